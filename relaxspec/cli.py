"""The ``relaxspec`` command line.

Each subcommand lives in the module that owns its concept; :data:`SUBCOMMANDS` names it, its one-line
summary (its one home: ``relaxspec --help`` lists them) and the module's function that adds its options
(and nested subcommands) to the subcommand's parser and sets a ``func`` default taking the parsed
namespace. Only the module of the subcommand being run is imported, so that ``relaxspec --help`` loads
neither torch nor Numba.

Every parser is a :class:`CommandParser`: a mistake argparse finds is one line and exit code 2, and an
option's help shows its default.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Iterable
from typing import NamedTuple, NoReturn

from relaxspec import __version__

PROG = "relaxspec"
LOGGER = "relaxspec"  # the library layers log under it (children: relaxspec.demo, ...)
USAGE_ERROR = 2  # exit code of a user's mistake (argparse's and the commands' own)


class Subcommand(NamedTuple):
    """One ``relaxspec`` subcommand: its name, one-line summary and ``"module:function"`` adding its
    options to its parser."""

    name: str
    summary: str
    target: str


SUBCOMMANDS: list[Subcommand] = [
    Subcommand("theory", "exact acceptance and distortion tables", "relaxspec.theory.cli:add_arguments"),
    Subcommand("train-mini", "train a shipped Fashion-MNIST model (tokenizer, target, drafters, evaluator); "
               "needs the dataset-fashion-mnist package", "relaxspec.mini.train_mini:add_arguments"),
    Subcommand("mini", "analyses of the shipped Fashion-MNIST model (ambiguity, image quality, simulator "
               "validation)", "relaxspec.mini.cli:add_arguments"),
    Subcommand("simulate", "run a sweep grid from a TOML config into a resumable results CSV",
               "relaxspec.simulate_cli:add_simulate_arguments"),
    Subcommand("plot", "standard figures (PDF + PNG) of a results CSV",
               "relaxspec.simulate_cli:add_plot_arguments"),
    Subcommand("demo", "exact vs LANTERN vs LANTERN++ on EAGLE-2, static, DDD and Sequoia trees in the "
               "confident and ambiguous worlds (results.csv, figures, report.md)",
               "relaxspec.simulate_cli:add_demo_arguments"),
    Subcommand("warm-up", "compile the simulator's Numba kernels into Numba's cache ahead of a run "
               "(`make test` runs it first; minutes on a cold cache, nothing when it is warm)",
               "relaxspec.simulate_cli:add_warm_up_arguments"),
    Subcommand("world-stats", "ambiguity of a world preset: mean top-1, entropy, top-10 mass, 1 - TV(p, q)",
               "relaxspec.simulate_cli:add_world_stats_arguments"),
    Subcommand("fit", "fit a world (a world file, *.toml) to captured traces of any model, with its context "
               "sensitivity when the model or a kappa file is at hand", "relaxspec.fit_cli:add_arguments"),
    Subcommand("advise", "which method to decode with in a world within a TV budget per token: every method "
               "simulated, ranked by tokens per target forward and SPEC 8's speed-up (table, Pareto figure)",
               "relaxspec.advise_cli:add_arguments"),
    Subcommand("trace-acceptance", "Sequoia's positional acceptance vector measured exactly on a trace "
               "(JSON, for generate --tree sequoia|costaware)",
               "relaxspec.simulate_cli:add_trace_acceptance_arguments"),
    Subcommand("generate", "generate images (and a trace) with the reference decoder",
               "relaxspec.reference.cli:add_generate_arguments"),
    Subcommand("replay", "re-verify every step of a trace through simulate and theory",
               "relaxspec.reference.cli:add_replay_arguments"),
    Subcommand("rescore", "exact tokens per step of another rule on traces' logits",
               "relaxspec.reference.cli:add_rescore_arguments"),
    Subcommand("figures", "execute the analysis notebooks and regenerate every figure (vector PDF + PNG) "
               "under figures/", "relaxspec.notebooks:add_arguments"),
]


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to an option's help, unless the help already says it, the default is None
    (the help says what happens then) or the option is a flag (``store_true``: off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not shows_default(action) or "(default" in text or "%(default)" in text:
            return text
        return f"{text} (default: %(default)s)"


def shows_default(action: argparse.Action) -> bool:
    """Whether ``action``'s help must show its default: an option (or optional positional) taking a
    value whose default is neither None nor suppressed."""
    takes_value = action.nargs != 0
    optional = bool(action.option_strings) or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)
    return takes_value and optional and action.default not in (None, argparse.SUPPRESS)


class SubcommandsAction(argparse._SubParsersAction):
    """argparse's subcommands, except that arguments the chosen subcommand does not know are its mistake
    (argparse hands them up to the top-level parser, whose message would name ``relaxspec --help``)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        super().__call__(parser, namespace, values, option_string)
        unknown = getattr(namespace, argparse._UNRECOGNIZED_ARGS_ATTR, None)  # where argparse keeps them
        if unknown:
            self.choices[values[0]].error(f"unrecognized arguments: {' '.join(unknown)}")


class CommandParser(argparse.ArgumentParser):
    """The parser of ``relaxspec`` and of every subcommand (nested ones inherit the class): a mistake is
    one line, ``PROG: error: MESSAGE (see PROG --help)``, and exit code 2; help shows defaults."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", SubcommandsAction)

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser(commands: Iterable[str] | None = None) -> CommandParser:
    """The top-level parser listing every subcommand with its summary.

    Parameters
    ----------
    commands : iterable of str, optional
        The subcommands whose options are added (importing their modules); default: all of them.
        The others are listed but take no options.
    """
    wanted = None if commands is None else set(commands)
    parser = CommandParser(
        prog=PROG,
        description="Relaxed speculative decoding for visual autoregressive models: "
        "exact theory, Numba simulation and a reference decoder.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error instead of a one-line message")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in SUBCOMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.summary, description=cmd.summary)
        if wanted is None or cmd.name in wanted:
            module, _, func = cmd.target.partition(":")
            getattr(importlib.import_module(module), func)(p)
    return parser


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` runs: its first word that is not an option (the top-level options take no
    value), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


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


class ConsoleHandler(logging.Handler):
    """What the library logs, as the command line shows it: information on stdout as it is (what the
    layers printed before they logged), warnings and errors on stderr as ``relaxspec: warning: ...``.
    The streams are looked up for each record, so that a swapped ``sys.stdout`` (tests) is followed."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if record.levelno >= logging.WARNING:
                print(f"{PROG}: {record.levelname.lower()}: {' '.join(text.split())}", file=sys.stderr)
            else:
                print(text, file=sys.stdout, flush=True)
        except Exception:  # logging's rule: a failing handler reports itself and does not raise
            self.handleError(record)


def setup_logging() -> None:
    """Show the ``relaxspec`` logger's INFO records and above on the console (once per process)."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(logging.INFO)
    if not any(isinstance(h, ConsoleHandler) for h in logger.handlers):
        logger.addHandler(ConsoleHandler())


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
    setup_logging()
    debug = "--debug" in argv  # accepted before or after the subcommand
    argv = [a for a in argv if a != "--debug"]
    try:
        command = chosen_command(argv)
        parser = build_parser([command] if command else [])
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0 if args.command is None else USAGE_ERROR
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
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
