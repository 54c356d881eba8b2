"""Resumable sweeps: a grid of worlds x trees x verifications x temperatures -> CSV.

A config (TOML) holds the grid and the run sizes::

    worlds = ["ambiguous", "confident"]          # presets, or world files ("fitted.toml": relaxspec fit)
    trees = ["eagle2:10,4,59", "static:naive_extend_57", "ddd:10,11,5/7/9,-0.3,60", "sequoia:57,8"]
    verifications = [                            # theory.verification specs (default ["r1"])
        "r1",                                    # the exact test (rules r1, r2, r3, r4)
        "r1+lantern:k=1000,delta=0.1",           # LANTERN
        "r1+lantern++:k=1000,lam=2",             # LANTERN++
        "r1+lantern:k=1000,delta=0.1/official",  # as LANTERN's code does it
        "r2+gsd:G=10", "r2+cool:omega=2/1.5", "r2+budget:tv=0.05,k=8",   # boosts of R2 (or R4)
    ]
    temperatures = [1.0]
    n_sequences = 8
    seq_len = 256
    seed = 0
    threads = 2                                  # optional
    [world_overrides]                            # optional LatentParams overrides for every world
    vocab_size = 4096
    [sequoia]                                    # optional: how Sequoia's acceptance vector is measured
    width = 16
    n_sequences = 8
    seq_len = 64

    [cost]                                       # optional: the cost table of costaware trees
    table = "core/tables/decoder_cpu.csv"
    model = "GPT-B"

A verification is one value (:class:`theory.verification.Verification`: rule, relaxation or boost,
variant), written as its spec; each is checked when the config is read (a boost with rule r1, R4 with a
LANTERN relaxation: refused, naming the spec) and stored canonical (``lantern:k=1000,delta=0.1`` is the
row ``r1+lantern:k=1000,delta=0.1``). A grid of rules x methods is a list comprehension away in Python
(``SweepConfig.from_dict``); in TOML each configuration is listed, so what runs is what is written.

Tree specs: ``static:NAME`` (mc_sim_7b_63, naive_extend_57), ``chain:N``,
``eagle2:K,D,M``, ``ddd:K,CALLS,S1/S2/..,THRESHOLD,M``, ``sequoia:N,DEPTH``
(acceptance measured per world, verification (unboosted) and temperature, as
Sequoia does, with a one-level tree). Rules r2 and r4 (traversal verification,
SPEC 9.6) are run on static trees whose children are drawn from q only.

Relaxation-aware trees (issue 7; the selection uses the job's relaxation
and the world's neighbour table, see :mod:`core.trees.selection`):
``latent:K,D,M[,POOL]``, ``latent-diverse:K,D,M[,POOL]``,
``latent-walk:K,D,M[,POOL]`` (:class:`~core.trees.policies.LatentAwareTree`);
``sequoia-lossless:N,DEPTH`` (acceptance measured with the exact rule,
children by q: Sequoia as published, verified with the job's rule);
``sequoia-latent:N,DEPTH``, ``sequoia-diverse:N,DEPTH``,
``sequoia-walk:N,DEPTH`` (measured under the job's rule with children
picked by that selection); ``costaware:N,DEPTH[,MODE]`` (the Sequoia tree
of at most N nodes and depth DEPTH whose predicted speedup on the
``[cost]`` table is largest; MODE q, latent, diverse or walk, default q).

Tree sizes are bounded (:mod:`core.trees.policies`): N, chain lengths and M - 1
at most ``MAX_TREE_NODES`` = 2048 draft nodes (also the latent POOL and
``[sequoia] width``), D, CALLS - 1 and Sequoia's DEPTH at most
``MAX_TREE_DEPTH`` = 64, K + D K^2 at most ``MAX_POOL_NODES`` = 65536. So are worlds
(:mod:`simulate.world_params`) and seeds (``simulate.rng.MAX_SEED``); each world is checked against the
temperatures (logits within the float32 kernels' bound) and every k (at most V - 1) before anything runs.

Boosts (SPEC 9.2-9.3 and 9.5, ``theory.boost.Boost``: the budget merging the world's
neighbour table within tv per node, GSD's group acceptance reading the
world's codebook, Cool-SD's depth-scaled acceptance) raise R2's sampled-draft
test (R2's stages, R4's edges); the ``verification`` column records the whole spec.

Pairs of a tree and a verification that cannot or need not run are skipped, with a warning naming
them (a grid with nothing left to run is refused): what the tree drafts, the verification cannot verify
(``Verification.source_problem``: rules r2 and r4 on trees that do not draw children from q, a Jacobi
window with rule r1 or r3 or a LANTERN relaxation), and variant official where it equals principled
(``Verification.variant_matters``). The whole grid is checked before anything runs, so a sweep never
stops part way on a combination it cannot run.

Tree specs are stored in their canonical form (``core.trees.spec.check_tree_spec``: ``eagle2:010, 4, 59``
is the row ``eagle2:10,4,59``), as verifications are; a list naming one value twice is refused.

Each finished configuration appends one CSV row, written with a single
``os.write`` and synced, so a crash leaves whole rows and at most one torn
last line; a configuration whose hash (of its config columns) is already in
the CSV is skipped, so an interrupted sweep resumes where it stopped. The
config columns (world, tree, verification, temperature, run sizes, settings) hold every setting that
changes a row: the tables' settings
that differ from their defaults are the ``settings`` column
(:meth:`SweepConfig.row_settings`: the world overrides that differ from the
preset, ``[sequoia]`` for trees built from a measured acceptance vector,
``[cost]`` for costaware trees), so a sweep rerun into the same CSV with a
changed setting writes new rows. On
resume a torn last line (no line end, or the wrong number of fields) is cut
off with a warning and its configuration runs again. The ``seconds`` column
is the wall-clock time of the configuration's decoding, measured after a
one-step warm-up run of the same configuration (Numba compilation, cache
loading and neighbour tables excluded; the Sequoia measurement and tree
building excluded too); every other column is independent of the warm-up.

Where the configurations run (``relaxspec simulate --scheduler``, :func:`run_sweep`'s ``scheduler``) is
:mod:`core.execution`'s choice: in this process, on a local Dask cluster or on a running Dask scheduler,
one task per configuration. Rows stream back and are appended as they finish, so a distributed sweep
resumes exactly like a serial one, and every column but ``seconds`` is the same wherever it ran.
"""

