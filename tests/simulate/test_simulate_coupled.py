"""SCD's coupled Jacobi windows and SJD-PAC's windows (SPEC 10.1-10.2) in the simulator, exact and with the
budgeted relaxation (SPEC 9.5, docs/theory.md 15.6): the grammar, the Numba kernel decision for decision
against the NumPy oracle, thread-count invariance, the oracle's emitted law against theory.coupled's exact
laws, ``simulate.run`` dispatch and clear refusals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.spec import check_tree_spec, draft_source, parse_tree
from relaxspec.core.trees.windows import CoupledWindow, PacWindow
from relaxspec.simulate.coupled_kernels import window_codes
from relaxspec.simulate.coupled_oracle import decode_coupled, tree_size
from relaxspec.simulate.engine import _outputs, run
from relaxspec.simulate.jacobi import run_windows
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld
from relaxspec.theory.boost import Boost
from relaxspec.theory.budget import check_budget
from relaxspec.theory.coupled import WindowRule, coupled_budget_law, coupled_sequence_law
from relaxspec.theory.coupled_gumbel import gumbel_sequence_law
from relaxspec.theory.verification import DraftSource, Verification

V_SMALL = 64
LATENT_64 = LatentWorld.preset("confident", vocab_size=V_SMALL, rho=0.95, sigma=0.02, beta=20.0)
AMBIGUOUS = LatentWorld.preset("ambiguous", vocab_size=V_SMALL)
_RNG = np.random.default_rng(20250)
STATIONARY_64 = StationaryWorld(_RNG.dirichlet(np.full(V_SMALL, 0.3)), np.full(V_SMALL, 1 / V_SMALL))
WINDOWS = ["jacobi:5,coupled=principled", "jacobi:5,copy,coupled=official", "jacobi:5,coupled=gumbel",
           "pac:6", "pac:6,width=2,depth=2,ac=off,siblings=official", "pac:6,copy,siblings=official"]
BUDGET = "r2+budget:tv=0.1,k=4"
BUDGET_WINDOWS = ["jacobi:5,coupled=principled", "jacobi:5,copy,coupled=gumbel", "pac:6",
                  "pac:6,width=2,depth=2,ac=off"]


def decode(world, spec: str, *, n: int, seq_len: int, seed: int, backend: str = "numba",
           threads: int | None = None, exact: bool = False, verification: str = "r2"):
    """Per-step buffers and tokens of ``simulate.jacobi.run_windows`` (what ``simulate.run`` calls)."""
    v = Verification.parse(verification)
    rs = v.encode(world.vocab_size, neighbours=world.neighbours(v.neighbour_k) if v.neighbour_k else None)
    out = _outputs(n, seq_len)
    seqs = run_windows(world, parse_tree(spec), rs, v, out, seq_len=seq_len, temperature=1.0,
                       seed=seed, threads=threads, backend=backend, exact=exact)
    return out, seqs


# ------------------------------------------------------------------ the grammar
@pytest.mark.parametrize("spec, name, cls", [
    ("jacobi:16,coupled=principled", "jacobi:16,coupled=principled", CoupledWindow),
    (" jacobi:4 , copy , coupled = gumbel", "jacobi:4,copy,coupled=gumbel", CoupledWindow),
    ("jacobi:4,uniform,coupled=official", "jacobi:4,coupled=official", CoupledWindow),
    ("jacobi:4,coupled=none", "jacobi:4", JacobiWindow),
    ("pac:32", "pac:32", PacWindow),
    ("pac:32,width=3,depth=3,ac=on,siblings=principled", "pac:32", PacWindow),
    ("pac:8,copy,width=2,depth=1,ac=off,siblings=official",
     "pac:8,copy,width=2,depth=1,ac=off,siblings=official", PacWindow)])
def test_window_specs_parse_back(spec: str, name: str, cls: type) -> None:
    policy = parse_tree(spec)
    assert type(policy) is cls and str(policy) == name and check_tree_spec(spec) == name
    assert parse_tree(name) == policy and hash(parse_tree(name)) == hash(policy)
    source = (DraftSource.JACOBI if cls is JacobiWindow else DraftSource.COUPLED if "official" not in name
              else DraftSource.COUPLED_OFFICIAL)  # whether every draft follows its stored law
    assert draft_source(policy) is source and draft_source(name) is source and source.is_window
    assert policy != JacobiWindow(policy.window, policy.fresh) or cls is JacobiWindow


@pytest.mark.parametrize("spec, match", [
    ("jacobi:4,coupled=maximal", "coupled must be one of"), ("jacobi:4,coupled=gumbel,copy", "positional"),
    ("jacobi:4,depth=2", "unknown setting 'depth'"),
    ("pac:4,width=0", r"width must be an integer in \[1, 8\]"),
    ("pac:4,depth=9", r"\[1, 8\]"), ("pac:4,ac=yes", "ac must be one of"), ("pac", "1 or 2"),
    ("pac:4,siblings=residual", "siblings must be one of"), ("pac:4,width=2,width=3", "given twice"),
    ("pac:65", r"\[1, 64\]")])
def test_bad_window_specs_are_named(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_tree(spec)


def test_tree_size_is_the_column_product() -> None:
    assert tree_size([1, 1, 1]) == 3 and tree_size([3, 3, 1, 1]) == 3 + 9 + 9 + 9


# ------------------------------------------------------------------ kernel against oracle
@pytest.mark.parametrize("world, spec, verification", [
    *((world, w, "r2") for world in (LATENT_64, STATIONARY_64) for w in WINDOWS),
    *((world, w, BUDGET) for world in (LATENT_64, AMBIGUOUS) for w in BUDGET_WINDOWS)],  # (a world's table)
    ids=lambda v: v if isinstance(v, str) else ("stationary" if v is STATIONARY_64 else v.name))
def test_kernel_takes_the_oracles_decisions(world, spec: str, verification: str) -> None:
    exact = spec.startswith("jacobi")
    kw = dict(n=3, seq_len=40, seed=11, exact=exact, verification=verification)
    a_out, a_seq = decode(world, spec, **kw)
    b_out, b_seq = decode(world, spec, **kw, backend="numpy")
    for x, y in zip((a_out[0], a_out[4], a_seq), (b_out[0], b_out[4], b_seq), strict=True):
        np.testing.assert_array_equal(x, y)
    for i in (1, 2, 3):
        np.testing.assert_allclose(a_out[i], b_out[i], rtol=0, atol=1e-12)
    steps = a_out[0][:, :, 0][a_out[0][:, :, 0] > 0]
    assert steps.sum() == (a_seq >= 0).sum()
    if verification == BUDGET:  # the budget moved mass somewhere
        assert np.nansum(a_out[3]) > 0.0


@pytest.mark.parametrize("spec", BUDGET_WINDOWS)
def test_budget_zero_takes_the_exact_tests_decisions(spec: str) -> None:
    """tv = 0: no budget to spend, scale 0 and the exact acceptances: every token and step as R2's (on
    chains bit for bit, docs/theory.md 14.4; on PD trees the draft residual is renormalised from q rather
    than step by step, equal decisions at this seed)."""
    a_out, a_seq = decode(AMBIGUOUS, spec, n=4, seq_len=60, seed=9)
    b_out, b_seq = decode(AMBIGUOUS, spec, n=4, seq_len=60, seed=9, verification="r2+budget:tv=0,k=4")
    np.testing.assert_array_equal(a_out[0], b_out[0])
    np.testing.assert_array_equal(a_seq, b_seq)
    assert np.all(b_out[3] == 0.0)


def test_budget_spends_at_most_tv_per_token() -> None:
    """Each emitted token's node is charged at most tv (docs/theory.md Theorem 15.3's per-node budget): a
    step's record is at most tv times its tokens, and the budget buys tokens per forward."""
    tv = 0.1
    out, _ = decode(AMBIGUOUS, "pac:6", n=6, seq_len=80, seed=4, verification=f"r2+budget:tv={tv},k=8")
    exact, _ = decode(AMBIGUOUS, "pac:6", n=6, seq_len=80, seed=4)
    live = out[0][:, :, 0] > 0
    assert np.all(out[3][live] <= tv * out[0][:, :, 0][live] + 1e-12) and out[3][live].max() > 0.0
    assert out[0][:, :, 0][live].mean() > exact[0][:, :, 0][exact[0][:, :, 0] > 0].mean()


