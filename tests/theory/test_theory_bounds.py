"""Distortion bounds (theory.bounds): they hold, they are attained where the docs say so,
and the counterexamples of docs/theory.md are exact."""

import itertools
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_strategies import VARIANTS, nodes

from relaxspec.theory import (
    Relax,
    node_outcome,
    proximity_set,
    r1_distortion,
    r1_walk,
    r2_stage_bound,
    r2_tv_bound,
    r3_tv_bound,
    total_variation,
    tv_bound,
)
from relaxspec.theory.rules import neighbour_rows
from relaxspec.theory.verification import Verification

TOL = 1e-12


# --- the bounds hold ------------------------------------------------------------------------


@settings(max_examples=250, deadline=None)
@given(node=nodes())
def test_theory_tv_bound_holds_r1_r3(node):
    for rule in ("r1", "r3"):
        out = node_outcome(node.p, node.kids, Verification(rule, node.relax, node.variant),
                           neighbours=node.nb)
        bound = tv_bound(node.p, node.kids, Verification(rule, node.relax, node.variant), neighbours=node.nb)
        assert out.tv <= bound + TOL, (rule, out.tv, bound)


@settings(max_examples=150, deadline=None)
@given(node=nodes(max_v=7, max_m=3))
def test_theory_tv_bound_holds_r2(node):
    m = int(node.kids.size)
    out = node_outcome(node.p, m, Verification("r2", node.relax, node.variant), neighbours=node.nb, q=node.q)
    fine = tv_bound(node.p, m, Verification("r2", node.relax, node.variant), neighbours=node.nb, q=node.q)
    coarse = r2_tv_bound(node.p, node.q, m, relax=node.relax, neighbours=node.nb,
                         variant=node.variant, coarse=True)
    assert out.tv <= fine + 1e-9, (out.tv, fine)
    assert fine <= coarse + TOL, (fine, coarse)
    if node.relax.is_exact:
        assert fine == 0.0


@settings(max_examples=250, deadline=None)
@given(node=nodes())
def test_theory_r1_bound_is_exact_when_tight(node):
    """TV = p(D) when no tested child was removed before its test and the residual never
    ran out of target mass."""
    out = node_outcome(node.p, node.kids, Verification("r1", node.relax, node.variant), neighbours=node.nb)
    dist = r1_distortion(node.p, node.kids, relax=node.relax, neighbours=node.nb,
                         variant=node.variant)
    if dist.tight:
        assert abs(out.tv - dist.bound) <= TOL


@settings(max_examples=250, deadline=None)
@given(node=nodes(kinds=("additive", "multiplicative")))
def test_theory_r1_principled_bound_is_merged_mass_within_nominal(node):
    """Principled: p(D) = sum_i P(reach i) * C_i (normalised) <= delta * E[#tested], or
    <= (lam - 1) * p(tested children)."""
    dist = r1_distortion(node.p, node.kids, relax=node.relax, neighbours=node.nb)
    nb = neighbour_rows(node.nb, node.V, node.relax)
    merged = 0.0
    for s in r1_walk(node.p, node.kids, nb, node.relax, "principled"):
        if s.index > 0 and s.mass == float(node.V) and np.all(s.residual == 1.0):
            break  # a rounding-exhausted residual restarted uniform (reach ~1e-16): no target mass left
        merged += s.merged
    assert dist.extra == 0.0
    assert abs(dist.merged - merged) <= TOL
    assert dist.bound <= dist.nominal + TOL
    out = node_outcome(node.p, node.kids, Verification("r1", node.relax), neighbours=node.nb)
    if node.relax.kind == "additive":
        assert abs(dist.nominal - node.relax.delta * out.expected_tried) <= TOL


# --- R1: attained and exceeded ----------------------------------------------------------------


