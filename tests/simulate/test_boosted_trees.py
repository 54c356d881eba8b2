"""Boosted sampled-draft acceptance (GSD, Cool-SD; SPEC 9.2-9.4) on draft trees: theory's node outcome
against SPEC 9.4, the Numba engine against the NumPy oracle, exact expectations against Monte Carlo,
thread invariance, the sweep's boost column and bad input."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from relaxspec.core.trees import StaticTree
from relaxspec.simulate.engine import STEP_FIELDS, run
from relaxspec.simulate.group_kernels import rank_order_kernel
from relaxspec.simulate.verify import step_expectation, verify_step
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld
from relaxspec.sweep import SweepConfig, jobs
from relaxspec.testing import (
    KernelRule,
    TheoryRule,
    check_matches,
    check_tv_bound,
    nodes,
    proved_bound,
)
from relaxspec.testing.strategies import codebooks, distributions
from relaxspec.theory import Relax, Tree, expected_tokens_per_step, node_outcome, sample_step
from relaxspec.theory import step_expectation as theory_step_expectation
from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.boost_law import acceptance_vector, boosted_law, boosted_tv, rank_order
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.tree import path_tv
from relaxspec.theory.verification import Verification

EXACT = 1e-12
FEW = settings(max_examples=30, deadline=None)

boosts = st.one_of(
    st.builds(Boost.group, st.integers(1, 8), st.sampled_from([0.05, 0.15, 0.5, 1.0]),
              st.sampled_from([0.25, 0.5, 1.0, 4.0]), window=st.sampled_from(["principled", "official"])),
    st.builds(Boost.depth, st.lists(st.sampled_from([1.0, 1.25, 2.0, 5.0]), min_size=1, max_size=3)),
)


@st.composite
def boosted_nodes(draw, max_v: int = 10, max_m: int = 1):
    """(p, q, embedding, boost, depth, m) with q positive on at least m tokens."""
    V = draw(st.integers(2, max_v))
    p = draw(distributions(V))
    q = draw(distributions(V))
    m = draw(st.integers(1, min(max_m, int(np.count_nonzero(q)))))
    return p, q, draw(codebooks(V)), draw(boosts), draw(st.integers(1, 4)), m


# ---------------------------------------------------------------- theory (SPEC 9.4)
@FEW
@given(boosted_nodes())
def test_one_child_node_is_spec_9_4(case):
    """One draw from q: the node's law and exact TV are boosted_law / boosted_tv of the boost's
    acceptance vector, and the per-stage sum equals the TV."""
    p, q, E, boost, depth, _ = case
    o = node_outcome(p, 1, Verification("r2", boost=boost), q=q, depth=depth, emb=E)
    a = acceptance_vector(p, q, boost, depth=depth, emb=E)
    np.testing.assert_allclose(o.emitted, boosted_law(p, q, a), rtol=0, atol=EXACT)
    assert abs(o.tv - boosted_tv(p, q, a)) <= EXACT
    assert abs(o.stage_tv - o.tv) <= EXACT


@FEW
@given(boosted_nodes(max_v=7, max_m=3))
def test_multi_child_tv_within_the_stage_sum(case):
    """Recursive boosted verification: exact TV (enumerated draw orders) <= the per-stage 9.4 sum."""
    p, q, E, boost, depth, m = case
    o = node_outcome(p, m, Verification("r2", boost=boost), q=q, depth=depth, emb=E)
    assert abs(o.emitted.sum() - 1.0) <= 1e-9
    assert o.tv <= o.stage_tv + EXACT


@FEW
@given(boosted_nodes(max_v=7, max_m=3), st.lists(st.floats(0.0, 0.999999), min_size=4, max_size=4))
def test_identity_boosts_are_r2_bit_for_bit(case, u):
    """Cool-SD with omega = 1 and GSD whose groups are {x} take R2's path through the boosted stage and
    give its numbers bit for bit (the boosted stage's residual is R2's unrelaxed one)."""
    p, q, E, _, depth, m = case
    plain = node_outcome(p, m, "r2", q=q)
    kids = draw_without_replacement(q, np.array(u[:m]))
    for boost in (Boost.depth([1.0]), Boost.group(1, 0.15, 0.5)):
        o = node_outcome(p, m, Verification("r2", boost=boost), q=q, depth=depth, emb=E)
        for f in ("accept_probs", "emitted", "tried_probs"):
            np.testing.assert_array_equal(getattr(o, f), getattr(plain, f))
        assert abs(o.stage_tv) <= 1e-15  # 0 up to the rounding of the p = q convention
        tree = Tree(np.array([-1] + [0] * kids.size), np.concatenate(([0], kids)))
        rows = np.tile(p, (tree.size, 1))
        qs = np.tile(q, (tree.size, 1))
        uu = np.array(u[: tree.size] + [0.5] * (tree.size - len(u)))
        kw = dict(neighbours=None, q_dists=qs)
        boosted = sample_step(tree, rows, uu, uu, Verification("r2", boost=boost), **kw, emb=E)
        assert boosted == sample_step(tree, rows, uu, uu, "r2", **kw)


# ---------------------------------------------------------------- Numba against theory, step by step
def test_rank_order_kernel_is_theory_rank_order_with_ties():
    """GSD's window order: decreasing r, ties by lower id (a stable sort), on rows full of ties."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        V = int(rng.integers(2, 3000))
        r = rng.integers(0, 5, V).astype(np.float64)
        order, rank = np.empty(V, np.int64), np.empty(V, np.int64)
        rank_order_kernel(r, order, rank)
        np.testing.assert_array_equal(order, rank_order(r))
        np.testing.assert_array_equal(order[rank], np.arange(V))


