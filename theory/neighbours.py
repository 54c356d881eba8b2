"""Latent-space neighbour tables of a VQ codebook (SPEC section 1).

Row ``x`` of the table lists the other tokens in order of increasing Euclidean
distance between code vectors, ``x`` itself excluded, ties broken by token id.
The official LANTERN script ranks the raw codebook rows; LlamaGen quantises
with L2-normalised rows. Both are available through ``normalize``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DEFAULT_K_MAX = 1024


def neighbour_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every token id fits (V <= 65536), else int32."""
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.int32)


def neighbour_table(
    codebook: np.ndarray,
    k_max: int | None = DEFAULT_K_MAX,
    *,
    normalize: bool = False,
    block_rows: int = 32,
) -> np.ndarray:
    """Nearest-neighbour table of a codebook, shape ``(V, K)`` with ``K = min(k_max, V - 1)``.

    Distances are squared Euclidean distances computed coordinate by
    coordinate in float64 (no ``|a|^2 + |b|^2 - 2ab`` cancellation), one block
    of rows at a time so that V = 16384 needs ``2 * block_rows * V * 8`` bytes
    of scratch rather than the V x V matrix. ``k_max=None`` keeps all V - 1.
    Rows are ordered by (distance, token id) exactly.
    """
    E = np.asarray(codebook, dtype=np.float64)
    if E.ndim != 2 or E.shape[0] < 2 or E.shape[1] < 1:
        raise ValueError(f"codebook must be a (V >= 2, d >= 1) array, got shape {E.shape}")
    if not np.all(np.isfinite(E)):
        raise ValueError("codebook has NaN or infinite entries")
    V = E.shape[0]
    if normalize:
        norms = np.linalg.norm(E, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError("codebook has a zero row: cannot L2-normalise it")
        E = E / norms
    K = V - 1 if k_max is None else int(k_max)
    if K < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max!r}")
    K = min(K, V - 1)
    if int(block_rows) != block_rows or block_rows < 1:
        raise ValueError(f"block_rows must be a positive integer, got {block_rows!r}")
    out = np.empty((V, K), dtype=neighbour_dtype(V))
    ET = np.ascontiguousarray(E.T)
    dist = np.empty((block_rows, V))
    scratch = np.empty((block_rows, V))
    for start in range(0, V, block_rows):
        stop = min(start + block_rows, V)
        d = dist[: stop - start]
        with np.errstate(over="ignore"):
            _squared_distances(E[start:stop], ET, d, scratch[: stop - start])
        if not np.all(np.isfinite(d)):
            raise ValueError("codebook entries are too large: squared distances overflow float64")
        d[np.arange(stop - start), np.arange(start, stop)] = np.inf
        out[start:stop] = _k_smallest_rows(d, K)
    return out


