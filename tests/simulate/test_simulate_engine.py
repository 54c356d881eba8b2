"""run(): Numba vs NumPy oracle (exact), thread invariance, agreement with theory, input errors."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.core.trees import DDDTree, Eagle2Tree, StaticTree
from relaxspec.simulate.engine import STEP_FIELDS, run
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld
from relaxspec.theory import Relax, Tree
from relaxspec.theory.tree import choices_to_parents, expected_tokens_per_step
from relaxspec.theory.verification import Verification


@pytest.fixture(scope="module")
def small_world():
    return LatentWorld.preset("ambiguous", vocab_size=512, n_clusters=32, draft_sigma=0.05,
                              draft_token_noise=0.3)


CASES = [  # (tree, rule, relax, variant, exact_expectations)
    (StaticTree.mc_sim_7b_63(), "r1", Relax.none(), "principled", True),
    (StaticTree.mc_sim_7b_63(), "r1", Relax.additive(40, 0.2), "official", False),
    (StaticTree.naive_extend_57(), "r2", Relax.multiplicative(20, 3.0), "principled", True),
    (StaticTree.chain(4), "r2", Relax.additive(20, 0.1), "official", False),
    (StaticTree.chain(4), "r2", Relax.none(), "principled", True),
    (Eagle2Tree(6, 3, 30), "r1", Relax.additive(40, 0.1), "principled", True),
    (Eagle2Tree(6, 3, 30), "r1", Relax.additive(40, 0.1), "official", False),
    (Eagle2Tree(6, 3, 30), "r3", Relax.multiplicative(40, 5.0), "principled", False),
    (DDDTree(5, 7, (3, 5), -0.5, 30), "r1", Relax.multiplicative(40, 2.0), "official", True),
]


@pytest.mark.parametrize("tree,rule,relax,variant,exact", CASES, ids=lambda c: str(c))
def test_numba_run_matches_numpy_oracle(small_world, tree, rule, relax, variant, exact):
    v = Verification(rule, relax, variant)
    kw = dict(n_sequences=2, seq_len=24, seed=4, exact_expectations=exact)
    a = run(small_world, tree, v, **kw)
    b = run(small_world, tree, v, backend="numpy", **kw)
    for f in STEP_FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    np.testing.assert_allclose(a.token_tv, b.token_tv, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(a.expected_tokens, b.expected_tokens, rtol=1e-9)
    np.testing.assert_allclose(a.expected_tv, b.expected_tv, rtol=1e-7, atol=1e-12)
    assert np.all(np.isnan(a.expected_tokens)) != exact


def test_thread_count_invariance(small_world):
    tree = Eagle2Tree(6, 3, 30)
    kw = dict(n_sequences=6, seq_len=32, seed=9)
    v = "r1+lantern:k=40,delta=0.2"
    one = run(small_world, tree, v, threads=1, **kw)
    two = run(small_world, tree, v, threads=2, **kw)
    both = run(small_world, tree, v, threads=2, exact_expectations=True, **kw)
    for f in (*STEP_FIELDS, "token_tv", "expected_tokens", "expected_tv", "sequence"):
        np.testing.assert_array_equal(getattr(one, f), getattr(two, f), err_msg=f)
    for f in (*STEP_FIELDS, "token_tv", "sequence"):  # the expectations change no outcome
        np.testing.assert_array_equal(getattr(one, f), getattr(both, f), err_msg=f)


@pytest.mark.parametrize("rule,relax,tree", [
    ("r1", Relax.none(), Eagle2Tree(6, 3, 30)),
    ("r1", Relax.additive(40, 0.2), StaticTree.mc_sim_7b_63()),
    ("r2", Relax.multiplicative(40, 3.0), StaticTree.mc_sim_7b_63()),
    ("r3", Relax.additive(40, 0.1), DDDTree(5, 7, (3, 5), -0.5, 30)),
])
def test_simulated_tokens_agree_with_theory(small_world, rule, relax, tree):
    """Mean tokens per step vs theory's exact per-step expectation over the same visited states.

    tokens_t - E[tokens_t | tree_t, state_t] is a martingale difference (mean 0, uncorrelated
    across steps), so the threshold 5.3 standard errors of its mean has a two-sided normal tail
    of 1.2e-7 < 1e-6. So is token_tv_t - expected_tv_t (the TV of the deciding nodes, read on the
    path, against its expectation over the whole tree). R3 is deterministic: they agree exactly.
    """
    res = run(small_world, tree, Verification(rule=rule, relax=relax), n_sequences=24, seq_len=64, seed=2,
              exact_expectations=True)
    diff = res.mean_tokens_per_step - res.mean_expected_tokens
    if rule == "r3":
        np.testing.assert_array_equal(res.tokens, res.expected_tokens)
        np.testing.assert_array_equal(res.token_tv, res.expected_tv)
        return
    assert abs(diff) <= 5.3 * res.se_difference, (diff, res.se_difference)
    assert res.se_difference <= res.se_tokens_per_step * 1.5
    if rule == "r1":
        d_tv = res.token_tv - res.expected_tv
        se_tv = res._ratio_se(d_tv)
        assert abs(d_tv.mean()) <= 5.3 * se_tv or (relax.is_exact and not d_tv.any()), (d_tv.mean(), se_tv)


def test_stationary_world_matches_expected_tokens_per_step():
    """With p, q the same at every node and a static R1 tree, every step is i.i.d. with the mean
    theory.expected_tokens_per_step; 5.3 standard errors: two-sided normal tail 1.2e-7."""
    V = 40
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.full(V, 0.3))
    q = 0.5 * p + 0.5 * rng.dirichlet(np.full(V, 0.3))
    E = rng.standard_normal((V, 3))
    from relaxspec.theory import neighbour_table

    nb = neighbour_table(E, k_max=V - 1)
    world = StationaryWorld(p, q, neighbours=nb)
    policy = StaticTree.mc_sim_7b_63()
    parents, ranks = choices_to_parents(policy.choices)
    tokens = np.zeros(parents.size, dtype=np.int64)
    order = np.argsort(-q, kind="stable")
    tokens[1:] = order[ranks[1:]]
    tree = Tree(parents, tokens)
    for relax in (Relax.none(), Relax.additive(10, 0.1)):
        want = expected_tokens_per_step(tree, np.tile(p, (tree.size, 1)), Verification("r1", relax),
                                        neighbours=nb)
        res = run(world, policy, Verification(rule="r1", relax=relax), n_sequences=32, seq_len=128, seed=1,
                  exact_expectations=True)
        np.testing.assert_allclose(res.expected_tokens, want, rtol=1e-12)
        se = res.tokens.std(ddof=1) / np.sqrt(res.n_steps)
        assert abs(res.mean_tokens_per_step - want) <= 5.3 * se, (res.mean_tokens_per_step, want, se)


def test_sim_result_summaries(small_world):
    res = run(small_world, StaticTree.chain(3), Verification(rule="r1", relax=Relax.additive(40, 0.2)),
              n_sequences=3,
              seq_len=20, seed=0)
    assert res.n_steps == res.tokens.size == res.token_tv.size == res.expected_tv.size
    assert np.all(res.tokens == res.accepted_depth + 1)
    assert np.all(res.tree_size == 3) and np.all(res.tree_depth == 3) and np.all(res.draft_calls == 3)
    per_seq = np.bincount(res.sequence, weights=res.tokens)
    assert np.all(per_seq >= 20)
    assert res.tv_bound_per_sequence == pytest.approx(res.token_tv.sum() / 3)
    assert res.tv_bound_per_token == pytest.approx(res.token_tv.sum() / res.tokens.sum())
    assert np.all(res.token_tv >= 0) and res.token_tv.sum() > 0
    with pytest.raises(ValueError, match="exact_expectations=True"):
        _ = res.mean_expected_tokens
    assert set(res.summary()) == {"mean_tokens_per_step", "se_tokens_per_step", "mean_accepted_depth",
                                  "mean_tree_depth", "mean_tree_size", "draft_calls_per_step",
                                  "tv_bound_per_token", "tv_bound_per_sequence"}


def test_run_rejects_bad_input(small_world):
    tree = StaticTree.chain(2)
    with pytest.raises(ValueError, match="n_sequences"):
        run(small_world, tree, "r1", n_sequences=0)
    with pytest.raises(ValueError, match="temperature"):
        run(small_world, tree, "r1", n_sequences=1, temperature=0.0)
    with pytest.raises(ValueError, match="use a static or Sequoia tree"):
        run(small_world, Eagle2Tree(), "r2", n_sequences=1)
    with pytest.raises(ValueError, match="unknown rule"):
        run(small_world, tree, "r9", n_sequences=1)
    with pytest.raises(ValueError, match="tree policy"):
        run(small_world, "chain", "r1", n_sequences=1)
    with pytest.raises(ValueError, match="threads"):
        run(small_world, tree, "r1", n_sequences=1, threads=10_000)
    with pytest.raises(ValueError, match="neighbour table"):
        run(StationaryWorld(np.full(4, 0.25), np.full(4, 0.25)), tree, "r1+lantern:k=2,delta=0.1",
            n_sequences=1)


def test_to_frame(small_world):
    """SimResult.to_frame(): one row per step with what ran beside it, or one summary row (issue 27)."""
    res = run(small_world, Eagle2Tree(6, 3, 30), "r1+lantern:k=40,delta=0.2", n_sequences=2, seq_len=16,
              seed=3)
    steps = res.to_frame()
    assert len(steps) == res.n_steps
    assert list(steps.columns[-len(res.STEP_COLUMNS):]) == list(res.STEP_COLUMNS)
    np.testing.assert_array_equal(steps["tokens"].to_numpy(), res.tokens)
    assert steps["sequence"].max() == 1 and steps["tokens"].sum() >= 2 * 16
    assert set(steps["verification"]) == {"r1+lantern:k=40,delta=0.2"} and set(steps["tree"]) == {res.tree}
    assert res.verification == Verification("r1", Relax.additive(40, 0.2))
    one = res.to_frame(per="run")
    assert len(one) == 1 and one["mean_tokens_per_step"].iloc[0] == res.mean_tokens_per_step
    assert one["tv_bound_per_token"].iloc[0] == res.tv_bound_per_token
    with pytest.raises(ValueError, match="per must be"):
        res.to_frame(per="sequence")


def test_run_takes_one_verification_as_a_value_or_its_spec(small_world):
    """Issue 27: ``run(world, tree, verification)``; a spec string parses with ``Verification.parse`` (aliases
    too), the result holds the value, and the loose rule/relax/variant/boost keywords are gone."""
    tree = Eagle2Tree(6, 3, 30)
    kw = dict(n_sequences=2, seq_len=16, seed=3)
    value = run(small_world, tree, Verification("r1", Relax.additive(40, 0.2)), **kw)
    spec = run(small_world, tree, "lantern:k=40,delta=0.2", **kw)
    assert spec.verification == value.verification and str(spec.verification) == "r1+lantern:k=40,delta=0.2"
    for f in (*STEP_FIELDS, "token_tv"):
        np.testing.assert_array_equal(getattr(spec, f), getattr(value, f), err_msg=f)
    assert run(small_world, tree, **kw).verification == Verification()  # r1, the default
    with pytest.raises(ValueError, match=r"^verification 'r1\+gsd:G=3': .*needs rule r2 or r4"):
        run(small_world, tree, "r1+gsd:G=3", **kw)
    with pytest.raises(TypeError, match="rule"):
        run(small_world, tree, rule="r1", **kw)
