"""Decoding traces: the file format shared by ``reference`` (writer) and ``simulate`` (reader).

A trace is a directory (SPEC section 7)::

    run.trace/
      header.json          model, checkpoint and codebook hashes, V, settings
      neighbours.npy       the neighbour table the run used (when it relaxed)
      embedding.npy        GSD's embedding table (float32, V x dim; when the run's boost is ``gsd``)
      codes.npy            the code vectors VVS's dynamic schedule compares (float32, V x dim)
      chunk-000000.npz     whole sequences of steps, concatenated
      chunk-000001.npz     ...

Each step records the draft tree (parents, tokens), the target and draft
logits at every tree node (float16 or float32, after classifier-free
guidance, before temperature / top-k / top-p, which the header's settings
hold), the two uniforms of every node (``u_accept``, ``u_draw``; see
``theory.sampler``) and the outcome (accepted node path from the root, bonus
token). Chunks are written whole and renamed into place, so an interrupted
run keeps every finished sequence and can resume.

The header's ``verification`` (``theory.verification.Verification`` spec, e.g.
``r1+lantern:k=1000,delta=0.1`` or ``r2+gsd:G=10``) says how the steps were verified:
the rule, its relaxation or boost (GSD, Cool-SD, the budgeted relaxation) and its
variant; a GSD trace stores the embedding table it measured distances with, a
relaxed or budget trace the neighbour table it merged with. Its rule may be ``r4``
(traversal verification, SPEC 9.6: the same sampled-draft trees and uniforms as
``r2``). A Jacobi
trace (tree spec ``jacobi:L[,fresh]``, SPEC 9.1) records each window as a chain:
node 0 the last committed token, node j the draft d_j, ``draft_logits[j - 1]``
the logits of the law q_j that d_j was drawn from (the previous forward's target
logits for a kept token, 0 at the token and -inf elsewhere for a fresh one), and
``u_fresh`` the L uniforms that refilled the window (``reference.jacobi``): with
them a replay rebuilds every window from the trace alone. Chunks written before
``u_fresh`` existed read with no fresh uniforms. Coupled and PAC windows and VVS
skip steps (SPEC 10) record more per step: ``core.trace_step``.

Over 400 lines: the format's header, step records, writer (resumable, atomic chunks) and reader with
its validation are one file format, kept together so that writer and reader cannot drift apart.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from relaxspec.core.trace_header import LOGIT_DTYPES, TRACE_VERSION, Sampling, TraceHeader  # re-exported
from relaxspec.core.trace_step import TraceStep, check_step  # re-exported
from relaxspec.theory.boost import check_embedding
from relaxspec.theory.neighbours import load_neighbours, validate_neighbours
from relaxspec.theory.relax import Relax

_CHUNK_KEYS = (
    "sequence", "position", "n_nodes", "parents", "tokens", "target_logits", "draft_logits",
    "u_accept", "u_draw", "path_len", "path", "bonus",
)
_VARIABLE = ("u_fresh", "u_couple", "columns", "stale_logits")
"""Per-step arrays of any length (leading axis), stored concatenated with their lengths ``n_<name>``; a
chunk without one (a trace of a method that records none) reads as empty."""
_SCALARS = {"noise_key": 0, "mean_accepted": np.nan}
"""Per-step numbers of the frontier's methods, with the value of a chunk that stores none."""


