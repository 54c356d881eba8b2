"""``relaxspec mini validate``: the configurations and their fitted worlds, the rows' statistics, the
resumable run on the shipped model, and the tables it writes into the docs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from relaxspec.cli import main
from relaxspec.mini.validation import (
    ACCEPTANCE_SOURCE,
    VALIDATION_CONFIGS,
    config_key,
    fit_sources,
    needs_acceptance,
    ratio_and_se,
)
from relaxspec.mini.validation_report import markers, misfits, render, write_section
from relaxspec.mini.validation_run import read_rows, run_validation, world_file, write_rows
from relaxspec.simulate.worlds import PRESETS


def test_every_method_has_one_configuration_and_a_fitted_world() -> None:
    names = [c.name for c in VALIDATION_CONFIGS]
    assert len(set(names)) == len(names)
    assert {config_key(c) for c in VALIDATION_CONFIGS} == {"eagle", "draft_gpt", "eagle-greedy"}
    keys = ("eagle", "draft_gpt", "eagle-greedy")
    got = {k: {c.name for c in fit_sources(VALIDATION_CONFIGS, k)} for k in keys}
    assert got == {"eagle": {"AR", "EAGLE-2 r1 exact", "static r2 exact", "SJD L=15"},
                   "draft_gpt": {"AR", "SJD L=15", "static r2 exact, draft GPT"},
                   "eagle-greedy": {"EAGLE-2 r3 exact"}}
    for k in got:  # a world is fitted to lossless traces only: its figures are the model's own
        assert all(c.verification.is_exact for c in fit_sources(VALIDATION_CONFIGS, k))
    assert [c.name for c in VALIDATION_CONFIGS if needs_acceptance(c)] == ["Sequoia r1 exact"]
    assert ACCEPTANCE_SOURCE in names


def test_ratio_and_se_is_the_cluster_robust_ratio() -> None:
    tokens, steps = np.array([6.0, 9.0, 4.0]), np.array([2.0, 3.0, 2.0])
    r, se = ratio_and_se(tokens, steps)
    assert r == 19 / 7
    assert se == pytest.approx(math.sqrt(3 / 2 * np.sum((tokens - r * steps) ** 2)) / 7, rel=1e-15)
    assert math.isnan(ratio_and_se(tokens[:1], steps[:1])[1])


FIT = {"figures": {"top1": {"model": 0.30, "world": 0.30, "fitted": True, "model_stderr": 0.01},
                   "accept_ranked": {"model": 0.50, "world": 0.45, "fitted": True, "model_stderr": 0.01},
                   "entropy": {"model": 2.0, "world": 2.05, "fitted": False}},
       "kappa": {"lags": [1, 2, 3], "model": [0.30, 0.10, 0.05], "model_stderr": [0.01, 0.01, 0.01],
                 "world": [0.31, 0.20, 0.05], "world_stderr": [0.01, 0.01, 0.01]}}


def test_misfits_name_what_the_world_lacks() -> None:
    params = PRESETS["mini-ambiguous"]  # no grid
    got = misfits(FIT, params, model_grid=8)
    # kappa_2 is 0.1 off (> 2 x 0.014), kappa_1 0.01 (inside); accept_ranked 5 standard errors off; entropy
    # (no standard error) 2.5% off, inside 5%; the world has no grid
    assert got == {"kappa": ["kappa_2 0.100/0.200"], "top-1": [], "drafter": ["accept_ranked 0.500/0.450"],
                   "shape": [], "grid": ["width 0 (model 8)"]}


def _row(name: str, measured: float, world: float | None, key: str = "eagle") -> dict:
    row = {"config": name, "decoding": "d", "world_key": key, "sequences": 4, "speculative_steps": 10,
           "replayed_steps": 12, "replay_mismatches": 0, "measured_tokens_per_forward": measured,
           "measured_se": 0.05, "trace_driven_prediction": measured, "trace_driven_rel_error": 0.0}
    if world is not None:
        row.update(world="w.toml", world_prediction=world, world_se=0.01,
                   world_rel_error=round(abs(world - measured) / measured, 4))
    return row


def test_render_and_write_section(tmp_path: Path) -> None:
    configs = [c for c in VALIDATION_CONFIGS if c.name in ("AR", "SJD L=15", "EAGLE-2 r1 exact")]
    rows = {"AR": _row("AR", 1.0, 1.0), "SJD L=15": _row("SJD L=15", 2.0, 1.5),
            "EAGLE-2 r1 exact": _row("EAGLE-2 r1 exact", 3.0, None)}
    worlds = {"eagle": (PRESETS["mini-ambiguous-grid"], FIT)}
    lines = render(rows, configs, worlds, model="m", command="relaxspec mini validate")
    text = "\n".join(lines)
    assert "**Partial**: 3 of 3 configurations measured, 2 predicted" in text
    assert ("| SJD L=15 | 10 | 0 | 2.0000 ± 0.0500 | 2.0000 | 0.0% | `eagle` | 1.5000 ± 0.0100 | 25.0% |"
            in text)
    assert "within 5% on 1 of 2 predicted rows" in text
    assert ("- SJD L=15: 25.0% low (1.5000 against 2.0000 ± 0.0500); `eagle` lacks kappa: kappa_2 "
            "0.100/0.200;") in text
    assert "| kappa_2 | 0.100 ± 0.010 / 0.200 |" in text
    doc = tmp_path / "doc.md"
    begin, end = markers("weights")
    doc.write_text(f"intro\n{begin}\nold table\n{end}\noutro\n")
    write_section(doc, "weights", lines)
    got = doc.read_text()
    assert got.startswith(f"intro\n{begin}\n\n```bash") and got.endswith(f"\n\n{end}\noutro\n")
    assert "old table" not in got and text in got
    with pytest.raises(ValueError, match="has no section 'ambiguous'"):
        write_section(doc, "ambiguous", lines)


def test_rows_round_trip_in_configuration_order(tmp_path: Path) -> None:
    rows = {"SJD L=15": _row("SJD L=15", 2.0, 1.5), "AR": _row("AR", 1.0, None)}
    write_rows(tmp_path / "v.csv", rows, VALIDATION_CONFIGS)
    back = read_rows(tmp_path / "v.csv")
    assert list(back) == ["AR", "SJD L=15"] and back == rows


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """AR and SJD (no drafter: both fit the EAGLE head's sampled world) on 2 images of the first model,
    with a world fitted in a handful of bisection steps (the pipeline, not its numbers)."""
    from relaxspec.mini.validation_run import FitOptions
    from relaxspec.mini.weights import WEIGHTS_DIR

    out = tmp_path_factory.mktemp("validate")
    configs = [c for c in VALIDATION_CONFIGS if c.name in ("AR", "SJD L=15")]
    fit = FitOptions(kappa_images=2, rounds=1, iters=2, n_sequences=4, seq_len=16)
    log: list[str] = []
    rows = run_validation(WEIGHTS_DIR, out, 2, configs, fit=fit, log=log.append)
    return out, configs, fit, rows, log


def test_validate_measures_replays_fits_and_predicts(validated) -> None:
    """About 20 s on a warm cache: two configurations decoded, replayed, fitted and predicted."""
    out, configs, _, rows, log = validated
    assert set(rows) == {"AR", "SJD L=15"} and world_file(out, "eagle").exists()
    ar, sjd = rows["AR"], rows["SJD L=15"]
    assert ar["measured_tokens_per_forward"] == ar["world_prediction"] == 1.0 and ar["speculative_steps"] == 0
    assert sjd["replay_mismatches"] == 0 and sjd["replayed_steps"] >= sjd["speculative_steps"] > 0
    measured = sjd["measured_tokens_per_forward"]
    assert measured >= 1 and sjd["world_prediction"] >= 1 and sjd["measured_se"] > 0
    rel = abs(sjd["world_prediction"] - measured) / measured
    assert sjd["world_rel_error"] == pytest.approx(rel, abs=1e-4)
    assert read_rows(out / "validation.csv") == rows
    assert not list(out.glob("*.trace"))  # every trace read and fitted: deleted


def test_validate_resumes_without_work(validated) -> None:
    out, configs, fit, rows, _ = validated
    from relaxspec.mini.weights import WEIGHTS_DIR

    log: list[str] = []
    assert run_validation(WEIGHTS_DIR, out, 2, configs, fit=fit, log=log.append) == rows
    assert log == []


def test_a_short_trace_is_measured_again(validated, tmp_path: Path) -> None:
    """A trace a stopped re-measurement left short beside its finished row (sequence 0 of 2) is not taken
    as the row's: the row is measured again (the capture resumes) and comes out as before."""
    import shutil

    from relaxspec.mini.shipped import load_mini
    from relaxspec.mini.validation import capture
    from relaxspec.mini.weights import WEIGHTS_DIR

    out, configs, fit, rows, _ = validated
    shutil.copytree(out, tmp_path / "v")
    sjd = next(c for c in configs if c.name == "SJD L=15")
    capture(load_mini(WEIGHTS_DIR), sjd, 1, tmp_path / "v", progress=False)
    log: list[str] = []
    again = run_validation(WEIGHTS_DIR, tmp_path / "v", 2, configs, fit=fit, log=log.append)
    assert "start measure SJD L=15" in log and "start measure AR" not in log
    same = [k for k in rows["SJD L=15"] if k not in ("seconds", "world")]  # world: the copy's path
    assert [again["SJD L=15"][k] for k in same] == [rows["SJD L=15"][k] for k in same]


def test_validate_cli_errors_are_one_line(capsys) -> None:
    assert main(["mini", "validate", "--configs", "AR,nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("relaxspec: error: unknown configurations ['nope']") and err.count("\n") == 1
    assert main(["mini", "validate", "--n-sequences", "1"]) == 2
    assert "--n-sequences must be >= 2" in capsys.readouterr().err