def test_a_pac_tree_is_used_and_off_spine_paths_are_taken() -> None:
    """In an ambiguous world PD's siblings make trees and some forwards accept a sibling (choice > 0):
    the off-spine branch of both implementations is exercised (and agrees, above and here)."""
    a_out, a_seq = decode(AMBIGUOUS, "pac:6", n=4, seq_len=120, seed=5)
    b_out, b_seq = decode(AMBIGUOUS, "pac:6", n=4, seq_len=120, seed=5, backend="numpy")
    np.testing.assert_array_equal(a_out[0], b_out[0])
    np.testing.assert_array_equal(a_seq, b_seq)
    rows = a_out[0][a_out[0][:, :, 0] > 0]
    assert rows[:, 1].max() > 6 and rows[:, 5].max() > 0


def test_thread_count_changes_nothing() -> None:
    for spec, v in (("jacobi:8,coupled=gumbel", "r2"), ("pac:8", "r2"), ("pac:8", BUDGET)):
        one = decode(AMBIGUOUS, spec, n=6, seq_len=48, seed=3, threads=1, verification=v)
        two = decode(AMBIGUOUS, spec, n=6, seq_len=48, seed=3, threads=2, verification=v)
        for a, b in zip((*one[0], one[1]), (*two[0], two[1]), strict=True):
            np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ the oracle's law is theory's
