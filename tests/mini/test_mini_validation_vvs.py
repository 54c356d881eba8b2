"""VVS's rows in ``relaxspec mini validate`` (issue 28 item 4): on 2 traced images of the first shipped
model, the measured tokens per target forward and the trace-driven prediction against the trace's own
records (a skip step's expected length by brute force over its tree's leaves), a trace without skip steps
scored as before, and the fitted-world column on VVS's kernel."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from relaxspec.core.trace import read_trace
from relaxspec.mini.quality import EAGLE2
from relaxspec.mini.validation import (
    VALIDATION_CONFIGS,
    capture,
    config_key,
    ratio_and_se,
    trace_driven,
    world_prediction,
)
from relaxspec.mini.validation_run import pick_config
from relaxspec.simulate import run
from relaxspec.simulate.inputs import as_tree, as_world
from relaxspec.simulate.replay import replay_skip, replay_trace
from relaxspec.simulate.worlds import TraceWorld
from relaxspec.theory.rule_step import step_neighbours
from relaxspec.theory.tree import step_expectation

BY_NAME = {c.name: c for c in VALIDATION_CONFIGS}
VVS_ROWS = ("VVS every 2 + LANTERN delta=0.1", "VVS dynamic + LANTERN delta=0.1")


def test_vvs_rows_skip_the_eagle2_rows_trees_with_lantern() -> None:
    k, d, m = EAGLE2.partition(":")[2].split(",")
    for name, schedule in zip(VVS_ROWS, ("uniform=2", "dynamic"), strict=True):
        c = BY_NAME[name]
        assert c.tree == f"vvs:{k},{d},{m},{schedule}" and str(c.verification) == "r1+lantern:k=50,delta=0.1"
        assert config_key(c) == "eagle"  # the EAGLE head's sampled world (r1, its drafter)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """2 images each of VVS every 2 and EAGLE-2 with LANTERN (no skips) on the first shipped model (a few
    seconds each: 64 tokens, ~25 steps)."""
    from relaxspec.mini.shipped import load_mini

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("vvsval")
    mini = load_mini()
    configs = (BY_NAME[VVS_ROWS[0]], BY_NAME["EAGLE-2 r1 LANTERN delta=0.2"])
    yield {c.name: (c, capture(mini, c, 2, out, progress=False)) for c in configs}
    torch.set_num_threads(threads)


def _brute_skip_tokens(step) -> float:
    """E[gamma + 1] of a recorded skip step: each root-to-leaf path of its tree equally likely, cut after
    floor(Lbar) drafts, plus the bonus."""
    n = step.parents.size
    kids = {v: [c for c in range(n) if step.parents[c] == v] for v in range(n)}
    cap = int(np.floor(step.mean_accepted))
    lengths, stack = [], [(0, 0)]
    while stack:
        v, depth = stack.pop()
        if not kids[v]:
            lengths.append(min(depth, cap) + 1)
        stack += [(c, depth + 1) for c in kids[v]]
    return float(np.mean(lengths))


def test_vvs_trace_scores_skips_as_skips(traces) -> None:
    """Measured: emitted tokens over verify steps per image (ratio estimator over the 2 images), from the
    trace's records; trace-driven: theory's exact E[tokens] on each verify step plus each skip step's
    brute-force expected length, over the verify steps."""
    config, path = traces[VVS_ROWS[0]]
    trace = read_trace(path)
    h = trace.header
    nb = step_neighbours(trace.neighbours, h.vocab_size, config.verification)
    tokens, forwards, expected = np.zeros(2), np.zeros(2), 0.0
    skips = 0
    for step in trace.steps():
        if step.parents.size < 2:  # the prefill and the last token
            continue
        tokens[step.sequence] += step.path.size
        forwards[step.sequence] += not step.skipped
        if step.skipped:
            expected += _brute_skip_tokens(step)
            skips += 1
        else:
            p = h.target_sampling.probs(step.target_logits.astype(np.float64))
            expected += step_expectation(step.tree, p, verification=config.verification, neighbours=nb).tokens
    assert skips > 0
    measured, se = ratio_and_se(tokens, forwards)
    predicted = expected / forwards.sum()
    got = trace_driven(path, config)
    assert got["speculative_steps"] == skips + forwards.sum()
    assert got["measured_tokens_per_forward"] == round(measured, 4) and got["measured_se"] == round(se, 4)
    assert abs(got["trace_driven_prediction"] - predicted) < 5e-5 + 1e-12
    assert measured > tokens.sum() / (skips + forwards.sum())  # skipped tokens count with no forward


def test_vvs_trace_replays_its_skip_steps(traces) -> None:
    """run on the TraceWorld replays the skips by their rule (check=True: the recorded paths and bonuses
    come back), counts no forward on them and records each skip's exact expected length; a changed bonus is
    named."""
    config, path = traces[VVS_ROWS[0]]
    world = TraceWorld(path)
    res = replay_trace(world, config.verification, check=True)
    steps = list(world.trace.steps())
    skipped = np.array([s.skipped for s in steps])
    assert res.target_forwards.tolist() == (~skipped).astype(int).tolist()
    assert res.tokens.tolist() == [s.path.size for s in steps]
    assert res.expected_tokens[skipped].tolist() == pytest.approx(
        [_brute_skip_tokens(s) for s in steps if s.skipped], abs=1e-12)
    assert np.isnan(res.expected_tv[skipped]).all() and np.all(res.token_tv[skipped] > 0)
    skip = next(s for s in steps if s.skipped)
    bad = replace(skip, bonus=(skip.bonus + 1) % world.vocab_size)
    with pytest.raises(ValueError, match="is a skip step that replays to path"):
        replay_skip(bad, world.header.target_sampling, check=True)


def test_a_trace_without_skips_scores_as_before(traces) -> None:
    """EAGLE-2 with LANTERN: no target_forwards, and the row is the one the code before VVS's rows gave
    (every speculative step one forward; the prediction the mean of the steps' expected tokens)."""
    config, path = traces["EAGLE-2 r1 LANTERN delta=0.2"]
    traced = run(TraceWorld(path), None, config.verification, n_sequences=1, threads=1)
    assert traced.target_forwards is None
    spec = traced.tree_size > 1
    seq = traced.sequence[spec]
    tokens = np.bincount(seq, weights=traced.tokens[spec].astype(np.float64), minlength=2)
    steps = np.bincount(seq, minlength=2).astype(np.float64)
    measured, se = ratio_and_se(tokens, steps)
    predicted = float(traced.expected_tokens[spec].mean())
    assert trace_driven(path, config) == {
        "speculative_steps": int(spec.sum()), "measured_tokens_per_forward": round(measured, 4),
        "measured_se": round(se, 4), "trace_driven_prediction": round(predicted, 4),
        "trace_driven_rel_error": round(abs(predicted - measured) / measured, 4)}


@pytest.mark.parametrize("name", VVS_ROWS)
def test_world_column_runs_vvs_kernel(name: str) -> None:
    """The fitted world's column on a VVS row: VVS's kernel in a world of the model's vocabulary
    (``mini-fit``: a fitted world file is the same kind), tokens per target forward and its standard error
    over sequences."""
    config = BY_NAME[name]
    got = world_prediction("mini-fit", config, 2.0, seed=3, n_sequences=4, seq_len=24)
    w = as_world("mini-fit")
    sim = run(w, as_tree(config.tree, w, config.verification, seed=3, threads=1), config.verification,
              n_sequences=4, seq_len=24, seed=3, threads=1)
    assert sim.target_forwards is not None
    assert got["world_prediction"] == round(sim.tokens.sum() / sim.target_forwards.sum(), 4)
    tok = np.bincount(sim.sequence, weights=sim.tokens.astype(float))
    fwd = np.bincount(sim.sequence, weights=sim.target_forwards.astype(float))
    assert got["world_se"] == round(ratio_and_se(tok, fwd)[1], 4)
    if name == VVS_ROWS[0]:  # every 2nd step skips: tokens with no forward
        assert sim.target_forwards.sum() < sim.n_steps


def test_advise_picks_are_decoded_unless_skips_are_bounded() -> None:
    pick = {"method": "VVS every 2", "tree": "vvs:10,4,59,uniform=2",
            "verification": "r1+lantern:k=50,delta=0.1"}
    config = pick_config(pick)
    assert config is not None and config.tree == pick["tree"]
    assert pick_config({**pick, "tree": "vvs:10,4,59,uniform=2,tv=0.1"}) is None
    for tree in ("jacobi:15,coupled=principled", "pac:15"):  # the decoder runs SCD's and SJD-PAC's windows
        got = pick_config({"method": "m", "tree": tree, "verification": "r2"})
        assert got is not None and got.tree == tree and got.is_jacobi
