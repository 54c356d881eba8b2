"""The budgeted relaxation of sampled drafts (theory.budget; SPEC 9.5)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_strategies import (
    ROUNDING_NB,
    ROUNDING_P,
    ROUNDING_Q,
    assert_counts_match,
    distributions,
    full_neighbourhoods,
    neighbour_tables,
)

from relaxspec.theory import (
    Boost,
    PrefixModel,
    Tree,
    node_outcome,
    sample_node,
    sample_step,
    total_variation,
)
from relaxspec.theory.budget import (
    budget_node_outcome,
    budget_r2_step_ends,
    budget_scale,
    budget_stage,
    check_budget,
    proximity_masses,
    sample_budget_node,
    sample_budget_r2_step,
)
from relaxspec.theory.sampled_trees import r2_step_ends, step_law, step_tv, tree_depth
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.traversal import sample_traversal_step, traversal_ends

DELTAS = [0.0, 0.01, 0.05, 0.2, 1.0]


@st.composite
def budget_nodes(draw: st.DrawFn, max_v: int = 12):
    V = draw(st.integers(2, max_v))
    p = draw(distributions(V))
    q = draw(distributions(V))
    nb = draw(neighbour_tables(V))
    delta = draw(st.one_of(st.sampled_from(DELTAS), st.floats(0.0, 1.0)))
    return p, q, nb, Boost.budget(delta, draw(st.integers(0, nb.shape[1])))


def stage_delta(gap, slope, s):
    return float(np.minimum(gap, s * slope).sum())


# ------------------------------------------------------------------ the scale
@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 12))
def test_theory_budget_scale_is_the_largest_within_the_budget(data, n):
    """Delta(s) = sum min(gap, s slope) <= remaining, with equality unless s = 1 (the whole boost fits)."""
    pos = st.floats(0.0, 1.0)
    gap = np.array(data.draw(st.lists(pos, min_size=n, max_size=n)))
    slope = np.array(data.draw(st.lists(pos, min_size=n, max_size=n)))
    remaining = data.draw(st.one_of(st.sampled_from([0.0, 1e-3, 0.1]), pos))
    s = budget_scale(gap, slope, remaining)
    assert 0.0 <= s <= 1.0
    assert stage_delta(gap, slope, s) <= remaining + 1e-12
    if s < 1.0:
        assert stage_delta(gap, slope, s) == pytest.approx(remaining, abs=1e-12)
    # no larger s fits (bisection from above)
    if s < 1.0:
        assert stage_delta(gap, slope, min(1.0, s + 1e-9)) > remaining - 1e-12


def test_theory_budget_scale_examples():
    gap, slope = np.array([0.1, 0.3]), np.array([0.2, 0.2])
    assert budget_scale(gap, slope, 1.0) == 1.0  # Delta(1) = 0.1 + 0.2 = 0.3
    assert budget_scale(gap, slope, 0.2) == pytest.approx(0.5)  # 0.2 s + 0.2 s = 0.2
    assert budget_scale(gap, slope, 0.25) == pytest.approx(0.75)  # 0.1 + 0.2 s = 0.25
    assert budget_scale(gap, slope, 0.0) == 0.0
    assert budget_scale(np.zeros(2), slope, 0.0) == 0.0  # no budget: the exact test
    assert budget_scale(np.zeros(2), slope, 0.1) == 1.0  # nothing to boost: the scale does not matter


# ------------------------------------------------------------------ per-node TV <= delta
@settings(max_examples=120, deadline=None)
@given(node=budget_nodes(), m=st.integers(1, 4))
def test_theory_budget_r2_node_tv_within_delta(node, m):
    """Exact enumeration over draw orders: TV(emitted, p) <= expected charge sum <= delta, with equality
    of the first two for one draw (SPEC 9.4)."""
    p, q, nb, boost = node
    m = min(m, int(np.count_nonzero(q > 0)))
    out = budget_node_outcome(p, q, m, boost=boost, neighbours=nb)
    assert out.emitted.sum() == pytest.approx(1.0, abs=1e-12)
    assert out.tv <= out.stage_tv + 1e-12
    assert out.stage_tv <= boost.tv + 1e-12
    if m == 1:
        assert out.tv == pytest.approx(out.stage_tv, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(node=budget_nodes())
def test_theory_budget_one_draft_spends_the_budget_exactly(node):
    """One draft: acceptance = 1 - TV(p, q) + min(delta, Delta(1)), i.e. non-decreasing in delta and
    using all of it until the whole proximity boost fits."""
    p, q, nb, boost = node
    out = budget_node_outcome(p, q, 1, boost=boost, neighbours=nb)
    full = budget_stage(p, q / q.sum(), check_budget(boost, nb, p.size), boost, np.inf)
    assert full.scale == 1.0
    expect = 1.0 - total_variation(p, q) + min(boost.tv, full.charge)
    assert 1.0 - out.reject_prob == pytest.approx(expect, abs=1e-12)


def test_theory_budget_beats_lossless_example():
    """A flat target and an over-confident draft: the budget turns rejections of the draft's favourite
    into acceptances, at TV exactly delta (one draft), whatever the neighbours' masses."""
    p = np.array([0.25, 0.25, 0.25, 0.25])
    q = np.array([0.7, 0.1, 0.1, 0.1])
    nb = np.array([[1, 2, 3], [0, 2, 3], [3, 0, 1], [2, 0, 1]])
    exact = node_outcome(p, 1, "r2", q=q)
    out = budget_node_outcome(p, q, 1, boost=Boost.budget(0.05, 3), neighbours=nb)
    assert 1.0 - out.reject_prob == pytest.approx(1.0 - exact.reject_prob + 0.05)
    assert out.tv == pytest.approx(0.05)


