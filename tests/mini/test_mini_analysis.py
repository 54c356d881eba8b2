"""Building blocks of the mini-model analyses: ambiguity figures, records, configurations, report."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from relaxspec.mini.ambiguity import position_stats
from relaxspec.mini.calibration import (
    fit_world,
    fitted_preset,
    node_figures,
    params_literal,
    summarise,
    world_figures,
    world_key,
)
from relaxspec.mini.decoding import DecodeConfig
from relaxspec.mini.quality import QUALITY_CONFIGS, read_records, slug
from relaxspec.simulate.worlds import PRESETS, LatentParams


def test_position_stats_on_known_distributions():
    V = 20
    uniform = np.full((3, V), 1 / V)
    point = np.zeros((3, V))
    point[:, 4] = 1.0
    s = position_stats(uniform, {"same": uniform, "point": point})
    assert s["top1"] == pytest.approx(1 / V) and s["top10_mass"] == pytest.approx(0.5)
    assert s["entropy"] == pytest.approx(np.log(V))
    assert s["accept_same"] == pytest.approx(1.0) and s["accept_point"] == pytest.approx(1 / V)
    s = position_stats(point, {})
    assert s == {"top1": 1.0, "entropy": 0.0, "top10_mass": 1.0}
    with pytest.raises(ValueError, match="shape"):
        position_stats(uniform, {"short": point[:2]})


def test_records_drop_a_torn_last_line(tmp_path):
    path = tmp_path / "images.jsonl"
    path.write_text(json.dumps({"index": 0}) + "\n" + json.dumps({"index": 1}) + "\n" + '{"index": 2, "tok')
    assert [r["index"] for r in read_records(path)] == [0, 1]
    assert read_records(tmp_path / "missing.jsonl") == []


def test_configurations_are_named_and_validated():
    names = [c.name for c in QUALITY_CONFIGS]
    assert len(set(names)) == len(names) and len({slug(n) for n in names}) == len(names)
    assert QUALITY_CONFIGS[0].is_ar and all(not c.is_ar for c in QUALITY_CONFIGS[1:])
    with pytest.raises(ValueError, match="drafter"):
        DecodeConfig("x", tree="eagle2", drafter="oracle")
    with pytest.raises(ValueError):
        DecodeConfig("x", verification="r1+lantern:k=5,delta=2")


def test_params_literal_round_trips():
    text = params_literal(PRESETS["ambiguous"])
    assert eval(text, {"LatentParams": LatentParams}) == PRESETS["ambiguous"]


def test_fit_figures_by_hand():
    V = 20
    uniform = np.full(V, 1 / V)
    point = np.zeros(V)
    point[4] = 1.0
    top1, entropy, top10, ranked, q_entropy, accept = node_figures(uniform, point)
    assert (top1, top10, ranked, accept) == pytest.approx((1 / V, 0.5, 0.5, 1 / V))
    assert entropy == pytest.approx(np.log(V)) and q_entropy == 0.0
    # two sequences of three positions; top-1 0.1, 0.3, 0.5 and 0.5, 0.3, 0.1
    rows = np.zeros((2, 3, 6))
    rows[0, :, 0] = [0.1, 0.3, 0.5]
    rows[1, :, 0] = [0.5, 0.3, 0.1]
    f = summarise(rows)
    # deviations -0.2, 0, 0.2 and 0.2, 0, -0.2: variance 0.08 / 3, lag-1 products all 0
    assert f["top1"] == pytest.approx(0.3) and f["top1_sd"] == pytest.approx(np.sqrt(0.08 / 3))
    assert f["top1_lag1"] == pytest.approx(0.0, abs=1e-12)
    rows[1, :, 0] = [0.1, 0.5, 0.3]  # deviations -0.2, 0.2, 0: lag-1 products 0, 0, -0.04, 0
    f = summarise(rows)
    assert f["top1_lag1"] == pytest.approx(-0.01 / (0.16 / 6))
    with pytest.raises(ValueError, match="positions"):
        summarise(rows[:, :1])


def test_fit_world_recovers_a_known_worlds_figures():
    """Figures measured on a world with known parameters are matched by the fit started elsewhere."""
    small = {"vocab_size": 512, "n_clusters": 32}
    known = replace(PRESETS["ambiguous"], **small, beta=20.0, draft_beta=14.0, beta_spread=0.8, rho=0.75,
                    draft_sigma=0.1, draft_token_noise=0.5)
    goals = world_figures(known, n_sequences=8, seq_len=32)
    params, figures = fit_world(goals, replace(PRESETS["ambiguous"], **small), rounds=2, iters=10,
                                n_sequences=8, seq_len=32)
    assert figures == world_figures(params, n_sequences=8, seq_len=32)
    assert figures["top1"] == pytest.approx(goals["top1"], rel=0.05)
    assert figures["top1_sd"] == pytest.approx(goals["top1_sd"], rel=0.1)
    assert figures["top1_lag1"] == pytest.approx(goals["top1_lag1"], abs=0.05)
    assert figures["accept_ranked"] == pytest.approx(goals["accept_ranked"], abs=0.02)
    assert figures["draft_entropy"] == pytest.approx(goals["draft_entropy"], abs=0.05)
    # a second drafter keeps the target side
    lower = {**goals, "accept_ranked": goals["accept_ranked"] - 0.1}
    other, _ = fit_world(lower, target=params, rounds=1, iters=8, n_sequences=8, seq_len=32)
    assert (other.beta, other.beta_spread, other.rho) == (params.beta, params.beta_spread, params.rho)
    assert other.draft_sigma > params.draft_sigma
    with pytest.raises(ValueError, match="top1_lag1"):
        fit_world({k: v for k, v in goals.items() if k != "top1_lag1"})


def test_fitted_presets_by_target_weights():
    from relaxspec.mini.weights import WEIGHTS_DIR, read_card

    first = read_card(WEIGHTS_DIR, "target")["weights_sha256"]
    second = read_card(WEIGHTS_DIR / "ambiguous", "target")["weights_sha256"]
    assert fitted_preset(first, "eagle") == "mini-fit"
    assert fitted_preset(second, "eagle") == "mini-ambiguous"
    assert fitted_preset(second, "draft_gpt") == "mini-ambiguous-draft-gpt"
    assert fitted_preset(second, world_key("eagle", "r3")) == "mini-ambiguous-greedy"
    assert world_key("draft_gpt", "r2") == "draft_gpt"
    assert fitted_preset("0" * 64, "eagle") is None
    assert PRESETS["mini-ambiguous"].vocab_size == read_card(WEIGHTS_DIR / "ambiguous", "target")["config"][
        "vocab_size"]


def test_report_tables_of_a_fit_and_a_validation(tmp_path):
    from relaxspec.mini.report import ambiguity_table, validation_table

    figures = {"top1": 0.2, "top1_sd": 0.1, "top1_lag1": 0.4, "accept_ranked": 0.5, "draft_entropy": 4.0,
               "entropy": 3.0, "top10_mass": 0.6, "accept_sampled": 0.55}
    stats = {"top1": 0.2, "entropy": 3.0, "top10_mass": 0.6, "acceptance": 0.5}
    d = {"model": {**stats, "accept_eagle": 0.5, "accept_draft_gpt": 0.4}, "cfg_scale": 2.0, "n_images": 5,
         "worlds": {"ambiguous": stats},
         "fitted": {"eagle": {"params": "LatentParams(beta=1.0)",
                              "model": {**figures, "accept_ranked_deep": 0.45},
                              "world": {**figures, "top1": 0.21, "accept_ranked_deep": 0.44}},
                    "draft_gpt": {"params": "LatentParams(beta=2.0)", "model": figures, "world": figures}}}
    (tmp_path / "a.json").write_text(json.dumps(d))
    text = "\n".join(ambiguity_table(tmp_path / "a.json"))
    assert "| top1 (fitted) | 0.200 / 0.210 | 0.200 / 0.200 |" in text
    assert "| accept_ranked_deep (fitted) | 0.450 / 0.440 |  |" in text
    assert "| accept_sampled | 0.550 / 0.550 | 0.550 / 0.550 |" in text
    assert "`draft_gpt`: `LatentParams(beta=2.0)`" in text
    (tmp_path / "v.csv").write_text("config,sequences,speculative_steps,replay_mismatches,"
                                    "measured_tokens_per_step,trace_driven_prediction,trace_driven_rel_error,"
                                    "world,world_prediction,world_rel_error\nx,4,9,0,2.0,1.9,0.05,mini,2.1,0.05\n")
    row = "| x | 4 | 9 | 0 | 2.0 | 1.9 | 5.0% | `mini` | 2.1 | 5.0% |"
    assert row in validation_table(tmp_path / "v.csv")
