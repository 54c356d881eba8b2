"""The Verification value (issue 27): its grammar round-trips, it validates once, and it answers which
draft sources, columns and oracle a rule needs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from relaxspec.testing.strategies import relaxations
from relaxspec.theory.boost import NO_BOOST, Boost, BoostKind
from relaxspec.theory.bounds import tv_bound
from relaxspec.theory.relax import Relax
from relaxspec.theory.rule_step import (
    rule_step_expectation,
    sample_rule_step,
    sample_window_step,
    step_neighbours,
)
from relaxspec.theory.rules import RULES, VARIANTS
from relaxspec.theory.sampler import sample_node
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import DraftSource, Oracle, Verification, parse
from relaxspec.theory.verify import node_outcome

NUMBERS = st.floats(min_value=0.0, max_value=1.0, allow_nan=False).filter(lambda x: x == 0 or x > 1e-300)


@st.composite
def boosts(draw: st.DrawFn) -> Boost:
    kind = draw(st.sampled_from(["none", "group", "depth", "cool", "budget"]))
    if kind == "group":
        return Boost.group(draw(st.integers(1, 60)), draw(st.floats(1e-3, 1.0)), draw(st.floats(1e-3, 4.0)),
                           window=draw(st.sampled_from(["principled", "official"])),
                           embedding=draw(st.sampled_from(["token", "codebook"])))
    if kind == "depth":
        return Boost.depth(draw(st.lists(st.floats(1.0, 5.0), min_size=1, max_size=4)))
    if kind == "cool":
        return Boost.cool(draw(st.floats(1.5, 4.0)), draw(st.floats(0.1, 2.0)))
    if kind == "budget":
        return Boost.budget(draw(NUMBERS), draw(st.integers(0, 64)))
    return NO_BOOST


@st.composite
def verifications(draw: st.DrawFn) -> Verification:
    """Every valid (rule, relaxation, variant, boost) combination the suite defines."""
    rule = draw(st.sampled_from(RULES))
    boost = draw(boosts()) if rule in ("r2", "r4") and draw(st.booleans()) else NO_BOOST
    relax = draw(relaxations(K=64)) if boost.is_none and rule != "r4" else Relax.none()
    return Verification(rule, relax, draw(st.sampled_from(VARIANTS)), boost)


@given(verifications())
def test_str_parses_back(v: Verification) -> None:
    assert parse(str(v)) == v
    assert str(parse(str(v))) == str(v)
    assert hash(parse(str(v))) == hash(v)


@pytest.mark.parametrize(("text", "canonical"), [
    ("r1", "r1"),
    ("pointmass", "r1"),
    ("greedy", "r3"),
    ("r2+lantern++:k=1000,lam=5", "r2+lantern++:k=1000,lam=5"),
    ("r2+multiplicative:k=1000,lam=5", "r2+lantern++:k=1000,lam=5"),
    ("lantern++:k=1000,lam=5", "r2+lantern++:k=1000,lam=5"),
    ("r1+lantern:k=1000,delta=0.1/official", "r1+lantern:k=1000,delta=0.1/official"),
    ("lantern:k=1000, delta=0.1", "r1+lantern:k=1000,delta=0.1"),
    ("r4+budget:tv=0.1,k=50", "r4+budget:tv=0.1,k=50"),
    ("budget:k=50,tv=0.1", "r2+budget:tv=0.1,k=50"),
    ("traversal+gsd:G=10", "r4+gsd:G=10,tau=0.15,dist=0.5"),
    ("r2+cool:delta=2", "r2+cool:delta=2,nu=0.7"),
    ("r2+cool:omega=2/1.5", "r2+cool:omega=2/1.5"),
    ("r2+depth:omega=2/1.5/principled", "r2+cool:omega=2/1.5"),
])
def test_aliases_and_canonical_forms(text: str, canonical: str) -> None:
    assert str(parse(text)) == canonical


def test_fields_of_a_parsed_spec() -> None:
    v = parse("r1+lantern:k=1000,delta=0.1/official")
    assert (v.rule, v.relax, v.variant, v.boost) == ("r1", Relax.additive(1000, 0.1), "official", NO_BOOST)
    b = parse("r4+budget:tv=0.25,k=8")
    assert (b.rule, b.boost) == ("r4", Boost.budget(0.25, 8))


@pytest.mark.parametrize(("text", "says"), [
    ("r5", "unknown rule or method 'r5'"),
    ("r1+gsd:G=3", "needs rule r2 or r4"),
    ("r4+lantern:k=3,delta=0.1", "takes no LANTERN relaxation"),
    ("r2+budget:delta=0.1,k=3", "budget takes ('tv', 'k')"),
    ("r2+budget:tv=2,k=3", "in [0, 1]"),
    ("r1+foo:k=1", "unknown method 'foo'"),
    ("r2+lantern++:lam=5", "needs k"),
    ("r1/offical", "unknown rule"),
    ("r2+gsd:G=x", "bad number"),
])
def test_bad_specs_name_the_spec_and_the_problem(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="verification") as err:
        parse(text)
    assert says in str(err.value) and repr(text) in str(err.value)
    assert "\n" not in str(err.value)


def test_not_a_string() -> None:
    with pytest.raises(ValueError, match="got int"):
        parse(3)  # type: ignore[arg-type]


@given(verifications())
def test_oracle_and_columns_agree_with_the_step_dispatch(v: Verification) -> None:
    assert v.walks_own_step == (v.rule == "r4" or v.boost.uses_budget)  # theory.rule_step's dispatch
    assert (v.oracle is Oracle.TRAVERSAL) == (v.rule == "r4")
    V = 70
    table = np.array([[(i + j) % V for j in range(1, 66)] for i in range(V)])
    assert step_neighbours(table, V, v).shape[1] >= v.neighbour_columns
    if v.neighbour_columns == 0:
        assert step_neighbours(None, V, str(v)).shape[1] == 0
    assert v.reads_embedding == (v.boost.kind == "group")
    assert v.is_exact == (v.relax.is_exact and v.boost.is_none)


@given(verifications())
def test_draft_sources(v: Verification) -> None:
    sampled = v.rule in ("r2", "r4")
    assert (v.source_problem(DraftSource.RANKED) is None) == (not sampled)
    assert v.source_problem(DraftSource.DRAWN) is None
    assert (v.source_problem(DraftSource.JACOBI) is None) == (sampled and v.relax.is_exact)
    assert (v.source_problem(DraftSource.AR) is None) == (v.boost.is_none and v.rule != "r4")
    coupled = v.rule == "r2" and v.relax.is_exact and (v.boost.is_none or v.uses_budget)
    assert (v.source_problem(DraftSource.COUPLED) is None) == coupled
    assert (v.source_problem(DraftSource.COUPLED_OFFICIAL) is None) == (coupled and not v.uses_budget)
    assert [s for s in DraftSource if s.is_window] == [DraftSource.JACOBI, DraftSource.COUPLED,
                                                        DraftSource.COUPLED_OFFICIAL]
    for source in DraftSource:
        problem = v.source_problem(source)
        if problem is None:
            v.check_source(source)
        else:
            with pytest.raises(ValueError, match="tree 7: "):
                v.check_source(source, "tree 7")


@given(verifications())
def test_encode_is_the_rules_encoding(v: Verification) -> None:
    V = 70
    table = np.array([[(i + j) % V for j in range(1, 66)] for i in range(V)])
    emb = np.arange(2 * V, dtype=np.float64).reshape(V, 2)
    enc = v.encode(V, neighbours=table, emb=emb)
    rule, code, k, param, variant, nb = enc.rs
    assert rule == RULES.index(v.rule) + 1 == v.rule.code
    assert variant == VARIANTS.index(v.variant)
    assert (code, k, param) == (v.relax.code, v.relax.k, v.relax.param)
    assert nb.dtype == np.int32 and nb.shape == (V, 0 if v.relax.is_exact else v.neighbour_columns)
    kind, *_, tv, budget = enc.bs
    assert kind == list(BoostKind).index(v.boost.kind) and tv == (v.boost.tv if v.uses_budget else 0.0)
    assert budget.shape[1] == (v.boost.k if v.uses_budget else 0)
    if v.reads_embedding:
        np.testing.assert_array_equal(enc.emb, emb)


# ---------------------------------------------------------------- one verification in every signature
P4 = np.array([0.4, 0.3, 0.2, 0.1])
Q4 = np.array([0.1, 0.2, 0.3, 0.4])
NB4 = np.array([[1, 2], [0, 2], [1, 3], [2, 1]])
TREE = Tree(np.array([-1, 0, 0, 1]), np.array([0, 1, 2, 3]))


@pytest.mark.parametrize("text", ["r1", "r1+lantern:k=2,delta=0.2/official", "r2+lantern++:k=1,lam=3",
                                  "r3+lantern:k=1,delta=0.3", "r2+cool:omega=2/1.5", "r4+budget:tv=0.2,k=1"])
def test_a_spec_and_its_value_give_the_same_numbers(text: str) -> None:
    """Theory's functions take the verification as one argument, a spec string or the value alike."""
    v = parse(text)
    rows, q = np.tile(P4, (4, 1)), np.tile(Q4, (4, 1))
    ua, ud = np.array([0.0, 0.35, 0.9, 0.2]), np.array([0.5, 0.1, 0.7, 0.3])
    nb = step_neighbours(NB4, 4, v)
    for spec in (text, v):
        assert sample_rule_step(TREE, rows, ua, ud, spec, neighbours=nb, q_dists=q) == \
            sample_rule_step(TREE, rows, ua, ud, v, neighbours=nb, q_dists=q)
        got = rule_step_expectation(TREE, rows, spec, neighbours=nb, q_dists=q)
        assert got.tokens == rule_step_expectation(TREE, rows, v, neighbours=nb, q_dists=q).tokens
    if v.walks_own_step:
        return
    kids = 2 if v.samples_drafts else [1, 3]
    a, b = (node_outcome(P4, kids, s, neighbours=NB4, q=Q4 if v.samples_drafts else None) for s in (text, v))
    np.testing.assert_array_equal(a.emitted, b.emitted)
    if v.boost.is_none:
        assert tv_bound(P4, kids, text, neighbours=NB4, q=Q4) == tv_bound(P4, kids, v, neighbours=NB4, q=Q4)


