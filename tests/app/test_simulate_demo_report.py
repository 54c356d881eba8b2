"""The demo's report.md (relaxspec.demo.write_report, mini.demo's FD lines) on synthetic rows: sample size
and standard errors, non-monotone rows flagged with their noise, the LANTERN++ claim under R1 and R2, the
cost model's speed-up, the run's conditions, and the mini model's FD (issue 12, items 4 and 9)."""

from __future__ import annotations

import math

import pytest

from relaxspec.core.cost import CostModel
from relaxspec.demo import (
    DEMO_CONFIG,
    EAGLE_TREE,
    STATIC_TREE,
    DemoRun,
    demo_configs,
    non_monotone,
    row_speedup,
    write_report,
)
from relaxspec.mini.demo import DEMO_NAMES, QUALITY_COMMAND, committed_quality, fd_lines, lossless_twin
from relaxspec.mini.quality import QUALITY_CONFIGS
from relaxspec.results import COLUMNS, VIEW_COLUMNS, config_key, verification_view
from relaxspec.sweep import jobs
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import Verification

DDD = DEMO_CONFIG["trees"][2]
RELAXATIONS = [("none", 0.0, 1.0), *(("additive", d, 1.0) for d in (0.05, 0.1, 0.2, 0.4)),
               *(("multiplicative", 0.0, lam) for lam in (2.0, 5.0, 10.0))]


def row(world: str, tree: str, relax: tuple[str, float, float], tokens: float, se: float = 0.05,
        rule: str = "r1") -> dict:
    """A results row as ``load(...).to_dict("records")`` gives it: the stored columns and the verification's
    views."""
    kind, delta, lam = relax
    v = Verification(rule, Relax(kind, 0 if kind == "none" else 1000, delta, lam))
    r = {"world": world, "tree": tree, "verification": str(v), "rule": rule, "variant": "principled",
         "relax": kind,
         "k": 0.0 if kind == "none" else 1000.0, "delta": delta, "lam": lam, "boost": "none",
         "temperature": 1.0, "n_sequences": 4.0, "seq_len": 128.0, "seed": 0.0, "settings": "{}",
         "mean_tokens_per_step": tokens, "se_tokens_per_step": se, "mean_accepted_depth": tokens - 1.0,
         "mean_tree_depth": 2.3 if tree == EAGLE_TREE else 5.0, "mean_tree_size": 57.0,
         "draft_calls_per_step": 5.0,
         "tv_bound_per_token": 0.0 if kind == "none" else (math.nan if rule == "r2" else 0.1),
         "tv_bound_per_sequence": 0.0, "seconds": 1.0}
    assert set(r) == set(COLUMNS) | set(VIEW_COLUMNS)
    assert all(r[c] == value for c, value in verification_view(r["verification"]).items())
    return r


def grid(ddd_tokens: dict[float, tuple[float, float]] | None = None) -> list[dict]:
    """Both worlds, EAGLE-2 / static / DDD under R1 rising with the relaxation, the static tree under R2;
    in the ambiguous world EAGLE-2 accepts deeper than the R1 static tree and shallower than the R2 one."""
    rows = []
    for world, base in (("confident", 3.0), ("ambiguous", 1.3)):
        for i, rel in enumerate(RELAXATIONS):
            rows.append(row(world, EAGLE_TREE, rel, base + 0.2 * i))
            rows.append(row(world, STATIC_TREE, rel, base - 0.1 + 0.1 * i))
            rows.append(row(world, DDD, rel, base + 0.3 * i))
            rows.append(row(world, STATIC_TREE, rel, base + 2.0 + 0.3 * i, rule="r2"))
    for r in rows:  # the DDD rows: delta 0.05: 5.92, delta 0.1: 5.63
        if ddd_tokens and r["world"] == "ambiguous" and r["tree"] == DDD and r["relax"] == "additive":
            r["mean_tokens_per_step"], r["se_tokens_per_step"] = ddd_tokens.get(
                r["delta"], (r["mean_tokens_per_step"], r["se_tokens_per_step"]))
            r["mean_accepted_depth"] = r["mean_tokens_per_step"] - 1.0
    return rows


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return CostModel.from_table()


def report(tmp_path, rows, cost, run=None) -> str:
    return write_report(rows, tmp_path, run=run, cost=cost).read_text()


def test_report_states_the_sample_size_and_what_the_standard_errors_mean(tmp_path, cost):
    text = report(tmp_path, grid(), cost)
    assert "4 independent sequences x 128 tokens (512 tokens" in text
    assert "one standard error, estimated from the spread between the 4 sequences" in text
    assert "below about 2 combined standard errors" in text and "sampling noise" in text


