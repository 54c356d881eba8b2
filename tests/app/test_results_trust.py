"""Results you can trust (issue 27 item 4): a row's key and its ``settings`` column cover every setting that
changes it, so a rerun with a changed setting writes new rows; measures keep full float64 precision;
files with an older header are not results files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest

import relaxspec.results as results_mod
import relaxspec.results_lock as results_lock
from relaxspec.core.trees.spec import parse_tree
from relaxspec.results import COLUMNS, config_key, load, read_results, result_row, save, settings_text
from relaxspec.simulate.engine import run
from relaxspec.simulate.worlds import PRESETS, LatentWorld
from relaxspec.sweep import SweepConfig, jobs, run_sweep

GRID = {
    "worlds": ["ambiguous"],
    "trees": ["chain:3"],
    "verifications": ["r1", "r1+lantern:k=50,delta=0.2"],
    "n_sequences": 2,
    "seq_len": 16,
    "seed": 1,
    "world_overrides": {"vocab_size": 300, "n_clusters": 20},
}


def _keys(cfg: SweepConfig) -> dict[str, str]:
    """Each job's key by its tree."""
    return {j.tree: config_key(j.row_config(cfg)) for j in jobs(cfg)}


def test_a_changed_world_override_writes_new_rows_into_the_same_csv(tmp_path):
    out = tmp_path / "results.csv"
    first = run_sweep(SweepConfig.from_dict(GRID), out, progress=False)
    assert len(first) == 2 and run_sweep(SweepConfig.from_dict(GRID), out, progress=False) == []
    bigger = {**GRID, "world_overrides": {"vocab_size": 400, "n_clusters": 20}}
    second = run_sweep(SweepConfig.from_dict(bigger), out, progress=False)
    assert len(second) == 2
    rows = read_results(out)
    assert len(rows) == 4
    # the row records what ran: the overrides, canonical (sorted keys, no spaces)
    assert [r["settings"] for r in rows] == (['{"world_overrides":{"n_clusters":20,"vocab_size":300}}'] * 2
                                             + ['{"world_overrides":{"n_clusters":20,"vocab_size":400}}'] * 2)
    assert json.loads(rows[2]["settings"])["world_overrides"]["vocab_size"] == 400
    assert run_sweep(SweepConfig.from_dict(bigger), out, progress=False) == []  # resuming still resumes


def test_an_override_that_equals_the_preset_keys_as_no_override():
    plain = SweepConfig.from_dict({**GRID, "world_overrides": {}})
    same = SweepConfig.from_dict({**GRID, "world_overrides": {"vocab_size": PRESETS["ambiguous"].vocab_size}})
    assert _keys(plain) == _keys(same)
    assert {j.row_config(plain)["settings"] for j in jobs(plain)} == {"{}"}
    # a float field written as a TOML integer is the same setting as the float
    a = SweepConfig.from_dict({**GRID, "world_overrides": {"cluster_spread": 1}})
    b = SweepConfig.from_dict({**GRID, "world_overrides": {"cluster_spread": 1.0}})
    assert _keys(a) == _keys(b) != _keys(plain)


def test_sequoia_and_cost_settings_key_the_rows_they_change():
    trees = ["chain:3", "sequoia:8,3", "costaware:8,3"]
    base = SweepConfig.from_dict({**GRID, "trees": trees})
    wider = SweepConfig.from_dict({**GRID, "trees": trees, "sequoia": {"width": 8}})
    other_model = SweepConfig.from_dict({**GRID, "trees": trees, "cost": {"model": "GPT-S"}})
    k0, k1, k2 = _keys(base), _keys(wider), _keys(other_model)
    assert k1["chain:3"] == k0["chain:3"] and k2["chain:3"] == k0["chain:3"]  # no Sequoia vector, no cost
    assert k1["sequoia:8,3"] != k0["sequoia:8,3"] and k1["costaware:8,3"] != k0["costaware:8,3"]
    assert k2["sequoia:8,3"] == k0["sequoia:8,3"] and k2["costaware:8,3"] != k0["costaware:8,3"]
    row = next(j.row_config(other_model) for j in jobs(other_model) if j.tree == "costaware:8,3")
    assert json.loads(row["settings"])["cost"] == {"model": "GPT-S"}
    # the default sequoia settings written out are the defaults: the same key
    same = SweepConfig.from_dict({**GRID, "trees": trees, "sequoia": dict(base.sequoia)})
    assert _keys(same) == k0


def test_every_configuration_column_changes_the_key():
    row = next(j.row_config(SweepConfig.from_dict(GRID)) for j in jobs(SweepConfig.from_dict(GRID)))
    changed = {"world": "confident", "tree": "chain:4", "verification": "r1+lantern:k=50,delta=0.2/official",
               "temperature": 0.5, "n_sequences": 3, "seq_len": 17, "seed": 2,
               "settings": settings_text({"sequoia": {"width": 4}})}
    assert set(changed) == set(results_mod.CONFIG_COLUMNS)
    for column, value in changed.items():
        assert config_key({**row, column: value}) != config_key(row), column