from __future__ import annotations

import itertools
import time
import tomllib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numba
import numpy as np

from relaxspec.core.cost import DEFAULT_TABLE, CostModel
from relaxspec.core.trees.policies import (
    MAX_TREE_NODES,
    check_budget,
)
from relaxspec.core.trees.selection import ChildSelector
from relaxspec.core.trees.spec import (
    check_tree_spec,
    draft_source,
    measures_acceptance,
    parse_tree,
    tree_kind,
)
from relaxspec.results import (
    config_key,
    csv_line,
    drop_torn_tail,
    read_done,
    result_row,
    settings_text,
)
from relaxspec.results_lock import ResultsLock, append_line
from relaxspec.simulate.acceptance import SEQUOIA_MEASUREMENT, measure_positional_acceptance
from relaxspec.simulate.engine import run
from relaxspec.simulate.rng import check_seed
from relaxspec.simulate.world_file import is_world_file, params_sha256, world_params
from relaxspec.simulate.worlds import LatentWorld, check_world_settings
from relaxspec.sweep_checks import is_int, is_number, no_repeats, table, world_overrides
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import DEFAULT_VARIANT, Verification

_LIST_KEYS = {"worlds": "strings", "trees": "strings", "verifications": "strings", "temperatures": "numbers"}
_SPLIT_KEYS = ("rules", "variants", "relaxations", "boosts")  # an older relaxspec's grid: one list now
_SCALAR_KEYS = {"n_sequences": 1, "seq_len": 1, "seed": 0, "threads": 1}  # lower bounds
_TABLE_KEYS = {"world_overrides", "sequoia", "cost"}
_SEQUOIA_KEYS = {"width": int, "n_sequences": int, "seq_len": int}
_COST_KEYS = {"table", "model", "drafter"}
DEFAULT_SEQUOIA = SEQUOIA_MEASUREMENT  # how Sequoia's vectors are measured
DEFAULT_COST = {"table": str(DEFAULT_TABLE), "model": "GPT-B"}  # the costaware trees' cost table


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep grid."""

    worlds: list[str]
    trees: list[str]
    verifications: list[Verification] = field(default_factory=lambda: [Verification()])
    temperatures: list[float] = field(default_factory=lambda: [1.0])
    n_sequences: int = 8
    seq_len: int = 256
    seed: int = 0
    threads: int | None = None
    world_overrides: dict = field(default_factory=dict)
    sequoia: dict = field(default_factory=lambda: dict(DEFAULT_SEQUOIA))
    cost: dict = field(default_factory=lambda: dict(DEFAULT_COST))

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> SweepConfig:
        """Validate a parsed config; raise ``ValueError`` naming unknown keys, bad values and types, tree
        sizes over the limits, and a grid whose every combination would be skipped."""
        split = [key for key in _SPLIT_KEYS if key in d]
        if split:
            raise ValueError(f"{source}: {', '.join(split)}: a verification is one value now: list them as "
                             'verifications = ["r1", "r1+lantern:k=1000,delta=0.1", "r2+gsd:G=10", ...] '
                             "(relaxspec/sweep.py)")
        unknown = set(d) - set(_LIST_KEYS) - set(_SCALAR_KEYS) - _TABLE_KEYS
        if unknown:
            raise ValueError(f"{source}: unknown keys {sorted(unknown)}; allowed: "
                             f"{sorted(set(_LIST_KEYS) | set(_SCALAR_KEYS) | _TABLE_KEYS)}")
        for key in ("worlds", "trees"):
            if key not in d:
                raise ValueError(f"{source}: missing required key {key!r}")
        kw: dict = {}
        for key, kind in _LIST_KEYS.items():
            if key not in d:
                continue
            val = d[key]
            if not isinstance(val, list) or not val or not all(is_number(v) if kind == "numbers"
                                                               else isinstance(v, str) for v in val):
                raise ValueError(f"{source}: {key} must be a non-empty list of {kind}, got {val!r}")
            kw[key] = list(val)
        for key, lo in _SCALAR_KEYS.items():
            if key == "seed" and key in d:  # the one seed rule (simulate.rng.check_seed)
                kw[key] = check_seed(d[key], f"{source}: seed")
            elif key in d:
                if not is_int(d[key]) or d[key] < lo:
                    what = "a non-negative" if lo == 0 else "a positive"
                    raise ValueError(f"{source}: {key} must be {what} integer, got {d[key]!r}")
                kw[key] = d[key]
        if "threads" in kw and kw["threads"] > numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"{source}: threads must be in [1, {numba.config.NUMBA_NUM_THREADS}], "
                             f"got {kw['threads']!r}")
        for w in kw["worlds"]:  # a preset or a world file (relaxspec fit's *.toml)
            try:
                world_params(w)
            except ValueError as err:
                raise ValueError(f"{source}: {err}") from err
        for t in kw.get("temperatures", []):
            if not (np.isfinite(t) and t > 0):
                raise ValueError(f"{source}: temperatures must be finite and > 0, got {t!r}")
        kw["temperatures"] = [float(t) for t in kw.get("temperatures", [1.0])]
        try:
            kw["verifications"] = [Verification.parse(v) for v in kw.get("verifications", ["r1"])]
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from err
        trees = []
        for t in kw["trees"]:
            if "\n" in t or "\r" in t:
                raise ValueError(f"{source}: tree spec {t!r} holds a line break")
            try:
                trees.append(check_tree_spec(t))  # stored canonical: one tree, one row key
            except ValueError as err:
                raise ValueError(f"{source}: {err}") from err
        kw["trees"] = trees
        for key in _LIST_KEYS:
            if key in d:
                no_repeats(key, d[key], kw[key], source)
        kw["world_overrides"] = world_overrides(d.get("world_overrides", {}), kw["worlds"], source)
        widths = {str(v): v.neighbour_k for v in kw["verifications"] if v.neighbour_k}
        for w in kw["worlds"]:  # temperatures and neighbour widths against each world, before building any
            try:
                check_world_settings(w, kw["world_overrides"], kw["temperatures"], widths)
            except ValueError as err:
                raise ValueError(f"{source}: world {w!r}: {err}") from err
        seq = dict(DEFAULT_SEQUOIA)
        extra = table(d, "sequoia", source)
        if set(extra) - set(_SEQUOIA_KEYS):
            raise ValueError(f"{source}: sequoia takes only {sorted(_SEQUOIA_KEYS)}")
        for key, val in extra.items():
            if not is_int(val) or val < 1:
                raise ValueError(f"{source}: sequoia.{key} must be a positive integer, got {val!r}")
        if "width" in extra:
            check_budget(f"{source}: sequoia.width", extra["width"], 1, MAX_TREE_NODES)
        seq.update(extra)
        kw["sequoia"] = seq
        cost = dict(DEFAULT_COST)
        extra = table(d, "cost", source)
        if set(extra) - _COST_KEYS:
            raise ValueError(f"{source}: cost takes only {sorted(_COST_KEYS)}")
        for key, val in extra.items():
            if not isinstance(val, str):
                raise ValueError(f"{source}: cost.{key} must be a string, got {val!r}")
        cost.update(extra)
        kw["cost"] = cost
        cfg = cls(**kw)
        if any(tree_kind(t) == "costaware" for t in cfg.trees):
            try:
                cfg.cost_table()  # read now, not by the first costaware row after others ran
            except (OSError, ValueError) as err:
                raise ValueError(f"{source}: cost table of the costaware trees: {err}") from err
        if next(jobs(cfg), None) is None:
            raise ValueError(f"{source}: the grid has no configuration to run: " + "; ".join(cfg.skipped()))
        return cfg

    def skipped(self) -> list[str]:
        """What the grid skips and why, one line per verification and reason (empty when every pair of a
        tree and a verification runs)."""
        trees: dict[tuple[str, str], list[str]] = {}  # (verification, reason) -> the trees it skips
        for t, v in itertools.product(self.trees, self.verifications):
            reason = _skip_reason(t, v)
            if reason is not None:
                trees.setdefault((str(v), reason), []).append(t)
        return [f"skipped {v} on {', '.join(ts)}: {reason}" for (v, reason), ts in trees.items()]

    def row_settings(self, world: str, tree: str) -> str:
        """The ``settings`` column of the rows of ``world`` and ``tree``
        (:func:`relaxspec.results.settings_text`): the settings of the config's tables that change those
        rows and differ from their defaults (the world overrides that differ from the preset, ``[sequoia]``
        for a tree built from a measured acceptance vector, ``[cost]`` for a costaware tree)."""
        preset = world_params(world)
        changed = {"world_overrides": {k: v for k, v in self.world_overrides.items()
                                       if getattr(preset, k) != v}}
        if is_world_file(world):  # a world file's rows are keyed by its parameters, not only its path
            changed["world_file"] = {"params_sha256": params_sha256(preset)[:16]}
        if measures_acceptance(tree):
            changed["sequoia"] = {k: v for k, v in self.sequoia.items() if DEFAULT_SEQUOIA.get(k) != v}
        if tree_kind(tree) == "costaware":
            changed["cost"] = {k: v for k, v in self.cost.items() if DEFAULT_COST.get(k) != v}
        return settings_text({table: values for table, values in changed.items() if values})

    def cost_table(self) -> CostModel:
        """The ``[cost]`` table (``CostModel.from_table``)."""
        return CostModel.from_table(self.cost["table"], self.cost["model"], drafter=self.cost.get("drafter"))

    @classmethod
    def load(cls, path: str | Path) -> SweepConfig:
        """Read a TOML config (a ``ValueError`` naming it when it cannot be read, is not UTF-8 text or
        not TOML, or holds a bad value)."""
        path = Path(path)
        try:
            d = tomllib.loads(path.read_bytes().decode("utf-8"))  # TOML is UTF-8, whatever the locale
        except OSError as err:
            raise ValueError(f"cannot read config {path}: {err}") from err
        except UnicodeDecodeError as err:
            raise ValueError(f"config {path} is not UTF-8 text, so not a TOML file (byte "
                             f"0x{err.object[err.start]:02x} at offset {err.start})") from None
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"config {path} is not valid TOML: {err}") from err
        return cls.from_dict(d, source=str(path))


@dataclass(frozen=True)
class Job:
    """One configuration of the grid."""

    world: str
    tree: str
    verification: Verification
    temperature: float

    def row_config(self, cfg: SweepConfig) -> dict:
        """The configuration columns of this job's row."""
        return {"world": self.world, "tree": self.tree, "verification": str(self.verification),
                "temperature": self.temperature, "n_sequences": cfg.n_sequences, "seq_len": cfg.seq_len,
                "seed": cfg.seed, "settings": cfg.row_settings(self.world, self.tree)}


