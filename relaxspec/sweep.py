"""Resumable sweeps: a grid of worlds x trees x rules x variants x relaxations x temperatures -> CSV.

A config (TOML) holds the grid and the run sizes::

    worlds = ["ambiguous", "confident"]          # presets
    trees = ["eagle2:10,4,59", "static:naive_extend_57", "ddd:10,11,5/7/9,-0.3,60", "sequoia:57,8"]
    rules = ["r1"]                               # r1, r2, r3
    variants = ["principled"]                    # principled, official
    relaxations = ["none", "additive:k=1000,delta=0.1", "multiplicative:k=1000,lam=2"]
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

Tree specs: ``static:NAME`` (mc_sim_7b_63, naive_extend_57), ``chain:N``,
``eagle2:K,D,M``, ``ddd:K,CALLS,S1/S2/..,THRESHOLD,M``, ``sequoia:N,DEPTH``
(acceptance measured per world, rule, relaxation and temperature, as
Sequoia does, with a one-level tree). Rule r2 is run on static trees only.

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
``MAX_TREE_DEPTH`` = 64, K + D K^2 at most ``MAX_POOL_NODES`` = 65536.

Combinations that cannot or need not run are skipped, with a warning naming
them (a grid with nothing left to run is refused): rule r2 on trees that do
not draw children from q (dynamic and relaxation-aware trees), and variant
official where it equals principled (exact verification, rule r3).

Each finished configuration appends one CSV row, written with a single
``os.write`` and synced, so a crash leaves whole rows and at most one torn
last line; a configuration whose hash (of its config columns) is already in
the CSV is skipped, so an interrupted sweep resumes where it stopped. On
resume a torn last line (no line end, or the wrong number of fields) is cut
off with a warning and its configuration runs again. The ``seconds`` column
is the wall-clock time of the configuration's decoding, measured after a
one-step warm-up run of the same configuration (Numba compilation, cache
loading and neighbour tables excluded; the Sequoia measurement and tree
building excluded too); every other column is independent of the warm-up.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import tomllib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np

from core.cost import DEFAULT_TABLE, CostModel
from core.trees.policies import (
    MAX_TREE_NODES,
    check_budget,
)
from core.trees.selection import ChildSelector
from core.trees.spec import R2_FORMS, check_tree_spec, draws_children, parse_tree
from relaxspec.results import (
    append_line,
    config_key,
    csv_line,
    drop_torn_tail,
    read_done,
    result_row,
)
from simulate.acceptance import measure_positional_acceptance
from simulate.engine import run
from simulate.worlds import PRESETS, LatentParams, LatentWorld
from theory.relax import Relax
from theory.rules import RULES, VARIANTS

_LIST_KEYS = {"worlds": "strings", "trees": "strings", "rules": "strings", "variants": "strings",
              "relaxations": "strings", "temperatures": "numbers"}
_SCALAR_KEYS = {"n_sequences": 1, "seq_len": 1, "seed": 0, "threads": 1}  # lower bounds
_TABLE_KEYS = {"world_overrides", "sequoia", "cost"}
_SEQUOIA_KEYS = {"width": int, "n_sequences": int, "seq_len": int}
_COST_KEYS = {"table", "model", "drafter"}


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep grid."""

    worlds: list[str]
    trees: list[str]
    rules: list[str] = field(default_factory=lambda: ["r1"])
    variants: list[str] = field(default_factory=lambda: ["principled"])
    relaxations: list[Relax] = field(default_factory=lambda: [Relax.none()])
    temperatures: list[float] = field(default_factory=lambda: [1.0])
    n_sequences: int = 8
    seq_len: int = 256
    seed: int = 0
    threads: int | None = None
    world_overrides: dict = field(default_factory=dict)
    sequoia: dict = field(default_factory=lambda: {"width": 16, "n_sequences": 8, "seq_len": 64})
    cost: dict = field(default_factory=lambda: {"table": str(DEFAULT_TABLE), "model": "GPT-B"})

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> SweepConfig:
        """Validate a parsed config; raise ``ValueError`` naming unknown keys, bad values and types, tree
        sizes over the limits, and a grid whose every combination would be skipped."""
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
            if not isinstance(val, list) or not val or not all(_is_number(v) if kind == "numbers"
                                                               else isinstance(v, str) for v in val):
                raise ValueError(f"{source}: {key} must be a non-empty list of {kind}, got {val!r}")
            kw[key] = list(val)
        for key, lo in _SCALAR_KEYS.items():
            if key in d:
                if not _is_int(d[key]) or d[key] < lo:
                    what = "a non-negative" if lo == 0 else "a positive"
                    raise ValueError(f"{source}: {key} must be {what} integer, got {d[key]!r}")
                kw[key] = d[key]
        if "threads" in kw and kw["threads"] > numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"{source}: threads must be in [1, {numba.config.NUMBA_NUM_THREADS}], "
                             f"got {kw['threads']!r}")
        for w in kw["worlds"]:
            if w not in PRESETS:
                raise ValueError(f"{source}: unknown world {w!r}; presets: {sorted(PRESETS)}")
        for r in kw.get("rules", []):
            if r not in RULES:
                raise ValueError(f"{source}: unknown rule {r!r}; expected one of {RULES}")
        for v in kw.get("variants", []):
            if v not in VARIANTS:
                raise ValueError(f"{source}: unknown variant {v!r}; expected one of {VARIANTS}")
        for t in kw.get("temperatures", []):
            if not (np.isfinite(t) and t > 0):
                raise ValueError(f"{source}: temperatures must be finite and > 0, got {t!r}")
        kw["temperatures"] = [float(t) for t in kw.get("temperatures", [1.0])]
        try:
            kw["relaxations"] = [Relax.parse(r) for r in kw.get("relaxations", ["none"])]
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from err
        for t in kw["trees"]:
            if "\n" in t or "\r" in t:
                raise ValueError(f"{source}: tree spec {t!r} holds a line break")
            try:
                check_tree_spec(t)
            except ValueError as err:
                raise ValueError(f"{source}: {err}") from err
        kw["world_overrides"] = _world_overrides(d.get("world_overrides", {}), kw["worlds"], source)
        seq = dict(cls.__dataclass_fields__["sequoia"].default_factory())
        extra = _table(d, "sequoia", source)
        if set(extra) - set(_SEQUOIA_KEYS):
            raise ValueError(f"{source}: sequoia takes only {sorted(_SEQUOIA_KEYS)}")
        for key, val in extra.items():
            if not _is_int(val) or val < 1:
                raise ValueError(f"{source}: sequoia.{key} must be a positive integer, got {val!r}")
        if "width" in extra:
            check_budget(f"{source}: sequoia.width", extra["width"], 1, MAX_TREE_NODES)
        seq.update(extra)
        kw["sequoia"] = seq
        cost = dict(cls.__dataclass_fields__["cost"].default_factory())
        extra = _table(d, "cost", source)
        if set(extra) - _COST_KEYS:
            raise ValueError(f"{source}: cost takes only {sorted(_COST_KEYS)}")
        for key, val in extra.items():
            if not isinstance(val, str):
                raise ValueError(f"{source}: cost.{key} must be a string, got {val!r}")
        cost.update(extra)
        kw["cost"] = cost
        cfg = cls(**kw)
        if next(jobs(cfg), None) is None:
            raise ValueError(f"{source}: the grid has no configuration to run: " + "; ".join(cfg.skipped()))
        return cfg

    def skipped(self) -> list[str]:
        """What the grid skips and why, one line per reason (empty when every combination runs)."""
        r2, official = set(), set()
        for t, rule, var, relax in itertools.product(self.trees, self.rules, self.variants, self.relaxations):
            reason = _skip_reason(t, rule, var, relax)
            if reason == "r2":
                r2.add(t)
            elif reason == "official":
                official.add("rule r3" if rule == "r3" else f"relaxation {relax}")
        out = []
        if r2:
            out.append(f"skipped rule r2 on {', '.join(t for t in self.trees if t in r2)}: R2 verifies "
                       "drafts sampled from q without replacement, which needs a static tree ranked by q "
                       f"(trees that accept r2: {R2_FORMS})")
        if official:
            hint = "" if "principled" in self.variants else "; add variant principled for those rows"
            out.append(f"skipped variant official for {' and '.join(sorted(official))}: identical to "
                       "principled there (the official rejection update differs only for a relaxed R1 or "
                       f"R2 test){hint}")
        return out

    def cost_table(self) -> CostModel:
        """The ``[cost]`` table (``CostModel.from_table``)."""
        return CostModel.from_table(self.cost["table"], self.cost["model"], drafter=self.cost.get("drafter"))

    @classmethod
    def load(cls, path: str | Path) -> SweepConfig:
        """Read a TOML config."""
        path = Path(path)
        try:
            d = tomllib.loads(path.read_text())
        except OSError as err:
            raise ValueError(f"cannot read config {path}: {err}") from err
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"config {path} is not valid TOML: {err}") from err
        return cls.from_dict(d, source=str(path))


