"""``relaxspec mini validate``: the validation of :mod:`mini.validation`, resumable, in worker processes.

Three kinds of task, each a process-pool job (``workers`` at a time; one runs inline):

1. *measure* a configuration (decode with a trace, replay, trace-driven prediction): any time; a
   Sequoia-type configuration once :data:`~mini.validation.ACCEPTANCE_SOURCE` is measured (its tree is
   built from the acceptance vector measured on that trace);
2. *fit* the world of one :func:`~mini.validation.config_key` once every one of its
   :func:`~mini.validation.fit_sources` is measured: :func:`relaxspec.fit_cli.fit_traces` on their
   traces, kappa measured on the model, written to ``OUT/worlds/KEY.toml`` (a rerun keeps a written
   world);
3. *predict* a measured configuration's row in its fitted world.

``OUT/validation.csv`` is rewritten (atomically) after every finished task, in the order of the
configurations, and read back on a rerun: a row with its measurement is not decoded again, a row with
its world's prediction not predicted again. A trace is deleted once nothing reads it any more (its row is
done and, for a fit source, its world is fitted) unless ``keep_traces``; an ambiguous-model trace of 40
images holds gigabytes of float32 logits.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from relaxspec.mini.decoding import DecodeConfig
from relaxspec.mini.validation import (
    ACCEPTANCE_SOURCE,
    COLUMNS,
    VALIDATION_CONFIGS,
    acceptance_vector,
    config_key,
    fit_sources,
    measure_config,
    needs_acceptance,
    trace_path,
    with_acceptance,
    world_prediction,
)

ROWS = "validation.csv"
WORLDS = "worlds"
INTS = ("sequences", "speculative_steps", "replayed_steps", "replay_mismatches")
TEXT = ("config", "decoding", "world_key", "world")


@dataclass(frozen=True)
class FitOptions:
    """The options of the worlds' fit (``relaxspec fit``'s; its defaults)."""

    kappa_images: int = 16
    rounds: int = 3
    iters: int = 12
    n_sequences: int = 32
    seq_len: int = 64


def trace_complete(path: Path, n_sequences: int) -> bool:
    """False only for a trace at ``path`` that lacks one of sequences ``0..n_sequences-1`` (a stopped
    capture); a missing trace is a deleted one, not a short one."""
    from relaxspec.core.trace import read_trace

    if not path.exists():
        return True
    return set(range(n_sequences)) <= read_trace(path).sequences()


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The rows of a validation CSV by configuration name (numbers as numbers, empty cells left out)."""
    if not path.exists():
        return {}
    rows = {}
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in raw.items():
                if v in ("", None) or k not in COLUMNS:
                    continue
                row[k] = v if k in TEXT else int(v) if k in INTS else float(v)
            rows[row["config"]] = row
    return rows


def write_rows(path: Path, rows: dict[str, dict[str, Any]], configs: list[DecodeConfig]) -> None:
    """Write ``rows`` in the order of ``configs`` (then any other rows the file held), atomically."""
    names = [c.name for c in configs]
    order = [n for n in names if n in rows] + [n for n in rows if n not in names]
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows[n] for n in order)
    os.replace(tmp, path)


def world_file(out: Path, key: str) -> Path:
    """Where the world of ``key`` is written."""
    return Path(out) / WORLDS / f"{key}.toml"


# ---------------------------------------------------------------- tasks (run in the worker processes)
_MINI: dict[str, Any] = {}


def _init(weights: str, device: str) -> None:
    """A worker: one thread each for torch and Numba, the model loaded once (on ``device``)."""
    import numba
    import torch

    from relaxspec.mini.shipped import load_mini

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    mini = load_mini(Path(weights))
    if device != "cpu":
        for part in (mini.target, mini.eagle_head, mini.draft_gpt):
            part.to(device)
    _MINI["model"] = mini


def _measure(config: DecodeConfig, n_sequences: int, out: str, seed: int) -> dict[str, Any]:
    return measure_config(_MINI["model"], config, n_sequences, Path(out), seed)


def _fit(sources: list[str], world: str, weights: str, options: FitOptions, seed: int) -> str:
    from relaxspec.fit_cli import fit_traces

    fit_traces([Path(s) for s in sources], Path(world), model=Path(weights), seed=seed,
               kappa_images=options.kappa_images, rounds=options.rounds, iters=options.iters,
               n_sequences=options.n_sequences, seq_len=options.seq_len)
    return world


def _predict(world: str, config: DecodeConfig, measured: float, seed: int) -> dict[str, Any]:
    return world_prediction(world, config, measured, seed)