def test_non_monotone_rows_are_flagged_next_to_their_numbers_with_their_noise(tmp_path, cost):
    # delta 0.1 falls within noise (0.29 over sqrt(0.2^2 + 0.15^2) = 0.25: 1.2 SE); delta 0.4 falls beyond
    rows = grid({0.05: (5.92, 0.2), 0.1: (5.63, 0.15), 0.2: (6.5, 0.02), 0.4: (6.3, 0.02)})
    flagged = {(r["tree"], r["delta"]): (prev["delta"], z) for r, prev, z in non_monotone(rows)}
    assert set(flagged) == {(DDD, 0.1), (DDD, 0.4)}
    assert flagged[DDD, 0.1][0] == 0.05 and flagged[DDD, 0.1][1] == pytest.approx(0.29 / 0.25)
    assert flagged[DDD, 0.4][1] == pytest.approx(0.2 / math.hypot(0.02, 0.02))
    lines = report(tmp_path, rows, cost).splitlines()
    ddd = {ln.split(" | ")[3]: ln for ln in lines if ln.startswith(f"| ambiguous | {DDD} | R1 |")}
    assert "5.63 ± 0.15" in ddd["LANTERN δ=0.1"]
    assert "↓ -0.29 vs LANTERN δ=0.05 (1.2 SE, within noise)" in ddd["LANTERN δ=0.1"]
    assert "↓ -0.20 vs LANTERN δ=0.2 (7.1 SE, beyond noise)" in ddd["LANTERN δ=0.4"]
    assert "↓" not in ddd["LANTERN δ=0.05"]
    shrunk = [dict(r, mean_tree_size=8.6 if r["delta"] == 0.4 else r["mean_tree_size"]) for r in rows]
    assert "(7.1 SE, beyond noise; tree 57.0 → 8.6 drafts)" in report(tmp_path, shrunk, cost)
    assert any("2 rows (↓)" in ln and "1 of them within 2 combined standard errors" in ln for ln in lines)


def test_non_monotone_compares_the_first_relaxation_with_the_exact_row():
    rows = [row("ambiguous", DDD, RELAXATIONS[0], 2.0), row("ambiguous", DDD, RELAXATIONS[5], 1.9),
            row("ambiguous", DDD, RELAXATIONS[6], 2.5)]
    [(r, prev, _)] = non_monotone(rows)
    assert (r["lam"], prev["relax"]) == (2.0, "none")


def test_report_states_the_lantern_pp_claim_under_r1_and_under_r2(tmp_path, cost):
    text = report(tmp_path, grid(), cost)
    r1 = next(ln for ln in text.splitlines() if ln.startswith("Verified like EAGLE-2 (R1"))
    r2 = next(ln for ln in text.splitlines() if ln.startswith("Verified as LANTERN++ verifies it (R2"))
    # ambiguous world, LANTERN delta 0.05: EAGLE-2 R1 accepts 0.5, static R1 0.3, static R2 2.6
    assert "in 0 of 7 relaxed settings" in r1 and "LANTERN δ=0.05: 0.30 vs 0.50" in r1
    assert "**not reproduced**" in r1
    assert "in 7 of 7 relaxed settings" in r2 and "LANTERN δ=0.05: 2.60 vs 0.50" in r2
    assert "**reproduced**" in r2 and "**not reproduced**" not in r2
    assert "With the exact test it accepts 2.30 against EAGLE-2's 0.30" in r2
    assert "The LANTERN++ claim therefore holds as LANTERN++ states it, under R2, and not under R1" in text


def test_report_predicts_the_cost_model_speedup_and_names_its_table(tmp_path, cost):
    rows = grid()
    text = report(tmp_path, rows, cost)
    r = next(r for r in rows if r["world"] == "ambiguous" and r["tree"] == STATIC_TREE and r["rule"] == "r2"
             and r["lam"] == 10.0)
    expected = r["mean_tokens_per_step"] * cost.ar_step_ms / (
        float(cost.target_ms(58.0)) + 5.0 * cost.t_draft_ms)
    assert row_speedup(r, cost) == pytest.approx(expected)
    line = next(ln for ln in text.splitlines()
                if ln.startswith(f"| ambiguous | {STATIC_TREE} | R2 | LANTERN++ λ=10 |"))
    assert f"| {expected:.2f} |" in line
    assert ("`core/tables/decoder_cpu.csv`, target GPT-B with the EAGLE head (GPT-B) drafter on "
            "CPU (1 thread)") in text
    assert f"- ambiguous world: best predicted speed-up {expected:.2f}x ({STATIC_TREE}, R2, LANTERN++ λ=10" \
        in text
    eagle = rows[0]
    even = eagle["mean_tokens_per_step"] / row_speedup(eagle, cost)
    assert f"EAGLE-2's tree (57 drafts, 5 draft calls) breaks even at {even:.1f} tokens per step" in text
    assert even == pytest.approx((float(cost.target_ms(58.0)) + 5 * cost.t_draft_ms) / cost.ar_step_ms)
    slower = sum(row_speedup(r, cost) < 1 for r in rows)
    assert f"- {slower} of {len(rows)} rows are predicted slower than autoregressive decoding" in text


