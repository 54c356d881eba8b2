"""The layers import only downwards (issue 13): theory <- core <- simulate (Numba) | reference (torch)
<- mini <- relaxspec. Each check runs in a fresh interpreter, so nothing another test imported counts."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

LAYERS = ("theory", "core", "simulate", "reference", "mini")
"""The layers, each a subpackage of the one namespace (relaxspec.theory, ...); the rest of relaxspec is
the application layer, named "relaxspec" below."""
APP = "relaxspec"

# module (under relaxspec.) -> layers and third-party packages it must not load
FORBIDDEN = {
    "theory": ["numba", "torch", "core", "simulate", "reference", "mini", APP],
    "core": ["numba", "torch", "simulate", "reference", "mini", APP],
    "core.trees": ["numba", "torch", "simulate", "reference", "mini", APP],
    "core.trace": ["numba", "torch", "simulate", "reference", "mini", APP],
    "core.cost": ["numba", "torch", "simulate", "reference", "mini", APP],
    "core.execution": ["numba", "torch", "simulate", "reference", "mini", APP, "dask", "distributed"],
    "simulate": ["torch", "reference", "mini", APP],
    "simulate.engine": ["torch", "reference", "mini", APP],
    "simulate.acceptance": ["torch", "reference", "mini", APP],
    "reference": ["numba", "simulate", "mini", APP],
    "reference.decode": ["numba", "simulate", "mini", APP],
    "reference.generate": ["numba", "simulate", "mini", APP],
    "reference.capture": ["numba", "simulate", "mini", APP],
    "reference.replay": ["numba", "torch", "simulate", "mini", APP],
    "mini": [APP],
    "mini.decoding": [APP],
}


def loaded_after_import(module: str) -> list[str]:
    """The layers (:data:`LAYERS`, :data:`APP` for the rest of relaxspec) and third-party top-level packages
    present in sys.modules after importing ``relaxspec.<module>`` in a new interpreter (the namespace's
    own ``relaxspec/__init__`` is every layer's parent, so it does not count)."""
    target = f"{APP}.{module}" if module else APP
    code = (f"import json, sys, importlib; importlib.import_module({target!r}); "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = set()
    for name in json.loads(out.stdout):
        parts = name.split(".")
        if parts[0] != APP:
            found.add(parts[0])
        elif len(parts) > 1:
            found.add(parts[1] if parts[1] in LAYERS else APP)
    return sorted(found)


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_layers_import_only_downwards(module: str) -> None:
    loaded = set(loaded_after_import(module))
    assert not loaded & set(FORBIDDEN[module]), f"{module} loads {sorted(loaded & set(FORBIDDEN[module]))}"


def test_the_namespace_root_is_light() -> None:
    """``import relaxspec`` (every layer's parent package) loads no layer, no Numba and no torch."""
    loaded = set(loaded_after_import(""))
    assert not loaded & {"numba", "torch", APP, *LAYERS}, loaded


PACKAGES = ("theory", "core", "simulate", "reference", "mini", "relaxspec")
ROOT = Path(__file__).resolve().parents[2]


def import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports (at any depth of its code, lazy imports included), every name
    under the one namespace (``relaxspec.theory.rules``)."""
    modules = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            name = ".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            modules[name if pkg == APP else f"{APP}.{name}"] = f
    graph: dict[str, set[str]] = {}
    for name, f in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                targets = []
            deps |= {t for t in targets if t in modules and t != name}
        graph[name] = deps
    return graph


def test_no_import_outside_the_namespace() -> None:
    """Every import of a layer is under relaxspec (``relaxspec.theory``, never a bare ``theory``), in the
    package, the tests, the benchmarks and the notebooks: a bare one works only from the repository root."""
    bare = []
    sources = [f for d in (*PACKAGES, "tests", "benchmarks") for f in (ROOT / d).rglob("*.py")]
    for f in sources:
        for node in ast.walk(ast.parse(f.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [])
            bare += [f"{f.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in LAYERS]
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                src = "".join(cell["source"])
                bare += [f"{nb.name}: {line}" for line in src.splitlines()
                         if line.split()[:2] and line.split()[0] in ("import", "from")
                         and line.split()[1].split(".")[0] in LAYERS]
    assert not bare, bare


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
        assert _resolve(f"{APP}.{name}") is not None, name