def jobs(cfg: SweepConfig) -> Iterator[Job]:
    """Every configuration of the grid that runs (:meth:`SweepConfig.skipped` says what is left out)."""
    for w, t, v, temp in itertools.product(cfg.worlds, cfg.trees, cfg.verifications, cfg.temperatures):
        if _skip_reason(t, v) is None:
            yield Job(w, t, v, temp)


def _skip_reason(tree: str, verification: Verification) -> str | None:
    """Why a tree and a verification are not run together (None: they are): what the tree drafts, the
    verification cannot verify (``Verification.source_problem``, the one home of that check), or the
    official variant where it decides as the principled one does."""
    problem = verification.source_problem(draft_source(tree))
    if problem is not None:
        return problem
    principled = replace(verification, variant=DEFAULT_VARIANT)
    if verification != principled and not verification.variant_matters:
        return (f"identical to {principled} (the official rejection update differs only for a relaxed R1 or "
                "R2 test)")
    return None


def build_world(cfg: SweepConfig, name: str) -> LatentWorld:
    """World ``name`` of the grid, with the neighbour table its relaxations and budget boosts read (loaded
    from the on-disk cache of :meth:`LatentWorld.neighbours` or computed): a sweep's large read-only input,
    built once per sweep (on a cluster: once, by :meth:`core.execution.Executor.share`)."""
    world = LatentWorld.preset(name, **cfg.world_overrides)
    widths = [v.neighbour_k for v in cfg.verifications if v.neighbour_k]
    if widths:
        world.neighbours(max(widths))
    return world