# ------------------------------------------------------------------ delta = 0 is R2 / R4 bit for bit
@settings(max_examples=100, deadline=None)
@given(node=budget_nodes(), m=st.integers(1, 4), data=st.data())
def test_theory_budget_delta_zero_is_r2_bit_for_bit(node, m, data):
    p, q, nb, boost = node
    boost = Boost.budget(0.0, boost.k)
    m = min(m, int(np.count_nonzero(q > 0)))
    a = budget_node_outcome(p, q, m, boost=boost, neighbours=nb)
    b = node_outcome(p, m, "r2", q=q)
    for x, y in ((a.accept_probs, b.accept_probs), (a.emitted, b.emitted), (a.tried_probs, b.tried_probs)):
        assert np.array_equal(x, y)
    assert a.stage_tv == 0.0 and a.tv == b.tv
    kids = draw_without_replacement(q, np.array(data.draw(st.lists(st.floats(0, 1, exclude_max=True),
                                                                   min_size=m, max_size=m))))
    a = budget_node_outcome(p, q, kids, boost=boost, neighbours=nb)
    b = node_outcome(p, kids, "r2", q=q)
    assert np.array_equal(a.accept_probs, b.accept_probs) and np.array_equal(a.emitted, b.emitted)
    u = np.array(data.draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=m + 1, max_size=m + 1)))
    nb64 = check_budget(boost, nb, p.size)
    assert sample_budget_node(p, q, kids, u[:m], u[m], boost=boost, nb=nb64) == sample_node(p, kids, u[:m],
                                                                                            u[m], "r2",
                                                                                            neighbours=nb64,
                                                                                            q=q)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), V=st.integers(3, 6), shape=st.sampled_from(
    [[-1, 0, 0], [-1, 0, 1], [-1, 0, 0, 1], [-1, 0, 1, 1, 2], [-1, 0, 0, 1, 2]]))
def test_theory_budget_delta_zero_on_trees_is_r2_and_r4_bit_for_bit(data, V, shape):
    """On a drawn tree: budgeted R2 ends == R2 ends and budgeted R4 ends == R4 ends, exactly, and the
    samplers agree with the same uniforms."""
    n = len(shape)
    p_rows = np.array([data.draw(distributions(V)) for _ in range(n)])
    q_rows = np.array([np.full(V, 1.0 / V) for _ in range(n)])
    tokens = [0] + [int(t) for t in data.draw(st.lists(st.integers(0, V - 1), min_size=n - 1,
                                                        max_size=n - 1))]
    parents = np.array(shape)
    for v in range(1, n):  # distinct siblings
        while tokens[v] in [tokens[w] for w in range(1, v) if parents[w] == parents[v]]:
            tokens[v] = (tokens[v] + 1) % V
    tree = Tree(parents, np.array(tokens))
    nb = data.draw(neighbour_tables(V))
    boost = Boost.budget(0.0, data.draw(st.integers(0, nb.shape[1])))
    a, _ = budget_r2_step_ends(tree, p_rows, q_rows, boost=boost, neighbours=nb)
    b = r2_step_ends(tree, p_rows, q_rows)
    assert [(e.node, e.prob) for e in a] == [(e.node, e.prob) for e in b]
    c = traversal_ends(tree, p_rows, q_rows, boost=boost, neighbours=nb)
    d = traversal_ends(tree, p_rows, q_rows)
    assert [(e.node, e.prob) for e in c.ends] == [(e.node, e.prob) for e in d.ends] and c.tv_bound == 0.0
    u = np.array(data.draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=2 * n, max_size=2 * n)))
    assert sample_traversal_step(tree, p_rows, q_rows, u[:n], u[n:], boost=boost, neighbours=nb) == \
        sample_traversal_step(tree, p_rows, q_rows, u[:n], u[n:])

    assert sample_budget_r2_step(tree, p_rows, q_rows, u[:n], u[n:], boost=boost, neighbours=nb) == \
        tuple(sample_step(tree, p_rows, u[:n], u[n:], "r2", neighbours=None, q_dists=q_rows))


