"""The one tree grammar (core.trees.spec): every spec parses to a policy whose str() is the spec,
and that spec parses back to a policy building the same trees."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.core.cost import DEFAULT_TABLE, CostModel
from relaxspec.core.trees.spec import check_tree_spec, draws_children, parse_tree, tree_kind
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import Relax

NB = neighbour_table(np.random.default_rng(0).normal(size=(32, 3)), k_max=31)
CONTEXT = {"relax": Relax.additive(4, 0.2), "neighbours": NB, "acceptance": [0.5, 0.2, 0.1, 0.05],
           "cost": CostModel.from_table(DEFAULT_TABLE, "GPT-S")}
SPECS = ["static:naive_extend_57", "static:mc_sim_7b_63", "static:[[0],[1],[0,0]]", "chain:1", "chain:7",
         "eagle2:10,4,59", "eagle2:3,0,4", "ddd:10,11,5/7/9,-0.3,60", "ddd:4,3,,-1.5,9", "latent:4,2,10",
         "latent-diverse:4,2,10,8", "latent-walk:4,3,12", "sequoia:12,4", "sequoia-lossless:12,4",
         "sequoia-latent:12,4", "sequoia-diverse:12,4", "sequoia-walk:12,4", "costaware:12,4",
         "costaware:12,4,walk"]


def _same_trees(a, b) -> None:
    ka, kb = a.kernel_spec(), b.kernel_spec()
    for field in ("kind", "top_k", "max_calls", "total_tokens", "threshold", "max_nodes", "max_buffer"):
        assert getattr(ka, field) == getattr(kb, field), field
    for field in ("parents", "ranks", "check_steps"):
        np.testing.assert_array_equal(getattr(ka, field), getattr(kb, field))
    assert str(a.selector) == str(b.selector)


@pytest.mark.parametrize("spec", SPECS)
def test_spec_round_trips_through_the_policy(spec: str) -> None:
    check_tree_spec(spec)
    policy = parse_tree(spec, **CONTEXT)
    assert str(policy) == spec
    _same_trees(policy, parse_tree(str(policy), **CONTEXT))


def test_equivalent_spellings_normalise_to_one_spec() -> None:
    assert str(parse_tree("latent:4,2,10,40", **CONTEXT)) == "latent:4,2,10"  # POOL 40 is the default
    assert str(parse_tree("static:[[0], [1], [0, 0]]")) == "static:[[0],[1],[0,0]]"
    assert str(parse_tree(" eagle2:10,4,59 ")) == "eagle2:10,4,59"
    assert parse_tree("ar") is None and tree_kind("ar") == "ar"


@pytest.mark.parametrize("name", ["eagle2-10-4-59", "chain4", "latent-walk-10-4-58", "sequoia-57-8"])
def test_a_policy_name_is_an_unknown_tree_kind(name: str) -> None:
    """0.1 has no users of the spellings before the one grammar: they are unknown kinds like any other."""
    with pytest.raises(ValueError) as err:
        parse_tree(name)
    assert str(err.value).startswith(f"unknown tree kind in {name!r}; tree specs: ")
    assert "write" not in str(err.value)


@pytest.mark.parametrize("spec, match", [
    ("eagle2", "needs 3 comma-separated values"), ("eagle2:10,4", r"eagle2:K,D,M"),
    ("ddd:10,11,5/7,x,60", "THRESHOLD .* must be a decimal number"), ("static:nope", "unknown static tree"),
    ("static:[[0],[2]]", "child ranks"), ("static:[0]", "JSON list of lists"),
    ("costaware:10,3,best", "MODE"), ("chain:100000", "at most 2048"), ("ar:1", "no arguments"),
    ("sequoia:10,3", "acceptance vector"), ("eagle2:10,4,59\nchain:2", "one line"),
    ("latent:4,2,10", None),
])
def test_bad_specs_are_named(spec: str, match: str | None) -> None:
    if match is None:  # a relaxation-aware tree under a relaxation needs the neighbour table
        with pytest.raises(ValueError, match="neighbour table"):
            parse_tree(spec, relax=Relax.additive(4, 0.2))
        return
    with pytest.raises(ValueError, match=match):
        parse_tree(spec)


@pytest.mark.parametrize("spec, draws", [
    ("static:naive_extend_57", True), ("chain:3", True), ("sequoia:10,3", True),
    ("sequoia-lossless:10,3", True),
    ("sequoia-walk:10,3", False), ("costaware:10,3", True), ("costaware:10,3,q", True),
    ("costaware:10,3,walk", False), ("eagle2:10,4,59", False), ("ddd:10,11,5/7/9,-0.3,60", False),
    ("latent:4,2,10", False), ("ar", False),
])
def test_which_specs_draw_their_children(spec: str, draws: bool) -> None:
    """Rule R2 needs children drawn from q: static trees picked by q, decided from the spec alone and
    agreeing with the built policy."""
    assert draws_children(spec) is draws
    if spec != "ar":
        assert parse_tree(spec, **CONTEXT).supports_draws is draws


@pytest.mark.parametrize("written, canonical", [
    ("eagle2:010, 4, 59", "eagle2:10,4,59"), (" eagle2:10,4,59", "eagle2:10,4,59"),
    ("chain:\t07 ", "chain:7"), ("ddd:10, 11, 5/07/9, -0.30, 60", "ddd:10,11,5/7/9,-0.3,60"),
    ("latent-diverse:4, 2,10, 8", "latent-diverse:4,2,10,8"), ("sequoia-walk: 12,04", "sequoia-walk:12,4"),
    ("costaware:12,4, walk", "costaware:12,4,walk"), ("costaware:12,4,q", "costaware:12,4"),
    ("jacobi: 015", "jacobi:15"), ("jacobi:3, copy", "jacobi:3,copy"),
    ("static:[[0], [1]]", "static:[[0],[1]]"), ("static: naive_extend_57", "static:naive_extend_57"),
    (" ar ", "ar"), *((spec, spec) for spec in SPECS),
])
def test_check_tree_spec_returns_the_canonical_spec(written: str, canonical: str) -> None:
    """Issue 26, item 3: harmless spaces and leading zeros are dropped, so that one tree has one spec
    (what sweeps store and resume by), the spec its policy's str() gives."""
    assert check_tree_spec(written) == canonical
    if tree_kind(canonical) != "ar":
        assert str(parse_tree(written, **CONTEXT)) == canonical


@pytest.mark.parametrize("spec", [
    "eagle2:+10,4,59", "chain:\u0663", "chain:1_0", "eagle2:10,4,5\u0669", "jacobi:\u0663", "jacobi:+3",
    "sequoia:\u0661\u0662,4", "latent:4,2,10,\u0664\u0660", "ddd:10,11,5/+7/9,-0.3,60",
    "ddd:10,11,5/7/9,+0.3,60", "ddd:10,11,5/7/9,\u0660.3,60", "ddd:10,11,5/7/9,-0_3,60", "chain:1 0",
    "chain:\u00a03", "static:[[true]]",
])
def test_signs_and_non_ascii_digits_are_refused(spec: str) -> None:
    """Numbers in a spec are ASCII digits with an optional minus sign: no ``+``, no ``_``, no other
    scripts' digits (which Python's int() would take and store verbatim)."""
    with pytest.raises(ValueError, match=r"ASCII|integers|lists of ints"):
        check_tree_spec(spec)
