"""Results as data (issue 16): ``relaxspec.results.load`` -> a typed pandas DataFrame, from a sweep's CSV or
a Parquet copy written with pyarrow; ``relaxspec plot`` reads both."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from relaxspec.cli import main
from relaxspec.results import (
    COLUMNS,
    INTEGER_COLUMNS,
    TEXT_COLUMNS,
    VIEW_COLUMNS,
    column_types,
    load,
    read_results,
    save,
)
from relaxspec.sweep import SweepConfig, run_sweep

GRID = {
    "worlds": ["ambiguous"],
    "trees": ["chain:3", "eagle2:4,2,12"],
    "verifications": [f"{rule}{method}" for rule in ("r1", "r3")
                      for method in ("", "+lantern:k=50,delta=0.2", "+lantern++:k=50,lam=2")],
    "n_sequences": 2,
    "seq_len": 16,
    "seed": 1,
    "world_overrides": {"vocab_size": 300, "n_clusters": 20},
}


@pytest.fixture(scope="module")
def csv_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("frame") / "results.csv"
    rows = run_sweep(SweepConfig.from_dict(GRID), out, progress=False)
    assert len(rows) == 12
    return out


def test_a_results_csv_loads_with_typed_columns(csv_path) -> None:
    frame = load(csv_path)
    assert list(frame.columns) == COLUMNS + list(VIEW_COLUMNS) and len(frame) == 12
    assert {c: str(t) for c, t in frame.dtypes.items()} == {**column_types(), **VIEW_COLUMNS}
    assert all(isinstance(frame.dtypes[c], pd.StringDtype) for c in TEXT_COLUMNS)
    assert all(frame.dtypes[c] == np.int64 for c in INTEGER_COLUMNS)
    # the same values read_results gives, row for row (NaN where the simulator bounds no TV: rule r3)
    rows = read_results(csv_path)
    for got, want in zip(frame.to_dict("records"), rows, strict=True):
        for c in COLUMNS:
            if c in TEXT_COLUMNS:
                assert got[c] == want[c]
            else:
                assert got[c] == want[c] or (np.isnan(got[c]) and np.isnan(want[c])), c
    assert set(frame["k"]) == {0, 50} and frame.loc[frame["relax"] == "none", "k"].eq(0).all()
    assert frame.groupby("relax")["mean_tokens_per_step"].mean().loc["none"] >= 1.0


def test_parquet_round_trip_keeps_values_and_types(csv_path, tmp_path) -> None:
    frame = load(csv_path)
    path = save(frame, tmp_path / "sub" / "results.parquet")
    back = load(path)
    pd.testing.assert_frame_equal(back, frame)
    assert not list(tmp_path.glob("sub/.*tmp"))  # the temporary file was renamed away
    # a frame with extra columns or another column order is saved as COLUMNS
    shuffled = frame[COLUMNS[::-1]].assign(note="x")
    pd.testing.assert_frame_equal(load(save(shuffled, tmp_path / "b.pq")), frame)


def test_bad_files_and_frames_are_value_errors_naming_them(csv_path, tmp_path) -> None:
    with pytest.raises(ValueError, match="missing.parquet does not exist"):
        load(tmp_path / "missing.parquet")
    with pytest.raises(ValueError, match="missing.csv does not exist"):
        load(tmp_path / "missing.csv")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="junk.parquet is not a Parquet file"):
        load(tmp_path / "junk.parquet")
    frame = load(csv_path)
    frame.drop(columns=["seed"]).to_parquet(tmp_path / "short.parquet")
    with pytest.raises(ValueError, match=r"short.parquet is not a results table: it lacks .*'seed'"):
        load(tmp_path / "short.parquet")
    bad = frame.astype({"seed": "float64"})
    bad.loc[0, "seed"] = 2.5
    with pytest.raises(ValueError, match="column seed holds a value that is not an integer"):
        save(bad, tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="must end in .parquet or .pq"):
        save(frame, tmp_path / "results.csv")
    with pytest.raises(ValueError, match=r"without the columns \['world'\]"):
        save(frame.drop(columns=["world"]), tmp_path / "x.parquet")


def test_a_torn_last_row_is_skipped_with_a_warning(csv_path, tmp_path) -> None:
    torn = tmp_path / "torn.csv"
    torn.write_bytes(csv_path.read_bytes()[:-40])
    with pytest.warns(UserWarning, match="torn last line"):
        frame = load(torn)
    assert len(frame) == 11 and frame.dtypes.equals(load(csv_path).dtypes)


def test_plot_reads_a_parquet_copy(csv_path, tmp_path, capsys) -> None:
    parquet = save(load(csv_path), tmp_path / "results.parquet")
    assert main(["plot", str(parquet), "--out", str(tmp_path / "figs")]) == 0
    assert {p.name for p in (tmp_path / "figs").glob("*.pdf")} == {"tokens_vs_relaxation.pdf", "depth.pdf",
                                                                    "tradeoff.pdf"}


def test_duplicate_configurations_are_reported(csv_path, tmp_path) -> None:
    """Issue 26, item 2: two sweeps that wrote one file at once leave every configuration twice; load
    names the file and the repeated rows instead of returning them."""
    data = csv_path.read_bytes()
    dup = tmp_path / "dup.csv"
    dup.write_bytes(data + data.splitlines(keepends=True)[3])
    repeated = r": 1 row\(s\) repeat a configuration \("
    with pytest.raises(ValueError, match=rf"{dup}{repeated}line 14 repeats line 4: world="):
        load(dup)
    frame = load(csv_path)
    pd.concat([frame, frame.iloc[[2]]]).to_parquet(tmp_path / "dup.parquet")
    with pytest.raises(ValueError, match=rf"dup.parquet{repeated}row 12 repeats row 2: world="):
        load(tmp_path / "dup.parquet")