def _advise(world: str, folder: str, budget: float, seed: int) -> dict[str, Any]:
    """``relaxspec advise WORLD --tv BUDGET`` (its default sizes and cost table); its top pick by predicted
    speed-up, and the lossless best, as read from the report's table."""
    import argparse

    from relaxspec.advise_cli import run
    from relaxspec.core.cost import DEFAULT_TABLE

    args = argparse.Namespace(world=world, tv=budget, cost=DEFAULT_TABLE, cost_model="GPT-B",
                              out=Path(folder), quick=False, sequences=None, seq_len=None, seed=seed,
                              no_progress=True)
    run(args)
    with open(Path(folder) / "advice.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["rank_speedup"] not in ("", "None")]
    best = min(rows, key=lambda r: int(r["rank_speedup"]))
    lossless = [r for r in rows if r["tv_kind"] == "lossless"]
    keys = ("method", "tree", "verification", "speedup", "se_speedup", "tokens_per_forward",
            "se_tokens_per_forward", "tv_per_token", "tv_kind")
    pick: dict[str, Any] = {k: best[k] for k in keys}
    pick["budget"] = budget
    pick["lossless_best"] = max(lossless, key=lambda r: float(r["speedup"]))["method"] if lossless else None
    (Path(folder) / PICK).write_text(json.dumps(pick, indent=1) + "\n")
    return pick


PICK = "pick.json"
ADVISE_KEY = "eagle"  # advise ranks the methods with the EAGLE head's sampled world (its drafter and rule)
PICK_PREFIX = "advise's pick: "


def advise_folder(out: Path) -> Path:
    """Where ``relaxspec advise`` writes its report on the fitted world :data:`ADVISE_KEY`."""
    return Path(out) / f"advise-{ADVISE_KEY}"


def read_pick(out: Path) -> dict[str, Any] | None:
    """advise's top pick on the fitted world (None before advise ran)."""
    path = advise_folder(out) / PICK
    return json.loads(path.read_text()) if path.exists() else None


def pick_config(pick: dict[str, Any]) -> DecodeConfig | None:
    """The decoder's configuration of advise's pick (None for VVS's skips bounded by a TV, which read the
    target's rows after a skipped forward: the simulator's only)."""
    from relaxspec.core.trees.skips import VvsTree
    from relaxspec.core.trees.spec import parse_tree

    policy = parse_tree(pick["tree"])
    if isinstance(policy, VvsTree) and policy.schedule.bounded:
        return None
    return DecodeConfig(PICK_PREFIX + pick["method"], tree=pick["tree"], verification=pick["verification"])


class _Inline:
    """A one-worker pool: each job runs when it is submitted."""

    def __init__(self, initializer: Callable[..., None], initargs: tuple) -> None:
        initializer(*initargs)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        f: Future = Future()
        f.set_result(fn(*args))
        return f

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _pool(workers: int, weights: Path, device: str) -> Any:
    if workers <= 1:
        return _Inline(_init, (str(weights), device))
    return ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init,
                               initargs=(str(weights), device))


