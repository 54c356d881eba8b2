"""The relaxation-aware-trees study's pieces (relaxspec.studies.relaxation_trees): the goal comparison,
the table, the figure, and the shipped-model rows (two images per policy), so the issue-7 measurement
cannot rot between its (long) runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from relaxspec.studies import relaxation_trees


@pytest.fixture(scope="module")
def bench():
    return relaxation_trees


def _rows(bench) -> list[dict]:
    rows = []
    for w in bench.WORLDS:
        for i, tree in enumerate(bench.LABELS):
            for text in bench.RELAXATIONS:
                r = bench.Relax.parse(text)
                rows.append({"world": w, "tree": tree, "verification": str(bench.Verification("r1", r)),
                             "rule": "r1", "relax": r.kind, "k": r.k,
                             "delta": r.delta if r.kind == "additive" else 0.0,
                             "lam": r.lam if r.kind == "multiplicative" else 1.0,
                             "mean_tokens_per_step": 2.0 + 0.01 * i, "se_tokens_per_step": 0.01,
                             "mean_accepted_depth": 1.0, "mean_tree_depth": 4.0, "mean_tree_size": 57.0,
                             "draft_calls_per_step": 4.0, "tv_bound_per_sequence": 0.5 * i,
                             "tv_bound_per_token": 0.01 * i})
    return rows


def test_world_table_compares_best_new_with_best_existing(bench, tmp_path):
    rows = _rows(bench)
    cost = bench.CostModel.from_table(bench.DEFAULT_TABLE, "GPT-B")
    lines, verdicts = bench.world_table(rows, cost)
    assert len(lines) == 2 + len(rows)
    assert len(verdicts) == len(bench.WORLDS) * len(bench.RELAXATIONS)
    order = list(bench.LABELS)
    old = max((t for t in bench.EXISTING), key=order.index)
    new = max((t for t in bench.NEW if not t.startswith("costaware")), key=order.index)
    for v in verdicts:
        assert v["best_existing"].startswith(bench.LABELS[old]) and v["best_new"] == bench.LABELS[new]
        want = (2.0 + 0.01 * order.index(new)) / (2.0 + 0.01 * order.index(old)) - 1.0
        assert v["gain"] == pytest.approx(want)
    paths = bench.figure(rows, tmp_path)
    assert sorted(p.name for p in paths) == ["tradeoff.pdf", "tradeoff.png"]


def test_shipped_table_reads_each_rows_verification(bench):
    """The shipped rows hold one ``verification`` column (no rule or relax columns): the table's rule, its
    relaxation and the NaN TV of relaxed R2 all come from it."""
    def row(tree: str, verification: str, tokens: float) -> dict:
        return {"world": "shipped", "tree": tree, "verification": verification, "tokens_per_step": tokens,
                "mean_accepted_depth": tokens - 1.0, "mean_tree_depth": 3.0,
                "target_forwards_per_image": 50.0, "tv_bound_per_sequence": 0.25, "fd": 1.0,
                "class_accuracy": 0.9}

    rows = [row("ar", "r1", 1.0), row("eagle2:10,4,58", "r1", 2.0),
            row("eagle2:10,4,58", "r1+lantern:k=50,delta=0.2", 2.5),
            row("static:naive_extend_57", "r2+lantern:k=50,delta=0.2", 3.0),
            row("latent-walk:10,4,58", "r1+lantern:k=50,delta=0.2", 2.75)]
    lines, verdicts = bench.shipped_table(rows)
    assert [line.split(" | ")[2] for line in lines[2:]] == ["R1", "R1", "R1", "R2", "R1"]
    assert lines[5].split(" | ")[7] == "n/a (R2)" and lines[4].split(" | ")[7] == "0.250"
    eagle, walk = bench.LABELS["eagle2:10,4,58"], bench.LABELS["latent-walk:10,4,58"]
    assert [(v["relax"], v["best_existing"], v["best_new"]) for v in verdicts] == [
        ("additive:k=50,delta=0.2", f"{eagle} R1", walk)]


def test_shipped_rows_decode_every_policy(bench, tmp_path, monkeypatch):
    trees = {"eagle2:10,4,58", "latent-walk:10,4,58", "costaware:57,8,walk"}
    monkeypatch.setattr(bench, "SHIPPED_TREES", trees)
    cost = bench.CostModel.from_table(bench.DEFAULT_TABLE, "GPT-S")
    rows = bench.shipped_rows(tmp_path, n_images=2, n_trace=1, cost=cost)
    trees = [(r["tree"], r["verification"]) for r in rows]
    assert trees[0] == ("ar", "r1") and ("eagle2:10,4,58", "r1") in trees
    assert ("latent-walk:10,4,58", "r1+lantern++:k=50,lam=5") in trees
    assert ("costaware:57,8,walk", "r1+lantern:k=50,delta=0.2") in trees
    assert len(rows) == 1 + 1 + 2 * 3
    assert all(r["n_images"] == 2 and np.isfinite(r["fd"]) for r in rows)
    lines, verdicts = bench.shipped_table(rows)
    assert len(lines) == 2 + len(rows) and len(verdicts) == 2


def test_the_studies_share_one_command_line(tmp_path, monkeypatch):
    """`--quick` shrinks the world and the study's own options; the output folder is named after the study."""
    from relaxspec.studies.study_options import QUICK_WORLD, study_parser, study_setup

    ap = study_parser("demo_study", None, quick_images=3)
    ap.add_argument("--shipped-images", type=int, default=100)
    args = ap.parse_args(["--quick", "--out", str(tmp_path / "q")])
    overrides, out = study_setup(args, "demo_study", shipped_images=3)
    assert overrides == QUICK_WORLD and out == tmp_path / "q" and out.is_dir()
    assert (args.sequences, args.seq_len, args.shipped_images) == (4, 64, 3)
    monkeypatch.chdir(tmp_path)
    args = ap.parse_args([])
    overrides, out = study_setup(args, "demo_study", shipped_images=3)
    assert overrides == {} and out == Path("results/demo_study") and (tmp_path / out).is_dir()
    assert (args.sequences, args.seq_len, args.shipped_images) == (32, 256, 100)