def _is_int(v: object) -> bool:
    """An integer that is not a bool (TOML integers)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    """An integer or float that is not a bool (TOML numbers)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def _table(d: dict, key: str, source: str) -> dict:
    """The optional table ``d[key]`` ({} when absent), else a ``ValueError``."""
    val = d.get(key, {})
    if not isinstance(val, dict):
        raise ValueError(f"{source}: {key} must be a table ([{key}]), got {val!r}")
    return val


def _world_overrides(over: object, worlds: list[str], source: str) -> dict:
    """``[world_overrides]`` checked key by key against :class:`LatentParams` (names, types, then the
    values, by building every world's parameters)."""
    over = _table({"world_overrides": over}, "world_overrides", source)
    fields = {f.name: f for f in dataclasses.fields(LatentParams)}
    bad = set(over) - set(fields)
    if bad:
        raise ValueError(f"{source}: unknown world_overrides {sorted(bad)}; allowed: {sorted(fields)}")
    for key, val in over.items():
        kind = type(fields[key].default)
        ok = {int: _is_int, float: _is_number, str: lambda v: isinstance(v, str)}[kind](val)
        if not ok:
            what = {int: "an integer", float: "a number", str: "a string"}[kind]
            raise ValueError(f"{source}: world_overrides.{key} must be {what}, got {val!r}")
    for w in worlds:
        try:
            dataclasses.replace(PRESETS[w], **over)
        except ValueError as err:
            raise ValueError(f"{source}: world_overrides for world {w!r}: {err}") from err
    return dict(over)


