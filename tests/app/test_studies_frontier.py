"""benchmarks/frontier.py's study (relaxspec.studies.frontier): what its report says about the run it made
(issue 26 item 16), its methods and the claims it computes (issue 29), without running it."""

from __future__ import annotations

import pytest

from relaxspec.simulate.worlds import PRESETS
from relaxspec.studies.frontier import (
    WORLDS,
    _shipped_models,
    scan_table,
    table,
    world_k,
    world_methods,
    world_table,
    world_vocab,
)
from relaxspec.studies.frontier_claims import claims_2026, goal_line, window_claim
from relaxspec.studies.frontier_methods import SCAN_WINDOWS, methods, methods_2026, neighbour_k, scan_methods
from relaxspec.studies.frontier_shipped import shipped_methods, tokens_per_forward
from relaxspec.studies.study_options import QUICK_WORLD, world_threads


@pytest.mark.parametrize("overrides", [QUICK_WORLD, {}], ids=["quick", "full"])
def test_the_world_table_names_the_vocabulary_it_ran(overrides) -> None:
    """The table's heading gives the V each world ran at: the --quick overrides' (2048), else the presets'
    (16384; the grid world fitted to the shipped ambiguous model: 8192)."""
    vocab = world_vocab(overrides)
    assert vocab == {w: overrides.get("vocab_size", PRESETS[w].vocab_size) for w in WORLDS}
    heading = table([], [], 0, None, vocab)[0]
    if overrides:
        assert heading == "### Synthetic worlds (V = 2048)"
    else:
        assert heading == "### Synthetic worlds (V = 16384; mini-ambiguous-grid: V = 8192)"
    assert table([], [], 0, None, 2048)[0] == "### Synthetic worlds (V = 2048)"


def test_the_proximity_set_scales_with_the_vocabulary() -> None:
    assert [neighbour_k(V) for V in (16384, 8192, 2048, 4)] == [1000, 500, 125, 1]
    assert world_k("ambiguous", {}) == 1000 and world_k("mini-ambiguous-grid", {}) == 500
    assert world_k("mini-ambiguous-grid", QUICK_WORLD) == 125


def test_the_2026_rows_and_the_scan() -> None:
    """Issue 29's rows are in the table (the shipped models' decoder runs the anchors, ours run in the worlds
    only), and the window scan adds SJD and SCD at every L without running a configuration twice."""
    every = methods()
    assert len({m.label for m in every}) == len(every)
    new = methods_2026()
    assert every[-len(new):] == new
    assert {m.family for m in new if not m.decoder} == {"budget-scd", "budget-pac", "vvs-bounded"}  # ours
    labels = {m.label for m in new}
    assert {m.label for m in shipped_methods()} & labels == {m.label for m in new if m.decoder}
    assert not {m.label for m in shipped_methods(with_2026=False)} & labels  # --quick's shipped rows
    assert {m.family for m in new} == {"jacobi", "scd", "pac", "vvs", "budget-scd", "budget-pac",
                                       "vvs-bounded"}
    runs = world_methods()
    assert len({(m.tree, m.verification) for m in runs}) == len(runs)
    assert {(m.tree, m.verification) for m in scan_methods()} <= {(m.tree, m.verification) for m in runs}
    assert [m.label for m in scan_methods()][:2] == [f"SJD L={SCAN_WINDOWS[0]}", f"SCD L={SCAN_WINDOWS[0]}"]


def _record(world: str, tree: str, verification: str, tokens: float, tv: float = 0.0) -> dict:
    return {"world": world, "tree": tree, "verification": verification, "tokens": tokens, "se": 0.01,
            "tv": tv}


def test_world_and_scan_tables_pick_each_worlds_k() -> None:
    rows = [_record("ambiguous", "jacobi:32,coupled=principled", "r2+budget:tv=0.1,k=1000", 2.0, 0.1),
            _record("ambiguous", "jacobi:32,coupled=principled", "r2+budget:tv=0.1,k=125", 9.0, 0.1),
            _record("confident", "jacobi:8", "r2", 1.5)]
    got = [r for r in world_table(rows, {}) if r["method"] == "SCD + budget δ=0.1"]
    assert [(r["setting"], r["tokens"]) for r in got] == [("ambiguous", 2.0)]
    quick = [r for r in world_table(rows, QUICK_WORLD) if r["method"] == "SCD + budget δ=0.1"]
    assert [r["tokens"] for r in quick] == [9.0]
    assert [(r["setting"], r["method"]) for r in scan_table(rows, {})] == [("confident", "SJD L=8")]


def _scan(sjd: list[float], scd: list[float]) -> dict[str, dict]:
    out = {}
    for L, a, b in zip(SCAN_WINDOWS, sjd, scd, strict=True):
        out[f"SJD L={L}"] = {"tokens": a}
        out[f"SCD L={L}"] = {"tokens": b}
    return out


def test_scds_window_claim() -> None:
    """SCD rises by 10% or more from the first window to the last while SJD moves by less."""
    assert "**holds**" in window_claim(_scan([2.0, 2.05, 2.0, 2.1], [2.0, 2.4, 2.8, 3.0]), "w")
    assert "**fails**" in window_claim(_scan([2.0, 2.3, 2.5, 2.6], [2.0, 2.4, 2.8, 3.0]), "w")  # SJD rises
    assert "**fails**" in window_claim(_scan([2.0, 2.0, 2.0, 2.0], [2.0, 2.1, 2.1, 2.1]), "w")  # SCD flat
    assert window_claim({}, "w") is None


