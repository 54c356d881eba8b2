"""The reference decoder on SPEC 10's methods (issue 29 item 3): SCD's coupled windows, SJD-PAC (AC, PD,
both; official siblings) and VVS (uniform and dynamic schedules) on both shipped models, traced and
replayed bit for bit; the decoder's decisions are the simulator oracle's given the same logits and
uniforms; a skip step's rows are the target's and its tokens' TVs theory's."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from test_reference_frontier import ckpts, generate  # noqa: F401 (ckpts: the tiny checkpoints' fixture)

from relaxspec.cli import main
from relaxspec.core.trace import Sampling, read_trace
from relaxspec.core.trees.spec import parse_tree
from relaxspec.mini.decoding import DecodeConfig, StepScorer, make_decoder
from relaxspec.mini.shipped import load_mini
from relaxspec.mini.weights import MODEL_DIRS
from relaxspec.reference.capture import capture_trace
from relaxspec.reference.coupled import WindowPlan, gumbel_uniforms
from relaxspec.reference.decode import Decoder, DecodeSettings
from relaxspec.reference.drafter import EagleDraftSession
from relaxspec.reference.replay import replay
from relaxspec.reference.vvs import skip_token_tvs
from relaxspec.theory.vvs import skip_step_tv
from relaxspec.theory.window_walk import level_starts

MODELS = ("mini", "ambiguous")
WINDOWS = {  # spec: what it is
    "jacobi:4,coupled=principled": "SCD", "jacobi:4,coupled=official": "SCD (code)",
    "jacobi:4,coupled=gumbel": "SCD Gumbel", "pac:4,width=3,depth=2,ac=off": "SJD+PD",
    "pac:4,width=1": "SJD+AC",
    "pac:4,width=3,depth=2": "SJD+PD+AC", "pac:4,width=3,depth=2,siblings=official": "PD+AC, code's siblings"}
VVS = {"vvs:3,2,6,uniform=2": "r1", "vvs:3,2,6,dynamic": "r1+lantern:k=8,delta=0.1"}
"""VVS's verifications: LANTERN's relaxation on the mini model's dynamic trees (the ambiguous model's
neighbour table, all 8191 columns sorted, takes half a minute to build: plain r1 there)."""
METHODS = [*WINDOWS, *VVS]
LABEL, SEED = 3, 1
SAMPLING = Sampling()


@pytest.fixture(scope="module")
def minis():
    """Both shipped models (with their drafters), one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield {name: load_mini(MODEL_DIRS[name]) for name in MODELS}
    torch.set_num_threads(threads)


def decode(minis, model: str, spec: str, root):
    """One traced image (class 3, no guidance) of ``spec`` on a shipped model, device verifier."""
    mini = minis[model]
    verification = "r1" if spec in VVS and model != "mini" else VVS.get(spec, "r2")
    config = DecodeConfig(spec, tree=spec, verification=verification, cfg_scale=1.0)
    k = config.verification.neighbour_k
    table = mini.neighbours()[:, :k] if k else None  # the columns the rule reads: all a trace needs
    dec = make_decoder(mini, config)
    result = capture_trace(dec, root / "trace", [LABEL], seed=SEED, neighbours=table)[0]
    return mini, config, result, root / "trace"


def emitted(step) -> list[int]:
    return [*map(int, step.tokens[step.path[1:]]), step.bonus]


# ------------------------------------------------------------------ every method on both shipped models
@pytest.mark.parametrize("spec", METHODS)
@pytest.mark.parametrize("model", MODELS)
def test_method_decodes_and_replays(minis, tmp_path, model: str, spec: str) -> None:
    """One image per method and shipped model (over 5 s for the larger ones: 64 tokens, ~30 forwards; the
    brief asks every method on both models), then on its trace: replay with 0 mismatches; a window on the
    mini model takes the simulator oracle's decisions; VVS skips by its schedule with no forward; and the
    checks of :data:`MINI_CHECKS` on the mini model."""
    traced = decode(minis, model, spec, tmp_path)
    check_replay(spec, *traced[1:])
    if spec in WINDOWS and model == "mini":
        check_simulator_oracle(spec, *traced[2:])
    if spec in VVS:
        check_schedule(spec, *traced[2:])
    if model == "mini":
        for check in MINI_CHECKS.get(spec, ()):
            check(spec, *traced, tmp_path)