def test_measures_keep_full_float64_precision(tmp_path):
    world = LatentWorld.preset("ambiguous", vocab_size=300, n_clusters=20)
    res = run(world, parse_tree("chain:3"), "r1", n_sequences=3, seq_len=16, seed=1)
    summary = res.summary()
    # the test means something: a measure that 6 significant digits would round
    assert any(float(f"{v:.6g}") != v for v in summary.values() if np.isfinite(v))
    out = tmp_path / "results.csv"
    results_lock.append_line(out, results_mod.csv_line(None) + results_mod.csv_line(
        result_row(res, "ambiguous", "chain:3", settings_text({}))))
    frame = load(out)
    for name, value in summary.items():
        got = frame[name].iloc[0]
        assert got == value or (np.isnan(got) and np.isnan(value)), name
        assert read_results(out)[0][name] == value or np.isnan(value), name
    back = load(save(frame, tmp_path / "results.parquet"))
    pd.testing.assert_frame_equal(back, frame, check_exact=True)
    assert back["mean_tokens_per_step"].iloc[0] == summary["mean_tokens_per_step"]


OLD_COLUMNS = ["world", "tree", "rule", "variant", "relax", "k", "delta", "lam", "boost", "temperature",
               "n_sequences", "seq_len", "seed", "settings", *COLUMNS[COLUMNS.index("settings") + 1:]]
"""The layout of the 0.1 releases before issue 27: the verification in seven columns."""


@pytest.mark.parametrize("header, match", [
    ([c for c in COLUMNS if c != "settings"], r"is not a results CSV \(its first line is not"),
    ([c for c in OLD_COLUMNS if c not in ("boost", "settings")], "was written by an older relaxspec"),
    (OLD_COLUMNS, "was written by an older relaxspec"),
])
def test_a_file_with_an_older_header_is_refused_and_left_as_it_is(tmp_path, header, match):
    path = tmp_path / "old.csv"
    row = {c: "1" for c in header}
    row.update(world="ambiguous", tree="chain:3")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerow(row)
    data = path.read_bytes()
    for call in (read_results, load, results_mod.drop_torn_tail,
                 lambda p: run_sweep(SweepConfig.from_dict(GRID), p, progress=False)):
        with pytest.raises(ValueError, match=rf"^{path} {match}") as err:
            call(path)
        assert "\n" not in str(err.value)
        assert path.read_bytes() == data
    frame = pd.DataFrame([{c: 1.0 for c in OLD_COLUMNS}]).astype({"rule": str})
    frame.to_parquet(tmp_path / "old.parquet")
    with pytest.raises(ValueError, match="old.parquet was written by an older relaxspec"):
        load(tmp_path / "old.parquet")
    assert not hasattr(results_mod, "LEGACY_COLUMNS") and not hasattr(results_mod, "add_boost_column")
    assert not hasattr(results_lock.ResultsLock, "replace")


def test_a_bad_settings_value_is_named_in_a_csv_and_in_parquet(tmp_path):
    out = tmp_path / "results.csv"
    run_sweep(SweepConfig.from_dict({**GRID, "verifications": ["r1"]}), out, progress=False)
    good = load(out)
    spaced = '{"world_overrides": {"n_clusters": 20, "vocab_size": 300}}'  # not canonical: keys would differ
    out.write_text(out.read_text().replace('{""world_overrides"":{""n_clusters"":20,""vocab_size"":300}}',
                                           spaced.replace('"', '""')))
    with pytest.raises(ValueError, match=rf"{out}, line 2: not a results row \(column settings holds"):
        load(out)
    save(good, tmp_path / "good.parquet")
    good.assign(settings="oops").to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet, row 0: column settings holds 'oops'"):
        load(tmp_path / "bad.parquet")


def test_the_verification_column_is_one_canonical_spec_with_typed_views(tmp_path):
    """Issue 27: one ``verification`` column (``str(v)``), checked canonical as it is read (one verification,
    one resume key); ``load`` derives typed views of it that ``save`` does not store."""
    out = tmp_path / "results.csv"
    run_sweep(SweepConfig.from_dict({**GRID, "verifications": ["lantern:k=50,delta=0.2", "pointmass"]}), out,
              progress=False)
    frame = load(out)
    assert list(frame["verification"]) == ["r1+lantern:k=50,delta=0.2", "r1"]
    assert list(frame.columns) == COLUMNS + list(results_mod.VIEW_COLUMNS)
    assert frame[["rule", "relax", "k", "delta", "lam", "boost"]].to_dict("records") == [
        {"rule": "r1", "relax": "additive", "k": 50, "delta": 0.2, "lam": 1.0, "boost": "none"},
        {"rule": "r1", "relax": "none", "k": 0, "delta": 0.0, "lam": 1.0, "boost": "none"}]
    assert frame["k"].dtype == "int64" and frame["rule"].dtype == "string"
    assert list(pd.read_parquet(save(frame, tmp_path / "r.parquet")).columns) == COLUMNS
    text = out.read_text()
    canonical = "column verification holds 'lantern:k=50,delta=0.2', not its canonical form 'r1\\+lantern"
    for bad, match in (("lantern:k=50,delta=0.2", canonical),
                       ("r1+gsd:G=10", "column verification holds 'r1\\+gsd:G=10': verification")):
        out.write_text(text.replace("r1+lantern:k=50,delta=0.2", bad))
        with pytest.raises(ValueError, match=rf"{out}, line 2: not a results row \({match}"):
            load(out)
