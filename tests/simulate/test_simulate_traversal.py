"""Traversal verification (R4, SPEC 9.6) and the budgeted relaxation (SPEC 9.5) in the simulator: the
Numba kernels against theory's NumPy oracles decision for decision (steps, engine runs on static trees
and Jacobi windows), thread invariance, R4's losslessness and tokens per step against theory, the
budget at delta = 0 bit for bit, the sweep's rows and skip reasons, the testing API and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from theory_strategies import ROUNDING_NB, ROUNDING_P, ROUNDING_Q, full_neighbourhoods

from relaxspec.core.trees import Eagle2Tree, StaticTree
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.simulate.engine import STEP_FIELDS, _outputs, run
from relaxspec.simulate.jacobi import run_windows
from relaxspec.simulate.verify import step_expectation, verify_step
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld
from relaxspec.sweep import SweepConfig, jobs, run_sweep
from relaxspec.testing import (
    KernelRule,
    TheoryRule,
    check_lossless,
    check_matches,
    check_tv_bound,
    proved_bound,
    theory_expected_tokens,
)
from relaxspec.theory import Relax, Tree, node_outcome, sample_step
from relaxspec.theory.boost import Boost
from relaxspec.theory.budget import budget_r2_step_ends, sample_budget_r2_step
from relaxspec.theory.sampled_trees import PrefixModel, draw_sampled_tree, r2_step_ends, step_law
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.traversal import sample_traversal_step, traversal_ends
from relaxspec.theory.verification import Verification

ALPHA = 1e-6
BOOSTS = [Boost.none(), Boost.depth([2.5, 1.5]), Boost.group(10, tau=0.3, dist=1.0), Boost.budget(0.05, 4)]
SMALL = StaticTree([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])


def ring_table(V: int, k: int) -> np.ndarray:
    """Row x: x + 1, x + 2, ... (mod V): a valid neighbour table of width k."""
    return (np.arange(V)[:, None] + np.arange(1, k + 1)[None, :]) % V


@pytest.fixture(scope="module")
def latent():
    return LatentWorld.preset("ambiguous", vocab_size=96, n_clusters=8)


@pytest.fixture(scope="module")
def stationary():
    rng = np.random.default_rng(20251)
    V = 48
    return StationaryWorld(rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.5)),
                           neighbours=ring_table(V, 6), embedding=rng.normal(size=(V, 3)),
                           name="stationary48")


# ---------------------------------------------------------------- one step, kernel against oracle
def _drawn_tree(rng: np.random.Generator, V: int, parents: list[int]):
    P = rng.dirichlet(np.full(V, 0.4), size=len(parents))
    Q = rng.dirichlet(np.full(V, 0.4), size=len(parents))
    tokens = np.zeros(len(parents), dtype=np.int64)
    for u in range(len(parents)):
        kids = np.flatnonzero(np.array(parents) == u)
        if kids.size:
            Q[u] = 0.5 * Q[u] + 0.5 / V  # every token drawable
            tokens[kids] = draw_without_replacement(Q[u], rng.random(kids.size))
    return Tree(np.array(parents), tokens), P, Q


@pytest.mark.parametrize("boost", BOOSTS, ids=str)
def test_step_kernel_takes_theorys_decisions_and_expectations(boost):
    """verify_step / step_expectation (rule r4, and r2 with the budget) against
    theory.traversal.sample_traversal_step / traversal_ends and theory.budget: the same path and bonus
    for every uniform, the same TV record and expectations (to 1e-12)."""
    rng = np.random.default_rng(11)
    for trial in range(30):
        V = 9 if trial % 2 else 24
        tree, P, Q = _drawn_tree(rng, V, [-1, 0, 0, 0, 1, 1, 2, 4, 7])
        kw = dict(boost=boost, emb=rng.standard_normal((V, 3)) if boost.kind == "group" else None,
                  neighbours=ring_table(V, 5) if boost.kind == "budget" else None)
        ua, ud = rng.random(tree.size), rng.random(tree.size)
        rules = ["r4", "r2"] if boost.kind == "budget" else ["r4"]
        for rule in rules:
            v, tables = Verification(rule, boost=boost), {"emb": kw["emb"], "neighbours": kw["neighbours"]}
            path, bonus, tv = verify_step(tree, P, ua, ud, v, q_dists=Q, with_tv=True, **tables)
            e = step_expectation(tree, P, v, q_dists=Q, **tables)
            if rule == "r4":
                want = sample_traversal_step(tree, P, Q, ua, ud, **kw)
                exact = traversal_ends(tree, P, Q, **kw)
                tokens, bound = exact.tokens, exact.tv_bound
            else:
                want = sample_budget_r2_step(tree, P, Q, ua, ud, boost=boost, neighbours=kw["neighbours"])
                ends, bound = budget_r2_step_ends(tree, P, Q, boost=boost, neighbours=kw["neighbours"])
                tokens = sum(x.prob * (tree.depths[x.node] + 1) for x in ends)
            assert (path, bonus) == (list(want[0]), want[1]), (rule, trial)
            assert abs(e.tokens - tokens) <= 1e-12 and abs(e.tv - bound) <= 1e-12
            assert tv >= 0.0 and (tv == 0.0 or not boost.is_none)


def test_step_kernel_at_llamagen_size():
    """V = 16384, a 10-node drawn tree: the kernel's R4 decisions are theory's, exact and budgeted."""
    rng = np.random.default_rng(3)
    V = 16384
    tree, P, Q = _drawn_tree(rng, V, [-1, 0, 0, 1, 1, 2, 3, 3, 5, 8])
    nb = ring_table(V, 8)
    for boost in (Boost.none(), Boost.budget(0.05, 8)):
        kw = dict(boost=boost, neighbours=nb if boost.kind == "budget" else None)
        for _ in range(3):
            ua, ud = rng.random(tree.size), rng.random(tree.size)
            got = verify_step(tree, P, ua, ud, Verification("r4", boost=boost), q_dists=Q,
                              neighbours=kw["neighbours"])
            want = sample_traversal_step(tree, P, Q, ua, ud, **kw)
            assert got == (list(want[0]), want[1])


# ---------------------------------------------------------------- the budget's eps past 1 by rounding
def _budget_step_both(p, q, nb, kids, ua, ud, rule):
    """One budgeted step on a root with children ``kids`` (tokens): the kernel's (path, bonus) and
    expected tokens, and theory's."""
    n = len(kids) + 1
    tree = Tree(np.array([-1] + [0] * len(kids)), np.array([0, *kids]))
    P, Q = np.tile(p, (n, 1)), np.tile(q, (n, 1))
    boost = Boost.budget(1.0, nb.shape[1])
    got = verify_step(tree, P, ua, ud, Verification(rule, boost=boost), q_dists=Q, neighbours=nb)
    e = step_expectation(tree, P, Verification(rule, boost=boost), q_dists=Q, neighbours=nb)
    if rule == "r4":
        want = sample_traversal_step(tree, P, Q, ua, ud, boost=boost, neighbours=nb)
        tokens = traversal_ends(tree, P, Q, boost=boost, neighbours=nb).tokens
    else:
        want = sample_budget_r2_step(tree, P, Q, ua, ud, boost=boost, neighbours=nb)
        ends, _ = budget_r2_step_ends(tree, P, Q, boost=boost, neighbours=nb)
        tokens = sum(x.prob * (tree.depths[x.node] + 1) for x in ends)
    return (got, e.tokens), ((list(want[0]), want[1]), tokens)


