"""Results files of a sweep: one CSV row per configuration, written so that a crash cannot corrupt it.

Each row is appended with one ``os.write`` and synced (:func:`append_line`): a crash leaves the file
whole or with a torn last line, which resuming drops with a warning (:func:`drop_torn_tail`) and
readers skip (:func:`read_results`). A row's configuration columns hash to the key resuming compares
(:func:`config_key`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import warnings
from pathlib import Path

from simulate.results import SimResult

COLUMNS = [
    "world", "tree", "rule", "variant", "relax", "k", "delta", "lam", "temperature", "n_sequences", "seq_len",
    "seed", "mean_tokens_per_step", "se_tokens_per_step", "mean_accepted_depth", "mean_tree_depth",
    "mean_tree_size", "draft_calls_per_step", "tv_bound_per_token", "tv_bound_per_sequence", "seconds",
]
CONFIG_COLUMNS = COLUMNS[:12]
TEXT_COLUMNS = ("world", "tree", "rule", "variant", "relax")


def config_key(row: dict) -> str:
    """Hash of a row's configuration columns (what resuming compares)."""
    text = json.dumps({c: str(row[c]) for c in CONFIG_COLUMNS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def result_row(res: SimResult, world: str, tree: str) -> dict:
    """One CSV row from a run."""
    r = res.relax
    row = {"world": world, "tree": tree, "rule": res.rule, "variant": res.variant, "relax": r.kind, "k": r.k,
           "delta": r.delta, "lam": r.lam, "temperature": res.temperature, "n_sequences": res.n_sequences,
           "seq_len": res.seq_len, "seed": res.seed}
    row.update({k: f"{v:.6g}" for k, v in res.summary().items()})
    row["seconds"] = f"{res.seconds:.3f}"
    return row


def _last_line_torn(data: bytes) -> bool:
    """Whether the last line of a results CSV's bytes is incomplete: no line end, or (for a row after the
    header) not exactly the columns' number of fields."""
    if not data.endswith(b"\n"):
        return True
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    if start == 0:
        return False  # a whole header line: its columns are checked by the readers
    fields = next(csv.reader(io.StringIO(data[start:].decode("utf-8", errors="replace"))), [])
    return len(fields) != len(COLUMNS)


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
    that resuming appends whole rows; returns the bytes dropped (``b""`` if the file ends cleanly)."""
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
    return torn


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
    if reader.fieldnames != COLUMNS:
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
    if reader.fieldnames != COLUMNS:
        raise ValueError(f"{path} is not a results CSV (expected columns {COLUMNS})")
    rows = []
    for line, row in enumerate(reader, start=2):
        try:
            if None in row or None in row.values():
                raise ValueError("wrong number of fields")
            rows.append({c: (row[c] if c in TEXT_COLUMNS else float(row[c])) for c in COLUMNS})
        except ValueError as err:
            raise ValueError(f"{path}, line {line}: not a results row ({err})") from err
    return rows