def test_report_records_the_run_conditions(tmp_path, cost):
    rows = grid()
    cold = DemoRun(510.0, 400.0, 90.0, 700.0, 2, 3.9, 4.2, len(rows) - 8, 12, 3)
    text = report(tmp_path, rows, cost, run=cold)
    assert ("Run conditions: 510 s wall clock in all (400 s for the simulated grid, 90 s for the mini "
            "model), 700 s CPU, on 2 cores; "
            "1-minute load average 3.9 before the run (loaded: other processes competed for the cores) and "
            "4.2 at its end (this run included)") in text
    assert "cold Numba cache (12 kernel compilations in this run" in text
    assert "8 resumed from an earlier run's results.csv" in text
    warm = DemoRun(150.0, 100.0, 40.0, 200.0, 2, 0.1, 2.9, len(rows), 0, 9).describe(len(rows))
    assert "(an idle machine)" in warm and "warm Numba cache (9 kernels loaded" in warm
    assert "resumed" not in warm


def test_demo_grids_keep_the_r1_rows_and_add_r2_on_the_static_tree():
    r1, r2 = demo_configs()
    r1_keys = {config_key(j.row_config(r1)) for j in jobs(r1)}
    r2_jobs = list(jobs(r2))
    assert len(r1_keys) == 2 * 7 * 8 and {j.verification.rule for j in jobs(r1)} == {"r1"}
    assert len(r2_jobs) == 2 * 8 and {(j.tree, j.verification.rule) for j in r2_jobs} == {(STATIC_TREE, "r2")}
    assert not r1_keys & {config_key(j.row_config(r2)) for j in r2_jobs}
    # same sizes and seed: the R2 rows compare with the R1 rows
    assert (r2.n_sequences, r2.seq_len, r2.seed) == (r1.n_sequences, r1.seq_len, r1.seed) == (4, 128, 0)


def test_mini_fd_is_quoted_from_the_committed_table_with_a_warning():
    configs = [c for c in QUALITY_CONFIGS if c.name in DEMO_NAMES]
    committed = committed_quality()
    assert set(DEMO_NAMES) <= set(committed)
    assert committed["exact EAGLE-2"]["images"] == "1000"
    text = "\n".join(fd_lines(configs, [31.0, 28.5, 33.2, 30.1, 35.0], 10, 128, committed))
    assert "10 images per row are too few for a Fréchet distance" in text
    assert "rank at most 9" in text and "(28.5 to 35.0) are dominated by small-sample bias" in text
    assert f"made by `{QUALITY_COMMAND}`" in text and "not measured by this run" in text
    fd, sd = (float(x) for x in committed["LANTERN delta=0.2"]["FD ± bootstrap sd"].split("±"))
    fd0, sd0 = (float(x) for x in committed["exact EAGLE-2"]["FD ± bootstrap sd"].split("±"))
    line = next(ln for ln in text.splitlines() if ln.startswith("| LANTERN delta=0.2 |"))
    assert f"{fd:.3f} ± {sd:.3f}" in line
    assert f"{fd - fd0:+.2f} ({(fd - fd0) / math.hypot(sd, sd0):.1f} sd) over exact EAGLE-2" in line
    assert "The lossless rows (AR, exact EAGLE-2, exact static)" in text


def test_mini_fd_without_the_committed_table_names_the_command():
    configs = [c for c in QUALITY_CONFIGS if c.name in DEMO_NAMES]
    text = "\n".join(fd_lines(configs, [30.0] * 5, 10, 128, {}))
    assert "too few for a Fréchet distance" in text and QUALITY_COMMAND in text and "|" not in text
    assert lossless_twin(configs[2], configs).name == "exact EAGLE-2"
    assert lossless_twin(configs[-1], configs).name == "exact static"
    assert lossless_twin(configs[0], configs) is None
