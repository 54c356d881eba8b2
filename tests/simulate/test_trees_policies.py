"""Relaxation-aware tree policies (issue 7): Numba builder = NumPy build, k = 0 gives EAGLE-2's trees,
the engine's Numba run = its NumPy oracle, and with Relax.none() the new trees are lossless
(exact tree expectation = 1 + sum_v prod p(path); chi-square of the emitted tokens)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2
from test_simulate_engine import test_numba_run_matches_numpy_oracle as engine_matches_oracle

from relaxspec.core.trees import Eagle2Tree, StaticTree
from relaxspec.core.trees.policies import LatentAwareTree
from relaxspec.core.trees.selection import ChildSelector
from relaxspec.core.trees.sequoia import SequoiaTree
from relaxspec.simulate.engine import run
from relaxspec.simulate.policy_kernels import kernel_build, kernel_draft
from relaxspec.simulate.rng import stream_key
from relaxspec.simulate.verify import step_expectation, verify_step
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld
from relaxspec.theory import Relax, Tree, neighbour_table
from relaxspec.theory.tree import expected_tokens_per_step
from relaxspec.theory.verification import Verification

FALSE_FAILURE = 1e-6
RELAX = Relax.additive(40, 0.1)


@pytest.fixture(scope="module")
def world():
    return LatentWorld.preset("ambiguous", vocab_size=384, n_clusters=24)


def policies(nb: np.ndarray, relax: Relax) -> list:
    sel = {m: ChildSelector(m, relax, nb, pool=12) for m in ("latent", "diverse", "walk")}
    return [
        LatentAwareTree(10, 4, 59, relax=relax, neighbours=nb),
        LatentAwareTree(4, 3, 20, relax=relax, neighbours=nb, mode="diverse", pool=9),
        LatentAwareTree(6, 5, 40, relax=relax, neighbours=nb, mode="walk"),
        StaticTree.naive_extend_57().__class__(StaticTree.naive_extend_57().choices, selector=sel["diverse"]),
        SequoiaTree([0.5, 0.2, 0.1, 0.05], 30, 6, selector=sel["walk"]),
        SequoiaTree([0.4, 0.3, 0.1], 20, 4, selector=sel["latent"]),
    ]


def root_state(world, s):
    return world.initial(np.uint64(stream_key(np.int64(5), np.int64(s))))


@pytest.mark.parametrize("relax", [RELAX, Relax.multiplicative(40, 3.0)], ids=str)
@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_numba_builder_matches_numpy_build(world, relax, temperature):
    for policy in policies(world.neighbours(40), relax):
        for s in range(3):
            z0, h0 = root_state(world, s)
            draft = kernel_draft(world, z0, h0, temperature)
            q_root = draft(np.array([-1]), np.array([0]), np.array([0]))[0]
            built = policy.build(q_root, draft)
            parents, tokens, q, calls = kernel_build(policy, world, z0, h0, temperature)
            np.testing.assert_array_equal(built.tree.parents, parents, err_msg=str(policy))
            np.testing.assert_array_equal(built.tree.tokens, tokens, err_msg=str(policy))
            np.testing.assert_array_equal(built.q, q)
            assert built.draft_calls == calls


@pytest.mark.parametrize("mode", ["latent", "diverse", "walk"])
def test_no_merging_gives_eagle2_trees(world, mode):
    """With Relax.none() or k = 0 the latent-aware score is EAGLE-2's: identical trees (NumPy and Numba)."""
    for relax in (Relax.none(), Relax.additive(0, 0.3)):
        policy = LatentAwareTree(8, 3, 40, relax=relax, neighbours=world.neighbours(40), mode=mode, pool=9)
        eagle = Eagle2Tree(8, 3, 40)
        for s in range(3):
            z0, h0 = root_state(world, s)
            draft = kernel_draft(world, z0, h0)
            q_root = draft(np.array([-1]), np.array([0]), np.array([0]))[0]
            a, b = policy.build(q_root, draft), eagle.build(q_root, draft)
            np.testing.assert_array_equal(a.tree.parents, b.tree.parents)
            np.testing.assert_array_equal(a.tree.tokens, b.tree.tokens)
            np.testing.assert_array_equal(a.q, b.q)
            got = kernel_build(policy, world, z0, h0)
            np.testing.assert_array_equal(got[0], b.tree.parents)
            np.testing.assert_array_equal(got[1], b.tree.tokens)


@pytest.mark.parametrize("index", range(3))
def test_numba_run_matches_numpy_oracle(world, index):
    policy = policies(world.neighbours(40), RELAX)[[0, 2, 4][index]]
    engine_matches_oracle(world, policy, "r1", RELAX, "principled", True)


def stationary(V: int, seed: int):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.7))
    q = 0.6 * p + 0.4 * rng.dirichlet(np.full(V, 0.7))
    nb = neighbour_table(rng.standard_normal((V, 2)), k_max=V - 1)
    return p, q, nb


def built_trees(p, q, nb):
    """Trees of every new policy built with a relaxed selection on the stationary q."""
    world = StationaryWorld(p, q, neighbours=nb)
    draft = kernel_draft(world, np.zeros(1), np.uint64(0))
    relax = Relax.additive(4, 0.2)
    return [pol.build(q, draft).tree for pol in policies(nb, relax)]


