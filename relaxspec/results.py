"""Results files of a sweep: one CSV row per configuration, written so that a crash cannot corrupt it.

Each row is appended with one ``os.write`` and synced (``results_lock.append_line``): a crash leaves the file
whole or with a torn last line, which resuming drops with a warning (:func:`drop_torn_tail`) and
readers skip (:func:`read_results`). A row's configuration columns hash to the key resuming compares
(:func:`config_key`): every setting that changes a row is one of them, the sweep's tables
(``[world_overrides]``, ``[sequoia]``, ``[cost]``) in the ``settings`` column (:func:`settings_text`), so a
rerun with a changed setting writes new rows. Measures are written in full float64 precision (the
shortest text that reads back as the same float). :func:`load` returns a results file (CSV, or Parquet
written by :func:`save`) as a pandas DataFrame with typed columns, for notebooks and ``relaxspec plot``.

What a row verified with is one column, ``verification``: the canonical spec of its
:class:`theory.verification.Verification` (``r1+lantern:k=1000,delta=0.1``; ``str(v)``, which parses
back to ``v``). A file of the layout an older relaxspec wrote (rule, variant, relax, k, delta, lam and
boost columns) is refused in one line.

A file that is not one of ours is never changed: a results path must be a regular file or a new path
(:func:`check_results_path`: a device, FIFO or folder is refused before it is opened) and its first line
our header (:func:`check_header`), both checked before anything is cut or appended. Every row is
checked as it is read, for resuming as for loading (a bad row: its file and line), and a configuration
may appear once only. One sweep at a time writes a file, one whole line at a time
(:mod:`relaxspec.results_lock`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from relaxspec.simulate.results import SimResult
from relaxspec.theory.verification import Verification

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "world", "tree", "verification", "temperature", "n_sequences", "seq_len", "seed", "settings",
    "mean_tokens_per_step", "se_tokens_per_step", "mean_accepted_depth", "mean_tree_depth", "mean_tree_size",
    "draft_calls_per_step", "tv_bound_per_token", "tv_bound_per_sequence", "seconds",
]
CONFIG_COLUMNS = COLUMNS[: COLUMNS.index("settings") + 1]
TEXT_COLUMNS = ("world", "tree", "verification", "settings")
NO_SETTINGS = "{}"
"""The ``settings`` of a row that ran with the defaults of every sweep table."""
INTEGER_COLUMNS = ("n_sequences", "seq_len", "seed")  # the rest of the numbers are float64
VIEW_COLUMNS = {"rule": "string", "variant": "string", "relax": "string", "k": "int64", "delta": "float64",
                "lam": "float64", "boost": "string"}
"""Read-only views of the ``verification`` column that :func:`load` appends for plots and tables (name ->
dtype; :func:`verification_view`): derived on every load, never stored (the CSV and :func:`save` keep
:data:`COLUMNS` only)."""
OLD_LAYOUT = ("world", "tree", "rule", "variant", "relax")
"""How the header of an older relaxspec's results CSV starts (its verification in seven columns)."""
PARQUET_SUFFIXES = (".parquet", ".pq")
HEADER_PROBE_BYTES = 4096  # more than a header line: what is read to tell a results CSV from another file
SHOWN_REPEATS = 3  # repeated configurations a duplicate error spells out
_FILE_TYPES = {stat.S_ISDIR: "a folder", stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device",
               stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}


