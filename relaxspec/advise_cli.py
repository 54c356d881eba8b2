"""``relaxspec advise WORLD --tv PER_TOKEN [--cost TABLE] [--out DIR]``: every method the suite implements,
simulated in a world (a preset or a world file), ranked within a TV budget per token
(:mod:`relaxspec.studies.advise`; the report: :mod:`relaxspec.studies.advise_report`).

Writes ``OUT/runs.jsonl`` (one line per run, as they finish; a rerun resumes), ``OUT/advice.md``,
``OUT/advice.csv`` and ``OUT/pareto.pdf`` / ``.png``, and prints the bests and where the report is.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from relaxspec.core.cost import DEFAULT_TABLE

LOG = logging.getLogger("relaxspec.advise")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec advise``."""
    p.add_argument("world", help="a world preset (ambiguous, confident, mini, ...) or a world file (*.toml)")
    p.add_argument("--tv", type=float, required=True, metavar="PER_TOKEN",
                   help="the distortion budget: TV per emitted token (0: lossless methods only)")
    p.add_argument("--cost", type=Path, default=DEFAULT_TABLE, metavar="TABLE",
                   help="latency table of SPEC 8's speed-up (benchmarks/decoder_bench.py's CSV)")
    p.add_argument("--cost-model", default="GPT-B", help="the target model's rows of the cost table")
    p.add_argument("--out", type=Path, default=Path("advise-output"), help="output folder")
    p.add_argument("--quick", action="store_true",
                   help="a small version: 4 sequences x 64 tokens, V = 2048 where the world's is larger")
    p.add_argument("--sequences", type=int, default=None, help="sequences per method (default 16; quick 4)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default 256; quick 64)")
    p.add_argument("--seed", type=int, default=0, help="the runs' seed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check every input, simulate (resuming), rank and write the report."""
    from relaxspec.core.cost import CostModel
    from relaxspec.simulate.rng import check_seed
    from relaxspec.simulate.world_file import world_params
    from relaxspec.studies.advise import Plan, quick_overrides, rank, simulate_all, sizes
    from relaxspec.studies.advise_report import figure, markdown, write_csv

    t0 = time.perf_counter()
    if not (args.tv >= 0 and args.tv < float("inf")):
        raise ValueError(f"--tv must be a number >= 0 (TV per token), got {args.tv!r}")
    world_params(args.world)  # an unknown preset or a bad world file: one line, before anything runs
    check_seed(args.seed, "--seed")
    cost = CostModel.from_table(args.cost, args.cost_model)
    n, L = sizes(args.quick, args.sequences, args.seq_len)
    plan = Plan(args.world, quick_overrides(args.world) if args.quick else {}, n, L, args.seed)
    runs, skipped = simulate_all(plan, args.out, progress=not args.no_progress)
    rows = rank(runs, cost, args.tv)
    size = f"{n} sequences x {L} tokens per method, V = {plan.vocab_size}, seed {args.seed}"
    lines = markdown(rows, world=args.world, budget=args.tv, cost=str(cost), sizes=size, skipped=skipped)
    (args.out / "advice.md").write_text("\n".join(lines) + "\n")
    write_csv(rows, args.out / "advice.csv")
    figure(rows, args.tv, args.out)
    head = lines[lines.index("Best by predicted speed-up:"):][:4]
    LOG.info("\n".join([*head, f"report: {args.out / 'advice.md'} ({time.perf_counter() - t0:.0f} s)"]))
    return 0
