"""simulate.verify_step / step_expectation against theory's NumPy oracle, exactly."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from relaxspec.simulate import step_expectation, verify_step
from relaxspec.theory import Relax, Tree, neighbour_table, node_outcome, sample_step
from relaxspec.theory.rules import neighbour_rows
from relaxspec.theory.tree import choices_to_parents, expected_tokens_per_step
from relaxspec.theory.verification import Verification

V = 24
RELAXES = [
    Relax.none(),
    Relax.additive(3, 0.05),
    Relax.additive(6, 0.3),
    Relax.additive(8, 1.0),  # merges a lot: exercises degenerate residuals
    Relax.multiplicative(4, 2.0),
    Relax.multiplicative(8, 10.0),
]


def random_dist(rng, V, sparsity=0.0, concentration=0.5):
    p = rng.dirichlet(np.full(V, concentration))
    if sparsity:
        p[rng.random(V) < sparsity] = 0.0
        if p.sum() == 0:
            p[0] = 1.0
        p /= p.sum()
    return p


def random_tree(rng, V, n, q_rows=None):
    """A random tree of n nodes with distinct sibling tokens (drawn from q_rows[parent] if given)."""
    parents = [-1]
    tokens = [0]
    used: dict[int, set[int]] = {}
    for v in range(1, n):
        u = int(rng.integers(0, v))
        while len(used.get(u, ())) >= V:
            u = int(rng.integers(0, v))
        choices = [t for t in range(V) if t not in used.get(u, set())]
        if q_rows is not None:
            w = np.array([q_rows[u][t] for t in choices])
            if w.sum() == 0:
                choices, w = [0], None
            t = int(rng.choice(choices, p=None if w is None else w / w.sum()))
            if t in used.get(u, set()):
                continue
        else:
            t = int(rng.choice(choices))
        used.setdefault(u, set()).add(t)
        parents.append(u)
        tokens.append(t)
    # keep topological order: sort nodes by (parent chain) is already topological
    return Tree(np.array(parents), np.array(tokens))


def emitted_tv(tree, p, path, rule, relax, table, variant):
    """TV of the tokens a step emitted (theory): node_outcome's TV at each path node with children;
    R3: 1 per accepted child that is not its parent's argmax; R2: 0 exact, NaN relaxed."""
    if rule == "r3":
        return float(sum(tree.tokens[b] != np.argmax(p[a]) for a, b in zip(path[:-1], path[1:], strict=True)))
    if relax.is_exact:
        return 0.0
    if rule == "r2":
        return np.nan
    return sum(node_outcome(p[u], tree.tokens[tree.children(u)], Verification("r1", relax, variant),
                            neighbours=table).tv for u in path if tree.children(u).size)


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(7)
    E = rng.standard_normal((V, 3))
    return neighbour_table(E, k_max=V - 1)


@pytest.mark.parametrize("rule", ["r1", "r2", "r3"])
@pytest.mark.parametrize("variant", ["principled", "official"])
def test_verify_step_matches_theory_exactly(table, rule, variant):
    rng = np.random.default_rng(hash((rule, variant)) % 2**32)
    checked = 0
    for trial, relax in itertools.product(range(25), RELAXES):
        n = int(rng.integers(1, 12))
        p = np.array([random_dist(rng, V, sparsity=0.3 if trial % 3 == 0 else 0.0) for _ in range(n)])
        q = np.array([random_dist(rng, V, sparsity=0.2 if trial % 4 == 0 else 0.0) for _ in range(n)])
        tree = random_tree(rng, V, n, q if rule == "r2" else None)
        n = tree.size
        p, q = p[:n], q[:n]
        ua, ud = rng.random(n), rng.random(n)
        kw = dict(verification=Verification(rule, relax, variant), neighbours=table,
                  q_dists=q if rule == "r2" else None)
        got = verify_step(tree, p, ua, ud, **kw)
        want = sample_step(tree, p, ua, ud, Verification(rule, relax, variant),
                           neighbours=table.astype(np.int64), q_dists=kw["q_dists"])
        assert got == (list(want[0]), int(want[1])), (trial, relax)
        *_, tv = verify_step(tree, p, ua, ud, with_tv=True, **kw)
        assert tv == pytest.approx(emitted_tv(tree, p, want[0], rule, relax, table, variant), rel=1e-9,
                                   abs=1e-12, nan_ok=True)
        checked += 1
    assert checked == 25 * len(RELAXES)


