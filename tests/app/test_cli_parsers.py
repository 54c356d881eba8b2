"""The ``relaxspec`` parsers (issue 27 item 5): ``--help`` and ``--version`` import no subcommand, every
option has help showing its default, and argparse's own mistakes are one line with exit code 2."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from relaxspec import __version__
from relaxspec.cli import SUBCOMMANDS, DefaultsFormatter, build_parser, main, shows_default

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "numba")
SKIPPED = ("help", "version")  # argparse's own actions


def modules_loaded_by(*argv: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after ``relaxspec argv`` (which exits)."""
    code = ("import sys\nfrom relaxspec.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
            f"    pass\nprint(*sorted(m for m in {HEAVY!r} if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()[-1].split()


@pytest.mark.parametrize("argv", [["--help"], ["--version"], []])
def test_top_level_help_and_version_import_no_subcommand(argv) -> None:
    assert modules_loaded_by(*argv) == []


def test_top_level_help_lists_every_subcommand_with_its_summary(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for cmd in SUBCOMMANDS:
        assert cmd.name in out and " ".join(cmd.summary.split()) in out


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"relaxspec {__version__}\n"


@pytest.mark.parametrize("cmd", SUBCOMMANDS, ids=[c.name for c in SUBCOMMANDS])
def test_each_subcommand_help_shows_its_own_options(cmd, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([cmd.name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: relaxspec {cmd.name} ")
    assert " ".join(cmd.summary.split()) in " ".join(out.split())
    parser = subparsers(build_parser([cmd.name]))[cmd.name]
    for action in parser._actions:
        for option in action.option_strings:
            assert option in out


def test_simulate_help_shows_its_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "--results" in out and "--no-progress" in out and "--scheduler" in out


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers of ``parser`` by name."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every parser nested under it (``mini ...``, ``theory ...``)."""
    yield parser
    for child in subparsers(parser).values():
        yield from every_parser(child)


def expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text of ``action`` as ``--help`` prints it (before wrapping)."""
    formatter = parser._get_formatter()
    assert isinstance(formatter, DefaultsFormatter)
    return formatter._expand_help(action) if action.help else ""


def test_every_option_has_help_showing_its_default() -> None:
    missing, no_default, twice = [], [], []
    parsers = list(every_parser(build_parser()))
    assert len(parsers) > len(SUBCOMMANDS) + 5  # the nested ones (mini ..., theory ...) are walked
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{parser.prog} {c.dest}" for c in action._choices_actions if not c.help]
                continue
            if action.dest in SKIPPED:
                continue
            name = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
            text = expanded_help(parser, action)
            if not text.strip():
                missing.append(name)
            if shows_default(action) and "(default" not in text:
                no_default.append(f"{name} = {action.default!r}")
            if text.count("(default") > 1:
                twice.append(f"{name}: {text}")
    assert not missing, f"options without help: {missing}"
    assert not no_default, f"defaults not shown: {no_default}"
    assert not twice, f"defaults shown twice: {twice}"


def test_a_default_is_shown_once_and_formatted() -> None:
    parser = build_parser(["simulate"])
    sim = subparsers(parser)["simulate"]
    scheduler = next(a for a in sim._actions if a.dest == "scheduler")
    assert expanded_help(sim, scheduler).endswith("(default: local)")


@pytest.mark.parametrize("argv, prog, words", [
    (["bogus"], "relaxspec", "invalid choice: 'bogus'"),
    (["--nope"], "relaxspec", "unrecognized arguments: --nope"),
    (["simulate"], "relaxspec simulate", "the following arguments are required: config, --results"),
    (["simulate", "c.toml", "--results", "r.csv", "--workers", "x"], "relaxspec simulate",
     "argument --workers: invalid int value: 'x'"),
    (["simulate", "c.toml", "--out", "r.csv"], "relaxspec simulate", "the following arguments are required"),
    (["plot", "r.csv", "--out", "d", "--results", "x"], "relaxspec plot",
     "unrecognized arguments: --results"),
    (["mini", "quality", "--n-images", "many"], "relaxspec mini quality", "invalid int value: 'many'"),
    (["mini", "nothing"], "relaxspec mini", "invalid choice: 'nothing'"),
    (["mini", "quality", "--bogus"], "relaxspec mini quality", "unrecognized arguments: --bogus"),
    (["theory", "demo", "--seed"], "relaxspec theory demo", "argument --seed: expected one argument"),
    (["rescore", "t"], "relaxspec rescore", "the following arguments are required: --verification"),
    (["rescore", "t", "--verification", "r1", "--rule", "r1"], "relaxspec rescore",
     "unrecognized arguments: --rule r1"),
])
def test_argparse_mistakes_are_one_line_and_exit_2(argv, prog, words, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"{prog}: error: ") and words in lines[0]
    assert lines[0].endswith(f"(see {prog} --help)")