@pytest.mark.parametrize("rule", ["r2", "r4"])
def test_budget_kernel_sums_all_k_neighbours(rule):
    """Issue 26 item 19's hand case: token 0's three neighbours carry 0.34 + 0.56 + 0.10 > 1.0 (rounding);
    eps(0) is all of it, so with delta = 1 one draft of token 0 is accepted surely (not with 0.96): a
    uniform of 0.98 accepts, in the kernel as in theory, and the step emits 2 tokens for sure."""
    got, want = _budget_step_both(ROUNDING_P, ROUNDING_Q, ROUNDING_NB, [0], np.array([0.5, 0.98]),
                                  np.array([0.5, 0.5]), rule)
    assert got[0] == want[0] == ([0, 1], got[0][1])
    assert got[1] == pytest.approx(2.0, abs=1e-12) and abs(got[1] - want[1]) <= 1e-12


@settings(max_examples=60, deadline=None)
@given(case=full_neighbourhoods(), u=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=6, max_size=6),
       rule=st.sampled_from(["r2", "r4"]), m=st.integers(1, 2))
def test_budget_kernel_matches_theory_where_rounding_lifts_eps(case, u, rule, m):
    """A token's V - 1 neighbours carry all of p (their sum 1 up to rounding): the kernel takes theory's
    decisions with the same uniforms and its expected tokens, with one or two drafts."""
    p, q, nb, x = case
    kids = [x, (x + 1) % p.size][:m]
    got, want = _budget_step_both(p, q, nb, kids, np.array(u[:m + 1]), np.array(u[3:4 + m]), rule)
    assert got[0] == want[0] and abs(got[1] - want[1]) <= 1e-12