@pytest.mark.parametrize(("call", "says"), [
    (lambda: node_outcome(P4, 2, "r4", q=Q4), "verifies a whole step, not node by node"),
    (lambda: node_outcome(P4, 2, "r2+budget:tv=0.1,k=1", q=Q4, neighbours=NB4), "node by node"),
    (lambda: sample_node(P4, np.array([1]), np.zeros(1), 0.5, "r4", neighbours=NB4[:, :0], q=Q4),
     "verifies a whole step, not node by node"),
    (lambda: tv_bound(P4, 2, "r2+gsd:G=2", q=Q4), "has its own bound"),
    (lambda: sample_window_step(np.tile(P4, (2, 1)), np.array([1]), Q4[None], np.zeros(1), np.zeros(2),
                                "r2+lantern:k=1,delta=0.1", neighbours=NB4), "no LANTERN relaxation"),
    (lambda: node_outcome(P4, [1], "r9"), "unknown rule or method 'r9'"),
])
def test_node_functions_refuse_what_they_do_not_verify(call, says: str) -> None:
    with pytest.raises(ValueError, match=says) as err:
        call()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec,known", [
    ("r2+lantern++:k=5,lam=2", False), ("r2+lantern:k=5,delta=0.1", False), ("r2", True),
    ("r1+lantern++:k=5,lam=2", True), ("r2+cool:delta=2,nu=0.7", True), ("r2+budget:tv=0.1,k=5", True),
    ("r4", True), ("r3", True),
])
def test_tv_computable_is_false_only_for_relaxed_r2_without_a_boost(spec, known):
    """Relaxed R2 (LANTERN++ on sampled drafts) is the one verification whose TV theory does not give
    (docs/theory.md, Finding 3): theory.tree's step TV is NaN exactly there."""
    assert Verification.parse(spec).tv_computable is known
