"""One verification value in every public signature (issue 27 item 2).

A verification (rule, relaxation, variant, boost) travels as one ``Verification`` or its spec string: no
public function or method of ``relaxspec.theory``, ``relaxspec.simulate`` or ``relaxspec.reference`` takes
two or more of its parts as parameters. The AST scan below finds any that does; the allow-list holds the
stage formulas, which are the relaxation's own maths and take it as ``(relax, variant)`` by design.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("theory", "simulate", "reference")
"""The folders of relaxspec.theory, relaxspec.simulate and relaxspec.reference."""
PARTS = {"rule", "relax", "variant", "boost"}
"""A verification's parts: a signature naming two or more of them takes the verification in pieces."""

STAGE = "a stage formula of one rule (SPEC 2-3): the relaxation under a variant, the rule is the function"
ALLOWED = {
    ("theory/stages.py", "zero_set"): STAGE,
    ("theory/stages.py", "r1_stage"): STAGE,
    ("theory/stages.py", "r2_stage"): STAGE,
    ("theory/boost_law.py", "sampled_draft_stage"): STAGE + " (R2's, boosted or not)",
    ("theory/verify.py", "r1_walk"): "R1's walk over one node's stages: " + STAGE,
    ("theory/verify.py", "r2_states"): "R2's walk over one node's stages: " + STAGE,
    ("theory/verify.py", "r2_given_states"): "R2's walk given the draw order: " + STAGE,
    ("theory/verify.py", "r2_stage_tvs"): "the TVs of R2's stages along a draw order: " + STAGE,
    ("theory/verify.py", "BoostAt.stage"): "R2's stage where a boost applies it: " + STAGE,
    ("theory/bounds.py", "r1_distortion"): "R1's distortion bound: the relaxation's own bound",
    ("theory/bounds.py", "r2_stage_bound"): "R2's per-stage bound: the relaxation's own bound",
    ("theory/bounds.py", "r2_tv_bound"): "R2's node bound, the sum of its stage bounds: the relaxation's own",
    ("theory/rules.py", "rows_read"): "the neighbour columns a relaxation reads under a variant (zero_set's "
                                      "width)",
    ("theory/rules.py", "rule_table"): "those columns of the table, the kernels' form (rows_read's)",
}
"""(file, qualified name) -> why it takes the relaxation and the variant as two parameters."""


def _public(name: str) -> bool:
    return not name.startswith("_") or name in ("__init__", "__call__")


def loose_signatures(source: str, path: str) -> dict[tuple[str, str], set[str]]:
    """The public functions and methods (of public classes) of ``source`` that take two or more
    verification parts: (path, qualified name) -> the parts."""
    out: dict[tuple[str, str], set[str]] = {}

    def check(fn: ast.FunctionDef | ast.AsyncFunctionDef, qual: str) -> None:
        a = fn.args
        parts = PARTS & {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        if len(parts) >= 2:
            out[(path, qual)] = parts

    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
            check(node, node.name)
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(item.name):
                    check(item, f"{node.name}.{item.name}")
    return out


def package_signatures() -> dict[tuple[str, str], set[str]]:
    """:func:`loose_signatures` over the public modules of the three layers."""
    out: dict[tuple[str, str], set[str]] = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            if path.name.startswith("_") and path.name != "__init__.py":
                continue
            out.update(loose_signatures(path.read_text(), path.relative_to(ROOT).as_posix()))
    return out


def test_public_functions_take_one_verification() -> None:
    found = {key: parts for key, parts in package_signatures().items() if key not in ALLOWED}
    assert not found, "take one `verification: Verification | str` instead of its parts:\n" + "\n".join(
        f"{path}: {name}({', '.join(sorted(parts))})" for (path, name), parts in sorted(found.items()))


def test_the_allow_list_names_stage_formulas_that_exist() -> None:
    """Every allowed signature is still there and still takes the parts (a stale entry is an error)."""
    found = package_signatures()
    stale = [key for key in ALLOWED if key not in found]
    assert not stale, f"allow-listed but gone or changed: {stale}"
    assert all(found[key] <= {"relax", "variant", "boost"} for key in ALLOWED)  # never the rule


def test_the_scan_finds_what_it_looks_for() -> None:
    source = ("def f(p, *, rule, relax): ...\n"
              "def g(p, verification): ...\n"
              "def _h(rule, boost): ...\n"
              "class A:\n"
              "    def step(self, tree, rule, variant='principled'): ...\n"
              "    def __init__(self, relax, boost): ...\n"
              "    def _walk(self, relax, variant): ...\n"
              "class _B:\n"
              "    def step(self, rule, relax): ...\n"
              "def k(x, relax): ...\n")
    assert set(loose_signatures(source, "x.py")) == {("x.py", "f"), ("x.py", "A.step"),
                                                      ("x.py", "A.__init__")}