def _tree_case(rng: np.random.Generator, V: int):
    """A random R2 tree drawn from q without replacement at each node, its rows and uniforms."""
    parents = np.array([-1, 0, 0, 0, 1, 1, 2, 4])
    P = rng.dirichlet(np.full(V, 0.4), size=parents.size)
    Q = rng.dirichlet(np.full(V, 0.4), size=parents.size)
    tokens = np.zeros(parents.size, dtype=np.int64)
    for u in range(parents.size):
        kids = np.flatnonzero(parents == u)
        if kids.size:
            Q[u] = 0.5 * Q[u] + 0.5 / V  # every token drawable
            tokens[kids] = draw_without_replacement(Q[u], rng.random(kids.size))
    return Tree(parents, tokens), P, Q, rng.random(parents.size), rng.random(parents.size)


@pytest.mark.parametrize("boost", [Boost.depth([3.0, 1.5]), Boost.group(5, 0.2, 0.8),
                                   Boost.group(14, 0.5, 2.0, window="official")], ids=str)
def test_verify_step_and_expectation_match_theory(boost):
    """simulate.verify_step / step_expectation (Numba) against theory.sample_step / step_expectation /
    path_tv: the same path and bonus for every uniform, expectations to rounding."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        V = 24 if trial % 2 else 9
        E = rng.standard_normal((V, 3))
        tree, P, Q, ua, ud = _tree_case(rng, V)
        kw = dict(verification=Verification("r2", boost=boost), neighbours=None, q_dists=Q, emb=E)
        path, bonus, tv = verify_step(tree, P, ua, ud, with_tv=True, **kw)
        assert (path, bonus) == sample_step(tree, P, ua, ud, **kw)
        want_tv = path_tv(tree, P, path, Verification("r2", boost=boost),
                          neighbours=np.zeros((V, 0), np.int64), q_dists=Q, emb=E)
        assert abs(tv - want_tv) <= 1e-12
        e = step_expectation(tree, P, **kw)
        t = theory_step_expectation(tree, P, **{**kw, "neighbours": np.zeros((V, 0), np.int64)})
        np.testing.assert_allclose(e.edge_probs, t.edge_probs, rtol=0, atol=1e-14)
        assert abs(e.tokens - t.tokens) <= 1e-12 and abs(e.tv - t.tv) <= 1e-12


# ---------------------------------------------------------------- the engine
@pytest.fixture(scope="module")
def small_world():
    return LatentWorld.preset("ambiguous", vocab_size=96, n_clusters=8)


ENGINE_CASES = [
    (StaticTree.chain(4), Boost.group(10), True),
    (StaticTree.naive_extend_57(), Boost.group(25, 0.15, 0.5, window="official"), False),
    (StaticTree([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]), Boost.depth([2.5, 1.6, 1.2]), True),
]


@pytest.mark.parametrize("tree,boost,exact", ENGINE_CASES, ids=lambda c: str(c))
def test_numba_run_matches_numpy_oracle(small_world, tree, boost, exact):
    v = Verification("r2", boost=boost)
    kw = dict(n_sequences=2, seq_len=20, seed=3, exact_expectations=exact)
    a = run(small_world, tree, v, **kw)
    b = run(small_world, tree, v, backend="numpy", **kw)
    for f in STEP_FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    np.testing.assert_allclose(a.token_tv, b.token_tv, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.expected_tokens, b.expected_tokens, rtol=1e-9)
    np.testing.assert_allclose(a.expected_tv, b.expected_tv, rtol=1e-9, atol=1e-12)
    assert a.verification == v and a.token_tv.sum() > 0


def test_identity_boost_run_is_unboosted_bit_for_bit(small_world):
    tree = StaticTree.naive_extend_57()
    kw = dict(n_sequences=3, seq_len=32, seed=5, exact_expectations=True)
    plain = run(small_world, tree, "r2", **kw)
    one = run(small_world, tree, "r2+cool:omega=1", **kw)
    for f in (*STEP_FIELDS, "token_tv", "expected_tokens", "expected_tv"):
        np.testing.assert_array_equal(getattr(one, f), getattr(plain, f), err_msg=f)
    assert plain.verification.boost.is_none and str(plain.verification) == "r2"


def test_thread_count_invariance(small_world):
    kw = dict(n_sequences=5, seq_len=24, seed=11)
    one = run(small_world, StaticTree.naive_extend_57(), "r2+gsd:G=10", threads=1, **kw)
    two = run(small_world, StaticTree.naive_extend_57(), "r2+gsd:G=10", threads=2, **kw)
    for f in (*STEP_FIELDS, "token_tv", "sequence"):
        np.testing.assert_array_equal(getattr(one, f), getattr(two, f), err_msg=f)


@pytest.mark.parametrize("boost", [Boost.group(10), Boost.depth([3.0, 2.0, 1.5])], ids=str)
def test_exact_expectations_agree_with_monte_carlo(boost):
    """tokens - E[tokens | tree, state] and token_tv - E[token_tv | tree, state] are martingale
    differences: 5.3 standard errors of their means is a two-sided normal tail of 1.2e-7 < 1e-6."""
    world = LatentWorld.preset("ambiguous", vocab_size=512, n_clusters=32)
    res = run(world, StaticTree.naive_extend_57(), Verification(rule="r2", boost=boost), n_sequences=24,
              seq_len=48,
              seed=2, exact_expectations=True)
    for d in (res.tokens - res.expected_tokens, res.token_tv - res.expected_tv):
        assert abs(d.mean()) <= 5.3 * res._ratio_se(d), (d.mean(), res._ratio_se(d))


def test_stationary_world_matches_theory_averaged_over_draws():
    """Same p, q at every node: every step is i.i.d. with the mean theory.expected_tokens_per_step gives
    (R2 averaged over the draw orders, exact at V = 8), boosted; 5.3 standard errors (tail 1.2e-7)."""
    rng = np.random.default_rng(4)
    V = 8
    p = rng.dirichlet(np.full(V, 0.5))
    q = 0.5 * p + 0.5 * rng.dirichlet(np.full(V, 0.5))
    E = rng.standard_normal((V, 2))
    world = StationaryWorld(p, q, embedding=E)
    policy = StaticTree([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    parents = np.array([-1, 0, 0, 1, 1, 2, 3])
    tree = Tree(parents, np.arange(parents.size))  # R2 ignores the tokens: children are draws
    for boost in (Boost.group(4, 0.15, 1.0), Boost.depth([2.0, 1.2])):
        want = expected_tokens_per_step(tree, np.tile(p, (7, 1)), Verification("r2", boost=boost),
                                        q_dists=np.tile(q, (7, 1)), emb=E)
        res = run(world, policy, Verification(rule="r2", boost=boost), n_sequences=40, seq_len=100, seed=1)
        se = res.tokens.std(ddof=1) / np.sqrt(res.n_steps)
        assert abs(res.mean_tokens_per_step - want) <= 5.3 * se, (res.mean_tokens_per_step, want, se)


# ---------------------------------------------------------------- relaxspec.testing
def test_boosted_rules_in_the_testing_api():
    s = settings(max_examples=25, deadline=None)
    for boost, depth in ((Boost.group(4, 0.3, 0.6), 1), (Boost.depth([2.0, 1.3]), 2)):
        v = Verification("r2", boost=boost)
        check_tv_bound(TheoryRule(v, depth=depth), proved_bound(v, depth), settings=s)
        check_matches(KernelRule(v, depth=depth), TheoryRule(v, depth=depth, law=False), settings=s)
    official = "r2+gsd:G=3,tau=0.5,dist=0.3,window=official"  # V up to 24: windows past the fallback
    check_matches(KernelRule(official), TheoryRule(official, law=False),
                  nodes=nodes(max_v=24, max_m=3, kinds=("none",)), settings=s)


# ---------------------------------------------------------------- the sweep and its CSV
def test_sweep_boosts_and_skips():
    cfg = SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:3", "eagle2:4,2,8"],
                                 "verifications": ["r1", "r2", "gsd:G=10", "r2+cool:omega=2/1.5"]})
    got = {(j.tree, str(j.verification)) for j in jobs(cfg)}
    assert got == {("chain:3", "r1"), ("chain:3", "r2"), ("chain:3", "r2+gsd:G=10,tau=0.15,dist=0.5"),
                   ("chain:3", "r2+cool:omega=2/1.5"), ("eagle2:4,2,8", "r1")}
    ranked = "on eagle2:4,2,8: rule r2 verifies children drawn from q"
    assert sum(ranked in line for line in cfg.skipped()) == 3
    with pytest.raises(ValueError, match="group size G must be an integer >= 1"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:3"],
                               "verifications": ["r2+gsd:G=0"]})
    with pytest.raises(ValueError, match=r"verification 'r1\+cool:omega=2': .*needs rule r2 or r4"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:3"],
                               "verifications": ["r1+cool:omega=2"]})


# ---------------------------------------------------------------- bad input
def test_bad_input_is_refused(small_world):
    p, q = np.full(6, 1 / 6), np.full(6, 1 / 6)
    E = np.zeros((6, 2))
    gsd = Boost.group(3)
    with pytest.raises(ValueError, match="needs rule r2"):
        node_outcome(p, [0], Verification("r1", boost=gsd), emb=E)
    with pytest.raises(ValueError, match="needs rule r2"):
        run(small_world, StaticTree.chain(2), Verification(rule="r1", boost=Boost.depth([2.0])),
            n_sequences=1, seq_len=2)
    with pytest.raises(ValueError, match="no LANTERN relaxation"):
        node_outcome(p, 1, Verification("r2", Relax.additive(2, 0.1), boost=Boost.depth([2.0])), q=q,
                     neighbours=np.zeros((6, 2), int))
    with pytest.raises(ValueError, match="needs an embedding"):
        node_outcome(p, 1, Verification("r2", boost=gsd), q=q)
    with pytest.raises(ValueError, match="another vocabulary size"):
        node_outcome(p, 1, Verification("r2", boost=gsd), q=q, emb=np.zeros((5, 2)))
    with pytest.raises(ValueError, match="another vocabulary size"):
        Verification("r2", boost=gsd).encode(6, emb=np.zeros((7, 2)))
    with pytest.raises(ValueError, match="another vocabulary size"):
        StationaryWorld(p, q, embedding=np.zeros((5, 2)))
    with pytest.raises(ValueError, match="no embedding table"):
        run(StationaryWorld(p, q), StaticTree.chain(2), Verification(rule="r2", boost=gsd), n_sequences=1,
            seq_len=2)
    with pytest.raises(ValueError, match="depth"):
        node_outcome(p, 1, Verification("r2", boost=Boost.depth([2.0])), q=q, depth=0)
    with pytest.raises(ValueError, match="not verified on draft trees"):
        node_outcome(p, 1, Verification("r2", boost=Boost.budget(0.1, 4)), q=q)
    with pytest.raises(ValueError, match="relaxspec.theory.boost.Boost"):
        node_outcome(p, 1, Verification("r2", boost="gsd:G=3"), q=q)
    tree = Tree(np.array([-1, 0]), np.array([0, 1]))
    with pytest.raises(ValueError, match="needs rule r2"):
        verify_step(tree, np.tile(p, (2, 1)), np.zeros(2), np.zeros(2), Verification("r3", boost=gsd),
                    neighbours=None, emb=E)
    with pytest.raises(ValueError, match="needs rule r2"):
        TheoryRule(Verification("r1", boost=gsd))
    assert NO_BOOST.is_none
