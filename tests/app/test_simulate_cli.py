"""relaxspec simulate / plot / world-stats: config errors, resumable CSV, figures."""

from __future__ import annotations

import csv

import pytest

from relaxspec.cli import main
from relaxspec.core.trees.spec import parse_tree
from relaxspec.results import COLUMNS
from relaxspec.sweep import SweepConfig

# these tests read a simulate command's stderr line by line: no cold-cache compile notice
pytestmark = pytest.mark.usefixtures("simulator_kernels")

CONFIG = """
worlds = ["ambiguous"]
trees = ["chain:3", "eagle2:4,2,12", "sequoia:6,3"]
verifications = ["r1", "r1+lantern:k=50,delta=0.2", "r2", "r2+lantern:k=50,delta=0.2"]
n_sequences = 2
seq_len = 16
seed = 1
[world_overrides]
vocab_size = 300
n_clusters = 20
[sequoia]
width = 4
n_sequences = 2
seq_len = 8
"""


@pytest.mark.filterwarnings("ignore:sweep. skipped r2")
def test_sweep_resumes_and_plots(tmp_path, capsys):
    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "results.csv"
    with pytest.warns(UserWarning,
                      match="skipped r2 on eagle2:4,2,12: rule r2 verifies children drawn from q"):
        assert main(["simulate", str(cfg), "--results", str(out), "--no-progress"]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS
    # r2 runs on static trees only: (chain + sequoia) x 2 rules + eagle2 x r1, times 2 relaxations
    assert len(rows) == (2 * 2 + 1) * 2
    assert main(["simulate", str(cfg), "--results", str(out), "--no-progress"]) == 0
    assert "0 new rows" in capsys.readouterr().out
    # an interrupted sweep: drop the last two rows and resume
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-2]))
    assert main(["simulate", str(cfg), "--results", str(out), "--no-progress"]) == 0
    assert "2 new rows" in capsys.readouterr().out
    # a crash while the last row was written (issue 12): the torn line is dropped and its row rerun once
    out.write_bytes(out.read_bytes()[:-60])
    with pytest.warns(UserWarning, match="torn last line"):
        assert main(["simulate", str(cfg), "--results", str(out), "--no-progress"]) == 0
    assert "1 new rows" in capsys.readouterr().out
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert len(rows) == 1 + 10 and all(len(r) == len(COLUMNS) for r in rows)
    figs = tmp_path / "figs"
    assert main(["plot", str(out), "--out", str(figs)]) == 0
    for name in ("tokens_vs_relaxation", "depth", "tradeoff"):
        assert (figs / f"{name}.pdf").stat().st_size > 0 and (figs / f"{name}.png").stat().st_size > 0


@pytest.mark.parametrize("text,match", [
    ('worlds = ["ambiguous"]\ntrees = ["chain:2"]\nbogus = 1', "unknown keys"),
    ('trees = ["chain:2"]', "missing required key 'worlds'"),
    ('worlds = ["foggy"]\ntrees = ["chain:2"]', "unknown world"),
    ('worlds = ["ambiguous"]\ntrees = ["oak:2"]', "unknown tree kind"),
    ('worlds = ["ambiguous"]\ntrees = ["eagle2:1,2"]', "needs 3"),
    ('worlds = ["ambiguous"]\ntrees = ["chain:2"]\nverifications = ["lantern:k=5"]', "needs delta"),
    ('worlds = ["ambiguous"]\ntrees = ["chain:2"]\nn_sequences = 0', "positive integer"),
    ('worlds = ["ambiguous"]\ntrees = ["chain:2"]\nverifications = ["r7"]', "unknown rule or method 'r7'"),
    ('worlds = ["ambiguous"]\ntrees = ["chain:2"]\nrules = ["r1"]', "rules: a verification is one value now"),
    ('worlds = ["ambiguous"\n', "not valid TOML"),
    ('worlds = ["ambiguous"]\ntrees = ["eagle2:10,4,59"]\nverifications = ["r2"]',
     "use a static or Sequoia tree"),
    ('worlds = ["ambiguous"]\ntrees = ["chain:100000"]', "at most 2048"),
    ('worlds = ["ambiguous"]\ntrees = ["eagle2:10,-1,59"]', r"depth D must be an integer in \[0, 64\]"),
    ('worlds = ["ambiguous"]\ntrees = ["chain:2"]\n[world_overrides]\nbeta = "x"',
     "world_overrides.beta must be a number"),
])
def test_config_errors(tmp_path, text, match, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ValueError, match=match):
        SweepConfig.load(cfg)
    assert main(["simulate", str(cfg), "--results", str(tmp_path / "r.csv")]) == 2
    assert "error" in capsys.readouterr().err


def test_parse_tree_and_world_stats(capsys):
    assert str(parse_tree("static:mc_sim_7b_63")) == "static:mc_sim_7b_63"
    assert parse_tree("ddd:10,11,5/7/9,-0.3,60").max_calls == 11
    with pytest.raises(ValueError, match="acceptance"):
        parse_tree("sequoia:10,4")
    assert main(["world-stats", "confident", "--sequences", "1", "--seq-len", "4"]) == 0
    out = capsys.readouterr().out
    assert "mean top-1 probability" in out and "1 - TV(p, q)" in out
    assert main(["world-stats", "foggy"]) == 2