def _row(setting: str, method: str, family: str, tokens: float, tv: float = 0.0, **kw) -> dict:
    return {"setting": setting, "method": method, "family": family, "tokens": tokens, "se": 0.01, "tv": tv,
            **kw}


def test_the_2026_claims_on_hand_made_rows() -> None:
    rows = [_row("w", "SJD L=32", "jacobi", 2.3), _row("w", "SJD-PAC +PD", "pac", 2.7),
            _row("w", "SJD-PAC +PD+AC", "pac", 3.5), _row("w", "SCD", "scd", 3.0),
            _row("w", "LANTERN δ=0.1", "lantern", 2.0, 0.2),
            _row("w", "VVS every 2 + LANTERN δ=0.1", "vvs", 3.0, 0.4),
            _row("w", "VVS dynamic + LANTERN δ=0.1", "vvs", 1.9, 0.3),
            _row("w", "SJD-PAC + budget δ=0.05", "budget-pac", 3.9, 0.05),
            _row("w", "SJD-PAC + budget δ=0.2", "budget-pac", 4.2, 0.2)]
    lines = claims_2026(rows, [], None)
    pac = next(line for line in lines if "SJD < +PD < +PD+AC" in line)
    assert "**holds**" in pac and "2.300 ± 0.010, 2.700 ± 0.010, 3.500 ± 0.010" in pac
    vvs = next(line for line in lines if "VVS above LANTERN" in line)
    assert "**fails**" in vvs and "VVS dynamic 1.900 (TV 0.3000)" in vvs  # one schedule below LANTERN
    goal = next(line for line in lines if "goal" in line)
    assert "SJD-PAC +PD+AC" in goal and "SJD-PAC + budget δ=0.2 4.200" in goal and "+20.0%" in goal
    assert "**met**" in goal and "within TV 0.05 per token: SJD-PAC + budget δ=0.05" in goal
    swapped = [{**r, "tokens": 2.0} if r["method"] == "SJD-PAC +PD+AC" else r for r in rows]
    assert "**fails**" in next(line for line in claims_2026(swapped, [], None) if "+PD+AC" in line)


def test_the_goal_line_on_the_shipped_model_is_at_equal_fd() -> None:
    by = {"SCD": _row("shipped", "SCD", "scd", 3.0, fd=8.0),
          "ours": _row("shipped", "ours", "budget-pac", 4.0, 5.0, fd=13.0),
          "near": _row("shipped", "near", "budget-scd", 3.3, 2.0, fd=9.0)}
    line = goal_line(by, "shipped", 2.0)
    assert "near 3.300" in line and "+10.0%" in line and "**not met**" in line
    assert goal_line(by, "shipped", None) is None
    assert "no rule of ours" in goal_line({k: by[k] for k in ("SCD", "ours")}, "shipped", 2.0)


def test_shipped_tokens_per_forward_counts_skips_without_a_forward() -> None:
    """A VVS skip step's tokens count with no target forward; records from before skips were recorded count
    none; AR (no speculative step) is one token per forward."""
    records = [{"emitted": [3, 1, 4], "skips": 1}, {"emitted": [2, 2], "skips": 0}]
    assert tokens_per_forward(records) == round(12 / 4, 4)
    assert tokens_per_forward([{"emitted": [3, 1]}]) == 2.0 and tokens_per_forward([{"emitted": []}]) == 1.0


def test_shipped_models_option() -> None:
    assert _shipped_models(None, False) == ["shipped", "shipped ambiguous"]
    assert _shipped_models(None, True) == ["shipped"]
    assert _shipped_models("shipped ambiguous", False) == ["shipped ambiguous"]
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        _shipped_models("shipped,nope", False)


def test_threads_option(capsys, tmp_path) -> None:
    """``--threads``: every core by default, Numba's limit named when a count is outside it, and
    benchmarks/frontier.py answers a bad option with one line and exit code 2 before running anything."""
    import importlib.util
    from pathlib import Path

    import numba

    limit = numba.config.NUMBA_NUM_THREADS
    assert 1 <= world_threads(None) <= limit and world_threads(1) == 1
    for bad in (0, limit + 1):
        with pytest.raises(ValueError, match=rf"--threads must be in \[1, {limit}\].*got {bad}"):
            world_threads(bad)
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "frontier.py"
    spec = importlib.util.spec_from_file_location("frontier_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    threads = f"--threads must be in [1, {limit}] (Numba's thread limit), got 0"
    for argv, line in ((["--threads", "0"], threads),
                       (["--shipped-models", "nope"], "--shipped-models: unknown model 'nope'")):
        with pytest.raises(SystemExit) as stop:
            script.main(["--quick", *argv, "--out", str(tmp_path / "never-run")])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"frontier: {line}")
    assert not (tmp_path / "never-run" / "worlds.csv").exists()  # nothing ran


def test_the_report_names_the_rows_a_stopped_run_lacks():
    """A run stopped before its last rows reports what it has and names every row it lacks, world and
    shipped model alike, in table order (none when complete)."""
    from relaxspec.studies.frontier import WORLDS, missing_rows, shipped_methods

    labels = [m.label for m in methods() if not m.shipped_only]
    world = [{"setting": w, "method": label} for w in WORLDS for label in labels]
    shipped = [{"setting": "shipped", "method": m.label} for m in shipped_methods()]
    assert missing_rows(world, shipped, ["shipped"]) == []
    gone = world[:3] + world[4:]
    assert missing_rows(gone, shipped[1:], ["shipped"]) == [f"{WORLDS[0]}: {labels[3]}",
                                                            f"shipped: {shipped[0]['method']}"]
    assert len(missing_rows(world, [], ["shipped", "shipped ambiguous"])) == 2 * len(shipped)
