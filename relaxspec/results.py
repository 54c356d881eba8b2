"""Results files of a sweep: one CSV row per configuration, written so that a crash cannot corrupt it.

Each row is appended with one ``os.write`` and synced (:func:`append_line`): a crash leaves the file
whole or with a torn last line, which resuming drops with a warning (:func:`drop_torn_tail`) and
readers skip (:func:`read_results`). A row's configuration columns hash to the key resuming compares
(:func:`config_key`). :func:`load` returns a results file (CSV, or Parquet written by :func:`save`) as a
pandas DataFrame with typed columns, for notebooks and ``relaxspec plot``.

Files written before the ``boost`` column existed (:data:`LEGACY_COLUMNS`) still load, their rows read
as boost ``none`` and keep their keys; resuming one first rewrites it with the column
(:func:`drop_torn_tail`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from simulate.results import SimResult

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "world", "tree", "rule", "variant", "relax", "k", "delta", "lam", "boost", "temperature", "n_sequences",
    "seq_len", "seed", "mean_tokens_per_step", "se_tokens_per_step", "mean_accepted_depth", "mean_tree_depth",
    "mean_tree_size", "draft_calls_per_step", "tv_bound_per_token", "tv_bound_per_sequence", "seconds",
]
CONFIG_COLUMNS = COLUMNS[:13]
TEXT_COLUMNS = ("world", "tree", "rule", "variant", "relax", "boost")
LEGACY_COLUMNS = [c for c in COLUMNS if c != "boost"]
"""The columns of a results file written before boosts existed (its rows: boost ``none``)."""
INTEGER_COLUMNS = ("k", "n_sequences", "seq_len", "seed")  # the rest of the numbers are float64
PARQUET_SUFFIXES = (".parquet", ".pq")


def config_key(row: dict) -> str:
    """Hash of a row's configuration columns (what resuming compares). ``boost`` counts only when it is
    not ``none``, so that a row written before the column existed keeps its key."""
    cols = [c for c in CONFIG_COLUMNS if c != "boost" or str(row.get("boost", "none")) != "none"]
    text = json.dumps({c: str(row[c]) for c in cols}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def result_row(res: SimResult, world: str, tree: str) -> dict:
    """One CSV row from a run."""
    r = res.relax
    row = {"world": world, "tree": tree, "rule": res.rule, "variant": res.variant, "relax": r.kind, "k": r.k,
           "delta": r.delta, "lam": r.lam, "boost": str(res.boost), "temperature": res.temperature,
           "n_sequences": res.n_sequences, "seq_len": res.seq_len, "seed": res.seed}
    row.update({k: f"{v:.6g}" for k, v in res.summary().items()})
    row["seconds"] = f"{res.seconds:.3f}"
    return row


def _fields(line: bytes) -> list[str]:
    return next(csv.reader(io.StringIO(line.decode("utf-8", errors="replace"))), [])


def _last_line_torn(data: bytes) -> bool:
    """Whether the last line of a results CSV's bytes is incomplete: no line end, or (for a row after the
    header) not exactly the header's number of fields (:data:`COLUMNS`, or :data:`LEGACY_COLUMNS`)."""
    if not data.endswith(b"\n"):
        return True
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    if start == 0:
        return False  # a whole header line: its columns are checked by the readers
    legacy = _fields(data[: data.find(b"\n") + 1]) == LEGACY_COLUMNS
    return len(_fields(data[start:])) != len(LEGACY_COLUMNS if legacy else COLUMNS)


def _whole_rows(path: Path) -> tuple[bytes, bytes]:
    """A results CSV's bytes split into its whole lines and a torn last line (``b""`` if none)."""
    data = path.read_bytes()
    if not data or not _last_line_torn(data):
        return data, b""
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    return data[:cut], data[cut:]


def _warn_torn(path: Path, torn: bytes, action: str) -> None:
    shown = torn[:60].decode("utf-8", errors="replace") + ("..." if len(torn) > 60 else "")
    warnings.warn(f"{path}: torn last line ({len(torn)} bytes, {shown!r}: a crash while it was written) "
                  f"{action}", UserWarning, stacklevel=3)


def drop_torn_tail(path: str | Path) -> bytes:
    """Cut a torn last line off a results CSV (with a warning naming the file and the bytes dropped), so
    that resuming appends whole rows; returns the bytes dropped (``b""`` if the file ends cleanly). A file
    written before the ``boost`` column existed is then rewritten with it (:func:`add_boost_column`)."""
    path = Path(path)
    if not path.exists():
        return b""
    whole, torn = _whole_rows(path)
    if torn:
        with open(path, "r+b") as f:
            f.truncate(len(whole))
            f.flush()
            os.fsync(f.fileno())
        _warn_torn(path, torn, "dropped; its configuration runs again")
    add_boost_column(path)
    return torn


def add_boost_column(path: Path) -> bool:
    """Rewrite a results CSV of :data:`LEGACY_COLUMNS` with the ``boost`` column (``none`` on every row)
    so that new rows can be appended; atomic (a temporary file renamed over it). Returns whether it did."""
    data = path.read_bytes()
    if _fields(data[: data.find(b"\n") + 1]) != LEGACY_COLUMNS:
        return False
    reader = csv.DictReader(io.StringIO(data.decode("utf-8"), newline=""))
    text = csv_line(None) + "".join(csv_line({**row, "boost": "none"}) for row in reader)
    tmp = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return True