# ---------------------------------------------------------------- the engine against the NumPy oracle
TREES = (StaticTree.chain(4), SMALL, JacobiWindow(4), JacobiWindow(3, "copy"))
CASES = [(tree, rule, boost) for tree in TREES
         for rule, boost in [("r4", b) for b in BOOSTS] + [("r2", Boost.budget(0.05, 4))]]


@pytest.mark.parametrize("tree,rule,boost", CASES, ids=lambda c: str(c))
def test_numba_run_matches_numpy_oracle(latent, stationary, tree, rule, boost):
    for world, exact in ((latent, True), (stationary, False)):
        v = Verification(rule, boost=boost)
        kw = dict(n_sequences=2, seq_len=16, seed=3, exact_expectations=exact)
        a = run(world, tree, v, **kw)
        b = run(world, tree, v, backend="numpy", **kw)
        for f in STEP_FIELDS:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
        np.testing.assert_allclose(a.token_tv, b.token_tv, rtol=1e-12, atol=1e-15)
        if exact:
            np.testing.assert_allclose(a.expected_tokens, b.expected_tokens, rtol=1e-12)
            np.testing.assert_allclose(a.expected_tv, b.expected_tv, rtol=1e-12, atol=1e-15)
        assert a.verification == v
        assert (a.token_tv.sum() > 0) == (not boost.is_none) or world is stationary


def test_thread_count_invariance(latent):
    for tree, boost in ((StaticTree.naive_extend_57(), Boost.budget(0.05, 8)),
                        (JacobiWindow(6), Boost.none())):
        v = Verification("r4", boost=boost)
        kw = dict(n_sequences=5, seq_len=24, seed=11)
        one = run(latent, tree, v, threads=1, **kw)
        two = run(latent, tree, v, threads=2, **kw)
        for f in (*STEP_FIELDS, "token_tv", "sequence"):
            np.testing.assert_array_equal(getattr(one, f), getattr(two, f), err_msg=f)


@pytest.mark.parametrize("tree", [StaticTree.naive_extend_57(), JacobiWindow(5)], ids=str)
def test_budget_at_delta_zero_is_r2_and_r4_bit_for_bit(latent, tree):
    for rule in ("r2", "r4"):
        kw = dict(n_sequences=3, seq_len=24, seed=5, exact_expectations=True)
        plain = run(latent, tree, rule, **kw)
        zero = run(latent, tree, Verification(rule, boost=Boost.budget(0.0, 8)), **kw)
        for f in (*STEP_FIELDS, "token_tv", "expected_tokens", "expected_tv"):
            np.testing.assert_array_equal(getattr(zero, f), getattr(plain, f), err_msg=f"{rule} {f}")
        assert not plain.token_tv.any()


# ---------------------------------------------------------------- R4 against theory
def test_r4_exact_expectations_agree_with_monte_carlo():
    """tokens - E[tokens | tree, state] and token_tv - E[token_tv | tree, state] are martingale
    differences: 5.3 standard errors of their means is a two-sided normal tail of 1.2e-7 < 1e-6."""
    world = LatentWorld.preset("ambiguous", vocab_size=512, n_clusters=32)
    for boost in (Boost.none(), Boost.budget(0.05, 8)):
        res = run(world, StaticTree.naive_extend_57(), Verification(rule="r4", boost=boost), n_sequences=16,
                  seq_len=48,
                  seed=2, exact_expectations=True)
        for d in (res.tokens - res.expected_tokens, res.token_tv - res.expected_tv):
            assert abs(d.mean()) <= 5.3 * res._ratio_se(d), (boost, d.mean(), res._ratio_se(d))
        assert (res.expected_tv.max() > 0) == (not boost.is_none)