@pytest.mark.parametrize("rule", ["r1", "r3"])
@pytest.mark.parametrize("variant", ["principled", "official"])
def test_step_expectation_matches_theory(table, rule, variant):
    rng = np.random.default_rng(3)
    for trial, relax in itertools.product(range(8), RELAXES):
        n = int(rng.integers(2, 10))
        p = np.array([random_dist(rng, V, sparsity=0.3 if trial % 2 else 0.0) for _ in range(n)])
        tree = random_tree(rng, V, n)
        p = p[: tree.size]
        got = step_expectation(tree, p, Verification(rule, relax, variant), neighbours=table)
        want = expected_tokens_per_step(tree, p, Verification(rule, relax, variant), neighbours=table)
        assert got.tokens == pytest.approx(want, rel=1e-12, abs=1e-12)
        if rule == "r1":
            tv = 0.0
            for u in range(tree.size):
                kids = tree.children(u)
                if kids.size:
                    o = node_outcome(p[u], tree.tokens[kids], Verification("r1", relax, variant),
                                     neighbours=table)
                    tv += got.reach_probs[u] * o.tv
            assert got.tv == pytest.approx(tv, rel=1e-9, abs=1e-12)


def test_r2_expectation_conditional_on_draws(table):
    rng = np.random.default_rng(5)
    for relax in RELAXES:
        for variant in ("principled", "official"):
            n = 7
            p = np.array([random_dist(rng, V) for _ in range(n)])
            q = np.array([random_dist(rng, V) for _ in range(n)])
            tree = random_tree(rng, V, n, q)
            got = step_expectation(tree, p, Verification("r2", relax, variant), neighbours=table, q_dists=q)
            for u in range(tree.size):
                kids = tree.children(u)
                if kids.size:
                    o = node_outcome(p[u], tree.tokens[kids], Verification("r2", relax, variant),
                                     neighbours=table, q=q[u])
                    np.testing.assert_allclose(got.edge_probs[kids], o.accept_probs, rtol=1e-12, atol=1e-15)
            assert np.isnan(got.tv) != relax.is_exact