def run_job(cfg: SweepConfig, job: Job, world: LatentWorld, vectors: dict | None = None,
            threads: int | None = None) -> dict:
    """One configuration's CSV row: build its tree (measuring Sequoia's acceptance vector when the tree
    needs one, memoised in ``vectors`` across jobs when given), warm up, then time the decoding.

    ``threads`` (default: the config's) sets Numba's threads; it changes no number but ``seconds``."""
    threads = cfg.threads if threads is None else threads
    tree = job_tree(cfg, job, world, vectors, threads)
    settings = {"temperature": job.temperature, "seed": cfg.seed, "threads": threads}
    # warm-up: one step of one sequence compiles (or loads) the kernels for this configuration's
    # argument types and builds its tables, so that `seconds` times the decoding alone
    run(world, tree, job.verification, n_sequences=1, seq_len=1, **settings)
    t0 = time.perf_counter()
    res = run(world, tree, job.verification, n_sequences=cfg.n_sequences, seq_len=cfg.seq_len, **settings)
    res.seconds = time.perf_counter() - t0
    return result_row(res, job.world, job.tree, cfg.row_settings(job.world, job.tree))


def job_tree(cfg: SweepConfig, job: Job, world: LatentWorld, vectors: dict | None = None,
             threads: int | None = None):
    """The tree policy of ``job`` in ``world`` (``core.trees.spec.parse_tree``), measuring Sequoia's
    acceptance vector as ``cfg.sequoia`` says when the tree needs one (memoised in ``vectors``)."""
    vectors = {} if vectors is None else vectors

    def acceptance(selector: ChildSelector, relax: Relax) -> list[float]:
        measured = job.verification.measured_with(relax)
        key = (job.world, measured, job.temperature, str(selector))
        if key not in vectors:
            s = cfg.sequoia
            vectors[key] = measure_positional_acceptance(
                world, measured, width=s["width"], n_sequences=s["n_sequences"], seq_len=s["seq_len"],
                temperature=job.temperature, seed=cfg.seed + 1, threads=threads, selector=selector).tolist()
        return vectors[key]

    return parse_tree(job.tree, acceptance=acceptance, relax=job.verification.relax,
                      neighbours=world.neighbours, cost=cfg.cost_table)


