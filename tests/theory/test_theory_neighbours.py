"""Neighbour tables: exact (distance, id) order, shapes, dtypes and validation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxspec.theory.neighbours import (
    load_neighbours,
    neighbour_dtype,
    neighbour_table,
    save_neighbours,
    validate_neighbour_rows,
    validate_neighbours,
)


def brute_force_table(E: np.ndarray, K: int) -> np.ndarray:
    """Sort every other token by (squared distance summed coordinate by coordinate, id)."""
    V, d = E.shape
    rows = []
    for x in range(V):
        keyed = []
        for y in range(V):
            if y == x:
                continue
            s = 0.0
            for j in range(d):
                diff = float(E[x, j]) - float(E[y, j])
                s += diff * diff
            keyed.append((s, y))
        keyed.sort()
        rows.append([y for _, y in keyed[:K]])
    return np.array(rows, dtype=np.int64)


@st.composite
def codebooks(draw, max_v: int = 40):
    V = draw(st.integers(2, max_v))
    d = draw(st.integers(1, 4))
    if draw(st.booleans()):  # integer grid: many exact distance ties
        vals = draw(st.lists(st.integers(-2, 2), min_size=V * d, max_size=V * d))
        E = np.array(vals, dtype=np.float64).reshape(V, d)
    else:
        seed = draw(st.integers(0, 2**32 - 1))
        E = np.random.default_rng(seed).standard_normal((V, d))
    return E


@settings(max_examples=60, deadline=None)
@given(E=codebooks(), k_frac=st.floats(0.0, 1.0))
def test_theory_neighbour_table_matches_brute_force(E, k_frac):
    V = E.shape[0]
    K = max(1, int(round(k_frac * (V - 1))))
    table = neighbour_table(E, K)
    assert table.shape == (V, K)
    assert table.dtype == np.uint16
    np.testing.assert_array_equal(table.astype(np.int64), brute_force_table(E, K))
    validate_neighbours(table, V, K, full=True)


@pytest.mark.parametrize("block_rows", [1, 7, 32])
def test_theory_neighbour_table_fast_selection_exact_with_ties(block_rows):
    # V large enough against K for the sampled cut-off path; a coarse grid makes
    # many rows tie at the K-th distance, exercising the exact fallback too.
    rng = np.random.default_rng(7)
    E = rng.integers(-3, 4, size=(400, 3)).astype(np.float64)
    K = 40
    table = neighbour_table(E, K, block_rows=block_rows)
    np.testing.assert_array_equal(table.astype(np.int64), brute_force_table(E, K))


def test_theory_neighbour_table_normalize_and_full_width():
    rng = np.random.default_rng(3)
    E = rng.standard_normal((30, 4)) * rng.uniform(0.5, 3.0, size=(30, 1))
    unit = E / np.linalg.norm(E, axis=1, keepdims=True)
    np.testing.assert_array_equal(neighbour_table(E, None, normalize=True),
                                  neighbour_table(unit, None))
    full = neighbour_table(E, None)
    assert full.shape == (30, 29)
    np.testing.assert_array_equal(full.astype(np.int64), brute_force_table(E, 29))


def test_theory_neighbour_dtype():
    assert neighbour_dtype(65536) == np.uint16
    assert neighbour_dtype(65537) == np.int32


@pytest.mark.parametrize(
    "codebook, kwargs, match",
    [
        (np.zeros((1, 3)), {}, "V >= 2"),
        (np.zeros(5), {}, "V >= 2"),
        (np.array([[0.0], [np.nan]]), {}, "NaN or infinite"),
        (np.array([[0.0, 1.0], [0.0, 0.0]]), {"normalize": True}, "zero row"),
        (np.eye(3), {"k_max": 0}, "k_max"),
        (np.eye(3), {"block_rows": 0}, "block_rows"),
        (np.array([[1e200], [-1e200]]), {}, "overflow"),
    ],
)
def test_theory_neighbour_table_bad_codebook(codebook, kwargs, match):
    with pytest.raises(ValueError, match=match):
        neighbour_table(codebook, **kwargs)


@pytest.mark.parametrize(
    "table, k, full, match",
    [
        ([[1], [0]], 0, False, "numpy array"),
        (np.zeros((3, 2), dtype=np.int64), 0, False, "3 rows, the vocabulary has 4 tokens"),
        (np.zeros((4,), dtype=np.int64), 0, False, "shape"),
        (np.array([[1.0], [0.0], [0.0], [0.0]]), 0, False, "integer dtype"),
        (np.array([[1], [0], [0], [0]]), 2, False, "only 1 columns"),
        (np.array([[1], [0], [4], [0]]), 1, True, "outside"),
        (np.array([[1], [0], [-1], [0]]), 1, True, "outside"),
        (np.array([[1], [0], [2], [0]]), 1, True, "itself"),
        (np.array([[1, 1], [0, 2], [0, 1], [0, 1]]), 1, True, "repeats"),
    ],
)
def test_theory_validate_neighbours_errors(table, k, full, match):
    with pytest.raises(ValueError, match=match):
        validate_neighbours(table, 4, k, full=full)


def test_theory_neighbours_save_load_roundtrip(tmp_path):
    table = neighbour_table(np.random.default_rng(0).standard_normal((20, 3)), 5)
    save_neighbours(tmp_path / "nb.npy", table)
    loaded = load_neighbours(tmp_path / "nb.npy", 20)
    np.testing.assert_array_equal(loaded, table)
    assert loaded.dtype == table.dtype
    with pytest.raises(ValueError, match="cannot read"):
        load_neighbours(tmp_path / "missing.npy")


def test_theory_neighbours_of_another_vocabulary_report_the_row_count(tmp_path):
    """Issue 12, item 9: a table of another codebook is a row-count mismatch, not "row 1 lists the
    token itself"."""
    table = neighbour_table(np.random.default_rng(0).standard_normal((8, 3)), 5)
    for V in (4, 12):
        with pytest.raises(ValueError, match=f"has 8 rows, the vocabulary has {V} tokens"):
            validate_neighbours(table, V, 3, full=True)
    save_neighbours(tmp_path / "nb8.npy", table)
    with pytest.raises(ValueError, match=r"nb8\.npy: neighbour table has 8 rows, the vocabulary has 4 "):
        load_neighbours(tmp_path / "nb8.npy", 4)
    # the first 4 rows of the 8-token table: the right row count, ids of a larger vocabulary
    with pytest.raises(ValueError, match=r"outside \[0, 4\) \(from 0 to 7\): it belongs to another codebook"):
        validate_neighbours(np.ascontiguousarray(table[:4]), 4, full=True)
    # reading rows the table does not have: named, not an IndexError
    with pytest.raises(ValueError, match="has 8 rows, but token 9 is read"):
        validate_neighbour_rows(table, np.array([1, 9]), 2)