START = np.array([0.5, 0.5])
TRANS = np.array([[0.9, 0.1], [0.2, 0.8]])  # docs/theory.md 15.2's counterexample target
START3 = np.array([0.5, 0.3, 0.2])
TRANS3 = np.array([[0.6, 0.3, 0.1], [0.15, 0.25, 0.6], [0.3, 0.1, 0.6]])
N_LAW = 20_000


def _sample_law(start: np.ndarray, trans: np.ndarray, spec: str, n: int, seed: int,
                boost: Boost | None = None, nb: np.ndarray | None = None, n_law: int = N_LAW) -> np.ndarray:
    """Counts of the first ``n`` tokens of ``n_law`` oracle decodes on the Markov target, fresh uniforms
    per decision and Gumbel noise fixed per absolute position (``boost``: the budget over ``nb``)."""
    rng = np.random.default_rng(seed)
    codes = window_codes(parse_tree(spec))
    budget = {} if boost is None else {"boost": boost, "nb": check_budget(boost, nb, start.size)}
    counts = np.zeros((start.size,) * n)
    for _ in range(n_law):
        noises: dict[int, np.ndarray] = {}

        def noise(position: int, size: int, noises: dict = noises) -> np.ndarray:
            if position not in noises:
                noises[position] = rng.random(size)
            return noises[position]

        steps = decode_coupled(lambda s: start if s is None else trans[s], lambda s, x: x, None, start.size,
                               codes, n, lambda step, node, purpose: rng.random(), noise, **budget)
        counts[tuple(np.concatenate([st.tokens for st in steps])[:n])] += 1
    return counts