def run_sweep(cfg: SweepConfig, out: str | Path, *, progress: bool = True, scheduler: str = "none",
              workers: int | None = None) -> list[dict]:
    """Run every configuration not yet in ``out``, appending rows as they finish; returns the new rows.

    ``scheduler`` says where the configurations run (:class:`core.execution.Executor`: ``"none"``, this
    process, one after another in grid order; ``"local"``, a local Dask cluster of ``workers`` processes;
    or a Dask scheduler's address), one task each; on a cluster each task decodes with one Numba thread
    unless the config sets ``threads``, its world (:func:`build_world`) is built once and fetched once by
    each worker, and rows are appended in the order they finish. Every column but ``seconds`` is the same
    wherever a configuration runs. A torn last line of ``out`` (a crash while a row was written) is dropped
    first, with a warning; combinations the grid skips are named in a warning (:meth:`SweepConfig.skipped`).
    ``out`` must be a regular file or a new path and, if not empty, a results CSV whose rows are all whole
    and typed (a ``ValueError`` names the file and line otherwise, before anything changes); it is
    locked while the sweep runs (:class:`relaxspec.results_lock.ResultsLock`).
    """
    out = Path(out)
    for line in cfg.skipped():
        warnings.warn(f"sweep: {line}", UserWarning, stacklevel=2)
    with ResultsLock(out):  # one writer per file: a second sweep is refused at once
        return _run_locked(cfg, out, progress, scheduler, workers)