# ------------------------------------------------------------------ trees
@settings(max_examples=30, deadline=None)
@given(data=st.data(), V=st.integers(3, 4), shape=st.sampled_from([[-1, 0], [-1, 0, 0], [-1, 0, 1],
                                                                     [-1, 0, 0, 1], [-1, 0, 1, 1]]))
def test_theory_budget_trees_tv_within_the_bound(data, V, shape):
    """Averaged over the tree's draws: budgeted R2 and budgeted R4 have step TV <= their bound, and the
    bound is at most delta per internal node; one-level trees: TV <= delta."""
    seed = data.draw(st.integers(0, 2**32 - 1))
    model = PrefixModel(lambda pre: np.random.default_rng([seed, 0, *pre]).dirichlet(np.ones(V)),
                        lambda pre: np.random.default_rng([seed, 1, *pre]).dirichlet(np.ones(V)), V)
    nb = data.draw(neighbour_tables(V))
    boost = Boost.budget(data.draw(st.sampled_from(DELTAS)), data.draw(st.integers(0, nb.shape[1])))
    internal = len(set(shape[1:]))
    r2 = step_law(shape, model, lambda t, p, q: budget_r2_step_ends(t, p, q, boost=boost, neighbours=nb))
    r4 = step_law(shape, model, lambda t, p, q: (lambda o: (o.ends, o.tv_bound))(
        traversal_ends(t, p, q, boost=boost, neighbours=nb)))
    for law in (r2, r4):
        tv = step_tv(law, model, tree_depth(shape))
        assert tv <= law.tv_bound + 1e-12
        assert law.tv_bound <= boost.tv * internal + 1e-12
        if internal == 1:
            assert tv <= boost.tv + 1e-12


# ------------------------------------------------------------------ the sampler
def test_theory_budget_sampler_matches_exact():
    """Budgeted R2 at one node: (accepted draw index or none, token) frequencies fit the exact joint law
    computed from the given-order outcomes averaged over draw orders (chi-square, rate 1e-6)."""
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    q = np.array([0.1, 0.15, 0.2, 0.25, 0.3])
    nb = np.array([[1, 2, 3, 4], [0, 2, 3, 4], [1, 3, 0, 4], [2, 4, 1, 0], [3, 2, 1, 0]])
    boost, m, V = Boost.budget(0.1, 2), 2, 5
    joint = np.zeros((m + 1) * V)
    for x in range(V):  # exact joint of (index, token) by conditioning on the draw order
        for y in range(V):
            if x == y:
                continue
            w = q[x] * q[y] / (1.0 - q[x])
            o = budget_node_outcome(p, q, [x, y], boost=boost, neighbours=nb)
            joint[0 * V + x] += w * o.accept_probs[0]
            joint[1 * V + y] += w * o.accept_probs[1]
            joint[m * V:] += w * (o.emitted - np.bincount([x, y], o.accept_probs, minlength=V))
    np.testing.assert_allclose(joint.reshape(m + 1, V).sum(axis=0),
                               budget_node_outcome(p, q, m, boost=boost, neighbours=nb).emitted, atol=1e-12)
    nb64 = check_budget(boost, nb, V)
    rng = np.random.default_rng(5)
    counts = np.zeros((m + 1) * V)
    for _ in range(20000):
        kids = draw_without_replacement(q, rng.random(m))
        i, tok = sample_budget_node(p, q, kids, rng.random(m), rng.random(), boost=boost, nb=nb64)
        counts[(i if i >= 0 else m) * V + tok] += 1
    assert_counts_match(counts, joint)