def test_r4_in_a_stationary_world_matches_theory_and_beats_r2():
    """Same p, q after every prefix: steps are i.i.d. with the mean theory gives averaged over every draw
    of the tree (``theory.sampled_trees.step_law``, exact at V = 5); R4's exact mean is at least R2's,
    and the simulated means agree with both within 5.3 standard errors (two-sided tail 1.2e-7)."""
    rng = np.random.default_rng(4)
    V = 5
    p = rng.dirichlet(np.full(V, 0.6))
    q = 0.5 * p + 0.5 * rng.dirichlet(np.full(V, 0.6))
    world = StationaryWorld(p, q)
    parents = [-1, 0, 0, 1, 1, 2, 3]  # SMALL without its third root child
    policy = StaticTree([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    model = PrefixModel.stationary(p, q)
    want = {"r4": step_law(parents, model, lambda t, P, Q: traversal_ends(t, P, Q).ends).tokens,
            "r2": step_law(parents, model, r2_step_ends).tokens}
    assert want["r4"] >= want["r2"]
    got = {rule: run(world, policy, Verification(rule=rule), n_sequences=40, seq_len=100, seed=1,
                     exact_expectations=True)
           for rule in ("r4", "r2")}
    for rule, res in got.items():
        se = res.tokens.std(ddof=1) / np.sqrt(res.n_steps)
        assert abs(res.mean_tokens_per_step - want[rule]) <= 5.3 * se, (rule, res.mean_tokens_per_step, want)
        assert abs(res.expected_tokens.mean() - want[rule]) <= 5.3 * res.expected_tokens.std() / np.sqrt(
            res.n_steps)
    se = np.hypot(*(r.tokens.std(ddof=1) / np.sqrt(r.n_steps) for r in got.values()))
    assert got["r4"].mean_tokens_per_step >= got["r2"].mean_tokens_per_step - 5.3 * se


def _chi2_ok(tokens: np.ndarray, probs: np.ndarray) -> bool:
    counts = np.bincount(tokens.ravel(), minlength=probs.size)
    keep = probs > 0
    assert not counts[~keep].any()
    stat = np.sum((counts[keep] - probs[keep] * tokens.size) ** 2 / (probs[keep] * tokens.size))
    return stat <= stats.chi2.isf(ALPHA, int(keep.sum()) - 1)


def test_r4_is_lossless_in_a_stationary_world():
    """The emitted stream is i.i.d. p: chi-square at 1e-6 on the tokens and on disjoint consecutive pairs,
    for R4 on drawn static trees (the kernel step by step) and on Jacobi windows (the engine)."""
    rng = np.random.default_rng(7)
    V = 6
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0])
    q = np.array([0.1, 0.1, 0.2, 0.2, 0.2, 0.2])
    model = PrefixModel.stationary(p, q)
    parents = [-1, 0, 0, 1, 1, 2, 3]
    stream: list[int] = []
    while len(stream) < 12000:
        tree, P, Q = draw_sampled_tree(parents, model, rng.random(len(parents)))
        path, bonus = verify_step(tree, P, rng.random(len(parents)), rng.random(len(parents)), "r4",
                                  neighbours=None, q_dists=Q)
        stream += [int(t) for t in tree.tokens[path[1:]]] + [bonus]
    L = 4
    world = StationaryWorld(p, q)
    spec = Verification("r4").encode(V)
    out = _outputs(48, 200)
    seqs = run_windows(world, JacobiWindow(L), spec, Verification("r4"), out, seq_len=200, temperature=1.0,
                       seed=9,
                       threads=None, backend="numba", exact=False)
    for tokens in (np.array(stream[:12000]).reshape(-1, 2), seqs[:, :200].reshape(-1, 2)):
        assert _chi2_ok(tokens, p)
        assert _chi2_ok(tokens[:, 0] * V + tokens[:, 1], np.outer(p, p).ravel())


# ---------------------------------------------------------------- the testing API
def test_r4_and_the_budget_in_the_testing_api():
    s = settings(max_examples=25, deadline=None)
    check_lossless(TheoryRule("r4"), settings=s)
    check_tv_bound(TheoryRule("r4"), proved_bound("r4"), settings=s)
    check_matches(KernelRule("r4"), TheoryRule("r4", law=False), settings=s)
    for v in ("r2+budget:tv=0.05,k=3", "r4+budget:tv=0.05,k=3"):
        check_tv_bound(TheoryRule(v), proved_bound(v), settings=s)
        check_matches(KernelRule(v), TheoryRule(v, law=False), settings=s)
    gsd = Verification("r4", boost=Boost.group(4, 0.3, 0.6))
    check_matches(KernelRule(gsd), TheoryRule(gsd, law=False), settings=s)
    assert proved_bound("r2+budget:tv=0.05,k=3")(None) == 0.05


