"""Relaxation-aware trees wired in (issue 7): the cost model and the cost-aware size, sweep specs,
``relaxspec generate`` policies, the reference decoder (lossless with a relaxation-aware tree) and the
per-trace positional acceptance."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from reference_helpers import random_model, tiny_config
from test_reference_decode import CFG, LOSSLESS_SAMPLES, SAMPLING, chi_square_ok, exact_sequence_probs

from relaxspec.core.cost import DEFAULT_TABLE, CostModel
from relaxspec.core.trace import TraceHeader, TraceWriter
from relaxspec.core.trees.costaware import choose_static_size
from relaxspec.core.trees.policies import LatentAwareTree, StaticTree
from relaxspec.core.trees.selection import ChildSelector
from relaxspec.core.trees.sequoia import sequoia_choices
from relaxspec.core.trees.spec import check_tree_spec, parse_tree
from relaxspec.reference.decode import Decoder, DecodeSettings
from relaxspec.reference.drafter import GPTDraftSession
from relaxspec.simulate.acceptance import trace_positional_acceptance
from relaxspec.simulate.worlds import TraceWorld
from relaxspec.sweep import SweepConfig, jobs
from relaxspec.theory import Relax, neighbour_table, node_outcome
from relaxspec.theory.verification import Verification


def test_a_gpu_table_plugs_in(tmp_path):
    """Same columns, another device: a GPU-like table where a tree costs little more than a step."""
    path = tmp_path / "decoder_cuda.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["device", "device_name", "model", "role", "dtype", "batch", "prefix", "n_tokens", "mode",
                    "latency_ms", "weight_bytes", "floor_ms"])
        for n, t in ((1, 10.0), (16, 10.5), (64, 12.0)):
            w.writerow(["cuda", "H100", "GPT-XL", "target", "bf16", 2, 1, n, "graph", t, 0, 0])
        w.writerow(["cuda", "H100", "EAGLE head (GPT-XL)", "drafter", "bf16", 2, 1, 10, "graph", 0.4, 0, 0])
    c = CostModel.from_table(path, "GPT-XL", mode="graph")
    a = [0.6, 0.2, 0.1, 0.05]
    cheap = choose_static_size(a, c, 40, 8)
    cpu = choose_static_size(a, CostModel.from_table(DEFAULT_TABLE, "GPT-B"), 40, 8)
    assert cheap.n_nodes > cpu.n_nodes and cheap.speedup > cpu.speedup


def test_cost_aware_size_maximises_the_predicted_speedup():
    a = [0.5, 0.2, 0.1, 0.05]
    c = CostModel.from_table(DEFAULT_TABLE, "GPT-S")
    best = choose_static_size(a, c, 20, 5)
    for n in range(1, 21):
        for d in range(1, 6):
            paths, value = sequoia_choices(a, n, d)
            size, depth = len(paths), max(len(p) for p in paths)
            assert c.speedup(1 + value, size + 1, depth) <= best.speedup + 1e-12
    assert best.n_nodes == len(best.choices) and best.depth == max(len(p) for p in best.choices)
    most_tokens = max(g[4] for g in best.grid)
    assert best.tokens < most_tokens  # on one CPU core the fastest tree is not the one with most tokens
    with pytest.raises(ValueError, match="max_depth"):
        choose_static_size(a, c, 10, 0)


def test_sweep_specs_of_the_new_trees():
    from relaxspec.simulate.worlds import LatentWorld

    world = LatentWorld.preset("ambiguous", vocab_size=256, n_clusters=16)
    relax = Relax.additive(20, 0.1)
    seen = []

    def acceptance(selector, rel):
        seen.append((selector.mode, str(rel)))
        return [0.5, 0.2, 0.1]

    for spec in ("latent:4,2,10", "latent-diverse:4,2,10,8", "latent-walk:4,2,10", "sequoia-lossless:10,3",
                 "sequoia-walk:10,3", "costaware:10,3,diverse"):
        check_tree_spec(spec)
        tree = parse_tree(spec, acceptance=acceptance, relax=relax, neighbours=world.neighbours,
                          cost=lambda: CostModel.from_table(DEFAULT_TABLE, "GPT-S"))
        assert str(tree) == spec
    assert seen == [("q", "none"), ("walk", str(relax)), ("diverse", str(relax))]
    with pytest.raises(ValueError, match="neighbour table"):
        parse_tree("latent:4,2,10", relax=relax)
    with pytest.raises(ValueError, match="MODE"):
        check_tree_spec("costaware:10,3,best")
    with pytest.raises(ValueError, match="K,D,M"):
        check_tree_spec("latent-walk:4,2")
    cfg = SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["latent:4,2,10", "sequoia-walk:10,3",
                                 "costaware:10,3", "static:mc_sim_7b_63"], "verifications": ["r1", "r2"],
                                 "cost": {"model": "GPT-S"}})
    assert {j.tree for j in jobs(cfg) if j.verification.samples_drafts} == {"costaware:10,3",
                                                                            "static:mc_sim_7b_63"}
    assert cfg.cost_table().model == "GPT-S"
    with pytest.raises(ValueError, match="cost takes only"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["eagle2:4,2,10"], "cost": {"price": "1"}})


def test_generate_policies_by_spec():
    nb = neighbour_table(np.random.default_rng(0).normal(size=(8, 3)), k_max=7)
    relax = Relax.additive(3, 0.2)
    t = parse_tree("latent-walk:3,2,8", relax=relax, neighbours=nb)
    assert isinstance(t, LatentAwareTree) and t.selector.mode == "walk"
    s = parse_tree("sequoia-diverse:6,3", relax=relax, neighbours=nb, acceptance=[0.5, 0.2])
    assert s.selector.mode == "diverse" and s.n_nodes - 1 <= 6 and str(s) == "sequoia-diverse:6,3"
    c = parse_tree("costaware:6,3", acceptance=[0.5, 0.2], cost=CostModel.from_table(DEFAULT_TABLE, "GPT-S"))
    assert isinstance(c, StaticTree) and str(c) == "costaware:6,3"
    with pytest.raises(ValueError, match="acceptance"):
        parse_tree("sequoia:3,2")
    with pytest.raises(ValueError, match="neighbour table"):
        parse_tree("latent:3,2,8", relax=relax)
    with pytest.raises(ValueError, match="needs 3 or 4"):
        parse_tree("latent:3,2,8,1,1", relax=relax, neighbours=nb)


@pytest.fixture(scope="module")
def models():
    cfg = tiny_config()
    torch.manual_seed(0)
    return random_model(cfg, 0, std=0.5), random_model(cfg, 1, std=0.5)


def test_decoder_with_a_relaxation_aware_tree_is_lossless(models):
    """The reference decoder runs the new trees through the draft callback; a tree picked with a relaxed
    selection but verified with Relax.none() generates the target's sequence law (chi-square over all
    8^4 sequences, false-failure probability 1e-6)."""
    target, small = models
    nb = neighbour_table(np.random.default_rng(0).normal(size=(8, 3)), k_max=7)
    policy = LatentAwareTree(3, 2, 8, relax=Relax.additive(3, 0.3), neighbours=nb, mode="walk")
    st = DecodeSettings("r1", cfg_scale=CFG, target_sampling=SAMPLING, draft_sampling=SAMPLING)
    dec = Decoder(target, st, drafter=GPTDraftSession(small), policy=policy)
    seqs, probs = exact_sequence_probs(target, label=2)
    samples = np.array([dec.generate(2, seed=3, sequence=i).tokens for i in range(LOSSLESS_SAMPLES)])
    ok, stat, limit = chi_square_ok(samples, seqs, probs)
    assert ok, f"chi-square {stat:.1f} >= {limit:.1f}"


def test_trace_positional_acceptance_is_exact(tmp_path, models):
    target, small = models
    nb = neighbour_table(np.random.default_rng(1).normal(size=(8, 3)), k_max=7)
    relax = Relax.additive(3, 0.2)
    st = DecodeSettings(Verification("r1", relax), cfg_scale=CFG, target_sampling=SAMPLING,
                        draft_sampling=SAMPLING)
    dec = Decoder(target, st, drafter=GPTDraftSession(small), policy=StaticTree([[0], [1], [0, 0]]),
                  neighbours=nb)
    header = TraceHeader(model="tiny", checkpoint_sha256="0" * 64, vocab_size=8, codebook_sha256="0" * 64,
                         verification=Verification("r1", relax), tree="static",
                         target_sampling=SAMPLING, draft_sampling=SAMPLING, logits_dtype="float32")
    with TraceWriter(tmp_path / "t", header, nb) as w:
        for c in range(3):
            dec.generate(c, seed=1, sequence=c, trace=w)
    world = TraceWorld(tmp_path / "t")
    steps = [s for s in world.trace.steps() if s.tree.size > 1]
    p = [SAMPLING.probs(s.target_logits[0].astype(np.float64)) for s in steps]
    q = [SAMPLING.probs(s.draft_logits[0].astype(np.float64)) for s in steps]
    # exact rule: rank i is accepted with probability p(rank-i token of q) (theory, Theorem 1)
    a = trace_positional_acceptance(world, "r1", width=4)
    want = np.mean([pi[np.argsort(-qi, kind="stable")[:4]] for pi, qi in zip(p, q, strict=True)], axis=0)
    np.testing.assert_allclose(a, want, rtol=1e-12)
    sel = ChildSelector("walk", relax, nb)
    b = trace_positional_acceptance(world, Verification(rule="r1", relax=relax), width=4, selector=sel)
    rows = []
    for pi, qi in zip(p, q, strict=True):
        kids, _ = sel.select(qi, 4)
        acc = np.zeros(4)
        acc[:kids.size] = node_outcome(pi, kids, Verification("r1", relax), neighbours=nb).accept_probs
        rows.append(acc)
    np.testing.assert_allclose(b, np.mean(rows, axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="r1 and r3"):
        trace_positional_acceptance(world, "r2")
    with pytest.raises(ValueError, match="TraceWorld"):
        trace_positional_acceptance(str(tmp_path / "t"))


def test_demo_reports_the_relaxation_aware_trees():
    from relaxspec.demo import DEMO_CONFIG, relaxation_aware_section

    rows = []
    for i, tree in enumerate(DEMO_CONFIG["trees"]):
        for relax, delta, lam in (("additive", 0.1, 1.0), ("multiplicative", 0.0, 5.0)):
            rows.append({"world": "ambiguous", "tree": tree, "relax": relax, "delta": delta, "lam": lam,
                         "mean_tokens_per_step": 2.0 + 0.1 * i, "se_tokens_per_step": 0.01})
    lines = relaxation_aware_section(rows)
    body = [ln for ln in lines if ln.startswith("| LANTERN")]
    assert len(body) == 2
    # best existing: the 4th tree (2.3), best new: the last (2.6): +13.0%
    old, new = DEMO_CONFIG["trees"][3], DEMO_CONFIG["trees"][-1]
    assert all(old in ln and new in ln and "+13.0%" in ln for ln in body)
