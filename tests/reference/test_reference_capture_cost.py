"""Capturing a trace from an in-memory decoder (it replays, and world_stats reads its ambiguity) and
the SPEC section 8 cost model on a latency table."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from reference_helpers import random_model, tiny_config

from relaxspec.core.cost import DEFAULT_TABLE, CostModel, read_table, target_models
from relaxspec.core.trace import read_trace
from relaxspec.core.trees.policies import Eagle2Tree
from relaxspec.reference.capture import capture_trace, module_sha256
from relaxspec.reference.decode import Decoder, DecodeSettings
from relaxspec.reference.drafter import GPTDraftSession
from relaxspec.reference.replay import replay
from relaxspec.simulate.worlds import TraceWorld, world_stats
from relaxspec.theory.distributions import total_variation
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import Verification

FIELDS = "device,device_name,model,role,dtype,batch,prefix,n_tokens,mode,latency_ms,weight_bytes,floor_ms"


def test_capture_replays_and_gives_trace_ambiguity(tmp_path) -> None:
    cfg = tiny_config()
    target, small = random_model(cfg, 0, std=0.5), random_model(cfg, 1, std=0.5)
    table = neighbour_table(np.random.default_rng(0).normal(size=(8, 4)), k_max=7)
    relax = Relax.additive(3, 0.2)
    dec = Decoder(target, DecodeSettings(Verification("r1", relax), cfg_scale=2.0),
                  drafter=GPTDraftSession(small), policy=Eagle2Tree(3, 2, 8), neighbours=table)
    results = capture_trace(dec, tmp_path / "t", [0, 1, 2], seed=5, neighbours=table, model="tiny")
    trace = read_trace(tmp_path / "t")
    h = trace.header
    assert (h.model, h.verification, h.tree) == ("tiny", Verification("r1", relax), "eagle2:3,2,8")
    assert str(h.tree_policy(table)) == h.tree  # the header's tree parses back to the policy that made it
    assert h.checkpoint_sha256 == module_sha256(target) != module_sha256(small)
    assert len(list(trace.steps())) == sum(len(r.steps) for r in results)
    report = replay(tmp_path / "t", require_simulate=True)
    assert report.ok and report.steps == len(trace)
    stats = world_stats(TraceWorld(tmp_path / "t"))
    p = [h.target_sampling.probs(s.target_logits[0].astype(np.float64)) for s in trace.steps()]
    assert stats.n_positions == len(p)
    assert stats.mean_top1 == pytest.approx(np.mean([x.max() for x in p]))
    q = [(x, h.draft_sampling.probs(s.draft_logits[0].astype(np.float64)))
         for x, s in zip(p, trace.steps(), strict=True) if s.parents.size > 1]
    assert stats.mean_acceptance == pytest.approx(np.mean([1 - total_variation(a, b) for a, b in q]))
    with pytest.raises(ValueError, match="needs its neighbour table"):
        capture_trace(dec, tmp_path / "u", [0], neighbours=None)


@pytest.fixture()
def latency_csv(tmp_path):
    rows = [FIELDS]
    for prefix in (1, 9):
        for n, ms in ((1, 10.0), (4, 12.0), (16, 20.0)):
            rows.append(f"cpu,CPU,GPT-X,target,float32,2,{prefix},{n},eager,{ms + prefix / 9},0,0")
        rows.append(f"cpu,CPU,EAGLE head (GPT-X),drafter,float32,2,{prefix},10,eager,{2.0 + prefix / 9},0,0")
        rows.append(f"cpu,CPU,GPT-Y,target,float32,2,{prefix},10,eager,5.0,0,0")
    path = tmp_path / "lat.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_cost_model_interpolates_and_computes_the_speedup(latency_csv) -> None:
    assert target_models(read_table(latency_csv)) == ["GPT-X", "GPT-Y"]
    c = CostModel.from_table(latency_csv, "GPT-X")
    assert c.ar_step_ms == pytest.approx(10.0 + 5 / 9)  # mean over the two prefixes
    assert c.target_ms(10.0) == pytest.approx(16.0 + 5 / 9)  # halfway between n = 4 and 16
    assert c.target_ms(28.0) == pytest.approx(28.0 + 5 / 9)  # linear beyond n = 16
    assert c.t_draft_ms == pytest.approx(2.0 + 5 / 9)
    tokens, n, calls = np.array([3, 1]), np.array([4, 16]), np.array([2, 3])
    want = 4 * c.ar_step_ms / (c.target_ms(4.0) + c.target_ms(16.0) + 5 * c.t_draft_ms)
    assert c.speedup(tokens, n, calls) == pytest.approx(want)
    assert CostModel.from_table(latency_csv, "GPT-X", drafter="GPT-Y").t_draft_ms == pytest.approx(5.0)
    with pytest.raises(ValueError, match="no eager target rows for 'GPT-Z'"):
        CostModel.from_table(latency_csv, "GPT-Z")
    with pytest.raises(ValueError, match="drafter"):
        CostModel.from_table(latency_csv, "GPT-Y")
    with pytest.raises(ValueError, match="does not exist"):
        read_table(latency_csv.with_name("missing.csv"))


def test_cost_model_reads_the_committed_cpu_table() -> None:
    c = CostModel.from_table(DEFAULT_TABLE, "GPT-B")
    assert c.device == "cpu" and c.drafter == "EAGLE head (GPT-B)"
    np.testing.assert_array_equal(c.sizes, [1, 4, 16, 60])
    with open(DEFAULT_TABLE, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["model"] == "GPT-B" and r["n_tokens"] == "60"]
    assert c.target_ms(60) == pytest.approx(np.mean([float(r["latency_ms"]) for r in rows]))
    assert c.target_ms(10) == pytest.approx(c.target_ms(4) + (c.target_ms(16) - c.target_ms(4)) / 2)
    slope = (c.target_ms(60) - c.target_ms(16)) / 44
    assert c.target_ms(70) == pytest.approx(c.target_ms(60) + 10 * slope)
    assert c.speedup(1.0, 1, 0) == 1.0
    assert c.speedup(3.0, 16, 2) == pytest.approx(3 * c.target_ms(1) / (c.target_ms(16) + 2 * c.t_draft_ms))
    with pytest.raises(ValueError, match="no eager target rows for 'GPT-Z'"):
        CostModel.from_table(DEFAULT_TABLE, "GPT-Z")
    with pytest.raises(ValueError, match="does not exist"):
        CostModel.from_table("/nonexistent/decoder_cuda.csv")
    with pytest.raises(ValueError, match="n >= 1"):
        c.target_ms(0)