# ---------------------------------------------------------------- the run
def run_validation(weights: Path, out: Path, n_sequences: int, configs: list[DecodeConfig] | None = None, *,
                   seed: int = 0, workers: int = 1, device: str = "cpu", keep_traces: bool = False,
                   worlds: bool = True, fit: FitOptions = FitOptions(), advise_tv: float | None = None,
                   log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Every configuration of ``configs`` (default :data:`~mini.validation.VALIDATION_CONFIGS`) on the
    model in ``weights``, resuming from ``OUT/validation.csv`` (module docstring); ``worlds=False``: no
    fit and no world column. ``advise_tv``: once the world :data:`ADVISE_KEY` is fitted, ``relaxspec
    advise`` ranks every method in it at this TV budget per token and its top pick by predicted speed-up
    is decoded as one more row (when the decoder runs its tree). Returns the rows by configuration name."""
    configs = list(configs or VALIDATION_CONFIGS)
    pick = read_pick(out) if worlds and advise_tv is not None else None
    extra = pick_config(pick) if pick else None
    if extra is not None and extra.name not in {c.name for c in configs}:
        configs.append(extra)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / ROWS
    rows = {n: r for n, r in read_rows(path).items() if r.get("sequences") == n_sequences}
    by_name = {c.name: c for c in configs}
    keys = sorted({config_key(c) for c in configs}) if worlds else []
    sources = {k: fit_sources(configs, k) for k in keys}
    for k in keys:  # a world still to fit needs its sources' traces: measure again where one is gone
        if not world_file(out, k).exists():
            for c in sources[k]:
                if c.name in rows and not trace_path(out, c).exists():
                    del rows[c.name]
    for name in list(rows):  # a trace a stopped re-measurement left short: measure again (it resumes)
        if name in by_name and not trace_complete(trace_path(out, by_name[name]), n_sequences):
            del rows[name]
    if any(needs_acceptance(c) for c in configs) and ACCEPTANCE_SOURCE not in by_name:
        raise ValueError(f"a Sequoia-type configuration needs {ACCEPTANCE_SOURCE!r}'s trace")
    todo = [c for c in configs if c.name not in rows]
    fits = [k for k in keys if not world_file(out, k).exists()]
    running: dict[Future, tuple[str, str]] = {}
    vectors: dict[str, DecodeConfig] = {}  # Sequoia-type configurations with their measured vector
    advised = pick is not None or ADVISE_KEY not in keys

    def still_read(name: str) -> bool:
        c = by_name[name]
        waiting = any(needs_acceptance(t) for t in todo) and name == ACCEPTANCE_SOURCE
        return waiting or any(c in sources[k] for k in fits) or any(v == ("fit", k) for v in running.values()
                                                                     for k in keys if c in sources[k])

    def tidy() -> None:
        if keep_traces:
            return
        for name in list(rows):
            if name in by_name and trace_path(out, by_name[name]).exists() and not still_read(name):
                shutil.rmtree(trace_path(out, by_name[name]))

    def ready() -> list[tuple[str, str, Callable[..., Any], tuple]]:
        """The jobs that can start: fits, their sources, predictions (a row complete early), the rest."""
        fit_jobs, first, rest, predict = [], [], [], []
        busy = set(running.values())
        for c in todo:
            if ("measure", c.name) in busy:
                continue
            if needs_acceptance(c):
                if ACCEPTANCE_SOURCE not in rows:
                    continue
                if c.name not in vectors:
                    source = trace_path(out, by_name[ACCEPTANCE_SOURCE])
                    vectors[c.name] = with_acceptance(c, acceptance_vector(source, c))
                c = vectors[c.name]
            job = ("measure", c.name, _measure, (c, n_sequences, str(out), seed))
            (first if any(c in sources[k] for k in fits) else rest).append(job)
        for k in fits:
            if ("fit", k) not in busy and all(c.name in rows for c in sources[k]):
                paths = [str(trace_path(out, c)) for c in sources[k]]
                world_file(out, k).parent.mkdir(parents=True, exist_ok=True)
                fit_jobs.append(("fit", k, _fit, (paths, str(world_file(out, k)), str(weights), fit, seed)))
        for name, row in rows.items():
            if name not in by_name or "world_prediction" in row or ("predict", name) in busy:
                continue
            w = world_file(out, row["world_key"])
            if row["world_key"] in keys and w.exists() and row["world_key"] not in fits:
                predict.append(("predict", name, _predict, (str(w), by_name[name],
                                                            float(row["measured_tokens_per_forward"]), seed)))
        if (advise_tv is not None and worlds and not advised and ("advise", ADVISE_KEY) not in busy
                and world_file(out, ADVISE_KEY).exists() and ADVISE_KEY not in fits):
            fit_jobs.append(("advise", ADVISE_KEY, _advise, (str(world_file(out, ADVISE_KEY)),
                                                             str(advise_folder(out)), advise_tv, seed)))
        return fit_jobs + first + predict + rest

    with _pool(workers, weights, device) as pool:
        while True:
            for kind, name, fn, args in ready():
                if len(running) >= max(workers, 1):
                    break
                log(f"start {kind} {name}")
                running[pool.submit(fn, *args)] = (kind, name)
            if not running:
                break
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for f in done:
                kind, name = running.pop(f)
                result = f.result()
                if kind == "measure":
                    rows[name] = result
                    todo[:] = [c for c in todo if c.name != name]
                elif kind == "fit":
                    fits.remove(name)
                elif kind == "advise":
                    advised = True
                    extra = pick_config(result)
                    log(f"advise's top pick in the {name} world: {result['method']} ({result['tree']}, "
                        f"{result['verification']})" + ("" if extra else ": bounded skips, no decoder row"))
                    if extra is not None and extra.name not in by_name:
                        configs.append(extra)
                        by_name[extra.name] = extra
                        todo.append(extra)
                    continue
                else:
                    rows[name].update(result)
                log(f"done {kind} {name}" + (f": {_brief(rows[name])}" if kind != "fit" else ""))
            write_rows(path, rows, configs)
            tidy()
    return rows


def _brief(row: dict[str, Any]) -> str:
    parts = [f"measured {row['measured_tokens_per_forward']}", f"mismatches {row['replay_mismatches']}"]
    if "world_prediction" in row:
        parts.append(f"world {row['world_prediction']} ({100 * row['world_rel_error']:.1f}%)")
    return ", ".join(parts)


def complete(rows: dict[str, dict[str, Any]], configs: list[DecodeConfig] | None = None) -> bool:
    """Whether every configuration has its measurement and its world's prediction."""
    return all(c.name in rows and math.isfinite(rows[c.name].get("world_prediction", math.nan))
               for c in configs or VALIDATION_CONFIGS)