# ---------------------------------------------------------------- the sweep
def test_sweep_runs_r4_and_budgets_and_names_what_it_skips(tmp_path):
    grid = {"worlds": ["ambiguous"], "trees": ["chain:3", "eagle2:4,2,8"],
            "verifications": ["r2", "r2+lantern:k=8,delta=0.1", "r4", "r2+budget:tv=0.05,k=8",
                              "r4+budget:tv=0.05,k=8"],
            "n_sequences": 1, "seq_len": 8, "world_overrides": {"vocab_size": 300, "n_clusters": 20}}
    cfg = SweepConfig.from_dict(grid)
    got = {(j.tree, str(j.verification)) for j in jobs(cfg)}
    assert got == {("chain:3", v) for v in grid["verifications"]}
    lines = " | ".join(cfg.skipped())
    assert "skipped r4 on eagle2:4,2,8" in lines and "skipped r2 on eagle2:4,2,8" in lines
    assert "skipped r4+budget:tv=0.05,k=8 on eagle2:4,2,8" in lines
    with pytest.warns(UserWarning, match="skipped r2 on eagle2"):
        rows = run_sweep(cfg, tmp_path / "r.csv", progress=False)
    tv = {r["verification"]: float(r["tv_bound_per_token"]) for r in rows}
    assert tv["r4"] == 0.0 and tv["r2"] == 0.0
    assert min(tv[f"{rule}+budget:tv=0.05,k=8"] for rule in ("r2", "r4")) > 0.0
    with pytest.raises(ValueError, match=r"verification 'r4\+lantern:k=8,delta=0.1': .*takes no LANTERN"):
        SweepConfig.from_dict({**grid, "verifications": ["r4+lantern:k=8,delta=0.1"]})


# ---------------------------------------------------------------- bad input
def test_bad_input_is_refused(latent):
    p, q = np.full(6, 1 / 6), np.full(6, 1 / 6)
    tree = Tree(np.array([-1, 0, 0]), np.array([0, 1, 2]))
    rows = np.tile(p, (3, 1))
    u = np.full(3, 0.5)
    budget = Boost.budget(0.1, 2)
    r0 = Relax.none()
    cases = [
        (lambda: run(latent, SMALL, Verification(rule="r4", relax=Relax.additive(4, 0.1)), n_sequences=1,
                     seq_len=2),
         "rule r4 .* takes no LANTERN relaxation"),
        (lambda: run(latent, Eagle2Tree(4, 2, 8), "r4", n_sequences=1, seq_len=2),
         "rule r4 verifies children drawn from q without replacement"),
        (lambda: run(StationaryWorld(p, q), SMALL, Verification(rule="r4", boost=budget), n_sequences=1,
                     seq_len=2),
         "needs a neighbour table"),
        (lambda: run(latent, JacobiWindow(3), "r1", n_sequences=1, seq_len=2), "needs rule r2 or r4"),
        (lambda: run(latent, SMALL, Verification(rule="r1", boost=budget), n_sequences=1, seq_len=2),
         "needs rule r2 or r4"),
        (lambda: verify_step(tree, rows, u, u, Verification("r4", r0), neighbours=None), "needs q_dists"),
        (lambda: verify_step(tree, rows, u, u, Verification("r4", r0, boost=budget),
                             neighbours=np.zeros((6, 2), int), q_dists=rows), "lists the token itself"),
        (lambda: verify_step(tree, rows, u, u, Verification("r4", r0), neighbours=None,
                             q_dists=np.tile([0.0, 0.0, 0.5, 0.5, 0.0, 0.0], (3, 1))),
         "zero draft probability"),
        (lambda: verify_step(tree, rows, u, u, Verification("r4", r0, boost=budget),
                             neighbours=ring_table(6, 1), q_dists=rows),
         "reads k=2 neighbours but the table has only 1"),
        (lambda: sample_step(tree, rows, u, u, Verification("r4", r0), neighbours=None, q_dists=rows),
         "verifies a whole step, not node by node"),
        (lambda: node_outcome(p, 1, Verification("r2", boost=budget), q=q),
         "not verified on draft trees node by node"),
        (lambda: TheoryRule("r4", depth=2), "depth 1"),
        (lambda: KernelRule("r3"), "rule must be 'r1', 'r2' or 'r4'"),
        (lambda: theory_expected_tokens("r4"), "not a node-by-node walk"),
        (lambda: SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["eagle2:4,2,8"],
                                        "verifications": ["r4"]}), "no configuration to run"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
