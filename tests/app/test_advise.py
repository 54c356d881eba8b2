"""relaxspec advise: ranking and filtering (exact, on hand-made runs), bad input, the CLI end to end."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from relaxspec.cli import main
from relaxspec.core.cost import CostModel
from relaxspec.studies.advise import (
    TV_BOUND,
    TV_EXACT,
    TV_LOSSLESS,
    TV_MEASURED,
    TV_UNKNOWN,
    Run,
    ar_run,
    bests,
    from_result,
    rank,
    ratio_se,
    read_runs,
)
from relaxspec.studies.advise_report import pareto
from relaxspec.studies.frontier import methods

# t_target(1) = 1 ms, t_target(5) = 3 ms (linear between), t_draft = 0.5 ms
COST = CostModel("cpu", "test", "T", "D", np.array([1.0, 5.0]), np.array([1.0, 3.0]), 0.5)


def _run(name: str, kind: str, tokens: float, tv: float, calls: float = 0.0, n: int = 5) -> Run:
    """Two sequences of 10 forwards verifying n tokens each, ``tokens`` and ``tv`` per sequence."""
    two = np.full(2, 1.0)
    return Run(name, "eagle2", "t", "r1", kind, tokens * two, 10 * two, tv * two, calls * two, {n: 10 * two})


def test_speedup_and_tokens_per_forward_are_spec8_on_the_totals() -> None:
    r = _run("a", TV_LOSSLESS, 30, 0.0, calls=20).summary(COST)
    assert r["tokens_per_forward"] == 3.0
    assert r["speedup"] == pytest.approx(30 * 1.0 / (10 * 3.0 + 20 * 0.5))  # 0.75
    assert r["se_speedup"] == 0.0 and r["se_tokens_per_forward"] == 0.0
    ar = ar_run(3, 16).summary(COST)
    assert (ar["tokens_per_forward"], ar["speedup"], ar["tv_per_token"]) == (1.0, 1.0, 0.0)


def test_ratio_se_is_the_cluster_robust_formula() -> None:
    num, den = np.array([1.0, 2.0, 6.0]), np.array([1.0, 1.0, 2.0])
    r = 9 / 4
    want = np.sqrt(3 / 2 * np.sum((num - r * den) ** 2)) / 4
    assert ratio_se(num, den) == pytest.approx(want, rel=1e-15)
    assert np.isnan(ratio_se(num[:1], den[:1]))


def test_rank_filters_by_budget_and_kind_and_orders_exactly() -> None:
    runs = [ar_run(2, 10),
            _run("lossless", TV_LOSSLESS, 20, 0.0),           # 2 tokens/forward, speed-up 20/30
            _run("lossy ok", TV_EXACT, 40, 0.4),              # TV/token 0.01
            _run("lossy over", TV_EXACT, 50, 2.5),            # TV/token 0.05 > budget
            _run("vvs", TV_MEASURED, 45, 0.45, calls=0, n=1),  # no bound: ranked by its measured TV
            _run("unknown", TV_UNKNOWN, 60, np.nan)]         # TV not recorded: never ranked
    rows = {r["method"]: r for r in rank(runs, COST, 0.02)}
    assert [m for m, r in rows.items() if r["within"]] == ["AR", "lossless", "lossy ok", "vvs"]
    assert rows["lossy over"]["rank_tokens"] is None and rows["unknown"]["rank_speedup"] is None
    assert [rows[m]["rank_tokens"] for m in ("vvs", "lossy ok", "lossless", "AR")] == [1, 2, 3, 4]
    # speed-ups: vvs 45/10 = 4.5 (n = 1), lossy ok 40/30, AR 1, lossless 20/30
    assert [rows[m]["rank_speedup"] for m in ("vvs", "lossy ok", "AR", "lossless")] == [1, 2, 3, 4]
    b = bests(list(rows.values()), "speedup")
    assert b["lossless"]["method"] == "AR" and b["lossy"]["method"] == "vvs"
    b = bests(list(rows.values()), "tokens_per_forward")
    assert b["lossless"]["method"] == "lossless" and b["lossy"]["method"] == "vvs"
    # a budget of 0 keeps the lossless rows only
    assert {r["method"] for r in rank(runs, COST, 0.0) if r["within"]} == {"AR", "lossless"}
    with pytest.raises(ValueError, match="budget"):
        rank(runs, COST, -0.1)


def test_advise_costs_a_pac_run_by_its_verified_tree() -> None:
    from dataclasses import replace

    from relaxspec.simulate import simulate
    from relaxspec.simulate.worlds import PRESETS, LatentWorld
    from relaxspec.studies.frontier import Method

    m = Method("SJD-PAC", "pac", "pac:6,width=2,depth=2", "r2")
    world = LatentWorld(replace(PRESETS["confident"], vocab_size=64))
    res = simulate(world, m.tree, "r2", n_sequences=3, seq_len=32)
    run = from_result(m, res, TV_LOSSLESS)
    # a branched step verifies the column product: 2 + 4 candidates, then the spine's draft below each of
    # the 4 paths for the last 4 columns (a token accepted there on a sibling's path was verified there)
    assert max(res.tree_size) == 2 + 4 + 4 * 4 and max(run.sizes) == 22 + 1
    assert sum(c.sum() for c in run.sizes.values()) == res.n_steps  # one forward per step
    want = np.mean(res.tree_size + 1)
    assert run.summary(COST)["verified_per_forward"] == pytest.approx(want, rel=1e-12)


def test_pareto_front() -> None:
    rows = [{"tv_per_token": tv, "x": x} for tv, x in ((0, 1), (0, 2), (0.1, 1.5), (0.2, 3), (0.3, 2.5))]
    assert [(r["tv_per_token"], r["x"]) for r in pareto(rows, "x")] == [(0, 2), (0.2, 3)]


def test_every_method_extends_the_frontier_list() -> None:
    every, frontier = methods(every=True), methods()
    assert every[:len(frontier)] == frontier
    families = {m.family for m in every}
    assert {"ar", "eagle2", "lantern", "lantern++", "lantern++-r1", "ddd", "sequoia", "jacobi", "gsd",
            "cool-sd", "r4", "budget", "budget-r4", "scd", "pac", "vvs"} <= families
    assert len({m.label for m in every}) == len(every)


def test_runs_file_round_trips_and_drops_a_torn_last_line(tmp_path) -> None:
    r = _run("a", TV_UNKNOWN, 30, np.nan)
    path = tmp_path / "runs.jsonl"
    line = json.dumps(r.as_dict("k1"))
    path.write_text(line + "\n" + line[:20])
    with pytest.warns(UserWarning, match="torn"):
        back = read_runs(path)
    assert list(back) == ["k1"] and np.isnan(back["k1"].tv).all()
    assert back["k1"].summary(COST) == pytest.approx(r.summary(COST), nan_ok=True)
    path.write_text("nonsense\n" + line + "\n")
    with pytest.raises(ValueError, match="line 1"):
        read_runs(path)


@pytest.mark.parametrize("argv, message", [
    (["advise", "ambiguous", "--tv", "-1"], "--tv must be a number >= 0"),
    (["advise", "nowhere", "--tv", "0.1"], "unknown world preset 'nowhere'"),
    (["advise", "ambiguous", "--tv", "0.1", "--cost", "missing.csv"], "does not exist"),
    (["advise", "ambiguous", "--tv", "0.1", "--sequences", "1"], "--sequences must be >= 2"),
    (["advise", "ambiguous"], "the following arguments are required: --tv"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path) -> None:
    try:
        code = main([*argv, "--out", str(tmp_path / "o")])
    except SystemExit as exit_:  # argparse's own mistakes exit from the parser
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("relaxspec")


def test_cli_end_to_end_tiny_and_resumes(tmp_path, capsys) -> None:
    out = tmp_path / "adv"
    argv = ["advise", "ambiguous", "--tv", "0.05", "--quick", "--sequences", "2", "--seq-len", "8",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "Best by predicted speed-up" in capsys.readouterr().out
    for name in ("advice.md", "advice.csv", "pareto.pdf", "pareto.png", "runs.jsonl"):
        assert (out / name).stat().st_size > 0
    with open(out / "advice.csv") as f:
        rows = list(csv.DictReader(f))
    runs = (out / "runs.jsonl").read_text()
    every = [m for m in methods(every=True) if not m.shipped_only]
    text = (out / "advice.md").read_text()
    not_run = text.partition("Not run in this world:")[2].count("\n- ")
    assert len(rows) + not_run == len(every)  # each method a row, or a line saying why it did not run
    ranked = sorted((r for r in rows if r["within"] == "True"), key=lambda r: int(r["rank_speedup"]))
    speedups = [float(r["speedup"]) for r in ranked]
    assert speedups == sorted(speedups, reverse=True)
    assert all(float(r["tv_per_token"]) <= 0.05 + 1e-12 for r in ranked)
    assert {r["tv_kind"] for r in rows if r["family"] == "vvs"} == {TV_MEASURED}
    assert {r["tv_kind"] for r in rows if r["family"] == "vvs-bounded"} == {TV_BOUND}  # ours, 15.7
    assert all(r["within"] == "False" for r in rows if r["tv_kind"] == TV_UNKNOWN)
    assert next(r for r in rows if r["method"] == "AR")["speedup"] == "1.0"
    assert main(argv) == 0  # a rerun resumes: nothing simulated again
    assert (out / "runs.jsonl").read_text() == runs
