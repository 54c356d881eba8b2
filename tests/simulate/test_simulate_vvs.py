"""VVS's skipped verification (SPEC 10.3) in the simulator: the grammar, the Numba kernel decision for
decision against the NumPy oracle, each skip step's token TV against theory.vvs, the schedules, tokens per
target forward, thread-count invariance and clear refusals."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.core.trees.policies import Eagle2Tree
from relaxspec.core.trees.skips import SkipSchedule, VvsTree
from relaxspec.core.trees.spec import check_tree_spec, draft_source, parse_tree
from relaxspec.simulate.engine import STEP_FIELDS, run
from relaxspec.simulate.vvs_oracle import decode_vvs
from relaxspec.simulate.worlds import LatentWorld, StationaryWorld
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import DraftSource, Verification
from relaxspec.theory.vvs import skip_step_tv

V_SMALL = 64
AMBIGUOUS = LatentWorld.preset("ambiguous", vocab_size=V_SMALL)
_RNG = np.random.default_rng(20261)
P_STAT = _RNG.dirichlet(np.full(V_SMALL, 0.05))  # peaked, and a drafter near it: R1 accepts drafts
# code vectors near one direction: the tree's paths are alike (score ~0.95), so the dynamic schedule skips
STATIONARY = StationaryWorld(P_STAT, 0.8 * P_STAT + 0.2 * _RNG.dirichlet(np.full(V_SMALL, 0.3)),
                             embedding=1.0 + 0.3 * _RNG.normal(size=(V_SMALL, 4)))
LANTERN = Relax.additive(8, 0.2)
SPECS = ["vvs:4,3,12,uniform=2", "vvs:4,3,12,uniform=4", "vvs:4,3,12,dynamic=0.6",
         "vvs:4,3,12,dynamic,alpha=0.5"]
FLOAT_FIELDS = ("token_tv", "expected_tokens", "expected_tv")


def _run(world, spec: str, relax: Relax = Relax.none(), **kw):
    kw = {"n_sequences": 3, "seq_len": 40, "seed": 11, **kw}
    return run(world, parse_tree(spec), Verification("r1", relax), **kw)


def _same(a, b) -> None:
    for f in (*STEP_FIELDS, "sequence", "target_forwards"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    for f in FLOAT_FIELDS:
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=0, atol=1e-12, err_msg=f)


# ------------------------------------------------------------------ the grammar
@pytest.mark.parametrize("spec, name, schedule", [
    ("vvs:10,4,59,uniform=2", "vvs:10,4,59,uniform=2", SkipSchedule("uniform", interval=2)),
    (" vvs: 10 ,4,59, uniform = 04", "vvs:10,4,59,uniform=4", SkipSchedule("uniform", interval=4)),
    ("vvs:10,4,59,dynamic", "vvs:10,4,59,dynamic", SkipSchedule("dynamic")),
    ("vvs:10,4,59,dynamic=0.70,alpha=0.9", "vvs:10,4,59,dynamic", SkipSchedule("dynamic")),
    ("vvs:10,4,59,dynamic=0.8,alpha=0.5", "vvs:10,4,59,dynamic=0.8,alpha=0.5",
     SkipSchedule("dynamic", similarity=0.8, alpha=0.5)),
    ("vvs:10,4,59,dynamic,alpha=1", "vvs:10,4,59,dynamic,alpha=1", SkipSchedule("dynamic", alpha=1.0)),
    ("vvs:10,4,59,uniform=2,tv=0.10", "vvs:10,4,59,uniform=2,tv=0.1",
     SkipSchedule("uniform", interval=2, tv=0.1)),
    ("vvs:10,4,59,dynamic=0.8,tv=0,alpha=0.5", "vvs:10,4,59,dynamic=0.8,alpha=0.5,tv=0",
     SkipSchedule("dynamic", similarity=0.8, alpha=0.5, tv=0.0))])
def test_vvs_specs_parse_back(spec: str, name: str, schedule: SkipSchedule) -> None:
    tree = parse_tree(spec)
    assert type(tree) is VvsTree and str(tree) == name and check_tree_spec(spec) == name
    assert tree.schedule == schedule and parse_tree(name) == tree and hash(parse_tree(name)) == hash(tree)
    assert tree.schedule.bounded == ("tv=" in name)
    assert str(tree.eagle2) == "eagle2:10,4,59"
    assert repr(tree.eagle2.kernel_spec()) == repr(tree.kernel_spec())
    assert draft_source(tree) is DraftSource.RANKED and draft_source(name) is DraftSource.RANKED
    assert tree != tree.eagle2


@pytest.mark.parametrize("spec, match", [
    ("vvs:10,4,59", "needs K,D,M and a skip schedule"), ("vvs:10,4,59,uniform=1", r"\[2, 1048576\]"),
    ("vvs:10,4,59,uniform", "uniform=I"), ("vvs:10,4,59,uniform=2,alpha=0.5", "uniform=I"),
    ("vvs:10,4,59,every=2", "must be one of"),
    ("vvs:10,4,59,dynamic=1.5", r"S must be a number in \[-1, 1\]"),
    ("vvs:10,4,59,dynamic,alpha=0", r"alpha must be a number in \(0, 1\]"),
    ("vvs:10,4,59,dynamic,alpha=0.5,alpha=0.4", "given twice"),
    ("vvs:10,4,59,dynamic,s=0.5", "unknown setting"),
    ("vvs:10,4,59,dynamic=nan", "decimal number"), ("vvs:10,0,1,uniform=2", "total_tokens M"),
    ("vvs:10,4,59,uniform=2,tv=1.5", r"tv must be a number in \[0, 1\]"),
    ("vvs:10,4,59,dynamic,tv=0.1,tv=0.2", "tv is given twice"),
    ("vvs:10,4,59,uniform=2,tv", "unknown setting")])
def test_bad_vvs_specs_are_named(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        parse_tree(spec)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ kernel against oracle
@pytest.mark.parametrize("world, relax", [(AMBIGUOUS, LANTERN), (AMBIGUOUS, Relax.none()),
                                          (STATIONARY, Relax.none())],
                         ids=["latent-lantern", "latent", "stationary"])
@pytest.mark.parametrize("spec", SPECS)
def test_kernel_takes_the_oracles_decisions(world, relax: Relax, spec: str) -> None:
    a = _run(world, spec, relax, exact_expectations=True)
    b = _run(world, spec, relax, exact_expectations=True, backend="numpy")
    _same(a, b)
    assert (a.target_forwards == 0).any() and (a.target_forwards == 1).any()


def test_thread_count_changes_nothing() -> None:
    for spec in ("vvs:4,3,12,uniform=2", "vvs:4,3,12,dynamic"):
        _same(_run(AMBIGUOUS, spec, LANTERN, n_sequences=6, threads=1),
              _run(AMBIGUOUS, spec, LANTERN, n_sequences=6, threads=2))


# ------------------------------------------------------------------ the schedules and the accounting
def _per_sequence(res, values: np.ndarray) -> list[np.ndarray]:
    return [values[res.sequence == s] for s in range(res.n_sequences)]


def test_schedules_skip_where_they_say() -> None:
    """uniform=4 skips exactly steps 1, 5, 9, ...; the dynamic schedule skips some eligible steps and
    verifies others; neither skips the first step or two steps in a row."""
    res = _run(AMBIGUOUS, "vvs:4,3,12,uniform=4", n_sequences=4, seq_len=80)
    for f in _per_sequence(res, res.target_forwards):
        np.testing.assert_array_equal(f == 0, np.arange(f.size) % 4 == 1)
    res = _run(AMBIGUOUS, "vvs:4,3,12,dynamic", n_sequences=4, seq_len=80)
    eligible = skipped = 0
    for f in _per_sequence(res, res.target_forwards):
        assert f[0] == 1 and not np.any((f[1:] == 0) & (f[:-1] == 0))
        after_verify = f[1:][f[:-1] == 1]
        eligible += after_verify.size
        skipped += int((after_verify == 0).sum())
    assert 0 < skipped < eligible


def test_tokens_per_forward_counts_skipped_tokens_without_a_forward() -> None:
    res = _run(AMBIGUOUS, "vvs:4,3,12,uniform=2", LANTERN)
    forwards = int((res.target_forwards == 1).sum())
    assert forwards < res.n_steps
    assert res.tokens_per_forward == res.tokens.sum() / forwards > res.mean_tokens_per_step
    plain = run(AMBIGUOUS, Eagle2Tree(4, 3, 12), Verification("r1", LANTERN), n_sequences=3, seq_len=40,
                seed=11)
    assert plain.target_forwards is None and plain.tokens_per_forward == plain.mean_tokens_per_step
    # its standard error: the ratio estimator with sequences as units, tokens over forwards (over steps
    # without skips, se_tokens_per_step's to the bit)
    tok = np.bincount(res.sequence, weights=res.tokens.astype(float))
    fwd = np.bincount(res.sequence, weights=res.target_forwards.astype(float))
    r = tok.sum() / fwd.sum()
    want = np.sqrt(3 / 2 * np.sum((tok - r * fwd) ** 2)) / fwd.sum()
    assert res.se_tokens_per_forward == pytest.approx(want, rel=1e-13) and res.se_tokens_per_forward > 0
    assert plain.se_tokens_per_forward == plain.se_tokens_per_step
    # the first step of each sequence is a verify step on the same tree with the same uniforms: EAGLE-2's
    first = np.flatnonzero(np.diff(np.append(-1, res.sequence)))
    first_plain = np.flatnonzero(np.diff(np.append(-1, plain.sequence)))
    for f in (*STEP_FIELDS, "token_tv"):
        np.testing.assert_array_equal(getattr(res, f)[first], getattr(plain, f)[first_plain], err_msg=f)


def test_skip_steps_token_tv_is_theory_vvs() -> None:
    """In a stationary world the target after any prefix, and the stale row, are p: each skip step's token
    TV, E[TV] and E[tokens] are theory.vvs.skip_step_tv's on the step's tree (the oracle's, whose decisions
    the kernel takes) with Lbar the mean accepted drafts of the verify steps before it."""
    spec = "vvs:4,3,12,uniform=2"
    res = _run(STATIONARY, spec, exact_expectations=True, n_sequences=2, seq_len=60)
    checked = 0
    for s in range(res.n_sequences):
        steps = decode_vvs(STATIONARY, parse_tree(spec), "r1", np.zeros((V_SMALL, 0), dtype=np.int64), None,
                           60, 1.0, 11, s, False)
        rows = np.flatnonzero(res.sequence == s)
        accepted = res.accepted_depth[rows]
        verify = res.target_forwards[rows] == 1
        assert len(steps) == rows.size
        for i, st in enumerate(steps):
            if verify[i]:
                continue
            lbar = accepted[:i][verify[:i]].mean()
            r = skip_step_tv(st.tree.parents, st.tree.tokens, lambda h: P_STAT, P_STAT, lbar)
            tokens = tuple(int(st.tree.tokens[v]) for v in st.path[1:])
            assert len(st.path) == res.tokens[rows[i]] == min(np.floor(lbar), len(st.path) - 1) + 1
            tv = sum(r.positions[tokens[:j]][2] for j in range(len(tokens) + 1))
            assert abs(res.token_tv[rows[i]] - tv) < 1e-12
            assert abs(res.expected_tv[rows[i]] - r.expected_tv) < 1e-12
            assert abs(res.expected_tokens[rows[i]] - r.expected_tokens) < 1e-12
            checked += 1
    assert checked >= 4 and res.token_tv[res.target_forwards == 0].max() > 0.1


# ------------------------------------------------------------------ bounded skips (ours)
BOUNDED = "vvs:4,3,12,uniform=2,tv=0.3"


@pytest.mark.parametrize("world", [STATIONARY, AMBIGUOUS], ids=["stationary", "latent"])
def test_bounded_skips_take_the_oracles_decisions(world) -> None:
    """The bound's decisions (``simulate.vvs_kernels.skip_max_tv`` against ``theory.vvs.SkipStepTV.max_tv``
    in the oracle) are the same in both implementations: in the stationary world the bound refuses some
    skips the schedule asks for and takes the others; in the ambiguous one it refuses them all."""
    a = _run(world, BOUNDED, exact_expectations=True, n_sequences=4, seq_len=60)
    _same(a, _run(world, BOUNDED, exact_expectations=True, n_sequences=4, seq_len=60, backend="numpy"))
    free = _run(world, "vvs:4,3,12,uniform=2", n_sequences=4, seq_len=60)
    skips, free_skips = int((a.target_forwards == 0).sum()), int((free.target_forwards == 0).sum())
    assert (0 < skips < free_skips) if world is STATIONARY else (skips == 0 < free_skips)


def test_bounded_skips_keep_every_token_within_the_bound() -> None:
    """docs/theory.md 15.7: with exact verify steps every emitted token's exact TV is at most the bound, so
    a run's measured TV per token is too; the unbounded schedule's skipped tokens exceed it on the same world
    (0.19 per token: the test can fail), and a bound of 0 takes no skip on these sequences (each skip the
    schedule asks for has a token with TV > 0): EAGLE-2's steps, bit for bit. In this world the stale row
    is the target, so a skip of the bonus alone is exact (the bounded run's skips have TV 0 here)."""
    tv = 0.15
    res = _run(STATIONARY, f"vvs:4,3,12,uniform=2,tv={tv}", n_sequences=6, seq_len=80)
    skip = res.target_forwards == 0
    assert skip.sum() > 10 and np.all(res.token_tv[~skip] == 0.0)
    assert np.all(res.token_tv[skip] <= tv * res.tokens[skip] + 1e-12)
    assert res.tv_bound_per_token <= tv
    free = _run(STATIONARY, "vvs:4,3,12,uniform=2", n_sequences=6, seq_len=80)
    per_token = free.token_tv[free.target_forwards == 0] / free.tokens[free.target_forwards == 0]
    assert per_token.max() > tv
    none = _run(STATIONARY, "vvs:4,3,12,uniform=2,tv=0", n_sequences=2, seq_len=40)
    plain = run(STATIONARY, Eagle2Tree(4, 3, 12), Verification("r1"), n_sequences=2, seq_len=40, seed=11)
    assert np.all(none.target_forwards == 1)
    for f in (*STEP_FIELDS, "token_tv"):
        np.testing.assert_array_equal(getattr(none, f), getattr(plain, f), err_msg=f)


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("world, kwargs, match", [
    (AMBIGUOUS, {"verification": "r2"}, "rule r1"), (AMBIGUOUS, {"verification": "r3"}, "rule r1"),
    (AMBIGUOUS, {"verification": "r2+cool:delta=2"}, "rule r1"),
    (StationaryWorld(P_STAT, P_STAT), {"verification": "r1", "tree": "vvs:4,3,12,dynamic"}, "code vectors"),
])
def test_bad_vvs_runs_are_refused(world, kwargs: dict, match: str) -> None:
    tree = parse_tree(kwargs.pop("tree", "vvs:4,3,12,uniform=2"))
    with pytest.raises(ValueError, match=match) as err:
        run(world, tree, n_sequences=1, seq_len=8, **kwargs)
    assert "\n" not in str(err.value)
