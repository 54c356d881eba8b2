"""Rule, boost and relaxation identity: enums and properties, never string comparisons (issue 27 item 2).

``Rule``, ``Variant``, ``BoostKind`` and ``RelaxKind`` are ``StrEnum`` s (a member equals its spelling), and
``Verification`` / ``Boost`` / ``Relax`` answer the questions the code asks (``samples_drafts``,
``is_traversal``, ``uses_budget``, ``reads_embedding``, ...). The AST check below keeps the package free
of comparisons against the spellings (``rule == "r2"``, ``boost.kind == "budget"``, ``relax.kind in
("additive", ...)``) outside the grammar code that reads and writes them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from relaxspec.theory.boost import Boost, BoostKind
from relaxspec.theory.relax import Relax, RelaxKind, Variant
from relaxspec.theory.rules import SAMPLED_DRAFT_RULES, Rule
from relaxspec.theory.verification import Oracle, parse

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ("theory", "core", "simulate", "reference", "mini", "relaxspec", "benchmarks")
"""The folders of the relaxspec namespace (and the benchmarks that drive it)."""

SPELLINGS = {"r1", "r2", "r3", "r4", "group", "depth", "budget", "gsd", "cool", "additive", "multiplicative",
             "lantern", "lantern++"}
"""Rule, boost and relaxation spellings: any comparison against one of them is a violation."""
CONTEXT_SPELLINGS = {"none", "official", "principled", "pointmass", "sampled", "greedy", "traversal"}
"""Spellings other concepts share (``fresh`` may be ``none``, drafts ``sampled``): a violation
only when the other side names a rule, variant, boost or relaxation."""
CONTEXT_WORDS = ("rule", "variant", "kind", "boost", "relax")

GRAMMAR = {
    ("theory/relax.py", "Relax.parse"),
    ("theory/boost.py", "Boost.parse"),
    ("theory/verification.py", "parse"),
    ("theory/verification.py", "_method_parts"),
    ("core/trees/windows.py", "parse_pac"),
}
"""The grammar code: it reads the spellings (parse) and may compare them."""


def _literals(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_literals(e) for e in node.elts)) if node.elts else set()
    return set()


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, source: str) -> None:
        self.path, self.source, self.scope, self.found = path, source, [], []

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(operands):
            words = _literals(op)
            others = " ".join(ast.get_source_segment(self.source, o) or "" for j, o in enumerate(operands)
                              if j != i).lower()
            bad = words & SPELLINGS
            if any(w in others for w in CONTEXT_WORDS):
                bad |= words & CONTEXT_SPELLINGS
            if bad and (self.path, ".".join(self.scope)) not in GRAMMAR:
                self.found.append(f"{self.path}:{node.lineno}: {ast.get_source_segment(self.source, node)}")
        self.generic_visit(node)


def spelling_comparisons() -> dict[str, list[str]]:
    """Every comparison against a rule / boost / relaxation spelling in the package, by file."""
    out: dict[str, list[str]] = {}
    for folder in PACKAGE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            source = path.read_text()
            finder = _Finder(rel, source)
            finder.visit(ast.parse(source))
            if finder.found:
                out[rel] = finder.found
    return out


def test_no_rule_boost_or_relaxation_string_comparisons() -> None:
    found = spelling_comparisons()
    assert not found, "compare a Rule / BoostKind / RelaxKind member or a property instead:\n" + "\n".join(
        line for lines in found.values() for line in lines)


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    source = ('def f(rule, boost, relax, window):\n'
              '    a = rule == "r2"\n    b = boost.kind != "budget"\n'
              '    c = relax.kind in ("additive", "x")\n    d = variant == "official"\n'
              '    e = window == "official"\n    g = rule is Rule.R2\n')
    finder = _Finder("x.py", source)
    finder.visit(ast.parse(source))
    assert [line.split(":")[1] for line in finder.found] == ["2", "3", "4", "5"]


def test_members_equal_their_spellings_and_answer_the_questions() -> None:
    assert Rule.R2 == "r2" and BoostKind.BUDGET == "budget" and RelaxKind.ADDITIVE == "additive"
    assert Variant.OFFICIAL == "official" and f"{Rule.R4}" == "r4" and repr(Rule.R1) == "'r1'"
    assert [r for r in Rule if r.samples_drafts] == list(SAMPLED_DRAFT_RULES) == [Rule.R2, Rule.R4]
    assert [r for r in Rule if r.is_traversal] == [Rule.R4] and Rule.R3.is_greedy and Rule.R1.is_point_mass
    b = Boost.parse("budget:tv=0.1,k=3")
    assert b.kind is BoostKind.BUDGET and b.uses_budget and not (b.reads_embedding or b.scales_by_depth)
    assert Boost.parse("gsd:G=4").reads_embedding and Boost.parse("cool:omega=2").scales_by_depth
    assert Boost.none().is_none and Boost("budget", tv=0.1, k=2).kind is BoostKind.BUDGET
    r = Relax.parse("multiplicative:k=3,lam=2")
    assert r.kind is RelaxKind.MULTIPLICATIVE and r.is_multiplicative and r.merges_neighbours
    assert r.merge_cap(1.0, 0.25) == 0.25 and Relax.additive(3, 0.1).merge_cap(0.5, 9.0) == 0.05
    assert not Relax.none().merges_neighbours and Relax("additive", k=0).is_exact


@pytest.mark.parametrize(("text", "samples", "traversal", "budget", "oracle"), [
    ("r1+lantern:k=3,delta=0.1", False, False, False, Oracle.TREE),
    ("r2+gsd:G=4", True, False, False, Oracle.TREE),
    ("r2+budget:tv=0.1,k=3", True, False, True, Oracle.BUDGET),
    ("r4+budget:tv=0.1,k=3", True, True, True, Oracle.TRAVERSAL),
    ("greedy", False, False, False, Oracle.TREE),
])
def test_verification_properties(text: str, samples: bool, traversal: bool, budget: bool,
                                 oracle: Oracle) -> None:
    v = parse(text)
    assert isinstance(v.rule, Rule) and isinstance(v.variant, Variant)
    assert (v.samples_drafts, v.is_traversal, v.uses_budget, v.oracle) == (samples, traversal, budget, oracle)
    assert v.walks_own_step == (oracle is not Oracle.TREE)