# ------------------------------------------------------------------ bad input
def test_theory_budget_bad_input():
    p = np.full(4, 0.25)
    nb = np.array([[1, 2], [0, 2], [3, 0], [2, 0]])
    with pytest.raises(ValueError, match="budget boost"):
        budget_node_outcome(p, p, 1, boost=Boost.depth(2.0), neighbours=nb)
    with pytest.raises(ValueError, match="needs a neighbour table"):
        budget_node_outcome(p, p, 1, boost=Boost.budget(0.1, 2), neighbours=None)
    with pytest.raises(ValueError, match="k"):
        budget_node_outcome(p, p, 1, boost=Boost.budget(0.1, 3), neighbours=nb)
    with pytest.raises(ValueError, match="lists the token itself"):
        budget_node_outcome(p, p, 1, boost=Boost.budget(0.1, 2), neighbours=np.array([[0, 1]] * 4))
    with pytest.raises(ValueError, match="V <= 12"):
        budget_node_outcome(np.full(13, 1 / 13), np.full(13, 1 / 13), 1, boost=Boost.budget(0.1, 0),
                            neighbours=None)
    with pytest.raises(ValueError, match="not distinct"):
        budget_node_outcome(p, p, [1, 1], boost=Boost.budget(0.1, 0), neighbours=None)
    with pytest.raises(ValueError, match=">= 0"):
        budget_node_outcome(p, p, -1, boost=Boost.budget(0.1, 0), neighbours=None)
    with pytest.raises(ValueError, match="zero draft probability"):
        budget_node_outcome(p, np.array([0.5, 0.5, 0, 0]), [2], boost=Boost.budget(0.1, 0), neighbours=None)
    with pytest.raises(ValueError, match="budget tv must be in"):
        Boost.budget(1.5, 2)
    tree = Tree(np.array([-1, 0]), np.array([0, 1]))
    with pytest.raises(ValueError, match="shape"):
        budget_r2_step_ends(tree, np.tile(p, (3, 1)), np.tile(p, (3, 1)), boost=Boost.budget(0.1, 0),
                            neighbours=None)


# ------------------------------------------------------------------ eps(x): the mass of all k neighbours
def test_theory_budget_proximity_mass_is_the_uncapped_sum_of_k():
    """docs/theory.md 14.1: eps(x) is the residual mass of all k neighbours, a sequential sum with no cap,
    even where rounding lifts it past 1 (issue 26 item 19: 0.34 + 0.56 + 0.10 > 1.0 in float64). One
    draft with delta = 1: token 0 is accepted surely, so the node accepts with 1.0, not 0.96."""
    boost = Boost.budget(1.0, 3)
    nb = check_budget(boost, ROUNDING_NB, 4)
    eps = proximity_masses(ROUNDING_P, np.arange(4), nb, boost)
    assert eps[0] == 0.34 + 0.56 + 0.10 > 1.0
    assert eps.tolist() == [float(np.add.accumulate(ROUNDING_P[nb[x]])[-1]) for x in range(4)]
    out = budget_node_outcome(ROUNDING_P, ROUNDING_Q, 1, boost=boost, neighbours=ROUNDING_NB)
    assert 1.0 - out.reject_prob == pytest.approx(1.0, abs=1e-12)
    assert sample_budget_node(ROUNDING_P, ROUNDING_Q, np.array([0]), np.array([0.98]), 0.5, boost=boost,
                              nb=nb) == (0, 0)


@settings(max_examples=300, deadline=None)
@given(case=full_neighbourhoods())
def test_theory_budget_proximity_mass_survives_rounding(case):
    """x's V - 1 neighbours carry all of p (their sum is 1 up to rounding): eps is the sequential sum of
    the k = V - 1 masses bit for bit, and with delta = 1 one draft is accepted surely (every token's
    neighbours carry 1 - p(x) >= q(x) - p(x))."""
    p, q, nb, x = case
    boost = Boost.budget(1.0, p.size - 1)
    eps = proximity_masses(p, np.arange(p.size), nb, boost)
    assert eps.tolist() == [float(np.add.accumulate(p[nb[y]])[-1]) for y in range(p.size)]
    out = budget_node_outcome(p, q, 1, boost=boost, neighbours=nb)
    assert 1.0 - out.reject_prob == pytest.approx(1.0, abs=1e-12)
