"""The on-disk cache of latent worlds' neighbour tables (``$RELAXSPEC_CACHE``, else ``~/.cache/relaxspec``).

A V = 16384 table takes minutes to build, so :meth:`simulate.worlds.LatentWorld.neighbours` keeps it in
``neighbours-<hash16>-<width>.npz``, which holds the table and the SHA-256 of the codebook it was built
from. A cached table is used only when it is that codebook's: the stored hash must equal the codebook's,
the table must be a valid neighbour table (``theory.validate_neighbours``, ``full=True``: ids in [0, V),
distinct, not the row's token) and ordered by distance from each row's token, with a sample of rows
rebuilt exactly (``theory.neighbours.check_table_order``). A file that fails is rebuilt with a warning:
the cache is ours, and a damaged table would crash the kernels (ids out of range) or change results.
"""

from __future__ import annotations

import os
import warnings
import zipfile
from pathlib import Path

import numpy as np

from relaxspec.theory.neighbours import check_table_order, neighbour_table, validate_neighbours


def cache_dir() -> Path:
    """The cache folder: ``$RELAXSPEC_CACHE``, else ``~/.cache/relaxspec``."""
    return Path(os.environ.get("RELAXSPEC_CACHE", Path.home() / ".cache" / "relaxspec"))


def cache_path(codebook_sha256: str, width: int) -> Path:
    """The cache file of a codebook's table with ``width`` columns."""
    return cache_dir() / f"neighbours-{codebook_sha256[:16]}-{width}.npz"


def cached_neighbours(codebook: np.ndarray, codebook_sha256: str, width: int) -> np.ndarray:
    """The neighbour table of ``codebook`` with ``width`` columns, read from the cache when a valid one
    is there, else built (:func:`theory.neighbour_table`) and cached (a warning says why an existing
    file was not used; an unwritable cache folder is skipped silently)."""
    path = cache_path(codebook_sha256, width)
    if path.exists():
        try:
            return _read(path, codebook, codebook_sha256, width)
        except ValueError as err:
            warnings.warn(f"neighbour-table cache {path} is not usable ({err}): rebuilt", UserWarning,
                          stacklevel=3)
    table = neighbour_table(codebook, k_max=width)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, table=table, codebook_sha256=np.array(codebook_sha256))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: recompute next time
    return table


def _read(path: Path, codebook: np.ndarray, codebook_sha256: str, width: int) -> np.ndarray:
    """The table in ``path`` after every check of the module docstring; ``ValueError`` saying why not."""
    try:
        with np.load(path, allow_pickle=False) as z:
            table, stored = z["table"], str(z["codebook_sha256"])
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"cannot be read ({type(err).__name__}: {err})") from None
    if stored != codebook_sha256:
        raise ValueError(f"was built from another codebook (SHA-256 {stored[:16]}..., this one "
                         f"{codebook_sha256[:16]}...)")
    V = codebook.shape[0]
    validate_neighbours(table, V, width, full=True)
    if table.shape[1] != width:
        raise ValueError(f"has {table.shape[1]} columns, expected {width}")
    check_table_order(table, codebook)
    return table
