"""Sweep robustness (issue 12): torn CSV rows, bounded tree sizes, skipped combinations, config types,
the ``seconds`` column after warm-up."""

from __future__ import annotations

import csv
import io
import time

import pytest

import relaxspec.results as results_mod
import relaxspec.sweep as sweep
from relaxspec.core.trees.policies import (
    MAX_POOL_NODES,
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    Eagle2Tree,
    StaticTree,
)
from relaxspec.core.trees.spec import check_tree_spec
from relaxspec.results import COLUMNS, TEXT_COLUMNS, config_key, read_results
from relaxspec.sweep import SweepConfig, run_sweep

GRID = {
    "worlds": ["ambiguous"],
    "trees": ["chain:3", "eagle2:4,2,12"],
    "verifications": ["r1", "r1+lantern:k=50,delta=0.2"],
    "n_sequences": 2,
    "seq_len": 16,
    "seed": 1,
    "world_overrides": {"vocab_size": 300, "n_clusters": 20},
}


def _rows(path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _without_seconds(row: dict) -> dict:
    return {c: v for c, v in row.items() if c != "seconds"}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished small sweep: (config, CSV bytes, rows)."""
    cfg = SweepConfig.from_dict(GRID)
    out = tmp_path_factory.mktemp("sweep") / "results.csv"
    rows = run_sweep(cfg, out, progress=False)
    assert len(rows) == 4
    return cfg, out.read_bytes(), rows


# ------------------------------------------------------------------ item 6: torn rows
def test_resume_drops_a_torn_last_row_and_reruns_it_once(tmp_path, finished):
    cfg, data, rows = finished
    out = tmp_path / "results.csv"
    out.write_bytes(data[:-60])  # a crash in the middle of writing the last row
    with pytest.warns(UserWarning, match=r"results\.csv.*torn last line"):
        new = run_sweep(cfg, out, progress=False)
    assert len(new) == 1 and _without_seconds(new[0]) == _without_seconds(rows[-1])
    text = out.read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 60) + 1  # the whole rows before the torn one stay as they were
    assert text.endswith(b"\r\n") and text[:cut] == data[:cut]
    lines = _rows(out)
    assert lines[0] == COLUMNS and all(len(line) == len(COLUMNS) for line in lines)
    keys = [config_key(dict(zip(COLUMNS, line, strict=True))) for line in lines[1:]]
    assert len(keys) == len(set(keys)) == 4
    got = read_results(out)
    assert [_without_seconds(r) for r in got] == [_without_seconds(r) for r in read_results_of(rows)]
    assert run_sweep(cfg, out, progress=False) == []


def read_results_of(rows: list[dict]) -> list[dict]:
    """What read_results makes of rows as run_sweep returns them (numbers as float)."""
    return [{c: (r[c] if c in TEXT_COLUMNS else float(r[c])) for c in COLUMNS} for r in rows]


def test_resume_drops_a_glued_last_line(tmp_path, finished):
    """The old failure: a torn row with the next row glued onto it (wrong field count, newline at the end)."""
    cfg, data, rows = finished
    lines = data.splitlines(keepends=True)
    glued = lines[-2][:-30] + lines[-1]
    out = tmp_path / "results.csv"
    out.write_bytes(b"".join(lines[:-2]) + glued)
    with pytest.warns(UserWarning, match="torn last line"):
        new = run_sweep(cfg, out, progress=False)
    assert [_without_seconds(r) for r in new] == [_without_seconds(r) for r in rows[-2:]]
    assert all(len(line) == len(COLUMNS) for line in _rows(out))


def test_read_results_skips_a_torn_last_line(tmp_path, finished):
    _, data, rows = finished
    out = tmp_path / "results.csv"
    out.write_bytes(data[:-60])
    with pytest.warns(UserWarning, match="torn last line"):
        got = read_results(out)
    assert [_without_seconds(r) for r in got] == [_without_seconds(r) for r in read_results_of(rows[:-1])]
    assert out.read_bytes() == data[:-60]  # reading never changes the file


def test_a_torn_header_is_rewritten(tmp_path, finished):
    cfg, data, _ = finished
    out = tmp_path / "results.csv"
    out.write_bytes(data[:25])
    with pytest.warns(UserWarning, match="torn last line"):
        assert len(run_sweep(cfg, out, progress=False)) == 4
    assert _rows(out)[0] == COLUMNS and len(_rows(out)) == 5


def test_each_row_is_one_write(tmp_path, monkeypatch):
    """Rows go to the file in one os.write each (a crash leaves whole rows or one torn last line)."""
    writes: list[bytes] = []
    real = results_mod.os.write

    def spy(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real(fd, data)

    monkeypatch.setattr(results_mod.os, "write", spy)
    out = tmp_path / "results.csv"
    rows = run_sweep(SweepConfig.from_dict({**GRID, "trees": ["chain:3"]}), out, progress=False)
    assert len(writes) == 1 + len(rows) == 3  # header + rows
    assert b"".join(writes) == out.read_bytes()
    assert all(w.endswith(b"\r\n") and w.count(b"\n") == 1 for w in writes)


# ------------------------------------------------------------------ item 7: bounded sizes
@pytest.mark.parametrize("spec,match", [
    ("chain:100000", f"at most {MAX_TREE_NODES}"),
    ("chain:0", "chain length"),
    ("eagle2:10,4,100000", f"at most {MAX_TREE_NODES + 1}"),
    ("eagle2:1000,60,59", r"K \+ D K\^2 = 60001000 candidate nodes, at most 65536"),
    ("eagle2:10,100,59", f"depth D.*at most {MAX_TREE_DEPTH}"),
    ("eagle2:1000,4,59", f"at most {MAX_POOL_NODES}"),
    ("ddd:10,1000,5/7/9,-0.3,60", f"at most {MAX_TREE_DEPTH + 1}"),
    ("ddd:300,11,5/7/9,-0.3,60", f"at most {MAX_POOL_NODES}"),
    ("latent:10,4,59,1000000", f"POOL.*at most {MAX_TREE_NODES}"),
    ("latent-walk:10,4,100000", f"at most {MAX_TREE_NODES + 1}"),
    ("sequoia:100000,8", f"N.*at most {MAX_TREE_NODES}"),
    ("sequoia-walk:57,100000", f"DEPTH.*at most {MAX_TREE_DEPTH}"),
    ("costaware:100000,8", f"N.*at most {MAX_TREE_NODES}"),
    ("costaware:57,100000,walk", f"DEPTH.*at most {MAX_TREE_DEPTH}"),
])
def test_tree_sizes_are_bounded_before_anything_is_built(spec, match):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": [spec]})
    assert time.perf_counter() - t0 < 5.0


def test_sequoia_width_is_bounded():
    with pytest.raises(ValueError, match=f"sequoia.width.*at most {MAX_TREE_NODES}"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["sequoia:57,8"],
                               "sequoia": {"width": 10**6}})


def test_the_largest_chain_is_built_in_linear_time():
    t0 = time.perf_counter()
    tree = StaticTree.chain(MAX_TREE_NODES)
    assert time.perf_counter() - t0 < 2.0
    assert tree.n_nodes == MAX_TREE_NODES + 1 and tree.template.depth == MAX_TREE_NODES
    assert tree.parents.tolist() == list(range(-1, MAX_TREE_NODES))
    small = StaticTree.chain(4)
    assert small.choices == [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]] and str(small) == "chain:4"
    ref = StaticTree([[0] * i for i in range(1, 5)])
    assert small.parents.tolist() == ref.parents.tolist() and small.ranks.tolist() == ref.ranks.tolist()
    with pytest.raises(ValueError, match=f"at most {MAX_TREE_NODES}"):
        StaticTree([[i] for i in range(MAX_TREE_NODES + 1)])


# ------------------------------------------------------------------ item 8: skipped combinations
def test_r2_on_dynamic_trees_only_is_refused():
    with pytest.raises(ValueError, match=r"skipped r2 on eagle2:10,4,59: rule r2 verifies children drawn "
                                         r"from q.*use a static or Sequoia tree"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["eagle2:10,4,59"], "verifications": ["r2"]})


def test_an_empty_grid_is_refused():
    with pytest.raises(ValueError, match=r"r1/official on chain:2: identical to r1 \(the official"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:2"],
                               "verifications": ["r1/official"]})


def test_skipped_combinations_are_named(tmp_path):
    cfg = SweepConfig.from_dict({**GRID, "trees": ["chain:2", "eagle2:4,2,12"], "verifications": ["r1", "r2"],
                                 "seq_len": 4})
    assert any("r2" in s and "eagle2:4,2,12" in s for s in cfg.skipped())
    with pytest.warns(UserWarning, match=r"skipped.*r2.*eagle2:4,2,12"):
        rows = run_sweep(cfg, tmp_path / "r.csv", progress=False)
    assert len(rows) == 3
    assert SweepConfig.from_dict({**GRID, "trees": ["chain:2"]}).skipped() == []


# ------------------------------------------------------------------ item 9: messages and types
@pytest.mark.parametrize("spec,match", [
    ("eagle2:10,-1,59", r"depth D must be an integer in \[0, 64\], got -1"),
    ("latent:10,-1,59", r"depth D must be an integer in \[0, 64\], got -1"),
    ("ddd:10,0,5/7/9,-0.3,60", r"max_calls CALLS must be an integer in \[1, 65\], got 0"),
    ("eagle2:0,4,59", r"top_k K must be an integer in \[1, "),
    ("eagle2:10,4,1", r"total_tokens M must be an integer in \[2, "),
])
def test_dynamic_tree_errors_name_what_the_user_wrote(spec, match):
    with pytest.raises(ValueError, match=match):
        check_tree_spec(spec)


def test_eagle2_depth_error_from_the_api():
    with pytest.raises(ValueError, match="depth D must be an integer in"):
        Eagle2Tree(10, -1, 59)


@pytest.mark.parametrize("extra,match", [
    ({"world_overrides": {"beta": "x"}}, "world_overrides.beta must be a number"),
    ({"world_overrides": {"vocab_size": 2.5}}, "world_overrides.vocab_size must be an integer"),
    ({"world_overrides": {"vocab_size": True}}, "world_overrides.vocab_size must be an integer"),
    ({"world_overrides": {"codebook": 3}}, "world_overrides.codebook must be a string"),
    ({"world_overrides": {"vocab_size": 1}}, r"vocab_size must be an integer in \[2, 262144\]"),
    ({"world_overrides": {"rho": 2.0}}, "rho must be in"),
    ({"world_overrides": 3}, "world_overrides must be a table"),
    ({"sequoia": 3}, "sequoia must be a table"),
    ({"sequoia": {"width": "x"}}, "sequoia.width must be a positive integer"),
    ({"cost": {"table": 5}}, "cost.table must be a string"),
    ({"cost": []}, "cost must be a table"),
    ({"seed": -1}, r"seed must be an integer in \[0, "),
    ({"seed": "0"}, r"seed must be an integer in \[0, "),
    ({"threads": 10**6}, r"threads must be in \[1, "),
    ({"temperatures": ["hot"]}, "temperatures must be a non-empty list of numbers"),
    ({"verifications": "r1"}, "verifications must be a non-empty list of strings"),
    ({"verifications": ["r1", "pointmass"]}, "verifications lists r1 twice"),
    ({"verifications": ["r1+gsd:G=10"]}, r"verification 'r1\+gsd:G=10': .*r2 or r4"),
    ({"rules": ["r1"], "relaxations": ["none"]}, "rules, relaxations: a verification is one value now"),
])
def test_config_values_of_the_wrong_type_are_value_errors(extra, match):
    with pytest.raises(ValueError, match=match):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:2"], **extra})


# ------------------------------------------------------------------ item 9: seconds after warm-up
def test_seconds_exclude_the_first_calls_one_off_cost(tmp_path, monkeypatch):
    """The first call of the kernels compiles them (Numba): ``seconds`` is timed after a warm-up run."""
    real = sweep.run
    calls: list[int] = []

    def compiling_run(*args, **kw):
        if not calls:
            time.sleep(0.5)  # what a cold Numba cache costs the first call
        calls.append(kw["n_sequences"])
        return real(*args, **kw)

    monkeypatch.setattr(sweep, "run", compiling_run)
    cfg = SweepConfig.from_dict({**GRID, "trees": ["chain:3"]})
    rows = run_sweep(cfg, tmp_path / "r.csv", progress=False)
    assert float(rows[0]["seconds"]) < 0.5


# ------------------------------------------------------------------ issue 26, item 3: canonical tree specs
def test_tree_specs_are_stored_canonical_and_resume_by_it(tmp_path, finished):
    """A spec written with spaces or leading zeros names the row it already has: resuming runs nothing."""
    cfg, data, _ = finished
    again = SweepConfig.from_dict({**GRID, "trees": [" chain:03", "eagle2:04, 2, 12"]})
    assert again.trees == cfg.trees == ["chain:3", "eagle2:4,2,12"]
    out = tmp_path / "results.csv"
    out.write_bytes(data)
    assert run_sweep(again, out, progress=False) == []
    assert out.read_bytes() == data


@pytest.mark.parametrize("trees, match", [
    (["chain:3", "chain:03"], r"trees lists chain:3 twice \('chain:3', 'chain:03'\)"),
    (["eagle2:+4,2,12"], "ASCII digits"), (["chain:\u0663"], "ASCII digits"),
])
def test_tree_specs_that_repeat_or_are_not_ascii_are_refused(trees, match):
    with pytest.raises(ValueError, match=match):
        SweepConfig.from_dict({**GRID, "trees": trees})


# ------------------------------------------------------------------ issue 26, item 14: one skip policy
def test_a_jacobi_window_with_a_rule_it_cannot_take_is_skipped_before_anything_runs():
    """Jacobi windows verify unrelaxed sampled drafts (rule r2 or r4): other rules and LANTERN relaxations
    are skipped with the grid's other impossible pairs, named in one warning, instead of failing mid-sweep."""
    from relaxspec.core.trees.jacobi import JacobiWindow
    from relaxspec.simulate.jacobi import check_jacobi_run
    from relaxspec.simulate.worlds import LatentWorld

    cfg = SweepConfig.from_dict({**GRID, "trees": ["chain:2", "jacobi:15"],
                                 "verifications": ["r1", "r2", "r3", "r2+lantern:k=50,delta=0.2"]})
    skipped = [s for s in cfg.skipped() if "jacobi:15" in s]
    assert [s.partition(" on ")[0] for s in skipped] == ["skipped r1", "skipped r3",
                                                         "skipped r2+lantern:k=50,delta=0.2"]
    assert "got rule 'r1'" in skipped[0] and "no LANTERN relaxation" in skipped[2]
    world = LatentWorld.preset("ambiguous", **GRID["world_overrides"])
    window_jobs = [j for j in sweep.jobs(cfg) if j.tree == "jacobi:15"]
    assert [str(j.verification) for j in window_jobs] == ["r2"]
    for j in window_jobs:  # what simulate.run checks before it decodes
        check_jacobi_run(world, JacobiWindow(15), j.verification)
    with pytest.raises(ValueError, match=r"no configuration to run.*skipped r1 on jacobi:15.*rule r2 or r4"):
        SweepConfig.from_dict({**GRID, "trees": ["jacobi:15"], "verifications": ["r1"]})


# ------------------------------------------------------------------ issue 26, item 4: a bad middle row
def _damaged(data: bytes, damage: str) -> bytes:
    """The results ``data`` with its line 3 (the second row) damaged."""
    lines = data.splitlines(keepends=True)
    fields = next(csv.reader([lines[2].decode()]))
    if damage == "fields":
        fields = fields[:-1]
    elif damage == "number":
        fields[COLUMNS.index("mean_tokens_per_step")] = "abc"
    elif damage == "integer":
        fields[COLUMNS.index("seed")] = "1.5"
    else:  # bytes that are not UTF-8 text
        return b"".join(lines[:2]) + b"\x9e\xff" + lines[2] + b"".join(lines[3:])
    buf = io.StringIO()
    csv.writer(buf).writerow(fields)
    lines[2] = buf.getvalue().encode()
    return b"".join(lines)


@pytest.mark.parametrize("damage, why", [("fields", "wrong number of fields"), ("number", "abc"),
                                         ("integer", "seed"), ("bytes", "not UTF-8 text")])
def test_resume_reports_a_bad_middle_row_as_load_does(tmp_path, finished, damage, why):
    cfg, data, _ = finished
    out = tmp_path / "results.csv"
    out.write_bytes(_damaged(data, damage))
    with pytest.raises(ValueError, match=rf"{out}, line 3: not a results row \(.*{why}") as resumed:
        run_sweep(cfg, out, progress=False)
    with pytest.raises(ValueError) as loaded:
        results_mod.load(out)
    assert str(loaded.value) == str(resumed.value)
    assert out.read_bytes() == _damaged(data, damage)


# ------------------------------------------------------------------ issue 26, item 2: one writer
def test_a_new_results_file_is_not_left_empty_by_a_failed_start(tmp_path, monkeypatch):
    """The lock creates a new file; a sweep that fails before its header is written removes it again."""
    def refused(*args, **kwargs):
        raise ValueError("no scheduler")

    monkeypatch.setattr("relaxspec.core.execution.Executor", refused)
    out = tmp_path / "new.csv"
    with pytest.raises(ValueError, match="no scheduler"):
        run_sweep(SweepConfig.from_dict({**GRID, "trees": ["chain:3"]}), out, progress=False)
    assert not out.exists()


@pytest.mark.parametrize("cost, match", [({"model": "GPT-XXL"}, "GPT-XXL"),
                                         ({"table": "/nonexistent/cost.csv"}, "/nonexistent/cost.csv")])
def test_a_bad_cost_table_is_refused_before_anything_runs(cost, match):
    """The cost table of costaware trees is read when the config is checked, not by the first costaware
    row after other rows ran."""
    with pytest.raises(ValueError, match=rf"cost.*{match}"):
        SweepConfig.from_dict({**GRID, "trees": ["chain:2", "costaware:12,4"], "cost": cost})
    SweepConfig.from_dict({**GRID, "trees": ["chain:2"], "cost": cost})  # no costaware tree: not read
