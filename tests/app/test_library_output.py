"""Library layers log, the command line prints (issue 27 item 5): ``print`` only in the command functions,
``logging.getLogger("relaxspec")`` elsewhere, shown by the CLI; progress bars from ``tqdm.auto``."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

from relaxspec.cli import LOGGER, setup_logging

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("relaxspec", "theory", "core", "simulate", "reference", "mini")

# The functions that may print: the commands' own (their output is what the user asked for) and the
# notebooks' display helper (Markdown in Jupyter, plain text elsewhere).
PRINTING: dict[str, set[str]] = {
    "relaxspec/cli.py": {"main", "emit"},
    "relaxspec/simulate_cli.py": {"_trace_acceptance", "_compile_notice", "_simulate", "_plot", "_warm_up",
                                  "_world_stats"},
    "relaxspec/fit_cli.py": {"run"},
    "relaxspec/notebooks.py": {"_figures"},
    "relaxspec/nbenv.py": {"say"},
    "relaxspec/studies/relaxation_trees.py": {"main"},
    "relaxspec/studies/study_options.py": {"option_error"},  # a study's bad option: one line, exit code 2
    "theory/cli.py": {"_demo"},
    "mini/cli.py": {"_ambiguity", "_quality", "_validate", "_explain", "_compare", "_report"},
    "mini/train_mini.py": {"_main"},
    "reference/cli.py": {"_replay", "_rescore"},
    "reference/generate.py": {"run"},
    "reference/train_drafter.py": {"main"},
}


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def prints(path: Path) -> list[tuple[int, str]]:
    """``(line, enclosing function)`` of every ``print(...)`` call in the module at ``path``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "print":
                found.append((child.lineno, function))
            visit(child, name)

    visit(ast.parse(path.read_text()), "<module>")
    return found


def test_only_command_functions_print() -> None:
    stray = []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        allowed = PRINTING.get(rel, set())
        stray += [f"{rel}:{line} in {func}" for line, func in prints(path) if func not in allowed]
    assert not stray, f"library code prints (log to logging.getLogger('relaxspec...') instead): {stray}"


def test_progress_bars_come_from_tqdm_auto() -> None:
    plain = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "tqdm":
                plain.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Import) and any(a.name == "tqdm" for a in node.names):
                plain.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not plain, f"plain tqdm (notebooks get no widget bar): {plain}"


def test_the_command_line_shows_what_the_library_logs(capsys) -> None:
    setup_logging()
    setup_logging()  # once per process, however often main() runs
    logger = logging.getLogger(LOGGER)
    assert sum(type(h).__name__ == "ConsoleHandler" for h in logger.handlers) == 1
    logging.getLogger(f"{LOGGER}.demo").info("wrote %s", "results.csv")
    logging.getLogger(f"{LOGGER}.demo").warning("two\nlines")
    captured = capsys.readouterr()
    assert captured.out == "wrote results.csv\n"
    assert captured.err == "relaxspec: warning: two lines\n"
