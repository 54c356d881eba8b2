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
import os
import sys
import warnings

from relaxspec import __version__

# (subcommand, module providing add_parser, or "module:function")
SUBCOMMANDS: list[tuple[str, str]] = [
    ("theory", "relaxspec.theory.cli"),
    ("train-mini", "relaxspec.mini.train_mini"),
    ("mini", "relaxspec.mini.cli"),
    ("simulate", "relaxspec.simulate_cli"),
    ("plot", "relaxspec.simulate_cli:add_plot_parser"),
    ("demo", "relaxspec.simulate_cli:add_demo_parser"),
    ("world-stats", "relaxspec.simulate_cli:add_world_stats_parser"),
    ("trace-acceptance", "relaxspec.simulate_cli:add_trace_acceptance_parser"),
    ("generate", "relaxspec.reference.cli:add_generate_parser"),
    ("replay", "relaxspec.reference.cli:add_replay_parser"),
    ("rescore", "relaxspec.reference.cli:add_rescore_parser"),
    ("figures", "relaxspec.notebooks"),
]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="relaxspec",
        description="Relaxed speculative decoding for visual autoregressive models: "
        "exact theory, Numba simulation and a reference decoder.",
    )
    parser.add_argument("--version", action="version", version=f"relaxspec {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error instead of a one-line message")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, target in SUBCOMMANDS:
        module, _, func = target.partition(":")
        getattr(importlib.import_module(module), func or "add_parser")(sub)
    return parser


def error_message(err: BaseException) -> str | None:
    """The one-line message of a mistake a user can make, or None for an internal error.

    User errors are ``ValueError`` (bad values, keys and files: the sources
    convert theirs to it) and ``OSError`` (paths), whose message names the
    path (``err.filename``) with the operating system's reason.

    Parameters
    ----------
    err : BaseException
        The exception a command raised.

    Returns
    -------
    str or None
        One line (newlines folded), or None when ``err`` is a bug to show with its traceback.
    """
    if isinstance(err, OSError):
        text = _os_error_text(err)
    elif isinstance(err, ValueError):
        text = str(err) or type(err).__name__
    else:
        return None
    return " ".join(text.split())


def _os_error_text(err: OSError) -> str:
    """``reason: 'path'`` (and ``-> 'path2'``) for an OSError, its own message when it has no path."""
    if err.filename is None:
        return str(err) or type(err).__name__
    path = os.fsdecode(err.filename)
    if isinstance(err, FileExistsError) and os.path.exists(path) and not os.path.isdir(path):
        return f"{path!r} is a file, not a directory"
    reason = err.strerror or str(err)
    target = f" -> {os.fsdecode(err.filename2)!r}" if err.filename2 is not None else ""
    return f"{reason}: {path!r}{target}"


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      line: str | None = None) -> str:
    """Warnings a command issues (a torn CSV row dropped, grid combinations skipped) as one line."""
    return f"relaxspec: warning: {' '.join(str(message).split())}\n"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``relaxspec`` console script.

    Returns 0 on success, the command's own code, 2 after a user error (one
    line on stderr; ``--debug`` raises it with its traceback instead) and 130
    after Ctrl-C.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    warnings.formatwarning = _one_line_warning
    debug = "--debug" in argv  # accepted before or after the subcommand
    argv = [a for a in argv if a != "--debug"]
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0 if args.command is None else 2
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        print("relaxspec: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        message = error_message(err)
        if debug or message is None:
            raise
        print(f"relaxspec: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
