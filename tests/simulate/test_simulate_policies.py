"""Tree policies: built-in shapes, NumPy build vs Numba builder (exact), EAGLE-2 / DDD / Sequoia facts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from relaxspec.core.trees import DDDTree, Eagle2Tree, StaticTree
from relaxspec.core.trees.sequoia import SequoiaTree, sequoia_choices
from relaxspec.simulate.acceptance import measure_positional_acceptance
from relaxspec.simulate.policy_kernels import kernel_build, kernel_draft
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld


def level_counts(policy: StaticTree) -> list[int]:
    return np.bincount(policy.template.depths)[1:].tolist()


def test_builtin_static_trees():
    mc = StaticTree.mc_sim_7b_63()
    assert mc.n_nodes - 1 == 25 and level_counts(mc) == [4, 8, 8, 3, 2]
    ne = StaticTree.naive_extend_57()
    assert ne.n_nodes - 1 == 57 and ne.template.depth == 5
    ch = StaticTree.chain(6)
    assert level_counts(ch) == [1] * 6
    with pytest.raises(ValueError, match="child ranks"):
        StaticTree([[0], [2]])
    with pytest.raises(ValueError, match="unknown static tree"):
        StaticTree.builtin("nope")


@pytest.fixture(scope="module")
def world():
    return LatentWorld.preset("ambiguous", vocab_size=384, n_clusters=24)


def root_state(world, s):
    from relaxspec.simulate.rng import stream_key

    return world.initial(np.uint64(stream_key(np.int64(5), np.int64(s))))


POLICIES = [
    StaticTree.mc_sim_7b_63(),
    StaticTree.naive_extend_57(),
    StaticTree.chain(4),
    Eagle2Tree(10, 4, 59),
    Eagle2Tree(3, 2, 8),
    DDDTree(4, 8, (3, 5, 7), -1.0, 30),
    DDDTree(10, 11, (5, 7, 9), -0.3, 60),
]


@pytest.mark.parametrize("policy", POLICIES, ids=str)
@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_numba_builder_matches_numpy_build(world, policy, temperature):
    for s in range(4):
        z0, h0 = root_state(world, s)
        draft = kernel_draft(world, z0, h0, temperature)
        q_root = draft(np.array([-1]), np.array([0]), np.array([0]))[0]
        u = None
        if policy.supports_draws and s % 2:
            u = np.random.default_rng(s).random(policy.n_nodes)
        built = policy.build(q_root, draft, u)
        parents, tokens, q, calls = kernel_build(policy, world, z0, h0, temperature, u)
        np.testing.assert_array_equal(built.tree.parents, parents)
        np.testing.assert_array_equal(built.tree.tokens, tokens)
        np.testing.assert_array_equal(built.q, q)
        assert built.draft_calls == calls


def test_top_tokens_matches_stable_argsort():
    """Top-k of q = e * inv with chunk pruning = the first m of a stable argsort of q (ties by lower
    token id), ties, float32 rows, odd sizes and fewer tokens than m included."""
    from relaxspec.simulate.policy_kernels import top_tokens
    from relaxspec.simulate.world_kernels import NCH, chunk_maxima

    rng = np.random.default_rng(2)
    rows = [np.ones(100), np.repeat(rng.random(13), 90), rng.random(1000), rng.dirichlet(np.ones(77)) * 3.0,
            rng.random(5000).astype(np.float32), np.repeat(rng.random(7), 300).astype(np.float32)]
    for e in rows:
        for inv in (1.0, 1.0 / float(e.sum()), 0.3):
            cmax = np.empty(NCH)
            chunk_maxima(e, cmax)
            q = e.astype(np.float64) * inv
            for m in (1, 3, 10, e.size + 2):
                out, vals = np.empty(m, dtype=np.int64), np.empty(m)
                got = top_tokens(e, e.size, cmax, inv, m, out, vals)
                want = np.argsort(-q, kind="stable")[:m]
                np.testing.assert_array_equal(out[:got], want)
                np.testing.assert_array_equal(vals[:got], q[want])


def test_eagle2_facts():
    V = 50
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(V))
    world = StationaryWorld(q, q)
    draft = kernel_draft(world, np.zeros(1), np.uint64(0))
    built = Eagle2Tree(4, 3, 25).build(q, draft)
    t = built.tree
    assert t.size == 25 and built.draft_calls == 4
    assert t.depth <= 4
    # scores never increase along a path, so the kept set is closed under ancestors (Tree validates
    # topological order); with one q everywhere the first layer is the top-4 of q
    np.testing.assert_array_equal(t.tokens[t.children(0)], np.argsort(-q, kind="stable")[:4])
    # closed under ancestors, children in rank order (descending q)
    for v in range(t.size):
        kids = t.children(v)
        assert np.all(np.diff(q[t.tokens[kids]]) <= 0)
    with pytest.raises(ValueError, match="static tree"):
        Eagle2Tree().build(q, draft, np.zeros(3))


def test_ddd_threshold_controls_depth():
    q = np.full(40, 1 / 40)
    world = StationaryWorld(q, q)
    draft = kernel_draft(world, np.zeros(1), np.uint64(0))
    shallow = DDDTree(4, 9, (3,), threshold=0.0, total_tokens=200).build(q, draft)
    deep = DDDTree(4, 9, (3,), threshold=-1e9, total_tokens=200).build(q, draft)
    assert shallow.draft_calls == 2 and shallow.tree.depth == 2
    assert deep.draft_calls == 9 and deep.tree.depth == 9
    with pytest.raises(ValueError, match="check steps"):
        DDDTree(4, 5, (7,))


def _brute_force(a, n, depth):
    """Best value over rank-prefix trees with <= n nodes and depth <= depth (exhaustive)."""
    if n == 0 or depth == 0:
        return 0.0
    best = 0.0

    def rec(i, left):
        if i >= len(a) or left == 0:
            return 0.0
        out = 0.0
        for s in range(1, left + 1):
            out = max(out, a[i] * (1 + _brute_force(a, s - 1, depth - 1)) + rec(i + 1, left - s))
        return out

    best = rec(0, n)
    return best


@pytest.mark.parametrize("a", [[0.6, 0.2, 0.1], [0.3, 0.25, 0.2, 0.1], [0.9], [0.5, 0.5]])
def test_sequoia_dp_is_optimal(a):
    for n, depth in itertools.product(range(1, 7), range(1, 4)):
        choices, value = sequoia_choices(a, n, depth)
        assert value == pytest.approx(_brute_force(a, n, depth), rel=1e-12)
        tree = StaticTree(choices)
        assert tree.n_nodes - 1 <= n and tree.template.depth <= depth
        got = sum(np.prod([a[r] for r in c]) for c in choices)
        assert got == pytest.approx(value, rel=1e-12)


def test_sequoia_tree_and_measurement():
    V = 30
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.full(V, 0.5))
    q = rng.dirichlet(np.full(V, 0.5))
    world = StationaryWorld(p, q)
    n_seq, seq_len, width = 64, 64, 5
    a = measure_positional_acceptance(world, "r1", width=width, n_sequences=n_seq, seq_len=seq_len,
                                      seed=3)
    # R1 exact: P(rank-i child accepted) = p(rank-i token of q), whatever the order (SPEC section 3)
    want = p[np.argsort(-q, kind="stable")[:width]]
    from relaxspec.simulate.engine import run

    steps = run(world, StaticTree([[i] for i in range(width)]), "r1", n_sequences=n_seq, seq_len=seq_len,
                seed=3).n_steps
    se = np.sqrt(want * (1 - want) / steps)
    assert np.all(np.abs(a - want) <= 5.5 * se + 1e-12)  # two-sided normal tail 3.8e-8 per rank
    tree = SequoiaTree(a, n_nodes=12, max_depth=4)
    assert tree.n_nodes - 1 <= 12 and tree.template.depth <= 4
    with pytest.raises(ValueError, match="acceptance_vector"):
        SequoiaTree([1.5], 3, 2)
    assert measure_positional_acceptance(world, "r1", width=2, n_sequences=2,
                                         seq_len=4).shape == (2,)