def array_sha256(arr: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes (C order)."""
    a = np.ascontiguousarray(arr)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class TraceWriter:
    """Write a trace, one whole sequence per chunk; ``resume=True`` appends to an existing one.

    Use as a context manager; call :meth:`add` per step and
    :meth:`end_sequence` after each sequence's last step.
    """

    def __init__(
        self,
        path: str | Path,
        header: TraceHeader,
        neighbours: np.ndarray | None = None,
        *,
        resume: bool = False,
        embedding: np.ndarray | None = None,
        codes: np.ndarray | None = None,
    ) -> None:
        self.path = Path(path)
        self.header = header
        self._dtype = np.dtype(header.logits_dtype)
        self._steps: list[TraceStep] = []
        if self.path.exists() and any(self.path.iterdir()):
            if not resume:
                raise ValueError(f"trace {self.path} already exists; pass resume=True to append")
            existing = read_trace(self.path)
            if existing.header != header:
                raise ValueError(f"trace {self.path} was written with different settings")
            self._next_chunk = len(existing.chunk_files)
            self.done_sequences = existing.sequences()
            return
        self.path.mkdir(parents=True, exist_ok=True)
        if neighbours is not None:
            validate_neighbours(neighbours, header.vocab_size, header.neighbour_columns)
            np.save(self.path / "neighbours.npy", neighbours, allow_pickle=False)
        elif header.neighbour_columns:
            raise ValueError(f"verification {header.verification} needs its neighbour table in the trace")
        if header.verification.reads_embedding:
            if embedding is None:
                raise ValueError(f"verification {header.verification} needs its embedding table in the trace")
            table = check_embedding(embedding, header.vocab_size).astype(np.float32)
            if not np.array_equal(table, embedding):
                raise ValueError("the GSD embedding table must hold float32 values (traces store float32)")
            np.save(self.path / "embedding.npy", table, allow_pickle=False)
        if codes is not None:  # the code vectors VVS's dynamic schedule compares (float32)
            table = check_embedding(codes, header.vocab_size).astype(np.float32)
            if not np.array_equal(table, codes):
                raise ValueError("the code table must hold float32 values (traces store float32)")
            np.save(self.path / "codes.npy", table, allow_pickle=False)
        _atomic_write(self.path / "header.json", header.to_json().encode())
        self._next_chunk = 0
        self.done_sequences: set[int] = set()

    def add(self, step: TraceStep) -> None:
        """Buffer one step (logits are stored in the header's dtype)."""
        step = TraceStep(
            sequence=int(step.sequence), position=int(step.position),
            parents=np.asarray(step.parents, dtype=np.int32),
            tokens=np.asarray(step.tokens, dtype=np.int32),
            target_logits=np.asarray(step.target_logits).astype(self._dtype),
            draft_logits=np.asarray(step.draft_logits).astype(self._dtype),
            u_accept=np.asarray(step.u_accept, dtype=np.float64),
            u_draw=np.asarray(step.u_draw, dtype=np.float64),
            path=np.asarray(step.path, dtype=np.int32), bonus=int(step.bonus),
            u_fresh=np.asarray(step.u_fresh, dtype=np.float64),
            u_couple=np.asarray(step.u_couple, dtype=np.float64),
            columns=np.asarray(step.columns, dtype=np.int32), noise_key=int(step.noise_key),
            stale_logits=np.asarray(step.stale_logits).astype(self._dtype).reshape(
                -1, self.header.vocab_size),
            mean_accepted=float(step.mean_accepted),
        )
        check_step(step, self.header.vocab_size, str(self.path))
        self._steps.append(step)

    def end_sequence(self) -> None:
        """Write the buffered steps (one finished sequence) as a new chunk."""
        if not self._steps:
            return
        s = self._steps
        arrays = {
            "sequence": np.array([t.sequence for t in s], dtype=np.int64),
            "position": np.array([t.position for t in s], dtype=np.int64),
            "n_nodes": np.array([t.parents.size for t in s], dtype=np.int64),
            "parents": np.concatenate([t.parents for t in s]),
            "tokens": np.concatenate([t.tokens for t in s]),
            "target_logits": np.concatenate([t.target_logits for t in s]),
            "draft_logits": np.concatenate([t.draft_logits for t in s]),
            "u_accept": np.concatenate([t.u_accept for t in s]),
            "u_draw": np.concatenate([t.u_draw for t in s]),
            "path_len": np.array([t.path.size for t in s], dtype=np.int64),
            "path": np.concatenate([t.path for t in s]),
            "bonus": np.array([t.bonus for t in s], dtype=np.int64),
            "n_fresh": np.array([t.u_fresh.size for t in s], dtype=np.int64),
            **{f"n_{k}": np.array([getattr(t, k).shape[0] for t in s], dtype=np.int64)
               for k in _VARIABLE if k != "u_fresh"},
            **{k: np.concatenate([getattr(t, k) for t in s]) for k in _VARIABLE},
            "noise_key": np.array([t.noise_key for t in s], dtype=np.int64),
            "mean_accepted": np.array([t.mean_accepted for t in s], dtype=np.float64),
        }
        name = self.path / f"chunk-{self._next_chunk:06d}.npz"
        tmp = name.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name)
        self._next_chunk += 1
        self.done_sequences.update(int(x) for x in arrays["sequence"])
        self._steps = []

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        # A sequence cut short by an exception is dropped, not half-written.
        if exc[0] is None:
            self.end_sequence()


@dataclass
class Trace:
    """A trace on disk: its header, neighbour table and chunk files (read lazily)."""

    path: Path
    header: TraceHeader
    neighbours: np.ndarray | None
    chunk_files: list[Path]
    embedding: np.ndarray | None = None
    codes: np.ndarray | None = None

    def steps(self) -> Iterator[TraceStep]:
        """Every step in order."""
        for f in self.chunk_files:
            yield from _read_chunk(f, self.header.vocab_size)

    def check_has_steps(self) -> None:
        """Raise ``ValueError`` when the trace holds no chunk: no recorded step to replay or score (a
        chunk holds at least one step: an empty one is refused when read)."""
        if not self.chunk_files:
            raise ValueError(f"trace {self.path} holds no steps (no chunk-*.npz: the run recorded no "
                             "finished sequence)")

    def sequences(self) -> set[int]:
        """Ids of the sequences the trace holds."""
        out: set[int] = set()
        for f in self.chunk_files:
            out.update(int(x) for x in _load_npz(f)["sequence"])
        return out

    def __len__(self) -> int:
        return sum(int(_load_npz(f)["n_nodes"].size) for f in self.chunk_files)


def read_trace(path: str | Path) -> Trace:
    """Open and validate a trace directory written by :class:`TraceWriter`."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"trace {path} is not a directory")
    head = path / "header.json"
    if not head.exists():
        raise ValueError(f"trace {path} has no header.json")
    header = TraceHeader.from_json(head.read_text(), source=str(head))
    nb_file = path / "neighbours.npy"
    neighbours = None
    if nb_file.exists():
        try:
            neighbours = np.load(nb_file, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise ValueError(f"trace neighbour table {nb_file} is corrupt: {err}") from err
        try:
            validate_neighbours(neighbours, header.vocab_size, header.neighbour_columns)
        except ValueError as err:
            raise ValueError(f"{nb_file}: {err}") from err
    elif header.neighbour_columns:
        raise ValueError(f"trace {path} verifies with {header.verification} but has no neighbours.npy")
    chunks = sorted(path.glob("chunk-*.npz"))
    codes = None
    if (path / "codes.npy").exists():
        try:
            codes = check_embedding(np.load(path / "codes.npy", allow_pickle=False), header.vocab_size)
        except (OSError, ValueError) as err:
            raise ValueError(f"trace code table {path / 'codes.npy'} is corrupt: {err}") from err
    return Trace(path, header, neighbours, chunks, _read_embedding(path, header), codes)


def _read_embedding(path: Path, header: TraceHeader) -> np.ndarray | None:
    """The GSD embedding table stored in a trace (float64), None when the run's boost needs none."""
    emb_file = path / "embedding.npy"
    if not header.verification.reads_embedding:
        return None
    if not emb_file.exists():
        raise ValueError(f"trace {path} verifies with {header.verification} but has no embedding.npy")
    try:
        table = np.load(emb_file, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"trace embedding table {emb_file} is corrupt: {err}") from err
    try:
        return check_embedding(table, header.vocab_size)
    except ValueError as err:
        raise ValueError(f"{emb_file}: {err}") from err


def trace_neighbours(trace: Trace, relax: Relax,
                     neighbours: np.ndarray | str | Path | None = None) -> np.ndarray | None:
    """The neighbour table to verify ``trace`` with under ``relax``.

    Parameters
    ----------
    trace : Trace
        The trace (its vocabulary size checks the table).
    relax : Relax
        The relaxation the table is for.
    neighbours : ndarray, str, Path or None
        A table, or a ``.npy`` file holding one (:func:`theory.load_neighbours`);
        None for the table stored in the trace.

    Returns
    -------
    ndarray or None
        The table (None only when ``relax`` merges nothing and the trace holds none).

    Raises
    ------
    ValueError
        If ``relax`` merges and there is no table, naming the ``--neighbours`` option.
    """
    if isinstance(neighbours, (str, Path)):
        neighbours = load_neighbours(neighbours, trace.header.vocab_size)
    table = trace.neighbours if neighbours is None else neighbours
    if table is None and not relax.is_exact:
        raise ValueError(
            f"relaxation {relax} needs a neighbour table and trace {trace.path} holds none (it was recorded "
            f"with {trace.header.verification}): pass a (V, K) table of its codebook with --neighbours "
            "TABLE.npy (neighbours= in Python; theory.neighbour_table and theory.save_neighbours make one)")
    return table


def _load_npz(f: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(f, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"trace chunk {f} is corrupt: {err}") from err
    missing = [k for k in _CHUNK_KEYS if k not in data]
    if missing:
        raise ValueError(f"trace chunk {f} lacks arrays {missing}")
    return data


def _read_chunk(f: Path, vocab_size: int) -> Iterator[TraceStep]:
    d = _load_npz(f)
    if d["n_nodes"].size == 0:
        raise ValueError(f"trace chunk {f} holds no steps (the writer never writes an empty chunk): it is "
                         "damaged; remove it")
    steps = d["n_nodes"].size
    node_end = np.cumsum(d["n_nodes"])
    path_end = np.cumsum(d["path_len"])
    empty = {"u_fresh": np.zeros(0), "u_couple": np.zeros(0), "columns": np.zeros(0, dtype=np.int32),
             "stale_logits": np.zeros((0, vocab_size), dtype=d["target_logits"].dtype)}
    var = {}
    for k in _VARIABLE:  # a chunk without the array (a method that records none): empty at every step
        counts = d.get("n_fresh" if k == "u_fresh" else f"n_{k}", np.zeros(steps, dtype=np.int64))
        values = d.get(k, empty[k])
        ends = np.cumsum(counts)
        if counts.shape != node_end.shape or (ends[-1] if steps else 0) != values.shape[0]:
            raise ValueError(f"trace chunk {f} has inconsistent step lengths")
        var[k] = (values, ends - counts, ends)
    scalars = {k: d.get(k, np.full(steps, v)) for k, v in _SCALARS.items()}
    if (node_end[-1] != d["parents"].size or path_end[-1] != d["path"].size
            or any(v.shape != node_end.shape for v in scalars.values())):
        raise ValueError(f"trace chunk {f} has inconsistent step lengths")
    for i in range(steps):
        a, b = node_end[i] - d["n_nodes"][i], node_end[i]
        pa, pb = path_end[i] - d["path_len"][i], path_end[i]
        step = TraceStep(
            sequence=int(d["sequence"][i]), position=int(d["position"][i]),
            parents=d["parents"][a:b], tokens=d["tokens"][a:b],
            target_logits=d["target_logits"][a:b], draft_logits=d["draft_logits"][a:b],
            u_accept=d["u_accept"][a:b], u_draw=d["u_draw"][a:b],
            path=d["path"][pa:pb], bonus=int(d["bonus"][i]),
            **{k: values[start[i]:end[i]] for k, (values, start, end) in var.items()},
            noise_key=int(scalars["noise_key"][i]), mean_accepted=float(scalars["mean_accepted"][i]),
        )
        check_step(step, vocab_size, str(f))
        yield step


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


__all__ = [
    "LOGIT_DTYPES",
    "TRACE_VERSION",
    "Sampling",
    "Trace",
    "TraceHeader",
    "TraceStep",
    "TraceWriter",
    "array_sha256",
    "file_sha256",
    "read_trace",
    "trace_neighbours",
]