def test_theory_r1_additive_candidate_bound_is_attained():
    """TV = delta * E[#tested] exactly: every merge uses the whole budget delta * Z."""
    p = np.array([4, 8, 1, 5, 14]) / 32
    nb = np.array([[1, 2, 3, 4], [0, 2, 3, 4], [3, 0, 1, 4], [2, 0, 1, 4], [0, 1, 2, 3]])
    relax = Relax.additive(1, 0.25)
    out = node_outcome(p, [0, 2], Verification("r1", relax), neighbours=nb)
    assert out.expected_tried == pytest.approx(13 / 8, abs=1e-15)
    assert out.tv == pytest.approx(13 / 32, abs=1e-15)
    assert out.tv == pytest.approx(relax.delta * out.expected_tried, abs=1e-15)
    dist = r1_distortion(p, [0, 2], relax=relax, neighbours=nb)
    assert dist.bound == pytest.approx(13 / 32, abs=1e-15)
    assert dist.nominal == pytest.approx(13 / 32, abs=1e-15)


def test_theory_r1_multiplicative_candidate_bound_is_attained():
    p = np.array([4, 8, 1, 2, 17]) / 32
    nb = np.array([[1, 2, 3, 4], [0, 2, 3, 4], [3, 0, 1, 4], [2, 0, 1, 4], [0, 1, 2, 3]])
    relax = Relax.multiplicative(1, 3.0)
    out = node_outcome(p, [0, 2], Verification("r1", relax), neighbours=nb)
    assert out.tv == pytest.approx(5 / 16, abs=1e-15)
    assert r1_distortion(p, [0, 2], relax=relax, neighbours=nb).nominal == pytest.approx(5 / 16)


@pytest.mark.parametrize("relax", [Relax.additive(1, 0.1), Relax.multiplicative(1, 1.5)])
def test_theory_r1_official_one_child_exceeds_its_budget(relax):
    """One child, merged mass 0.05 within the budget, but the official rule also zeroes the
    heavy second neighbour: TV = 0.65."""
    p = np.array([0.1, 0.05, 0.6, 0.125, 0.125])
    nb = np.array([[1, 2, 3, 4], [0, 2, 3, 4], [1, 0, 3, 4], [4, 0, 1, 2], [3, 0, 1, 2]])
    out = node_outcome(p, [0], Verification("r1", relax, "official"), neighbours=nb)
    np.testing.assert_allclose(out.emitted, [0.15, 0.0, 0.0, 0.425, 0.425], atol=1e-15)
    assert out.tv == pytest.approx(0.65, abs=1e-15)
    dist = r1_distortion(p, [0], relax=relax, neighbours=nb, variant="official")
    assert dist.merged == pytest.approx(0.05) and dist.extra == pytest.approx(0.6)
    assert dist.nominal == pytest.approx(0.1 if relax.kind == "additive" else 0.05)
    principled = node_outcome(p, [0], Verification("r1", relax), neighbours=nb)
    assert principled.tv == pytest.approx(0.05, abs=1e-15)


