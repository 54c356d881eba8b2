"""The ``relaxspec`` command line.

Each subcommand lives in the module that owns its concept and exposes
``add_parser(subparsers)`` returning a parser whose ``func`` default takes the
parsed namespace (``"module:function"`` names another registering function,
for a module that owns several subcommands). This file only wires them together, importing each module
lazily so that ``relaxspec --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (subcommand, module providing add_parser, or "module:function")
SUBCOMMANDS: list[tuple[str, str]] = [
    ("theory", "theory.cli"),
    ("train-mini", "mini.train_mini"),
    ("mini", "mini.cli"),
    ("simulate", "simulate.cli"),
    ("plot", "simulate.cli:add_plot_parser"),
    ("demo", "simulate.cli:add_demo_parser"),
    ("world-stats", "simulate.cli:add_world_stats_parser"),
    ("trace-acceptance", "simulate.cli:add_trace_acceptance_parser"),
    ("generate", "reference.cli:add_generate_parser"),
    ("replay", "reference.cli:add_replay_parser"),
    ("rescore", "reference.cli:add_rescore_parser"),
    ("figures", "relaxspec.notebooks"),
]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="relaxspec",
        description="Relaxed speculative decoding for visual autoregressive models: "
        "exact theory, Numba simulation and a reference decoder.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, target in SUBCOMMANDS:
        module, _, func = target.partition(":")
        getattr(importlib.import_module(module), func or "add_parser")(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``relaxspec`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"relaxspec: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