def check_replay(spec: str, config: DecodeConfig, result, path) -> None:
    """Every step replays bit for bit from the trace alone, with theory's oracle and simulate's tree step
    (the device verifier decided: its decisions are the host oracle's)."""
    trace = read_trace(path)
    assert trace.header.tree == str(parse_tree(spec)) and trace.header.verification == config.verification
    steps = list(trace.steps())
    assert np.concatenate([emitted(s) for s in steps]).tolist() == result.tokens.tolist()
    assert [s.skipped for s in steps] == [s.skipped for s in result.steps]
    report = replay(path, require_simulate=True)
    assert report.engines == ["theory", "simulate"]
    assert report.ok and report.steps == len(steps), report.mismatches[:3]
    if spec in VVS:
        assert 0 < sum(s.skipped for s in steps) < len(steps) / 2 + 1
        assert (trace.codes is not None) == ("dynamic" in spec)


def check_simulator_oracle(spec: str, result, path) -> None:
    """simulate.coupled_oracle.decode_coupled, fed the trace's target rows (by prefix) and the decoder's
    uniforms in its own layout, emits the decoder's tokens forward by forward while the window is full
    (the decoder then truncates it to the tokens left): the same tokens per forward."""
    from relaxspec.simulate.coupled_kernels import (
        MAX_WIDTH,
        REDRAW_BASE,
        SIBLING_BASE,
        U_COUPLE,
        window_codes,
    )
    from relaxspec.simulate.coupled_oracle import decode_coupled
    from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE

    policy = parse_tree(spec)
    plan, codes = WindowPlan.of(policy), window_codes(policy)
    L, W = plan.window, plan.width
    steps = list(read_trace(path).steps())
    rows: dict[tuple[int, ...], np.ndarray] = {}
    committed: list[int] = []
    for s in steps:
        p = SAMPLING.probs(s.target_logits.astype(np.float64))
        keys = [()]
        for v in range(1, s.parents.size):
            keys.append(keys[s.parents[v]] + (int(s.tokens[v]),))
        for v, k in enumerate(keys):
            rows[tuple(committed) + k] = p[v]
        committed += emitted(s)
    full = next(i for i, s in enumerate(steps) if s.columns.size < L * W)

    def u(step: int, node: int, purpose: int) -> float:
        s = steps[step]
        cols = s.columns.reshape(-1, W)
        depths = s.tree.depths
        if purpose == U_ACCEPT:
            c, i = divmod(node, W)
            return float(s.u_accept[np.flatnonzero((depths == c + 1) & (s.tokens == cols[c, i]))[0]])
        if purpose == U_DRAW:
            return float(s.u_draw[level_starts(cols)[node]])
        if purpose == U_TREE:
            return float(s.u_fresh[node])
        assert purpose == U_COUPLE
        table = s.u_couple.reshape(L + 1, W + 1)
        if node < REDRAW_BASE:
            return float(table[node, 0])
        if node < SIBLING_BASE:
            return float(table[node - REDRAW_BASE, 1])
        kk, j = divmod(node - SIBLING_BASE, MAX_WIDTH)
        return float(table[kk, 1 + j])

    def noise(position: int, V: int) -> np.ndarray:
        return gumbel_uniforms(steps[0].noise_key, position, V)

    n_tokens = sum(len(emitted(s)) for s in steps[:full])
    got = decode_coupled(lambda state: rows[state], lambda state, x: state + (x,), (), steps[0].target_logits
                         .shape[1], codes, n_tokens, u, noise)
    assert len(got) == full >= 5
    assert [g.tokens.tolist() for g in got] == [emitted(s) for s in steps[:full]]
    assert [g.accepted + 1 for g in got] == [s.tokens for s in result.steps[:full]]


def check_schedule(spec: str, result, path) -> None:
    """A skip step makes no forward and emits at most floor(Lbar) drafts and a bonus; tokens per forward
    counts them with none; never two skips in a row nor at the first speculative step; uniform=2:
    speculative steps 1, 3, 5, ... skip."""
    spec_steps = [s for s in result.steps if s.nodes > 1]
    skipped = [i for i, s in enumerate(spec_steps) if s.skipped]
    if "uniform=2" in spec:
        assert skipped == list(range(1, len(spec_steps), 2))
    assert all(i - 1 not in skipped for i in skipped) and 0 not in skipped
    assert all(s.t_target_s == 0.0 and s.host_bytes == 0 for s in result.steps if s.skipped)
    forwards = sum(not s.skipped for s in result.steps)
    assert result.tokens_per_forward == pytest.approx(64 / forwards, abs=1e-12)
    assert result.tokens_per_forward > result.tokens_per_step
    for s in read_trace(path).steps():
        if s.skipped:
            assert s.path.size - 1 <= int(s.mean_accepted)


