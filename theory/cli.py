"""``relaxspec theory ...``: exact tables from the command line."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands of ``relaxspec theory``."""
    tsub = parser.add_subparsers(dest="theory_command", metavar="THEORY_COMMAND")
    demo = tsub.add_parser(
        "demo", help="acceptance and TV of every rule on a LlamaGen-sized example (V = 16384)"
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the random codebook and target")
    demo.set_defaults(func=_demo)
    parser.set_defaults(func=lambda args: parser.print_help())


def _demo(args: argparse.Namespace) -> int:
    from relaxspec.theory.demo import report

    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    print(report(seed=args.seed))
    return 0