def _squared_distances(block: np.ndarray, ET: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """``out[i, y] = sum_j (block[i, j] - E[y, j])**2``, summed over j in order, in place."""
    np.subtract(block[:, 0, None], ET[0][None, :], out=out)
    np.multiply(out, out, out=out)
    for j in range(1, ET.shape[0]):
        np.subtract(block[:, j, None], ET[j][None, :], out=tmp)
        np.multiply(tmp, tmp, out=tmp)
        np.add(out, tmp, out=out)


# The fast selection estimates each row's cut-off from every _STRIDE-th column,
# aiming at _SLACK * K candidates; rows where the estimate falls short are
# redone exactly, so the result never depends on the estimate.
_STRIDE = 8
_SLACK = 1.25


def _k_smallest_rows(d: np.ndarray, K: int) -> np.ndarray:
    """Row-wise :func:`_k_smallest_by_id` of a block of distances (finite except the diagonal)."""
    n, V = d.shape
    sample = d[:, ::_STRIDE]
    rank = int(_SLACK * K) // _STRIDE
    if rank >= sample.shape[1] - 1:  # K close to V: the estimate would not prune
        return np.stack([_k_smallest_by_id(row, K) for row in d])
    cut = np.partition(sample, rank, axis=1)[:, rank]
    mask = d <= cut[:, None]  # holds the K smallest, ties at the K-th included, when count >= K
    count = mask.sum(axis=1)
    rows, cols = np.nonzero(mask)  # cols ascend within a row
    starts = np.concatenate(([0], np.cumsum(count)[:-1]))
    pos = np.arange(rows.size) - starts[rows]
    width = max(int(count.max()), K)
    vals = np.full((n, width), np.inf)
    ids = np.zeros((n, width), dtype=np.int64)
    vals[rows, pos] = d[rows, cols]
    ids[rows, pos] = cols
    # a stable sort keeps ascending ids among equal distances
    order = np.argsort(vals, axis=1, kind="stable")[:, :K]
    out = np.take_along_axis(ids, order, axis=1)
    for i in np.flatnonzero((count < K) | ~np.isfinite(cut)):
        out[i] = _k_smallest_by_id(d[i], K)
    return out


def _k_smallest_by_id(d: np.ndarray, K: int) -> np.ndarray:
    """Indices of the K smallest entries of ``d`` ordered by (value, index)."""
    if K < d.size - 1:
        kth = np.partition(d, K - 1)[K - 1]
        cand = np.flatnonzero(d <= kth)  # ascending ids, ties at the cut included
    else:
        cand = np.arange(d.size)
    order = np.argsort(d[cand], kind="stable")
    return cand[order[:K]]


def check_neighbour_count(k: int, vocab_size: int, what: str = "relaxation") -> None:
    """Refuse ``k`` neighbours per token where a vocabulary of ``vocab_size`` tokens gives each only
    ``vocab_size - 1``: ``ValueError`` naming ``what`` (e.g. the relaxation's spec)."""
    if k > vocab_size - 1:
        raise ValueError(f"{what} reads k={k} neighbours of each token, but a vocabulary of {vocab_size} "
                         f"tokens gives each only {vocab_size - 1} neighbours (k must be at most V - 1)")


def validate_neighbours(
    table: np.ndarray, vocab_size: int, k: int = 0, *, full: bool = False
) -> np.ndarray:
    """Check a neighbour table's shape, dtype and (with ``full``) its rows.

    ``k`` is the number of columns a relaxation will read. Raises
    ``ValueError`` naming the problem.
    """
    if not isinstance(table, np.ndarray):
        raise ValueError(f"neighbour table must be a numpy array, got {type(table).__name__}")
    if table.ndim != 2:
        raise ValueError(f"neighbour table must be a 2-D (V={vocab_size}, K) array, got shape {table.shape}")
    if table.shape[0] != vocab_size:
        raise ValueError(f"neighbour table has {table.shape[0]} rows, the vocabulary has {vocab_size} tokens "
                         f"(shape {table.shape}, expected ({vocab_size}, K)): it belongs to another codebook")
    if table.dtype.kind not in "iu":
        raise ValueError(f"neighbour table must have an integer dtype, got {table.dtype}")
    if k > table.shape[1]:
        raise ValueError(
            f"relaxation reads k={k} neighbours but the table has only {table.shape[1]} columns"
        )
    if full and table.size:
        t = table.astype(np.int64)
        if t.min() < 0 or t.max() >= vocab_size:
            raise ValueError(f"neighbour table has token ids outside [0, {vocab_size}) (from {t.min()} to "
                             f"{t.max()}): it belongs to another codebook, or is corrupt")
        if np.any(t == np.arange(vocab_size)[:, None]):
            row = int(np.flatnonzero(np.any(t == np.arange(vocab_size)[:, None], axis=1))[0])
            raise ValueError(f"neighbour table row {row} lists the token itself")
        s = np.sort(table, axis=1, kind="stable")  # the stored dtype: a radix sort for uint16, 5x faster
        if np.any(s[:, 1:] == s[:, :-1]):
            row = int(np.flatnonzero(np.any(s[:, 1:] == s[:, :-1], axis=1))[0])
            raise ValueError(f"neighbour table row {row} repeats a token")
    return table


def validate_neighbour_rows(table: np.ndarray, rows: np.ndarray, width: int) -> None:
    """Check the first ``width`` columns of the given rows: ids in [0, V), distinct, not the row.

    Cheap (O(len(rows) * width)) where the full check of a V = 16384 table is
    not; callers check the rows a rule will read.
    """
    width = min(int(width), table.shape[1])
    if width == 0 or len(rows) == 0:
        return
    rows = np.asarray(rows, dtype=np.int64)
    if rows.max() >= table.shape[0]:
        raise ValueError(f"neighbour table has {table.shape[0]} rows, but token {rows.max()} is read: "
                         "the table was built for a smaller vocabulary")
    sub = table[rows, :width].astype(np.int64)
    V = table.shape[0]
    bad = np.flatnonzero(np.any((sub < 0) | (sub >= V), axis=1))
    if bad.size:
        raise ValueError(f"neighbour table row {rows[bad[0]]} has token ids outside [0, {V})")
    bad = np.flatnonzero(np.any(sub == rows[:, None], axis=1))
    if bad.size:
        raise ValueError(f"neighbour table row {rows[bad[0]]} lists the token itself")
    s = np.sort(sub, axis=1)
    bad = np.flatnonzero(np.any(s[:, 1:] == s[:, :-1], axis=1))
    if bad.size:
        raise ValueError(f"neighbour table row {rows[bad[0]]} repeats a token")


# rows of a table rebuilt in full by check_table_order (evenly spaced); the other rows are checked for
# order only, which costs K distances a row instead of V
ORDER_CHECK_ROWS = 16


def check_table_order(table: np.ndarray, codebook: np.ndarray, *, sample_rows: int = ORDER_CHECK_ROWS,
                      block_rows: int = 256) -> None:
    """Check that ``table`` is :func:`neighbour_table` of ``codebook`` (``normalize=False``).

    Every row must list tokens by (distance, token id) non-decreasing, distances computed as
    :func:`neighbour_table` does (so equal means bit-equal); ``sample_rows`` evenly spaced rows are
    rebuilt in full and must be equal. An all-zero, column-reversed or shuffled table fails the
    first check, a table of another codebook almost surely both. Call :func:`validate_neighbours`
    with ``full=True`` first (ids in [0, V), distinct, not the row's token).

    Raises
    ------
    ValueError
        Naming the first row out of order.
    """
    E = np.asarray(codebook, dtype=np.float64)
    V, K = table.shape
    if E.ndim != 2 or E.shape[0] != V:
        raise ValueError(f"neighbour table has {V} rows, the codebook {E.shape[0]} codes")
    for start in range(0, V, block_rows):
        t = table[start:start + block_rows].astype(np.int64)
        block = E[start:start + t.shape[0]]
        d = block[:, None, 0] - E[t, 0]  # the operations of _squared_distances, in order: bit-equal
        d *= d
        for j in range(1, E.shape[1]):
            diff = block[:, None, j] - E[t, j]
            diff *= diff
            d += diff
        later = (d[:, 1:] > d[:, :-1]) | ((d[:, 1:] == d[:, :-1]) & (t[:, 1:] > t[:, :-1]))
        bad = np.flatnonzero(~later.all(axis=1))
        if bad.size:
            raise ValueError(f"neighbour table row {start + int(bad[0])} is not ordered by distance from its "
                             "token: it was not built from this codebook, or is corrupt")
    ET = np.ascontiguousarray(E.T)
    for i in np.unique(np.linspace(0, V - 1, min(sample_rows, V)).astype(np.int64)):
        d = np.empty((1, V))
        _squared_distances(E[i:i + 1], ET, d, np.empty((1, V)))
        d[0, i] = np.inf
        if not np.array_equal(_k_smallest_by_id(d[0], K), table[i]):
            raise ValueError(f"neighbour table row {i} is not the {K} nearest tokens of its token: it was "
                             "not built from this codebook, or is corrupt")


def save_neighbours(path: str | Path, table: np.ndarray) -> None:
    """Save a neighbour table as ``.npy``."""
    np.save(Path(path), table, allow_pickle=False)


def load_neighbours(path: str | Path, vocab_size: int | None = None) -> np.ndarray:
    """Load and fully validate a neighbour table saved by :func:`save_neighbours`."""
    path = Path(path)
    try:
        table = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read neighbour table {path}: {err}") from err
    if vocab_size is None:
        vocab_size = table.shape[0] if getattr(table, "ndim", 0) else 0
    try:
        return validate_neighbours(table, vocab_size, full=True)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from err