# ------------------------------------------------------------------ checks of one mini-model trace
def check_host_oracle(spec: str, mini, config: DecodeConfig, result, path, tmp_path) -> None:
    """``verifier="theory"`` (every row to the host, theory's oracle) emits the device verifier's tokens
    step for step."""
    settings = DecodeSettings(config.verification, cfg_scale=1.0, logits_dtype="float32", verifier="theory")
    policy = parse_tree(spec)
    if spec in VVS:
        dec = Decoder(mini.target, settings, drafter=EagleDraftSession(mini.eagle_head, mini.target),
                      policy=policy, neighbours=mini.neighbours(),
                      codes=mini.tokenizer.codebook().astype(np.float32))
    else:
        dec = Decoder(mini.target, settings, policy=policy)
    host = dec.generate(LABEL, SEED, sequence=0)
    assert host.tokens.tolist() == result.tokens.tolist()
    assert [(s.accepted, s.tokens, s.skipped) for s in host.steps] == \
        [(s.accepted, s.tokens, s.skipped) for s in result.steps]


def check_rows_and_tvs(spec: str, mini, config, result, path, tmp_path) -> None:
    """A skip step's stored rows equal a teacher-forced target forward after each emitted prefix, and
    reference.vvs.skip_token_tvs equals theory.vvs.skip_step_tv's exact value at each emitted prefix, its
    target given by teacher-forced forwards at every prefix the step could emit (two skip steps)."""
    steps = list(read_trace(path).steps())
    committed: list[int] = []
    checked = 0
    for s in steps:
        if s.skipped and checked < 2:
            def target(h: tuple[int, ...], before=tuple(committed)) -> np.ndarray:
                seq = torch.tensor([[*before, *h, 0]])
                with torch.no_grad():
                    logits = mini.target(seq, torch.tensor([LABEL]))[0, len(before) + len(h)]
                return SAMPLING.probs(logits.double().numpy()[None])[0]

            out = emitted(s)
            stored = SAMPLING.probs(s.target_logits[s.path].astype(np.float64))
            for i in range(len(out)):
                np.testing.assert_allclose(stored[i], target(tuple(out[:i])), atol=1e-5)
            stale = SAMPLING.probs(s.stale_logits.astype(np.float64))[0]
            exact = skip_step_tv(s.parents, s.tokens, target, stale, s.mean_accepted)
            want = [exact.positions[tuple(out[:i])][2] for i in range(len(out))]
            np.testing.assert_allclose(skip_token_tvs(s, SAMPLING), want, atol=1e-5)
            assert min(want) > 0.0
            checked += 1
        committed += emitted(s)
    assert checked == 2


def check_scorer(spec: str, mini, config, result, path, tmp_path) -> None:
    """mini.decoding.StepScorer on the traced steps: a lossless window's TV is 0, the code's variants' NaN
    (not known per step); a skip step's TV is the sum of its tokens' exact TVs."""
    scorer = StepScorer(mini, config)
    steps = list(read_trace(path).steps())
    for s in steps:
        scorer.add(s)
    speculative = [s for s in steps if s.parents.size > 1]
    assert len(scorer.tv) == len(speculative)
    if spec in VVS:
        tvs = [float(skip_token_tvs(s, SAMPLING).sum()) for s in steps if s.skipped]
        assert [t for t, s in zip(scorer.tv, speculative, strict=True) if s.skipped] == tvs and min(tvs) > 0
    elif "official" in spec:
        assert all(np.isnan(scorer.tv))
    else:
        assert scorer.tv == [0.0] * len(scorer.tv) and np.all(np.isfinite(scorer.expected))


def check_rescore(spec: str, mini, config, result, path, tmp_path) -> None:
    """A VVS skip step verified nothing: ``relaxspec rescore`` scores the verify steps only."""
    from relaxspec.reference.replay import rescore

    verified = [s for s in result.steps if s.nodes > 1 and not s.skipped]
    got = rescore(path, "r1")
    assert got["steps"] == len(verified)
    assert got["recorded_tokens_per_step"] == pytest.approx(np.mean([s.tokens for s in verified]), abs=1e-12)


