"""``relaxspec simulate | plot | demo | warm-up | world-stats``: the simulators from the command line."""

from __future__ import annotations

import argparse

from relaxspec.core.execution import add_scheduler_arguments
from relaxspec.reference.cli import add_trace_rule_arguments


def add_simulate_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec simulate`` (``relaxspec.cli`` lists it)."""
    p.add_argument("config", help="TOML config (see relaxspec/sweep.py)")
    p.add_argument("--results", required=True, metavar="CSV",
                   help="results file (appended to; finished rows are skipped)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_scheduler_arguments(p)
    p.set_defaults(func=_simulate)


def add_plot_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec plot``."""
    p.add_argument("results", help="results CSV written by `relaxspec simulate` (or a Parquet copy, "
                                   "relaxspec.results.save)")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=_plot)


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec demo``."""
    p.add_argument("--out", default="demo-output", help="output folder")
    p.add_argument("--threads", type=int, default=None, help="Numba threads (default: all cores)")
    p.add_argument("--model", default="mini", metavar="mini|ambiguous",
                   help="the shipped model of the real-model section: mini (512 codes, the default) or "
                        "ambiguous (8,192 codes, weights/ambiguous)")
    p.set_defaults(func=_demo)


def add_warm_up_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec warm-up`` (``relaxspec.simulate.kernel_cache.warm``)."""
    p.add_argument("--serial", action="store_true",
                   help="one kernel after another in this process (default: one process per cold kernel)")
    p.set_defaults(func=_warm_up)


def add_world_stats_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec world-stats``."""
    from relaxspec.simulate.worlds import PRESETS  # imported only when world-stats runs

    p.add_argument("preset", metavar="PRESET", help=f"world preset: {', '.join(PRESETS)}, or a world file "
                   "(*.toml, relaxspec fit)")
    p.add_argument("--sequences", type=int, default=8, help="sequences sampled from the world")
    p.add_argument("--seq-len", type=int, default=64, help="positions per sequence")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled sequences")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature of the target and draft laws")
    p.set_defaults(func=_world_stats)


def add_trace_acceptance_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec trace-acceptance``."""
    p.add_argument("trace", help="trace directory")
    p.add_argument("--width", type=int, default=16, help="children ranked at the root")
    add_trace_rule_arguments(p, "r1, speculative sampling, or r3, greedy", default="r1")
    p.add_argument("--mode", choices=("q", "latent", "diverse", "walk"), default="q",
                   help="how the root's children are ranked (core.trees.selection)")
    p.set_defaults(func=_trace_acceptance)


def _trace_acceptance(args: argparse.Namespace) -> int:
    import json

    from relaxspec.core.trace import read_trace, trace_neighbours
    from relaxspec.core.trees.selection import ChildSelector
    from relaxspec.simulate.acceptance import trace_positional_acceptance
    from relaxspec.simulate.worlds import TraceWorld
    from relaxspec.theory.verification import Verification

    verification = Verification.parse(args.verification)
    relax = verification.relax
    table = trace_neighbours(read_trace(args.trace), relax, args.neighbours)
    world = TraceWorld(args.trace, neighbours=table)
    nb = None if relax.is_exact else world.neighbours(relax.k)
    a = trace_positional_acceptance(world, verification, width=args.width,
                                    selector=ChildSelector(args.mode, relax, nb))
    print(json.dumps([round(float(x), 6) for x in a]))
    return 0


def _compile_notice() -> None:
    """Say on stderr, in one line, that a cold cache's kernels are being compiled (minutes, once)."""
    import sys

    from relaxspec.simulate.kernel_cache import compile_notice

    notice = compile_notice()
    if notice:
        print(f"relaxspec: note: {notice}", file=sys.stderr)


def _warm_up(args: argparse.Namespace) -> int:
    from relaxspec.simulate.kernel_cache import warm

    compiled = warm(parallel=not args.serial)
    print(f"compiled {', '.join(compiled)}" if compiled else "the simulator's kernels are cached", flush=True)
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from relaxspec.sweep import SweepConfig, run_sweep

    cfg = SweepConfig.load(args.config)
    _compile_notice()
    rows = run_sweep(cfg, args.results, progress=not args.no_progress, scheduler=args.scheduler,
                     workers=args.workers)
    print(f"{len(rows)} new rows in {args.results}")
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
