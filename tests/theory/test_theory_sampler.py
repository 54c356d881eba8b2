"""The NumPy Monte Carlo oracle (theory.sampler) against the exact analysis.

Each test draws at a fixed seed and applies a chi-square goodness-of-fit test
whose threshold is the chi-square quantile at 1e-6: a correct sampler fails
with probability about 1e-6. No hand-tuned tolerances.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from theory_strategies import assert_counts_match, binomial_bounds, nodes

from relaxspec.theory import (
    Relax,
    Tree,
    draw_token,
    draw_without_replacement,
    node_accept_probs,
    node_outcome,
    path_probs,
    r1_walk,
    r2_given_states,
    r2_states,
    sample_node,
    sample_step,
)
from relaxspec.theory.rules import neighbour_rows
from relaxspec.theory.verification import Verification

RELAXATIONS = [
    Relax.none(),
    Relax.additive(2, 0.15),
    Relax.additive(3, 0.5),
    Relax.multiplicative(2, 2.0),
    Relax.multiplicative(3, 5.0),
]
CASES = [(r, v) for r in RELAXATIONS for v in ("principled", "official")
         if not (r.kind == "none" and v == "official")]


def example(seed: int, V: int = 6):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.7))
    p[rng.integers(V)] = 0.0  # a zero of the target
    p /= p.sum()
    q = rng.dirichlet(np.full(V, 0.7))
    nb = np.array([rng.permutation(np.delete(np.arange(V), x)) for x in range(V)])
    return p, q, nb


def r1_exact_joint(p, kids, nb, relax, variant):
    """P(child i accepted) for i < m, then P(no child accepted and token x) at m + x."""
    m, V = kids.size, p.size
    probs = np.zeros(m + V)
    for st in r1_walk(p, kids, nb, relax, variant):
        if st.index == m:
            total = st.residual.sum()
            probs[m:] = st.reach * (st.residual / total if total > 0 else 1.0 / V)
        else:
            probs[st.index] = st.reach * st.accept
    return probs


def r2_exact_joint(p, q, m, nb, relax, variant):
    """P(draw i accepted and is token c) at i * V + c, then P(none accepted, token x)."""
    V = p.size
    probs = np.zeros((m + 1) * V)
    for s in r2_states(p, q, m, nb, relax, variant):
        if s.qp is None:
            probs[m * V :] += s.weight * s.r
            continue
        for c, a in zip(s.tokens, s.accept, strict=True):
            probs[s.stage * V + c] += s.weight * s.qp[c] * a
    return probs


@pytest.mark.parametrize("relax, variant", CASES)
def test_theory_sampler_r1_matches_exact(relax, variant):
    p, _, nb = example(1)
    kids = np.array([4, 0, 2])
    nb64 = neighbour_rows(nb, p.size, relax)
    probs = r1_exact_joint(p, kids, nb64, relax, variant)
    rng = np.random.default_rng(11)
    n, m = 20000, kids.size
    counts = np.zeros(m + p.size)
    for _ in range(n):
        i, tok = sample_node(p, kids, rng.random(m), rng.random(), Verification("r1", relax, variant),
                             neighbours=nb64)
        counts[i if i >= 0 else m + tok] += 1
        assert i < 0 or tok == kids[i]
    assert_counts_match(counts, probs)


def test_theory_sampler_r1_official_uniform_restart_matches_exact():
    """The official rule can zero all target mass; the residual restarts uniform (exact and
    sampled alike) and the next child is tested on it."""
    p = np.array([0.5, 0.25, 0.25, 0.0])
    nb = np.array([[1, 2, 3], [0, 2, 3], [3, 0, 1], [2, 1, 0]])
    relax = Relax.additive(1, 0.25)
    kids = np.array([0, 3])
    out = node_outcome(p, kids, Verification("r1", relax, "official"), neighbours=nb)
    np.testing.assert_array_equal(out.accept_probs, [0.75, 0.125])
    np.testing.assert_array_equal(out.emitted, [0.875, 0.0, 0.0, 0.125])
    probs = r1_exact_joint(p, kids, nb, relax, "official")
    rng = np.random.default_rng(5)
    counts = np.zeros(2 + 4)
    for _ in range(5000):
        i, tok = sample_node(p, kids, rng.random(2), rng.random(), Verification("r1", relax, "official"),
                             neighbours=nb)
        counts[i if i >= 0 else 2 + tok] += 1
    assert_counts_match(counts, probs)


@pytest.mark.parametrize("relax, variant", CASES)
def test_theory_sampler_r2_matches_exact(relax, variant):
    p, q, nb = example(2)
    m = 3
    nb64 = neighbour_rows(nb, p.size, relax)
    probs = r2_exact_joint(p, q, m, nb64, relax, variant)
    out = node_outcome(p, m, Verification("r2", relax, variant), neighbours=nb, q=q)
    V = p.size
    np.testing.assert_allclose(probs.reshape(m + 1, V).sum(axis=0), out.emitted, atol=1e-12)
    rng = np.random.default_rng(12)
    n = 10000
    counts = np.zeros((m + 1) * V)
    for _ in range(n):
        order = draw_without_replacement(q, rng.random(m))
        i, tok = sample_node(p, order, rng.random(m), rng.random(), Verification("r2", relax, variant),
                             neighbours=nb64, q=q)
        counts[(i if i >= 0 else m) * V + tok] += 1
    assert_counts_match(counts, probs)


@settings(max_examples=150, deadline=None)
@given(node=nodes())
def test_theory_sampler_r3_takes_the_exact_decision(node):
    nb64 = neighbour_rows(node.nb, node.V, node.relax)
    out = node_outcome(node.p, node.kids, Verification("r3", node.relax), neighbours=node.nb)
    i, tok = sample_node(node.p, node.kids, np.zeros(node.kids.size), 0.0,
                         Verification("r3", node.relax, node.variant), neighbours=nb64)
    assert out.emitted[tok] == 1.0
    if i >= 0:
        assert out.accept_probs[i] == 1.0
    else:
        assert out.reject_prob == 1.0


def test_theory_draw_token_matches_weights():
    w = np.array([0.0, 3.0, 1.0, 0.0, 4.0, 2.0])
    rng = np.random.default_rng(3)
    counts = np.bincount([draw_token(w, rng.random()) for _ in range(20000)], minlength=6)
    assert_counts_match(counts, w / w.sum())


def test_theory_draw_token_edges():
    assert draw_token(np.zeros(4), 0.0) == 0
    assert draw_token(np.zeros(4), 0.99) == 3  # no mass: floor(u * V)
    w = np.array([0.2, 0.3, 0.5, 0.0])
    assert draw_token(w, np.nextafter(1.0, 0.0)) == 2  # never a token without mass
    assert draw_token(w, 0.0) == 0
    assert draw_token(w, 0.2) == 1  # the smallest x with cumsum[x] > u * total


def test_theory_draw_without_replacement_matches_exact():
    q = np.array([0.4, 0.0, 0.1, 0.3, 0.2])
    support = [0, 2, 3, 4]
    orders = list(itertools.permutations(support, 3))
    probs = []
    for order in orders:
        w, left = 1.0, q.copy()
        for c in order:
            w *= left[c] / left.sum()
            left[c] = 0.0
        probs.append(w)
    index = {o: i for i, o in enumerate(orders)}
    rng = np.random.default_rng(4)
    counts = np.zeros(len(orders))
    for _ in range(20000):
        counts[index[tuple(draw_without_replacement(q, rng.random(3)).tolist())]] += 1
    assert_counts_match(counts, np.array(probs))
    assert draw_without_replacement(np.array([0.0, 1.0]), np.array([0.3, 0.6])).tolist() == [1]


def small_tree():
    # root 0 -> {1, 2}; 1 -> {3, 4}; 2 -> {5}; 3 -> {6}
    parents = np.array([-1, 0, 0, 1, 1, 2, 3])
    tokens = np.array([0, 1, 3, 0, 2, 4, 1])
    return Tree(parents, tokens)


def tree_exact_end_law(tree, dists, rule, relax, nb, q_dists, variant):
    """P(walk ends at node v and emits bonus token x) at v * V + x."""
    V = dists.shape[1]
    probs = np.zeros(tree.size * V)
    edge = np.zeros(tree.size)  # P(v accepted | parent reached); untested children stay 0
    edge[0] = 1.0
    for u in range(tree.size):
        kids = tree.children(u)
        if kids.size == 0:
            continue
        if rule == "r1":
            walk = list(r1_walk(dists[u], tree.tokens[kids], nb, relax, variant))
            for st in walk[:-1] if walk[-1].index == kids.size else walk:
                edge[kids[st.index]] = st.accept * st.reach
        else:
            walk = list(r2_given_states(dists[u], q_dists[u], tree.tokens[kids], nb, relax,
                                        variant))
            for s in walk:
                if s.qp is not None:
                    edge[kids[s.stage]] = s.weight * s.accept[0]
    reach = path_probs(tree, edge)
    for v in range(tree.size):
        kids = tree.children(v)
        if kids.size == 0:
            probs[v * V : (v + 1) * V] = reach[v] * dists[v]
            continue
        if rule == "r1":
            last = list(r1_walk(dists[v], tree.tokens[kids], nb, relax, variant))[-1]
            if last.index == kids.size:
                total = last.residual.sum()
                law = last.residual / total if total > 0 else np.full(V, 1.0 / V)
                probs[v * V : (v + 1) * V] = reach[v] * last.reach * law
        else:
            last = list(r2_given_states(dists[v], q_dists[v], tree.tokens[kids], nb, relax,
                                        variant))[-1]
            if last.qp is None:
                probs[v * V : (v + 1) * V] = reach[v] * last.weight * last.r
    return probs


@pytest.mark.parametrize("rule", ["r1", "r2"])
@pytest.mark.parametrize("relax, variant", [(Relax.none(), "principled"),
                                            (Relax.additive(2, 0.2), "principled"),
                                            (Relax.multiplicative(2, 3.0), "official")])
def test_theory_sample_step_matches_exact(rule, relax, variant):
    tree = small_tree()
    rng = np.random.default_rng(21)
    V = 5
    dists = rng.dirichlet(np.full(V, 0.8), size=tree.size)
    q_dists = np.full((tree.size, V), 1.0 / V)
    nb = np.array([rng.permutation(np.delete(np.arange(V), x)) for x in range(V)])
    nb64 = neighbour_rows(nb, V, relax)
    probs = tree_exact_end_law(tree, dists, rule, relax, nb64, q_dists, variant)
    if rule == "r1":  # consistent with the tree expectation
        acc = node_accept_probs(tree, dists, Verification("r1", relax, variant), neighbours=nb)
        ends = probs.reshape(tree.size, V).sum(axis=1)
        assert abs(1 + (ends * tree.depths).sum() - (1 + path_probs(tree, acc)[1:].sum())) < 1e-12
    counts = np.zeros(tree.size * V)
    for _ in range(10000):
        path, bonus = sample_step(tree, dists, rng.random(tree.size), rng.random(tree.size),
                                  Verification(rule, relax, variant), neighbours=nb64,
                                  q_dists=q_dists if rule == "r2" else None)
        counts[path[-1] * V + bonus] += 1
    assert_counts_match(counts, probs)


def test_theory_sampler_acceptance_binomial():
    """P(some child accepted) of R1 at V = 300 (too many bins for chi-square): binomial test."""
    rng = np.random.default_rng(8)
    V = 300
    p = rng.dirichlet(np.full(V, 0.5))
    nb = np.array([rng.permutation(np.delete(np.arange(V), x))[:20] for x in range(V)])
    kids = np.argsort(-p)[:4]
    relax = Relax.additive(20, 0.1)
    out = node_outcome(p, kids, Verification("r1", relax), neighbours=nb)
    n = 20000
    hits = sum(sample_node(p, kids, rng.random(4), rng.random(), Verification("r1", relax),
                           neighbours=nb.astype(np.int64))[0] >= 0 for _ in range(n))
    lo, hi = binomial_bounds(n, 1.0 - out.reject_prob)
    assert lo <= hits <= hi


def test_theory_r1_exhausted_residual_is_decided_on_the_residual():
    """Rejecting child 3, the official rule zeroes every token with mass; subtraction would leave
    Z = 1.1e-16 on an empty residual. Exhaustion is decided on the residual itself (``EXHAUSTION_CHECK``):
    the residual restarts uniform with Z = V, and the final draw is uniform, in the exact analysis and in
    the sampler alike (issue 19)."""
    p = np.array([2, 0, 2, 1, 2]) / 7
    nb = np.array([[1, 2, 4, 3], [4, 0, 2, 3], [4, 1, 3, 0], [1, 0, 2, 4], [3, 2, 0, 1]])
    relax = Relax.multiplicative(4, 1.5)
    kids = np.array([2, 3])
    final = list(r1_walk(p, kids, nb, relax, "official"))[-1]
    assert final.index == 2 and final.mass == 5.0
    np.testing.assert_array_equal(final.residual, np.ones(5))
    out = node_outcome(p, kids, Verification("r1", relax, "official"), neighbours=nb)
    uniform = final.reach / 5
    # child 2 accepted w.p. 2/7, child 3 w.p. (5/7) * (1/5), the rest uniform
    np.testing.assert_allclose(out.emitted, [uniform, uniform, 2 / 7 + uniform, 1 / 7 + uniform,
                                             uniform], atol=1e-15)
    probs = r1_exact_joint(p, kids, nb, relax, "official")
    rng = np.random.default_rng(6)
    counts = np.zeros(2 + 5)
    for _ in range(5000):
        i, tok = sample_node(p, kids, rng.random(2), rng.random(), Verification("r1", relax, "official"),
                             neighbours=nb)
        counts[i if i >= 0 else 2 + tok] += 1
    assert_counts_match(counts, probs)


@pytest.mark.parametrize("w, u, match", [
    ([0.2, np.nan, 0.5], 0.3, "NaN or infinite"),
    ([0.2, np.inf, 0.5], 0.3, "NaN or infinite"),
    ([0.2, -0.1, 0.5], 0.3, "negative"),
    ([0.2, 0.3, 0.5], 1.0, r"uniform in \[0, 1\)"),
    ([0.2, 0.3, 0.5], float("nan"), r"uniform in \[0, 1\)"),
    ([0.2, 0.3, 0.5], -0.5, r"uniform in \[0, 1\)"),
])
def test_theory_draw_token_refuses_bad_weights(w, u, match):
    """Issue 26 item 12: NaN weights were drawn from silently."""
    with pytest.raises(ValueError, match=match):
        draw_token(np.array(w), u)
