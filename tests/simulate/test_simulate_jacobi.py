"""SJD's Jacobi windows (SPEC 9.1) with exact, group (GSD) and depth-scaled (Cool-SD) acceptance in the
simulator: the grammar's ``jacobi`` policy, the NumPy window verifier, the Numba kernel decision for
decision against the NumPy oracle, thread-count invariance, losslessness and tokens per forward against
theory's exact chain (``theory.jacobi``), and clear errors on bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.spec import check_tree_spec, draws_children, parse_tree
from relaxspec.simulate.engine import _outputs, run
from relaxspec.simulate.jacobi import check_jacobi_run, run_windows
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld, TraceWorld
from relaxspec.theory.boost import Boost
from relaxspec.theory.boost_law import boosted_acceptance, standard_residual
from relaxspec.theory.jacobi import jacobi_expected_tokens
from relaxspec.theory.jacobi_sampler import (
    MAX_WINDOW,
    fill_window,
    kept_drafts,
    verify_window,
    window_expectation,
    window_tv,
)
from relaxspec.theory.relax import Relax
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.verification import Verification

BOOSTS = [Boost.none(), Boost.group(10, tau=0.3, dist=1.0), Boost.depth([3.0, 2.0, 1.5])]
RNG = np.random.default_rng(20250)
V_SMALL = 64
STATIONARY_64 = StationaryWorld(RNG.dirichlet(np.full(V_SMALL, 0.3)), np.full(V_SMALL, 1 / V_SMALL),
                                embedding=RNG.normal(size=(V_SMALL, 3)), name="stationary64")
LATENT_64 = LatentWorld.preset("confident", vocab_size=V_SMALL, rho=0.95, sigma=0.02, beta=20.0)


def decode(world, window: JacobiWindow, boost: Boost, *, n: int, seq_len: int, seed: int,
           backend: str = "numba", threads: int | None = None, exact: bool = False):
    """Per-step buffers and tokens of ``simulate.jacobi.run_windows`` (what ``simulate.run`` calls)."""
    emb = world.embedding() if boost.kind == "group" else None
    spec = Verification("r2", boost=boost).encode(world.vocab_size, emb=emb)
    out = _outputs(n, seq_len)
    seqs = run_windows(world, window, spec, Verification("r2", boost=boost), out, seq_len=seq_len,
                       temperature=1.0, seed=seed,
                       threads=threads, backend=backend, exact=exact)
    return out, seqs


# ------------------------------------------------------------------ the grammar
@pytest.mark.parametrize("spec, name", [("jacobi:16", "jacobi:16"), ("jacobi:16,uniform", "jacobi:16"),
                                        ("jacobi:4,copy", "jacobi:4,copy"), (" jacobi:1 ", "jacobi:1"),
                                        (f"jacobi:{MAX_WINDOW}", f"jacobi:{MAX_WINDOW}")])
def test_jacobi_specs_parse_to_the_window_policy(spec: str, name: str) -> None:
    check_tree_spec(spec)
    policy = parse_tree(spec)
    assert isinstance(policy, JacobiWindow) and str(policy) == name
    assert parse_tree(str(policy)) == policy and policy.supports_draws and draws_children(spec)
    with pytest.raises(ValueError, match="not a draft tree"):
        policy.kernel_spec()


@pytest.mark.parametrize("spec, match", [("jacobi:0", r"integer in \[1, 64\]"), ("jacobi:65", "64"),
                                         ("jacobi:4,random", "fresh must be one of"), ("jacobi", "1 or 2"),
                                         ("jacobi:2.5", "integer"), ("jacobi:4,copy,x", "1 or 2")])
def test_bad_jacobi_specs_are_named(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_tree(spec)


# ------------------------------------------------------------------ the NumPy window verifier
def test_a_hand_window_follows_spec_9_1() -> None:
    """L = 2: d_1 fresh (one-hot), d_2 kept (q = the p it was drawn from, here p_2 itself)."""
    p = np.array([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
    drafts = np.array([0, 1])
    q = np.array([[1.0, 0.0, 0.0], p[1]])
    none = Boost.none()
    assert verify_window(p, drafts, q, none, None, [0.4, 0.99], [0.0, 0.0, 0.95]) == (2, 2)  # bonus: p_3
    assert verify_window(p, drafts, q, none, None, [0.6, 0.0], [0.5, 0.0, 0.0]) == (0, 1)  # [0, .6, .4]
    assert window_expectation(p, drafts, q, none, None) == (pytest.approx(1 + 0.5 + 0.5), 0.0)
    cool = Boost.depth([1.5])  # a_1 = min(1, 1.5 * 0.5) = 0.75: TV = a - a0 = 0.25 (SPEC 9.4, one-hot q)
    assert verify_window(p, drafts, q, cool, None, [0.7, 0.0], [0.0, 0.0, 0.0])[0] == 2
    assert window_tv(p, drafts, q, cool, None, 0) == pytest.approx(0.25)
    assert window_tv(p, drafts, q, cool, None, 2) == pytest.approx(0.25)  # d_2 (q = p) adds nothing
    kept, kept_q = kept_drafts(p, [0.0, 0.5, 0.95], 0)  # after a rejection at d_1: t_2, t_3
    assert kept.tolist() == [1, 2] and np.array_equal(kept_q, p[1:])
    assert kept_drafts(p, [0.0, 0.5, 0.95], 2)[0].size == 0
    tokens, q2 = fill_window(kept[:1], kept_q[:1], 3, 3, "copy", [0.0, 0.0, 0.0], 0)
    assert tokens.tolist() == [1, 1, 1] and q2[1:].tolist() == [[0, 1, 0], [0, 1, 0]]
    assert fill_window([], np.zeros((0, 3)), 2, 3, "uniform", [0.7, 0.1], 2)[0].tolist() == [2, 0]
    assert fill_window([], np.zeros((0, 3)), 2, 3, "copy", [0.7, 0.1], None)[0].tolist() == [2, 2]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), L=st.integers(1, 4), kind=st.sampled_from(["none", "group", "depth"]))
def test_verify_window_is_spec_9_1_read_literally(seed: int, L: int, kind: str) -> None:
    """Left to right, accept iff u_accept[j] < a_j(d_j) (depth j), else a draw from norm((p_j - q_j)^+)
    with u_draw[j]; all accepted: a draw from p_{L+1} with u_draw[L]."""
    rng = np.random.default_rng(seed)
    V = 6
    boost = {"none": Boost.none(), "group": Boost.group(3, tau=0.5, dist=2.0),
             "depth": Boost.depth([2.0, 1.2])}[kind]
    emb = rng.normal(size=(V, 2))
    p = rng.dirichlet(np.ones(V), size=L + 1)
    q = rng.dirichlet(np.ones(V), size=L)
    fresh = rng.random(L) < 0.5
    drafts = np.array([rng.choice(V, p=q[j]) for j in range(L)])
    q[fresh] = np.eye(V)[drafts[fresh]]
    ua, ud = rng.random(L), rng.random(L + 1)
    expected = (L, draw_token(p[L], ud[L]))
    for j in range(L):
        qj = q[j] / q[j].sum()  # R2's draft residual of a node's first draw
        if not ua[j] < boosted_acceptance(p[j], qj, int(drafts[j]), boost, depth=j + 1, emb=emb):
            expected = (j, draw_token(standard_residual(p[j], qj), ud[j]))
            break
    assert verify_window(p, drafts, q, boost, emb, ua, ud) == expected


def test_verify_window_refuses_bad_input() -> None:
    p = np.full((3, 4), 0.25)
    q = np.eye(4)[[0, 1]]
    none = Boost.none()
    for args, match in [((p[:2], [0, 1], q, none, None, [0.1] * 2, [0.1] * 3), r"p_rows must have shape \(3"),
                        ((p, [0, 1], q[:1], none, None, [0.1, 0.1], [0.1] * 3), "q_rows must have shape"),
                        ((p, [0, 5], q, none, None, [0.1, 0.1], [0.1] * 3), r"tokens in \[0, 4\)"),
                        ((p, [1, 1], q, none, None, [0.1, 0.1], [0.1] * 3), "zero probability"),
                        ((p, [0, 1], q, none, None, [0.1, 1.0], [0.1] * 3), r"uniforms in \[0, 1\)"),
                        ((p, [0, 1], q, none, None, [0.1, 0.1], [0.1] * 2), r"u_draw must have shape \(3"),
                        ((p, [0, 1], q, Boost.group(3), None, [0.1] * 2, [0.1] * 3), "embedding table"),
                        ((p, [0, 1], q, Boost.group(3), np.ones((5, 2)), [0.1] * 2, [0.1] * 3),
                         "another vocabulary size"),
                        ((p, [0, 1], q, Boost.budget(0.1, 4), None, [0.1] * 2, [0.1] * 3), "budget"),
                        ((p * 2, [0, 1], q, none, None, [0.1] * 2, [0.1] * 3), "does not sum to 1")]:
        with pytest.raises(ValueError, match=match):
            verify_window(*args)


# ------------------------------------------------------------------ the kernel against the oracle
@pytest.mark.parametrize("world", [LATENT_64, STATIONARY_64], ids=["latent", "stationary"])
@pytest.mark.parametrize("boost", BOOSTS, ids=str)
def test_kernel_takes_the_oracles_decisions(world, boost: Boost) -> None:
    """Same steps, accepted counts and tokens; TVs and exact expectations to rounding."""
    window = JacobiWindow(5, "copy" if boost.kind == "group" else "uniform")
    a_out, a_seq = decode(world, window, boost, n=2, seq_len=30, seed=11, exact=True)
    b_out, b_seq = decode(world, window, boost, n=2, seq_len=30, seed=11, exact=True, backend="numpy")
    np.testing.assert_array_equal(a_out[4], b_out[4])
    np.testing.assert_array_equal(a_out[0], b_out[0])
    np.testing.assert_array_equal(a_seq, b_seq)
    for i in (1, 2, 3):
        np.testing.assert_allclose(a_out[i], b_out[i], rtol=0, atol=1e-12)
    steps = a_out[0][:, :, 0][a_out[0][:, :, 0] > 0]
    assert steps.sum() == (a_seq >= 0).sum() and np.all(steps <= window.window + 1)


def test_thread_count_changes_nothing() -> None:
    world = LatentWorld.preset("ambiguous", vocab_size=256)
    boost = Boost.group(10, tau=0.3, dist=1.0)
    one = decode(world, JacobiWindow(6), boost, n=6, seq_len=48, seed=3, threads=1, exact=True)
    two = decode(world, JacobiWindow(6), boost, n=6, seq_len=48, seed=3, threads=2, exact=True)
    for a, b in zip((*one[0], one[1]), (*two[0], two[1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_run_dispatches_windows_and_records_them() -> None:
    res = run(STATIONARY_64, parse_tree("jacobi:3,copy"), "r2+cool:omega=2", n_sequences=3, seq_len=40,
              seed=2,
              exact_expectations=True)
    assert res.tree == "jacobi:3,copy" and res.verification == Verification("r2", boost=Boost.depth([2.0]))
    assert np.all(res.tree_size == 3) and np.all(res.draft_calls == 0)
    assert np.array_equal(res.tokens, res.accepted_depth + 1) and res.tv_bound_per_token > 0
    assert np.all(np.isfinite(res.expected_tokens))
    out, _ = decode(STATIONARY_64, JacobiWindow(3, "copy"), Boost.depth([2.0]), n=3, seq_len=40, seed=2)
    assert res.n_steps == out[4].sum() and res.tokens.sum() == out[0][:, :, 0].sum()


# ------------------------------------------------------------------ statistics (false failure < 1e-6)
P8 = np.array([0.4, 0.2, 0.12, 0.1, 0.08, 0.05, 0.03, 0.02])
STATIONARY_8 = StationaryWorld(P8, np.full(8, 1 / 8), embedding=np.random.default_rng(0).normal(size=(8, 2)),
                               name="stationary8")
BURN, STEPS, L_STAT = 400, 300, 4  # the kept-count chain's second eigenvalue is <= 0.972: 0.972^400 < 1e-4
SEQ_LEN = (BURN + STEPS) * (L_STAT + 1)  # a step emits <= L + 1 tokens: every sequence reaches BURN + STEPS


@pytest.mark.parametrize("fresh", ["uniform", "copy"])
def test_sjd_without_boost_is_lossless(fresh: str) -> None:
    """Emitted tokens are i.i.d. p: chi-square on token counts and on disjoint consecutive pairs,
    each at 5e-7."""
    _, seqs = decode(STATIONARY_8, JacobiWindow(L_STAT, fresh), Boost.none(), n=64, seq_len=SEQ_LEN, seed=5)
    tokens = seqs[:, :SEQ_LEN]
    counts = np.bincount(tokens.ravel(), minlength=8)
    assert stats.chisquare(counts, P8 * tokens.size).pvalue > 5e-7
    pairs = tokens[:, 0::2] * 8 + tokens[:, 1::2]
    pair_counts = np.bincount(pairs.ravel(), minlength=64)
    assert stats.chisquare(pair_counts, np.outer(P8, P8).ravel() * pairs.size).pvalue > 5e-7


@pytest.mark.parametrize("boost", [Boost.none(), Boost.group(4, tau=0.2, dist=2.0),
                                   Boost.depth([3.0, 2.0, 1.5])], ids=str)
@pytest.mark.parametrize("fresh", ["uniform", "copy"])
def test_tokens_per_forward_match_the_exact_chain(boost: Boost, fresh: str) -> None:
    """Mean tokens per forward over steps BURN..BURN+STEPS of independent sequences against
    ``theory.jacobi.jacobi_expected_tokens``: |t| < 6 (two-sided < 1e-7 with 127 degrees of freedom)."""
    out, _ = decode(STATIONARY_8, JacobiWindow(L_STAT, fresh), boost, n=128, seq_len=SEQ_LEN, seed=7)
    assert out[4].min() >= BURN + STEPS
    means = out[0][:, BURN:BURN + STEPS, 0].mean(axis=1)
    exact = jacobi_expected_tokens(P8, L_STAT, fresh=fresh, boost=boost, emb=STATIONARY_8.embedding())
    t = (means.mean() - exact) / (means.std(ddof=1) / np.sqrt(means.size))
    assert abs(t) < 6.0, (means.mean(), exact, t)


# ------------------------------------------------------------------ bad input
class _BareTrace(TraceWorld):
    def __init__(self) -> None:
        self.name, self.vocab_size = "trace:none", V_SMALL


@pytest.mark.parametrize("kwargs, match", [
    ({"rule": "r1"}, "needs rule r2"), ({"rule": "r3"}, "needs rule r2"),
    ({"relax": Relax.additive(4, 0.1)}, "no LANTERN relaxation"),
    ({"boost": Boost.budget(0.1, 4)}, "budget:tv=0.1,k=4 merges .* needs a neighbour table"),
    ({"world": StationaryWorld(P8, P8), "boost": Boost.group(3)}, "no embedding table"),
    ({"world": _BareTrace()}, "TraceWorld"),
])
def test_bad_runs_are_refused(kwargs: dict, match: str) -> None:
    args = {"world": STATIONARY_64, "rule": "r2", "relax": Relax.none(), "boost": Boost.none(), **kwargs}
    with pytest.raises(ValueError, match=match):
        world = args.pop("world")
        run(world, JacobiWindow(4), Verification(**args), n_sequences=1, seq_len=8)


def test_bad_windows_are_refused() -> None:
    for window, fresh, match in [(0, "uniform", r"\[1, 64\]"), (65, "uniform", r"\[1, 64\]"),
                                 (True, "uniform", "integer"), (4, "random", "fresh must be one of")]:
        with pytest.raises(ValueError, match=match):
            JacobiWindow(window, fresh)
    with pytest.raises(ValueError, match="expected a JacobiWindow"):
        check_jacobi_run(STATIONARY_64, parse_tree("chain:3"), Verification("r2"))