def _run_locked(cfg: SweepConfig, out: Path, progress: bool, scheduler: str,
                workers: int | None) -> list[dict]:
    """:func:`run_sweep` once ``out`` is locked."""
    import sys

    from tqdm.auto import tqdm

    from relaxspec.core.execution import Executor

    drop_torn_tail(out)  # refuses a file that is not ours before it changes anything
    done = read_done(out)
    todo = [j for j in jobs(cfg) if config_key(j.row_config(cfg)) not in done]
    new_rows = []
    labels = [f"{j.world} {j.tree} {j.verification} T={j.temperature:g}" for j in todo]
    with Executor(scheduler, workers, tasks=len(todo), dashboard=progress) as executor:
        if out.stat().st_size == 0:  # a new file (the lock created it) or an empty one
            append_line(out, csv_line(None))
        bar = tqdm(total=len(todo), desc="sweep", unit="config", disable=not progress)
        if progress and not executor.inline:
            bar.write(f"sweep: {len(todo)} configurations {executor.describe()}", file=sys.stderr)
        # on a cluster: no shared memo of Sequoia vectors (each task measures its own: the same numbers)
        vectors = {} if executor.inline else None
        threads = cfg.threads if executor.inline or cfg.threads is not None else 1
        names = dict.fromkeys(j.world for j in todo)
        worlds = {name: executor.share(build_world, cfg, name) for name in names}
        calls = [(cfg, job, worlds[job.world], vectors, threads) for job in todo]
        with bar:
            for i, row in executor.run(run_job, calls, labels):
                append_line(out, csv_line(row))
                new_rows.append(row)
                bar.set_postfix_str(labels[i], refresh=False)
                bar.update()
    return new_rows


