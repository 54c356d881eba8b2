"""The layers import only downwards (issue 13): theory <- core <- simulate (Numba) | reference (torch)
<- mini <- relaxspec. Each check runs in a fresh interpreter, so nothing another test imported counts."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

# module -> top-level packages it must not load
FORBIDDEN = {
    "theory": ["numba", "torch", "core", "simulate", "reference", "mini", "relaxspec"],
    "core": ["numba", "torch", "simulate", "reference", "mini", "relaxspec"],
    "core.trees": ["numba", "torch", "simulate", "reference", "mini", "relaxspec"],
    "core.trace": ["numba", "torch", "simulate", "reference", "mini", "relaxspec"],
    "core.cost": ["numba", "torch", "simulate", "reference", "mini", "relaxspec"],
    "core.execution": ["numba", "torch", "simulate", "reference", "mini", "relaxspec", "dask", "distributed"],
    "simulate": ["torch", "reference", "mini", "relaxspec"],
    "simulate.engine": ["torch", "reference", "mini", "relaxspec"],
    "simulate.acceptance": ["torch", "reference", "mini", "relaxspec"],
    "reference": ["numba", "simulate", "mini", "relaxspec"],
    "reference.decode": ["numba", "simulate", "mini", "relaxspec"],
    "reference.generate": ["numba", "simulate", "mini", "relaxspec"],
    "reference.capture": ["numba", "simulate", "mini", "relaxspec"],
    "reference.replay": ["numba", "torch", "simulate", "mini", "relaxspec"],
    "mini": ["relaxspec"],
    "mini.decoding": ["relaxspec"],
}


def loaded_after_import(module: str) -> list[str]:
    """Top-level packages present in sys.modules after importing ``module`` in a new interpreter."""
    code = (f"import json, sys, importlib; importlib.import_module({module!r}); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_layers_import_only_downwards(module: str) -> None:
    loaded = set(loaded_after_import(module))
    assert not loaded & set(FORBIDDEN[module]), f"{module} loads {sorted(loaded & set(FORBIDDEN[module]))}"


PACKAGES = ("theory", "core", "simulate", "reference", "mini", "relaxspec")
ROOT = Path(__file__).resolve().parents[1]


def import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports (at any depth of its code, lazy imports included)."""
    modules = {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
               for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, f in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            deps |= {t for t in targets if t in modules and t != name}
        graph[name] = deps
    return graph


def test_layers_have_no_import_cycles() -> None:
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def _resolve(dotted: str) -> object:
    """The object a dotted name (module.attr[.attr]) names, importing the longest module prefix."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_every_name_in_the_rule_step_table_resolves() -> None:
    """docs/layers.md's side-by-side table: every theory, kernel and torch name exists."""
    import re

    text = (ROOT / "docs" / "layers.md").read_text()
    table = text[text.index("| rule step (SPEC)"):]
    names = re.findall(r"`((?:theory|simulate|reference|core)\.[\w.]+)`", table)
    assert len(names) >= 30
    for name in names:
        assert _resolve(name) is not None, name