@dataclass(frozen=True)
class Job:
    """One configuration of the grid."""

    world: str
    tree: str
    rule: str
    variant: str
    relax: Relax
    temperature: float

    def row_config(self, cfg: SweepConfig) -> dict:
        """The configuration columns of this job's row."""
        r = self.relax
        return {"world": self.world, "tree": self.tree, "rule": self.rule, "variant": self.variant,
                "relax": r.kind, "k": r.k, "delta": r.delta, "lam": r.lam, "temperature": self.temperature,
                "n_sequences": cfg.n_sequences, "seq_len": cfg.seq_len, "seed": cfg.seed}


def jobs(cfg: SweepConfig) -> Iterator[Job]:
    """Every configuration of the grid (r2 on static trees only; variants only where they differ:
    :meth:`SweepConfig.skipped` says what is left out)."""
    for w, t, rule, var, relax, temp in itertools.product(cfg.worlds, cfg.trees, cfg.rules, cfg.variants,
                                                          cfg.relaxations, cfg.temperatures):
        if _skip_reason(t, rule, var, relax) is None:
            yield Job(w, t, rule, var, relax, temp)


def _skip_reason(tree: str, rule: str, variant: str, relax: Relax) -> str | None:
    """Why a combination is not run: ``"r2"`` (the tree cannot draw children), ``"official"`` (identical
    to principled), or None."""
    if rule == "r2" and not draws_children(tree):
        return "r2"
    if variant == "official" and (relax.is_exact or rule == "r3"):
        return "official"
    return None


def run_sweep(cfg: SweepConfig, out: str | Path, *, progress: bool = True) -> list[dict]:
    """Run every configuration not yet in ``out``, appending rows as they finish; returns the new rows.

    A torn last line of ``out`` (a crash while a row was written) is dropped first, with a warning;
    combinations the grid skips are named in a warning (:meth:`SweepConfig.skipped`)."""
    from tqdm import tqdm

    out = Path(out)
    for line in cfg.skipped():
        warnings.warn(f"sweep: {line}", UserWarning, stacklevel=2)
    drop_torn_tail(out)
    done = read_done(out)
    todo = [j for j in jobs(cfg) if config_key(j.row_config(cfg)) not in done]
    worlds: dict[str, LatentWorld] = {}
    vectors: dict[tuple, list[float]] = {}
    new_rows = []
    if not out.exists() or out.stat().st_size == 0:
        out.parent.mkdir(parents=True, exist_ok=True)
        append_line(out, csv_line(None))
    bar = tqdm(todo, desc="sweep", unit="config", disable=not progress)
    for job in bar:
        bar.set_postfix_str(f"{job.world} {job.tree} {job.rule} {job.relax}")
        world = worlds.get(job.world)
        if world is None:
            world = worlds[job.world] = LatentWorld.preset(job.world, **cfg.world_overrides)
        def acceptance(selector: ChildSelector, relax: Relax, job: Job = job,
                       world: LatentWorld = world) -> list[float]:
            key = (job.world, job.rule, job.variant, str(relax), job.temperature, str(selector))
            if key not in vectors:
                s = cfg.sequoia
                vectors[key] = measure_positional_acceptance(
                    world, width=s["width"], rule=job.rule, relax=relax, variant=job.variant,
                    n_sequences=s["n_sequences"], seq_len=s["seq_len"], temperature=job.temperature,
                    seed=cfg.seed + 1, threads=cfg.threads, selector=selector).tolist()
            return vectors[key]
        tree = parse_tree(job.tree, acceptance=acceptance, relax=job.relax, neighbours=world.neighbours,
                          cost=cfg.cost_table)
        settings = {"rule": job.rule, "relax": job.relax, "variant": job.variant,
                    "temperature": job.temperature, "seed": cfg.seed, "threads": cfg.threads}
        # warm-up: one step of one sequence compiles (or loads) the kernels for this configuration's
        # argument types and builds its tables, so that `seconds` times the decoding alone
        run(world, tree, n_sequences=1, seq_len=1, **settings)
        t0 = time.perf_counter()
        res = run(world, tree, n_sequences=cfg.n_sequences, seq_len=cfg.seq_len, **settings)
        res.seconds = time.perf_counter() - t0
        row = result_row(res, job.world, job.tree)
        append_line(out, csv_line(row))
        new_rows.append(row)
    return new_rows