def config_key(row: dict) -> str:
    """Hash of a row's configuration columns (:data:`CONFIG_COLUMNS`: what resuming compares). A number
    counts by its value, so a row as written, as read (floats) and as loaded (int64) have one key."""
    text = json.dumps({c: _key_value(c, row[c]) for c in CONFIG_COLUMNS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _key_value(column: str, value: object) -> str:
    if column in TEXT_COLUMNS:
        return str(value)
    number = float(value)  # type: ignore[arg-type]
    return str(int(number)) if column in INTEGER_COLUMNS else repr(number)


def settings_text(settings: dict) -> str:
    """The ``settings`` column: the canonical JSON (sorted keys, no spaces) of a row's settings beyond the
    other configuration columns, one table per sweep table, e.g.
    ``{"world_overrides":{"vocab_size":4096}}`` (:data:`NO_SETTINGS`: none)."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"), allow_nan=False)


def settings_parts(text: str) -> dict[str, object]:
    """A ``settings`` value's values by name: world overrides by name, other tables' settings by table and
    name (``vocab_size``, ``sequoia.width``)."""
    return {name if table == "world_overrides" else f"{table}.{name}": value
            for table, values in json.loads(text).items() for name, value in values.items()}


def settings_differences(texts: list[str]) -> dict[str, str]:
    """Each ``settings`` value of ``texts`` as the ``name=value`` pairs of the names whose values differ
    among them (:func:`settings_parts`), or ``defaults`` where it sets none of those."""
    parts = {t: settings_parts(t) for t in texts}
    names = sorted({n for p in parts.values() for n in p})
    differ = [n for n in names if len({repr(p.get(n)) for p in parts.values()}) > 1]
    return {t: ", ".join(f"{n}={p[n]}" for n in differ if n in p) or "defaults" for t, p in parts.items()}


def settings_label(text: str) -> str:
    """A ``settings`` value as a short label: ``vocab_size=4096, sequoia.width=32`` (:func:`settings_parts`);
    ``defaults`` for :data:`NO_SETTINGS`."""
    return ", ".join(f"{name}={value}" for name, value in settings_parts(text).items()) or "defaults"


def verification_view(spec: str) -> dict[str, object]:
    """The :data:`VIEW_COLUMNS` of a ``verification`` value: its rule and variant, its relaxation's kind,
    k, delta and lam (``none``, 0, 0 and 1 when exact) and its boost's spec (``none`` unboosted)."""
    v = Verification.parse(spec)
    r = v.relax
    return {"rule": v.rule, "variant": v.variant, "relax": r.kind, "k": r.k, "delta": r.delta, "lam": r.lam,
            "boost": str(v.boost)}


def result_row(res: SimResult, world: str, tree: str, settings: str = NO_SETTINGS) -> dict:
    """One CSV row from a run; ``settings`` as :func:`settings_text` writes it. Measures in full precision
    (``repr`` of the float64: it reads back as the same number)."""
    row = {"world": world, "tree": tree, "verification": str(res.verification),
           "temperature": res.temperature, "n_sequences": res.n_sequences, "seq_len": res.seq_len,
           "seed": res.seed, "settings": settings}
    row.update({k: repr(float(v)) for k, v in res.summary().items()})
    row["seconds"] = f"{res.seconds:.3f}"
    return row


def _fields(line: bytes) -> list[str]:
    return next(csv.reader(io.StringIO(line.decode("utf-8", errors="replace"))), [])


def _last_line_torn(data: bytes) -> bool:
    """Whether the last line of a results CSV's bytes is incomplete: no line end, or (for a row after the
    header) not exactly the header's number of fields (:data:`COLUMNS`)."""
    if not data.endswith(b"\n"):
        return True
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    if start == 0:
        return False  # a whole header line: its columns are checked by the readers
    return len(_fields(data[start:])) != len(COLUMNS)


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


def check_results_path(path: Path) -> bool:
    """Whether a results file exists at ``path`` (False: a new path); a ``ValueError`` when something
    other than a regular file is there (reading a device or FIFO may never end)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(mode):
        raise ValueError(not_regular(path, mode))
    return True


def not_regular(path: Path, mode: int) -> str:
    what = next((name for test, name in _FILE_TYPES.items() if test(mode)), "not a file")
    return f"{path} is {what}, not a regular file (results are read from and written to regular files)"


def _is_header(head: bytes) -> bool:
    """Whether the first bytes of a file start a results CSV: empty, a whole header line, or a header
    torn by a crash while it was written (a prefix of one, no line end)."""
    end = head.find(b"\n")
    if end < 0:
        return csv_line(None).encode().startswith(head)
    return _fields(head[: end + 1]) == COLUMNS


def check_header(path: Path) -> None:
    """A ``ValueError`` unless the regular file ``path`` is empty or starts with a results header; reads
    its first bytes only and changes nothing (so a file that is not ours is left as it is)."""
    with open(path, "rb") as f:
        head = f.read(HEADER_PROBE_BYTES)
    if _fields(head[: head.find(b"\n") + 1])[: len(OLD_LAYOUT)] == list(OLD_LAYOUT):
        raise ValueError(_old_layout(path))
    if not _is_header(head):
        raise ValueError(f"{path} is not a results CSV (its first line is not the header "
                         f"{','.join(COLUMNS)}); it was left as it is: move it away or choose another file")


def _old_layout(path: Path) -> str:
    return (f"{path} was written by an older relaxspec (rule, variant, relax, k, delta, lam and boost "
            "columns; now one verification column): rerun its sweep into a new file")


def drop_torn_tail(path: str | Path) -> bytes:
    """Cut a torn last line off a results CSV (with a warning naming the file and the bytes dropped), so
    that resuming appends whole rows; returns the bytes dropped (``b""`` if the file ends cleanly). A file
    that is not ours is refused first (:func:`check_results_path`, :func:`check_header`), unchanged."""
    path = Path(path)
    if not check_results_path(path):
        return b""
    check_header(path)
    whole, torn = _whole_rows(path)
    if torn:
        with open(path, "r+b") as f:
            f.truncate(len(whole))
            f.flush()
            os.fsync(f.fileno())
        _warn_torn(path, torn, "dropped; its configuration runs again")
    return torn


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
    """Config hashes of the whole rows already in a results CSV (a torn last line is not counted); every
    row is checked as :func:`read_results` checks it (a bad row: a ``ValueError`` naming its line)."""
    if not check_results_path(path) or path.stat().st_size == 0:
        return set()
    check_header(path)
    whole, _ = _whole_rows(path)
    return {config_key(raw) for _, raw, _ in _parse_rows(path, whole)}


def read_results(path: str | Path) -> list[dict]:
    """Rows of a results CSV (numbers as float); a torn last line is skipped with a warning. A
    ``ValueError`` names the file (and line) of a file that is not a results CSV, a row with the wrong
    number of fields or a value of the wrong type, and configurations that appear more than once."""
    path = Path(path)
    if not check_results_path(path):
        raise ValueError(f"results file {path} does not exist")
    check_header(path)
    whole, torn = _whole_rows(path)
    if torn:
        _warn_torn(path, torn, "skipped (a resumed `relaxspec simulate` reruns it)")
    return [values for _, _, values in _parse_rows(path, whole)]


def _parse_rows(path: Path, whole: bytes) -> list[tuple[int, dict, dict]]:
    """``(line, row as written, row typed)`` of every row of a results CSV's whole lines ``whole`` (the
    header checked); a ``ValueError`` naming the file and line of a row that is not a results row, or the
    lines of a configuration that appears twice."""
    try:
        text = whole.decode("utf-8")
    except UnicodeDecodeError as err:
        line = whole[: err.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not a results row (not UTF-8 text: byte "
                         f"0x{whole[err.start]:02x})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    try:
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path} is not a results CSV (expected columns {COLUMNS})")
        for row in reader:
            try:
                rows.append((reader.line_num, row, _typed_row(row)))
            except ValueError as err:
                raise ValueError(f"{path}, line {reader.line_num}: not a results row ({err})") from err
    except csv.Error as err:  # a NUL byte, a field over csv's size limit
        raise ValueError(f"{path}, line {reader.line_num}: not a results row ({err})") from None
    check_unique(path, [(f"line {line}", raw) for line, raw, _ in rows])
    return rows


def _typed_row(row: dict) -> dict:
    """A row as written (``csv.DictReader``'s) typed: text columns as they are, numbers as float, the
    :data:`INTEGER_COLUMNS` checked to be integers; a ``ValueError`` saying what is wrong."""
    if None in row or None in row.values():
        raise ValueError("wrong number of fields")
    check_settings(row["settings"])
    check_verification(row["verification"])
    values = {c: (row[c] if c in TEXT_COLUMNS else float(row[c])) for c in COLUMNS}
    for c in INTEGER_COLUMNS:
        if not values[c].is_integer():
            raise ValueError(f"column {c} holds {row[c]!r}, not an integer")
    return values


def check_settings(text: str) -> None:
    """A ``ValueError`` unless ``text`` is a ``settings`` value as :func:`settings_text` writes it."""
    try:
        settings = json.loads(text)
        ok = isinstance(settings, dict) and settings_text(settings) == text
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"column settings holds {text[:60]!r}, not the canonical JSON object of a row's "
                         "settings")


def check_verification(text: str) -> None:
    """A ``ValueError`` unless ``text`` is a verification spec in its canonical form (``str(v)``, as
    :func:`result_row` writes it: one verification, one text, one resume key)."""
    try:
        canonical = str(Verification.parse(text))
    except ValueError as err:
        raise ValueError(f"column verification holds {text[:60]!r}: {err}") from None
    if canonical != text:
        raise ValueError(f"column verification holds {text[:60]!r}, not its canonical form {canonical!r}")


def check_unique(source: Path, rows: list[tuple[str, dict]]) -> None:
    """A ``ValueError`` naming ``source`` and the rows (``(where, row)``: ``"line 14"``, the row's
    configuration columns) whose configuration (:func:`config_key`) an earlier row already has."""
    first: dict[str, str] = {}
    repeats = []
    for where, row in rows:
        key = config_key(row)
        if key in first:
            label = " ".join(f"{c}={row[c]}" for c in CONFIG_COLUMNS if c in row)
            repeats.append(f"{where} repeats {first[key]}: {label}")
        else:
            first[key] = where
    if repeats:
        more = f"; and {len(repeats) - SHOWN_REPEATS} more" if len(repeats) > SHOWN_REPEATS else ""
        raise ValueError(f"{source}: {len(repeats)} row(s) repeat a configuration ("
                         f"{'; '.join(repeats[:SHOWN_REPEATS])}{more}): keep one row of each (two sweeps "
                         "writing one file at once do this)")


def column_types() -> dict[str, str]:
    """The pandas dtype of every column of :func:`load`'s frames: ``string`` for :data:`TEXT_COLUMNS`,
    ``int64`` for :data:`INTEGER_COLUMNS`, ``float64`` for the rest (NaN where a run gives no value)."""
    return {c: "string" if c in TEXT_COLUMNS else "int64" if c in INTEGER_COLUMNS else "float64"
            for c in COLUMNS}


def load(path: str | Path) -> pd.DataFrame:
    """A sweep's results as a pandas DataFrame, one row per configuration: the columns :data:`COLUMNS` typed
    by :func:`column_types`, then the :data:`VIEW_COLUMNS` (rule, variant, relax, k, delta, lam, boost),
    derived from each row's ``verification`` for plots and tables. The views are read-only in meaning:
    they are recomputed from ``verification`` on every load, and :func:`save` writes :data:`COLUMNS` only,
    so an edit of a view is never kept.

    A path ending in ``.parquet`` or ``.pq`` is read as Parquet (pyarrow; written by :func:`save`); any
    other as a results CSV, through :func:`read_results` (a torn last row skipped with a warning). Raises
    ``ValueError`` naming the file for a missing file (or one that is not a regular file), missing columns,
    a value of the wrong type (and its line, in a CSV), a file an older relaxspec wrote, and rows that
    repeat a configuration (:func:`check_unique`).
    """
    import pandas as pd

    path = Path(path)
    if path.suffix.lower() not in PARQUET_SUFFIXES:
        return with_views(_typed(pd.DataFrame(read_results(path), columns=COLUMNS), path))
    if not check_results_path(path):
        raise ValueError(f"results file {path} does not exist")
    try:
        frame = pd.read_parquet(path, engine="pyarrow")
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{path} is not a Parquet file ({err})") from err
    if "verification" not in frame.columns and set(OLD_LAYOUT) <= set(frame.columns):
        raise ValueError(_old_layout(path))
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path} is not a results table: it lacks the columns {missing}")
    frame = _typed(frame[COLUMNS].reset_index(drop=True), path)
    for i, (settings, verification) in enumerate(zip(frame["settings"], frame["verification"], strict=True)):
        try:
            check_settings(settings)
            check_verification(verification)
        except ValueError as err:
            raise ValueError(f"{path}, row {i}: {err}") from None
    check_unique(path, [(f"row {i}", row) for i, row in enumerate(frame[CONFIG_COLUMNS].to_dict("records"))])
    return with_views(frame)


def with_views(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (typed :data:`COLUMNS`) with the :data:`VIEW_COLUMNS` appended (recomputed from
    ``verification``)."""
    import pandas as pd

    views = pd.DataFrame([verification_view(v) for v in frame["verification"]], columns=list(VIEW_COLUMNS),
                         index=frame.index)
    return pd.concat([frame, views.astype(VIEW_COLUMNS)], axis=1)


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
    check_results_path(path)  # a device or FIFO is not replaced by a file
    frame = _typed(results[COLUMNS].reset_index(drop=True), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        frame.to_parquet(tmp, engine="pyarrow", index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