@pytest.mark.parametrize("spec, start, trans, law", [
    ("jacobi:2,coupled=principled", START3, TRANS3, WindowRule.scd()),
    ("jacobi:2,coupled=official", START, TRANS, WindowRule.scd("official")),
    ("jacobi:2,coupled=gumbel", START3, TRANS3, "gumbel"),
    ("pac:2,width=2,depth=1", START3, TRANS3, WindowRule.pac(width=2, depth=1)),
    ("pac:2,width=2,depth=2,ac=off", START3, TRANS3, WindowRule.pac(ac=False, width=2, depth=2)),
    ("pac:2,width=2,depth=1,siblings=official", START, TRANS, WindowRule.pac(width=2, depth=1,
                                                                               siblings="official")),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_oracles_law_is_theorys(spec, start, trans, law) -> None:
    """Chi-square of 20000 decodes' first three tokens against ``theory.coupled``'s (or
    ``theory.coupled_gumbel``'s) exact law, cells of expected count < 20 pooled: p > 1e-7 (seven tests with
    false failure < 1e-6); a token sequence of exact probability 0 never appears. SCD ``official`` and
    PAC's ``official`` siblings have laws that are not the target's: the oracle follows theirs (the SCD
    ``official`` sample against the lossless law gives p = 3e-14: the test can tell them apart)."""
    n = 3
    exact = (gumbel_sequence_law(start, trans, 2, n) if law == "gumbel"
             else coupled_sequence_law(start, trans, 2, n, law)).ravel()
    _chi_square(_sample_law(start, trans, spec, n, seed=7).ravel(), exact)


def test_the_budgeted_oracles_law_is_theorys() -> None:
    """As above with the budget (tv = 0.2, each token's neighbours the other two) on a PD+AC window, against
    ``theory.coupled.coupled_budget_law``, with 4000 decodes (one more chi-square test, about 5 s: the
    oracle's budget stages run in NumPy). The budget moves this law 0.16 in TV from the target's: the
    sample against the target's law gives p below 1e-30."""
    boost, nb = Boost.budget(0.2, 2), np.array([[1, 2], [2, 0], [0, 1]])
    exact = coupled_budget_law(START3, TRANS3, 2, 3, WindowRule.pac(width=2, depth=1),
                               verification=f"r2+{boost}", neighbours=nb).law.ravel()
    counts = _sample_law(START3, TRANS3, "pac:2,width=2,depth=1", 3, seed=8, boost=boost, nb=nb, n_law=4000)
    _chi_square(counts.ravel(), exact)


def _chi_square(counts: np.ndarray, exact: np.ndarray) -> None:
    assert counts[exact <= 1e-15].sum() == 0
    expected = exact * counts.sum()
    big = expected >= 20
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    assert stats.chisquare(obs[keep], exp[keep] * obs.sum() / exp[keep].sum()).pvalue > 1e-7


# ------------------------------------------------------------------ simulate.run
def test_run_decodes_coupled_windows() -> None:
    for spec, lossless in (("jacobi:6,coupled=principled", True), ("jacobi:6,coupled=official", False),
                           ("pac:6,width=2", True)):
        res = run(AMBIGUOUS, parse_tree(spec), "r2", n_sequences=3, seq_len=40, seed=2,
                  exact_expectations=spec.startswith("jacobi"))
        out, _ = decode(AMBIGUOUS, spec, n=3, seq_len=40, seed=2)
        assert res.tree == spec and res.n_steps == out[4].sum() and res.tokens.sum() == out[0][:, :, 0].sum()
        assert np.array_equal(res.tokens, res.accepted_depth + 1) and np.all(res.draft_calls == 0)
        assert np.all(res.token_tv == 0.0) if lossless else np.all(np.isnan(res.token_tv))
        if spec.startswith("jacobi"):
            assert np.all(res.tree_size == 6) and np.all(np.isfinite(res.expected_tokens))
            assert np.all((res.expected_tokens >= 1) & (res.expected_tokens <= 7))


@pytest.mark.parametrize("spec, kwargs, match", [
    ("pac:4", {"verification": "r4"}, "verified by rule r2"),
    ("pac:4", {"verification": "r2+cool:omega=2"}, "exact or with the budget"),
    ("jacobi:4,coupled=principled", {"verification": "r1"}, "verified by rule r2"),
    ("pac:4", {"verification": "r2+lantern++:k=2,lam=2"}, "exact or with the budget"),
    ("jacobi:4,coupled=official", {"verification": "r2+budget:tv=0.1,k=2"}, "distributed as the law"),
    ("pac:4,siblings=official", {"verification": "r2+budget:tv=0.1,k=2"}, "distributed as the law"),
    ("pac:4", {"exact_expectations": True}, "chains only")])
def test_bad_coupled_runs_are_refused(spec: str, kwargs: dict, match: str) -> None:
    args = {"verification": "r2", **kwargs}
    with pytest.raises(ValueError, match=match) as err:
        run(AMBIGUOUS, parse_tree(spec), n_sequences=1, seq_len=8, **args)
    assert "\n" not in str(err.value)


def test_budget_runs_and_records_its_charges() -> None:
    res = run(AMBIGUOUS, parse_tree("jacobi:6,coupled=principled"), "r2+budget:tv=0.05,k=4", n_sequences=3,
              seq_len=40, seed=2, exact_expectations=True)
    assert np.all((res.token_tv >= 0) & (res.token_tv <= 0.05 * res.tokens + 1e-12))
    assert np.all(np.isfinite(res.expected_tv)) and np.all(res.expected_tv <= 0.05 * 6 + 1e-12)
    assert res.token_tv.sum() > 0.0
