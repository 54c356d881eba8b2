"""Rule, boost and relaxation identity: enums and properties, never string comparisons (issue 27 item 2).

``Rule``, ``Variant``, ``BoostKind`` and ``RelaxKind`` are ``StrEnum`` s (a member equals its spelling), and
``Verification`` / ``Boost`` / ``Relax`` answer the questions the code asks (``samples_drafts``,
``is_traversal``, ``uses_budget``, ``reads_embedding``, ...). So are the windows' and trees' options:
SCD's ``Coupling`` and SJD-PAC's ``Siblings`` (``theory.coupled``), a window's ``Fresh`` tokens
(``theory.jacobi_sampler``), VVS's skip ``Schedule`` (``core.trees.skips``) and GSD's ``GroupWindow``
(``theory.boost``), with ``is_lossless``, ``redraws_with_gumbel``, ``copies``, ``reads_similarity``, ... The
AST check below keeps the package free of comparisons against the spellings (``rule == "r2"``,
``boost.kind == "budget"``, ``relax.kind in ("additive", ...)``, ``window.coupling == "official"``,
``sched.kind == "dynamic"``) outside the grammar code that reads and writes them.
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
OPTION_SPELLINGS = {"none", "principled", "official", "gumbel", "uniform", "copy", "dynamic"}
"""The spellings of a window's or tree's options (``coupled=``, ``siblings=``, fresh tokens, VVS's schedule,
GSD's ``window=``): a violation when the other side names one of :data:`OPTION_WORDS` (``kind``: a
schedule's)."""
OPTION_WORDS = ("coupl", "sibling", "fresh", "sched", "store", "window", "kind")

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
            if not words:
                continue
            # ast.unparse, not the source segment: that re-splits the file's lines at each call
            others = " ".join(ast.unparse(o) for j, o in enumerate(operands) if j != i).lower()
            bad = words & SPELLINGS
            if any(w in others for w in CONTEXT_WORDS):
                bad |= words & CONTEXT_SPELLINGS
            if any(w in others for w in OPTION_WORDS):
                bad |= words & OPTION_SPELLINGS
            if not bad or (self.path, ".".join(self.scope)) in GRAMMAR:
                continue
            segment = ast.get_source_segment(self.source, node)
            self.found.append(f"{self.path}:{node.lineno}: {segment}")
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
              '    e = window == "official"\n    g = rule is Rule.R2\n'
              '    h = window.coupling != "gumbel"\n    i = sched.kind == "dynamic"\n'
              '    j = "copy" == self.fresh\n    k = pac.siblings in ("principled",)\n'
              '    m = backend == "uniform"\n    n = window.coupling.is_lossless\n')
    finder = _Finder("x.py", source)
    finder.visit(ast.parse(source))
    assert [line.split(":")[1] for line in finder.found] == ["2", "3", "4", "5", "6", "8", "9", "10", "11"]


def test_window_and_tree_options_are_named_values() -> None:
    """The options of coupled, PAC, Jacobi and VVS specs parse to enum members that equal their spelling,
    answer the code's questions, and the specs round-trip."""
    from relaxspec.core.trees.skips import Schedule
    from relaxspec.core.trees.spec import parse_tree
    from relaxspec.theory.boost import GroupWindow
    from relaxspec.theory.coupled import Coupling, Siblings, WindowRule
    from relaxspec.theory.jacobi_sampler import Fresh

    for spec in ("jacobi:4,coupled=official", "jacobi:4,copy,coupled=gumbel", "jacobi:3,copy",
                 "pac:4,ac=off,siblings=official", "vvs:10,4,59,uniform=3",
                 "vvs:10,4,59,dynamic=0.5,alpha=0.8"):
        assert str(parse_tree(spec)) == spec and parse_tree(str(parse_tree(spec))) == parse_tree(spec)
    scd = parse_tree("jacobi:4,copy,coupled=official")
    assert scd.coupling is Coupling.OFFICIAL and scd.fresh is Fresh.COPY and scd.fresh.copies
    assert not scd.lossless and not scd.coupling.is_lossless and scd.coupling.keeps_old_law
    assert [c for c in Coupling if c.is_lossless] == [Coupling.NONE, Coupling.PRINCIPLED, Coupling.GUMBEL]
    assert [c for c in Coupling if c.redraws_with_gumbel] == [Coupling.GUMBEL] and not Coupling.NONE.couples
    assert parse_tree("jacobi:4,coupled=none") == parse_tree("jacobi:4")
    pac = parse_tree("pac:4,ac=off,siblings=official")
    assert pac.siblings is Siblings.OFFICIAL and not pac.siblings.from_stored_law and not pac.lossless
    assert pac.coupling is Coupling.NONE and parse_tree("pac:4").coupling is Coupling.PRINCIPLED
    assert parse_tree("pac:4,width=1,siblings=official").lossless
    assert repr(Coupling.GUMBEL) == "'gumbel'" and f"{Siblings.OFFICIAL}" == "official"
    vvs = parse_tree("vvs:10,4,59,dynamic").schedule
    assert vvs.kind is Schedule.DYNAMIC and vvs.kind.reads_similarity and not vvs.kind.is_periodic
    assert parse_tree("vvs:10,4,59,uniform=2").schedule.kind.is_periodic
    assert WindowRule.scd("official").coupling is Coupling.OFFICIAL
    assert WindowRule.pac(ac=False).coupling is Coupling.NONE
    assert WindowRule.pac().siblings is Siblings.PRINCIPLED
    gsd = Boost.parse("gsd:G=4,window=official")
    assert gsd.window is GroupWindow.OFFICIAL and gsd.official_window and str(gsd).endswith("window=official")
    gsd = Boost.parse("gsd:G=4")
    assert gsd.window is GroupWindow.PRINCIPLED and not gsd.official_window
    assert str(gsd) == "gsd:G=4,tau=0.15,dist=0.5"


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