# --- R2: not bounded by delta, even with one child ------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("variant", VARIANTS)
def test_theory_r2_one_child_counterexample(n, variant):
    """q uniform on n tokens of zero target mass, each with a private neighbour of mass
    delta = 1/4: every draft merges delta, so TV = n * delta (= 1 for n = 4)."""
    delta = 0.25
    V = 2 * n + 1
    p = np.zeros(V)
    p[n : 2 * n] = delta
    p[2 * n] = 1.0 - n * delta
    q = np.zeros(V)
    q[:n] = 1.0 / n
    nb = np.array([[(n + x) % V if x < n else (x + 1) % V]
                   + [y for y in range(V) if y not in (x, (n + x) % V if x < n else (x + 1) % V)]
                   for x in range(V)])
    relax = Relax.additive(1, delta)
    out = node_outcome(p, 1, Verification("r2", relax, variant), neighbours=nb, q=q)
    assert out.tv == pytest.approx(n * delta, abs=1e-12)
    assert out.accept_probs[0] == pytest.approx(n * delta, abs=1e-12)
    bound = r2_tv_bound(p, q, 1, relax=relax, neighbours=nb, variant=variant)
    assert out.tv <= bound + 1e-12
    if variant == "principled":  # D = n * delta, residual term delta * (1 - n * delta)
        assert bound == pytest.approx(min(1.0, n * delta + delta * (1 - n * delta)), abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(node=nodes(max_v=12, max_m=1, kinds=("additive", "multiplicative")))
def test_theory_r2_one_child_point_mass_draft_tv_is_merged_mass(node):
    """With q a point mass on the child, R2 is R1 with one child: TV = merged mass."""
    c = int(node.kids[0])
    q = np.zeros(node.V)
    q[c] = 1.0
    out = node_outcome(node.p, 1, Verification("r2", node.relax, node.variant), neighbours=node.nb, q=q)
    _, mass = proximity_set(node.p, c, node.nb, node.relax)
    assert abs(out.tv - (mass - node.p[c])) <= TOL
    if node.relax.kind == "additive":
        assert out.tv <= node.relax.delta + TOL


def test_theory_r2_stage_bound_bad_input():
    with pytest.raises(ValueError, match="sum to 1"):
        r2_stage_bound(np.array([0.5, 0.6]), np.array([0.5, 0.5]), relax=Relax.none(),
                       neighbours=None)
    with pytest.raises(ValueError, match="draw order"):
        r2_tv_bound(np.array([0.5, 0.5]), np.array([0.5, 0.5]), [0, 1])
    with pytest.raises(ValueError, match="draw order"):
        tv_bound(np.array([0.5, 0.5]), [1], "r2", q=np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="needs the draft"):
        tv_bound(np.array([0.5, 0.5]), 1, "r2")
    with pytest.raises(ValueError, match="unknown rule"):
        tv_bound(np.array([0.5, 0.5]), [1], "r9")


# --- R3 ----------------------------------------------------------------------------------------


@settings(max_examples=250, deadline=None)
@given(node=nodes())
def test_theory_r3_emits_an_approximate_mode(node):
    """The greedy rule emits e with p(e) >= max p - delta (additive), >= max p / lam
    (multiplicative), = max p (none)."""
    out = node_outcome(node.p, node.kids, Verification("r3", node.relax), neighbours=node.nb)
    e = int(np.argmax(out.emitted))
    best = node.p.max()
    if node.relax.kind == "additive":
        assert node.p[e] >= best - node.relax.delta - TOL
    elif node.relax.kind == "multiplicative":
        assert node.relax.lam * node.p[e] >= best - TOL
    else:
        assert e == int(np.argmax(node.p))
    assert out.tv <= r3_tv_bound(node.p, node.kids, relax=node.relax, neighbours=node.nb)


# --- sequences --------------------------------------------------------------------------------


class World:
    """A small autoregressive target p(. | prefix) and draft q(. | prefix), fixed by a seed."""

    def __init__(self, V: int, seed: int):
        self.V, self.seed = V, seed

    def dist(self, prefix: tuple, salt: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, salt, len(prefix), *prefix])
        return rng.dirichlet(np.full(self.V, 0.6))

    def p(self, prefix: tuple) -> np.ndarray:
        return self.dist(prefix, 1)

    def q(self, prefix: tuple) -> np.ndarray:
        return self.dist(prefix, 2)


def draft_tree(world: World, prefix: tuple, shape: tuple) -> list:
    """R1 static tree: shape[d] children (top ranks of q) at depth d; [(token, subtree)]."""
    if not shape:
        return []
    q = world.q(prefix)
    top = np.argsort(-q, kind="stable")[: shape[0]]
    return [(int(t), draft_tree(world, prefix + (int(t),), shape[1:])) for t in top]