def append_line(path: Path, text: str) -> None:
    """Append ``text`` (whole lines) with one ``os.write`` and sync it: a crash leaves it whole or torn at
    the end, never interleaved."""
    data = text.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        done = os.write(fd, data)
        while done < len(data):  # a regular file takes it at once; finish a short write all the same
            done += os.write(fd, data[done:])
        os.fsync(fd)
    finally:
        os.close(fd)


def csv_line(row: dict | None) -> str:
    """One CSV line (the header for None) as ``csv.DictWriter`` writes it (``\\r\\n`` line end)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    if row is None:
        writer.writeheader()
    else:
        writer.writerow(row)
    return buf.getvalue()


def read_done(path: Path) -> set[str]:
    """Config hashes of the whole rows already in a results CSV (a torn last line is not counted)."""
    if not path.exists() or path.stat().st_size == 0:
        return set()
    whole, _ = _whole_rows(path)
    reader = csv.DictReader(io.StringIO(whole.decode("utf-8"), newline=""))
    if reader.fieldnames not in (COLUMNS, LEGACY_COLUMNS):
        raise ValueError(f"{path} is not a results CSV of this version (columns differ); move it away")
    return {config_key(row) for row in reader}


def read_results(path: str | Path) -> list[dict]:
    """Rows of a results CSV (numbers as float); a torn last line is skipped with a warning."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"results file {path} does not exist")
    whole, torn = _whole_rows(path)
    if torn:
        _warn_torn(path, torn, "skipped (a resumed `relaxspec simulate` reruns it)")
    reader = csv.DictReader(io.StringIO(whole.decode("utf-8"), newline=""))
    if reader.fieldnames not in (COLUMNS, LEGACY_COLUMNS):
        raise ValueError(f"{path} is not a results CSV (expected columns {COLUMNS})")
    rows = []
    for line, row in enumerate(reader, start=2):
        try:
            if None in row or None in row.values():
                raise ValueError("wrong number of fields")
            row.setdefault("boost", "none")  # written before boosts existed
            rows.append({c: (row[c] if c in TEXT_COLUMNS else float(row[c])) for c in COLUMNS})
        except ValueError as err:
            raise ValueError(f"{path}, line {line}: not a results row ({err})") from err
    return rows


def column_types() -> dict[str, str]:
    """The pandas dtype of every column of :func:`load`'s frames: ``string`` for :data:`TEXT_COLUMNS`,
    ``int64`` for :data:`INTEGER_COLUMNS`, ``float64`` for the rest (NaN where a run gives no value)."""
    return {c: "string" if c in TEXT_COLUMNS else "int64" if c in INTEGER_COLUMNS else "float64"
            for c in COLUMNS}


def load(path: str | Path) -> pd.DataFrame:
    """A sweep's results as a pandas DataFrame, one row per configuration, columns :data:`COLUMNS` typed by
    :func:`column_types`.

    A path ending in ``.parquet`` or ``.pq`` is read as Parquet (pyarrow; written by :func:`save`); any
    other as a results CSV, through :func:`read_results` (a torn last row skipped with a warning, a file
    from before the ``boost`` column read with boost ``none``). Raises ``ValueError`` naming the file for
    a missing file, missing columns or a value of the wrong type.
    """
    import pandas as pd

    path = Path(path)
    if path.suffix.lower() not in PARQUET_SUFFIXES:
        return _typed(pd.DataFrame(read_results(path), columns=COLUMNS), path)
    if not path.exists():
        raise ValueError(f"results file {path} does not exist")
    try:
        frame = pd.read_parquet(path, engine="pyarrow")
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{path} is not a Parquet file ({err})") from err
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path} is not a results table: it lacks the columns {missing}")
    return _typed(frame[COLUMNS].reset_index(drop=True), path)


def _typed(frame: pd.DataFrame, source: Path) -> pd.DataFrame:
    """``frame`` with :func:`column_types`; a ``ValueError`` naming ``source`` and the column otherwise."""
    import numpy as np

    types = column_types()
    for column, kind in types.items():
        if kind == "int64":
            values = np.asarray(frame[column], dtype=np.float64)
            if not np.all(np.isfinite(values) & (values == np.round(values))):
                raise ValueError(f"{source}: column {column} holds a value that is not an integer")
    try:
        return frame.astype(types)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source}: {err}") from err


def save(results: pd.DataFrame, path: str | Path) -> Path:
    """Write results (a frame of :func:`load`) to a Parquet file with pyarrow, atomically (a temporary file
    renamed over ``path``); :func:`load` reads it back with the same types. Returns the path.

    Sweeps append their rows to a CSV as they finish (resumable); Parquet is the typed, compact copy for
    analysis. A path not ending in ``.parquet`` or ``.pq`` is a ``ValueError``."""
    path = Path(path)
    if path.suffix.lower() not in PARQUET_SUFFIXES:
        raise ValueError(f"save writes Parquet: {path} must end in .parquet or .pq (sweeps write their CSV "
                         "themselves, row by row)")
    missing = [c for c in COLUMNS if c not in results.columns]
    if missing:
        raise ValueError(f"cannot save results without the columns {missing}")
    frame = _typed(results[COLUMNS].reset_index(drop=True), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        frame.to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