def check_tampering(spec: str, mini, config, result, path, tmp_path) -> None:
    """Replay reports a changed coupling uniform (the next window is not the recorded one) and a changed
    stale row, and refuses a dynamic trace without its code table."""
    dst = tmp_path / "tampered"
    shutil.copytree(path, dst)
    chunk = sorted(dst.glob("chunk-*.npz"))[0]
    with np.load(chunk) as z:
        data = {k: z[k] for k in z.files}
    if spec in WINDOWS:
        data["u_couple"] = 0.999 - data["u_couple"]  # every keep test and redraw flips
        what = "not the ones the previous step leaves"
    else:
        data["stale_logits"][0] += 1.0
        what = "recorded stale row is not"
    np.savez(chunk, **data)
    report = replay(dst)
    assert any(what in m for m in report.mismatches), report.mismatches[:3]
    if "dynamic" in spec:
        (dst / "codes.npy").unlink()
        with pytest.raises(ValueError, match="has no codes.npy: the dynamic schedule's code vectors$"):
            replay(dst)


MINI_CHECKS = {
    "jacobi:4,coupled=principled": (check_tampering,),
    "jacobi:4,coupled=official": (check_scorer,),
    "pac:4,width=3,depth=2": (check_scorer,),
    "pac:4,width=3,depth=2,siblings=official": (check_host_oracle,),
    "vvs:3,2,6,uniform=2": (check_rows_and_tvs, check_scorer, check_rescore, check_tampering),
    "vvs:3,2,6,dynamic": (check_host_oracle, check_tampering),
}
"""The checks a method's mini-model trace gets besides replay (each on one trace)."""


# ------------------------------------------------------------------ relaxspec generate and replay
@pytest.mark.parametrize("tree", ["jacobi:2,coupled=gumbel", "pac:2,width=2,depth=1,siblings=official",
                                  "vvs:2,2,3,uniform=2", "vvs:2,2,3,dynamic=-1"])
def test_generate_records_and_replays_the_frontier(tmp_path, ckpts, capsys, tree: str) -> None:  # noqa: F811
    """``--tree`` takes the one grammar's specs; the trace replays with 0 mismatches (tiny checkpoints; VVS
    with the target drafting for itself; the dynamic schedule reads the VQ codebook, stored)."""
    out = tmp_path / "run"
    assert main(generate(ckpts, out, "--trace", "--tree", tree, "--per-class", "2")) == 0
    trace = read_trace(out / "trace")
    assert trace.header.tree == tree and str(trace.header.verification) == ("r1" if "vvs" in tree else "r2")
    assert (trace.codes is not None) == ("dynamic" in tree)
    capsys.readouterr()
    assert main(["replay", str(out / "trace"), "--require-simulate"]) == 0
    assert "with theory, simulate: 0 mismatches" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--tree", "pac:2", "--verification", "r4"],
     "pac:2: a coupled or SJD-PAC window is verified by rule r2 (as SCD and SJD-PAC verify), exact or with "
     "the budget (r2+budget:tv=..,k=..), got r4"),
    (["--tree", "jacobi:2,coupled=official", "--verification", "r2+cool:omega=2"],
     "exact or with the budget"),
    (["--tree", "pac:2", "--verification", "r2+budget:tv=0.1,k=2"], "runs in the simulator"),
    (["--tree", "jacobi:2,coupled=official", "--verification", "r2+budget:tv=0.1,k=2"],
     "distributed as the law it is stored with"),
    (["--tree", "vvs:2,2,3,uniform=2,tv=0.1"], "runs in the simulator only"),
    (["--tree", "vvs:2,2,3,uniform=2", "--verification", "r1+gsd:G=3"], "needs rule r2 or r4"),
    (["--tree", "vvs:2,2,3,uniform=1"], "I = 1 would skip two steps in a row"),
    (["--tree", "pac:2,width=9"], "pac's width must be an integer in [1, 8]"),
])
def test_generate_frontier_errors_are_one_line(tmp_path, ckpts, capsys, extra, message) -> None:  # noqa: F811
    assert main(generate(ckpts, tmp_path / "x", *extra)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxspec: error: ") and message in err, err