def decode_exactly(world, n, rule, shape, relax, nb, variant):
    """Joint law of the first n tokens under tree decoding, and sum over tokens of
    E[TV of the node that decides the token]."""
    joint: dict = defaultdict(float)
    tv_sum = 0.0

    def step(prefix, prob):
        if rule == "r1":
            node(prefix, draft_tree(world, prefix, shape), prob)
        else:
            node(prefix, shape[0], prob)

    def node(prefix, tree, prob):
        nonlocal tv_sum
        if prob == 0.0:
            return
        if len(prefix) >= n:
            joint[prefix[:n]] += prob
            return
        p = world.p(prefix)
        if tree == [] or tree == 0:  # leaf: bonus token from p, no distortion
            for x in range(world.V):
                step(prefix + (x,), prob * p[x])
            return
        if rule == "r1":
            kids = [t for t, _ in tree]
            out = node_outcome(p, kids, Verification("r1", relax, variant), neighbours=nb)
            tv_sum += prob * out.tv
            branches = [(1.0, kids, [sub for _, sub in tree], out)]
        else:  # R2 star: m leaves drawn from q without replacement
            q = world.q(prefix)
            avg = node_outcome(p, tree, Verification("r2", relax, variant), neighbours=nb, q=q)
            tv_sum += prob * avg.tv
            branches = []
            for order in itertools.permutations(range(world.V), tree):
                w, left = 1.0, q.copy()
                for c in order:
                    w *= left[c] / left.sum()
                    left[c] = 0.0
                out = node_outcome(p, list(order), Verification("r2", relax, variant), neighbours=nb, q=q)
                branches.append((w, list(order), [0] * tree, out))
        for w, kids, subs, out in branches:
            residual = out.emitted.copy()
            for i, (t, sub) in enumerate(zip(kids, subs, strict=True)):
                node(prefix + (t,), sub, prob * w * out.accept_probs[i])
                residual[t] -= out.accept_probs[i]
            for x in range(world.V):
                step(prefix + (x,), prob * w * max(residual[x], 0.0))

    step((), 1.0)
    seqs = list(itertools.product(range(world.V), repeat=n))
    target = np.array([np.prod([world.p(s[:t])[s[t]] for t in range(n)]) for s in seqs])
    law = np.array([joint[s] for s in seqs])
    assert abs(law.sum() - 1.0) <= 1e-12
    return total_variation(law, target), tv_sum


SEQ_CASES = [
    ("r1", (1, 1), Relax.additive(1, 0.3), "principled"),
    ("r1", (1, 1), Relax.additive(2, 0.3), "official"),
    ("r1", (2, 1), Relax.multiplicative(1, 3.0), "principled"),
    ("r1", (2, 1), Relax.additive(1, 0.2), "official"),
    ("r2", (2,), Relax.additive(1, 0.2), "principled"),
    ("r2", (2,), Relax.multiplicative(2, 2.0), "official"),
]


@pytest.mark.parametrize("rule, shape, relax, variant", SEQ_CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_theory_sequence_tv_at_most_sum_of_expected_token_tvs(rule, shape, relax, variant,
                                                              seed):
    world = World(3, seed)
    nb = np.array([[1, 2], [2, 0], [0, 1]])
    tv1, sum1 = decode_exactly(world, 1, rule, shape, relax, nb, variant)
    assert tv1 == pytest.approx(sum1, abs=1e-12)  # one token: the root's TV exactly
    tv, bound = decode_exactly(world, 3, rule, shape, relax, nb, variant)
    assert tv <= bound + 1e-12
    assert tv > 0.0
    tv0, bound0 = decode_exactly(world, 3, rule, shape, Relax.none(), nb, variant)
    assert tv0 <= 1e-12 and bound0 <= 1e-12


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), case=st.sampled_from(SEQ_CASES))
def test_theory_sequence_tv_bound_random_worlds(seed, case):
    rule, shape, relax, variant = case
    tv, bound = decode_exactly(World(3, seed), 2, rule, shape, relax,
                               np.array([[1, 2], [2, 0], [0, 1]]), variant)
    assert tv <= bound + 1e-12


@settings(max_examples=200, deadline=None)
@given(node=nodes())
def test_theory_r1_principled_emits_p_with_proximity_mass_moved(node):
    """Lemma: principled R1 emits p with the mass of each B_i = A_i minus earlier removals
    moved onto c_i; so P(some child accepted) = p(B_1 u ... u B_m)."""
    out = node_outcome(node.p, node.kids, Verification("r1", node.relax), neighbours=node.nb)
    nb = neighbour_rows(node.nb, node.V, node.relax)
    expected = node.p.copy()
    removed = np.zeros(node.V, dtype=bool)
    accepted = 0.0
    for stage in r1_walk(node.p, node.kids, nb, node.relax, "principled"):
        if stage.index == node.kids.size:
            break
        B = np.array([y for y in stage.zeroed.tolist() if not removed[y]], dtype=np.int64)
        removed[B] = True
        expected[B] = 0.0
        expected[node.kids[stage.index]] += node.p[B].sum()
        accepted += node.p[B].sum()
    np.testing.assert_allclose(out.emitted, expected, rtol=0, atol=1e-12)
    assert abs((1.0 - out.reject_prob) - accepted) <= 1e-12
