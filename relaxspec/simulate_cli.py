"""``relaxspec simulate | plot | demo | world-stats``: the simulators from the command line."""

from __future__ import annotations

import argparse

from relaxspec.core.execution import add_scheduler_arguments
from relaxspec.reference.cli import add_trace_rule_arguments


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``simulate`` subcommand (``relaxspec.cli`` lists it)."""
    p = sub.add_parser("simulate", help="run a sweep grid from a TOML config into a resumable CSV")
    p.add_argument("config", help="TOML config (see relaxspec/sweep.py)")
    p.add_argument("--out", required=True, help="results CSV (appended to; finished rows are skipped)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_scheduler_arguments(p)
    p.set_defaults(func=_simulate)
    return p


def add_plot_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``relaxspec plot``."""
    p = sub.add_parser("plot", help="standard figures (PDF + PNG) of a results CSV")
    p.add_argument("results", help="results CSV written by `relaxspec simulate` (or a Parquet copy, "
                                   "relaxspec.results.save)")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=_plot)
    return p


def add_demo_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``relaxspec demo``."""
    p = sub.add_parser("demo", help="exact vs LANTERN vs LANTERN++ on EAGLE-2, static, DDD and Sequoia trees "
                                    "in the confident and ambiguous worlds (results.csv, figures, report.md)")
    p.add_argument("--out", default="demo-output", help="output folder (default: demo-output)")
    p.add_argument("--threads", type=int, default=None, help="Numba threads (default: all cores)")
    p.add_argument("--model", default="mini", metavar="mini|ambiguous",
                   help="the shipped model of the real-model section: mini (512 codes, the default) or "
                        "ambiguous (8,192 codes, weights/ambiguous)")
    p.set_defaults(func=_demo)
    return p


def add_world_stats_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``relaxspec world-stats``."""
    from relaxspec.simulate.worlds import PRESETS  # the package imports it anyway: no cost for --help

    p = sub.add_parser("world-stats", help="ambiguity of a world preset: mean top-1, entropy, top-10 mass, "
                                           "1 - TV(p, q)")
    p.add_argument("preset", metavar="PRESET", help=f"world preset: {', '.join(PRESETS)}")
    p.add_argument("--sequences", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.set_defaults(func=_world_stats)
    return p


def add_trace_acceptance_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``relaxspec trace-acceptance``."""
    p = sub.add_parser("trace-acceptance", help="Sequoia's positional acceptance vector measured exactly "
                                                "on a trace (JSON, for generate --tree sequoia|costaware)")
    p.add_argument("trace", help="trace directory")
    p.add_argument("--width", type=int, default=16, help="children ranked at the root (default 16)")
    p.add_argument("--rule", choices=("r1", "r3"), default="r1")
    add_trace_rule_arguments(p)
    p.add_argument("--mode", choices=("q", "latent", "diverse", "walk"), default="q",
                   help="how the root's children are ranked (core.trees.selection)")
    p.set_defaults(func=_trace_acceptance)
    return p


def _trace_acceptance(args: argparse.Namespace) -> int:
    import json

    from relaxspec.core.trace import read_trace, trace_neighbours
    from relaxspec.core.trees.selection import ChildSelector
    from relaxspec.simulate.acceptance import trace_positional_acceptance
    from relaxspec.simulate.worlds import TraceWorld
    from relaxspec.theory.relax import Relax

    relax = Relax.parse(args.relax)
    table = trace_neighbours(read_trace(args.trace), relax, args.neighbours)
    world = TraceWorld(args.trace, neighbours=table)
    nb = None if relax.is_exact else world.neighbours(relax.k)
    a = trace_positional_acceptance(world, width=args.width, rule=args.rule, relax=relax,
                                    variant=args.variant, selector=ChildSelector(args.mode, relax, nb))
    print(json.dumps([round(float(x), 6) for x in a]))
    return 0


def _compile_notice() -> None:
    """Say on stderr, in one line, that a cold cache's kernels are being compiled (minutes, once)."""
    import sys

    from relaxspec.simulate.kernel_cache import compile_notice

    notice = compile_notice()
    if notice:
        print(f"relaxspec: note: {notice}", file=sys.stderr)


def _simulate(args: argparse.Namespace) -> int:
    from relaxspec.sweep import SweepConfig, run_sweep

    cfg = SweepConfig.load(args.config)
    _compile_notice()
    rows = run_sweep(cfg, args.out, progress=not args.no_progress, scheduler=args.scheduler,
                     workers=args.workers)
    print(f"{len(rows)} new rows in {args.out}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    import sys

    from relaxspec.figures import render

    done = render(args.results, args.out)
    for path in done.paths:
        print(path)
    for note in done.notes:  # rows a figure does not draw, and why
        print(f"note: {note}", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    import numba

    from relaxspec.demo import main

    top = numba.config.NUMBA_NUM_THREADS
    if args.threads is not None and not 1 <= args.threads <= top:
        raise ValueError(f"--threads must be in [1, {top}], got {args.threads}")
    from relaxspec.mini.weights import MODEL_DIRS

    if args.model not in MODEL_DIRS:
        raise ValueError(f"--model must be one of {', '.join(MODEL_DIRS)}, got {args.model!r}")
    _compile_notice()
    return main(args.out, threads=args.threads, model=args.model)


def _world_stats(args: argparse.Namespace) -> int:
    from relaxspec.simulate.rng import check_seed
    from relaxspec.simulate.worlds import LatentWorld, world_stats

    check_seed(args.seed, "--seed")
    if args.sequences < 1 or args.seq_len < 1:
        raise ValueError("--sequences and --seq-len must be >= 1")
    if not args.temperature > 0:
        raise ValueError("--temperature must be > 0")
    world = LatentWorld.preset(args.preset)
    st = world_stats(world, n_sequences=args.sequences, seq_len=args.seq_len, seed=args.seed,
                     temperature=args.temperature)
    print(f"world {args.preset}: V = {world.vocab_size}, d = {world.params.dim}, {st.n_positions} positions")
    print(f"mean top-1 probability   {st.mean_top1:.4f}")
    print(f"mean entropy (nats)      {st.mean_entropy:.4f}")
    print(f"mean top-10 mass         {st.mean_top10_mass:.4f}")
    print(f"mean 1 - TV(p, q)        {st.mean_acceptance:.4f}")
    return 0