@pytest.mark.parametrize("rule", ["r1", "r2", "r3"])
def test_kernel_step_expectation_is_the_twin_of_theorys(table, rule):
    """simulate.step_expectation (Numba) against theory.step_expectation, the one NumPy home of the sum."""
    from relaxspec.theory import step_expectation as theory_step_expectation

    rng = np.random.default_rng(11)
    for trial, relax in itertools.product(range(6), RELAXES):
        for variant in ("principled", "official"):
            n = int(rng.integers(2, 9))
            p = np.array([random_dist(rng, V, sparsity=0.3 if trial % 2 else 0.0) for _ in range(n)])
            q = np.array([random_dist(rng, V) for _ in range(n)])
            tree = random_tree(rng, V, n, q if rule == "r2" else None)
            p, q = p[: tree.size], q[: tree.size]
            kw = {"verification": Verification(rule, relax, variant), "q_dists": q}
            got = step_expectation(tree, p, neighbours=table, **kw)
            want = theory_step_expectation(tree, p, neighbours=neighbour_rows(table, V, relax), **kw)
            assert got.tokens == pytest.approx(want.tokens, rel=1e-12, abs=1e-12)
            assert got.tv == pytest.approx(want.tv, rel=1e-9, abs=1e-12, nan_ok=True)
            np.testing.assert_allclose(got.edge_probs, want.edge_probs, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(got.reach_probs, want.reach_probs, rtol=1e-12, atol=1e-15)


def test_static_tree_expectation_mc_sim(table):
    parents, _ = choices_to_parents([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    rng = np.random.default_rng(11)
    tokens = np.array([0, 3, 5, 1, 2, 7, 9])
    tree = Tree(parents, tokens)
    p = np.array([random_dist(rng, V) for _ in range(tree.size)])
    got = step_expectation(tree, p, "r1")
    assert got.tokens == pytest.approx(expected_tokens_per_step(tree, p, "r1"), rel=1e-13)
    assert got.tv == 0.0


def test_verify_step_rejects_bad_input(table):
    tree = Tree(np.array([-1, 0]), np.array([0, 1]))
    p = np.full((2, V), 1.0 / V)
    with pytest.raises(ValueError, match="node_dists"):
        verify_step(tree, p[:1], np.zeros(2), np.zeros(2), "r1", neighbours=None)
    with pytest.raises(ValueError, match="u_accept"):
        verify_step(tree, p, np.ones(2), np.zeros(2), "r1", neighbours=None)
    with pytest.raises(ValueError, match="unknown rule"):
        verify_step(tree, p, np.zeros(2), np.zeros(2), "r9", neighbours=None)
    with pytest.raises(ValueError, match="neighbour table"):
        verify_step(tree, p, np.zeros(2), np.zeros(2), Verification("r1", Relax.additive(2, 0.1)),
                    neighbours=None)
    with pytest.raises(ValueError, match="q_dists"):
        verify_step(tree, p, np.zeros(2), np.zeros(2), "r2", neighbours=None)
    q = p.copy()
    q[0, 1] = 0.0
    q[0] /= q[0].sum()
    with pytest.raises(ValueError, match="zero draft probability"):
        verify_step(tree, p, np.zeros(2), np.zeros(2), "r2", neighbours=None, q_dists=q)


def test_r1_exact_residual_without_mass():
    """p sums to 1 - 1e-7 (valid): rejecting the only child zeroes every token while the tracked
    mass Z stays 1e-7 > 0; the sampler then draws uniformly, and theory's exact law (fixed in this
    branch: it divided by r.sum() = 0) and the kernel agree with it."""
    p = np.array([0.1, 0.2, 0.7 - 1e-7])
    nb = np.array([[1, 2], [0, 2], [0, 1]])
    relax = Relax.additive(2, 1.0)
    o = node_outcome(p, [0], Verification("r1", relax), neighbours=nb)
    assert np.all(np.isfinite(o.emitted))
    reach = 1.0 - o.accept_probs[0]
    np.testing.assert_allclose(o.emitted, [o.accept_probs[0] + reach / 3, reach / 3, reach / 3])
    tree = Tree(np.array([-1, 0]), np.array([0, 0]))
    got = step_expectation(tree, np.tile(p, (2, 1)), Verification("r1", relax), neighbours=nb)
    assert got.tv == pytest.approx(o.tv, rel=1e-9)
    path, bonus = sample_step(tree, np.tile(p, (2, 1)), np.array([0.0, 0.9999999999]), np.array([0.5, 0.5]),
                              Verification("r1", relax), neighbours=nb)
    assert path == [0] and bonus == 1  # floor(0.5 * 3): the uniform draw
    assert verify_step(tree, np.tile(p, (2, 1)), np.array([0.0, 0.9999999999]), np.array([0.5, 0.5]),
                       Verification("r1", relax), neighbours=nb) == (path, bonus)


def test_kernel_draw_token_matches_theory():
    """The kernel's draw (one sequential pass, binary search on the stored cumulative sums) takes
    theory's draws, edge cases included (no mass, u * total rounding up to total, zero weights)."""
    from relaxspec.simulate.verify_kernels import draw_token_kernel as kernel_draw
    from relaxspec.theory import draw_token

    rng = np.random.default_rng(8)
    rows = [np.zeros(4), np.array([0.2, 0.3, 0.5, 0.0]), np.array([0.0, 0.0, 1e-300, 0.0]),
            np.array([1.0, 1e-17, 1e-17, 0.0, 1e-17])]
    rows += [random_dist(rng, 50, sparsity=0.5) for _ in range(20)]
    for r in rows:
        for u in [0.0, 0.2, 0.5, 0.99, np.nextafter(1.0, 0.0), *rng.random(20)]:
            assert kernel_draw(r, u, np.empty(r.size)) == draw_token(r, u), (r, u)