def test_lossless_exact_tree_expectation():
    """Relax.none() on any tree: E[tokens] = 1 + sum over nodes of prod of p along the path (theory,
    section 7), whatever the tree policy; Numba and theory agree."""
    p, q, nb = stationary(12, 0)
    for tree in built_trees(p, q, nb):
        rows = np.tile(p, (tree.size, 1))
        want = 1.0 + sum(np.prod(p[tree.tokens[path_nodes(tree, v)]]) for v in range(1, tree.size))
        e = step_expectation(tree, rows, "r1")
        assert e.tokens == pytest.approx(want, rel=1e-12)
        assert e.tv == 0.0
        assert expected_tokens_per_step(tree, rows, "r1") == pytest.approx(want, rel=1e-12)


def path_nodes(tree: Tree, v: int) -> list[int]:
    out = []
    while v != 0:
        out.append(v)
        v = int(tree.parents[v])
    return out


def test_lossless_emitted_tokens_chi_square():
    """Decoding with the new trees and Relax.none() in a stationary world emits i.i.d. p: the first two
    tokens of a sequence are distributed as p x p (chi-square, false-failure probability 1e-6)."""
    V = 6
    p, q, nb = stationary(V, 1)
    rng = np.random.default_rng(7)
    n = 5000
    limit = chi2.isf(FALSE_FAILURE, V * V - 1)
    trees = built_trees(p, q, nb)
    for tree in (trees[1], trees[2], trees[4]):  # latent-diverse, latent-walk, Sequoia ranked by the walk
        rows = np.tile(p, (tree.size, 1))
        counts = np.zeros((V, V))
        for _ in range(n):
            out: list[int] = []
            while len(out) < 2:
                path, bonus = verify_step(tree, rows, rng.random(tree.size), rng.random(tree.size), "r1",
                                          neighbours=None)
                out += [int(t) for t in tree.tokens[path[1:]]] + [bonus]
            counts[out[0], out[1]] += 1
        expected = n * np.outer(p, p)
        stat = float(((counts - expected) ** 2 / expected).sum())
        assert stat < limit, (stat, limit)


def test_run_is_lossless_in_expectation():
    """run() with Relax.none(): theory's per-step expectation is 1 + sum prod p; the mean tokens per step
    agree with it within 5.3 standard errors (two-sided normal tail 1.2e-7)."""
    p, q, nb = stationary(12, 2)
    world = StationaryWorld(p, q, neighbours=nb)
    policy = LatentAwareTree(4, 3, 20, relax=Relax.additive(4, 0.2), neighbours=nb, mode="walk")
    res = run(world, policy, "r1", n_sequences=32, seq_len=64, seed=3,
              exact_expectations=True)
    tree = built_trees(p, q, nb)[0]
    assert tree.size > 1
    se = res.tokens.std(ddof=1) / np.sqrt(res.n_steps)
    assert abs(res.mean_tokens_per_step - res.expected_tokens[0]) <= 5.3 * se
    np.testing.assert_array_equal(res.token_tv, 0.0)


def test_policy_bad_input(world):
    nb = world.neighbours(40)
    with pytest.raises(ValueError, match="Eagle2Tree"):
        LatentAwareTree(relax=RELAX, neighbours=nb, mode="q")
    with pytest.raises(ValueError, match="needs the neighbour table"):
        LatentAwareTree(relax=RELAX, neighbours=None)
    with pytest.raises(ValueError, match="top_k"):
        LatentAwareTree(0, relax=RELAX, neighbours=nb)
    other = LatentWorld.preset("ambiguous", vocab_size=256, n_clusters=16)
    with pytest.raises(ValueError, match="V = 384"):
        run(other, LatentAwareTree(relax=RELAX, neighbours=nb), "r1", n_sequences=1, seq_len=4)
    static = StaticTree([[0], [1]], selector=ChildSelector("diverse", RELAX, nb))
    assert not static.supports_draws
    with pytest.raises(ValueError, match="static or Sequoia tree that draws from q"):
        run(world, static, "r2", n_sequences=1, seq_len=4)
    with pytest.raises(ValueError, match="by diverse"):
        static.build(np.full(384, 1 / 384), lambda *a: None, np.zeros(3))
    with pytest.raises(ValueError, match="ChildSelector"):
        StaticTree([[0]], selector="diverse")


def test_thread_count_invariance(world):
    """The selection's scratch is per sequence: same seed, same numbers with 1 or 2 threads."""
    nb = world.neighbours(40)
    for policy in (LatentAwareTree(6, 3, 30, relax=RELAX, neighbours=nb, mode="diverse"),
                   LatentAwareTree(6, 3, 30, relax=RELAX, neighbours=nb, mode="walk")):
        kw = dict(n_sequences=6, seq_len=32, seed=9)
        v = Verification("r1", RELAX)
        one, two = run(world, policy, v, threads=1, **kw), run(world, policy, v, threads=2, **kw)
        for f in ("tokens", "tree_size", "tree_depth", "accepted_depth", "root_choice", "token_tv"):
            np.testing.assert_array_equal(getattr(one, f), getattr(two, f), err_msg=f)
