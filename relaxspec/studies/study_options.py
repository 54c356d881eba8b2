"""The command line every study shares: where results go, the world sample, its threads and ``--quick``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

QUICK_WORLD = {"vocab_size": 2048, "n_clusters": 64}
"""World overrides of a ``--quick`` run (V = 16384 otherwise)."""
QUICK_SEQUENCES, QUICK_SEQ_LEN = 4, 64


def study_parser(name: str, doc: str | None, quick_images: int,
                 sequences: int = 32) -> argparse.ArgumentParser:
    """A study's parser with ``--out``, ``--sequences`` (default ``sequences``), ``--seq-len``,
    ``--skip-shipped``, ``--threads`` and ``--quick`` (whose run makes ``quick_images`` shipped-model
    images); the study adds its own options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help=f"output folder (default results/{name}[-quick])")
    ap.add_argument("--sequences", type=int, default=sequences, help="sequences per world configuration")
    ap.add_argument("--seq-len", type=int, default=256, help="tokens per sequence (a 16 x 16 image)")
    ap.add_argument("--skip-shipped", action="store_true", help="no shipped-model rows")
    ap.add_argument("--threads", type=int, default=None,
                    help="Numba threads of each world configuration (default: every core this process may "
                         "use); the numbers do not depend on it, only the seconds")
    ap.add_argument("--quick", action="store_true",
                    help=f"V = {QUICK_WORLD['vocab_size']}, {QUICK_SEQUENCES} x {QUICK_SEQ_LEN} tokens, "
                         f"{quick_images} shipped images")
    return ap


def study_setup(args: argparse.Namespace, name: str, **quick: int) -> tuple[dict, Path]:
    """The world overrides and the (created) output folder of a run; ``--quick`` also sets the world
    sample to its size and the study's options ``quick`` (e.g. ``shipped_images=10``). ``--threads`` is
    resolved to a count (outside [1, Numba's thread limit]: :func:`option_error`)."""
    try:
        args.threads = world_threads(args.threads)
    except ValueError as err:
        option_error(name, str(err))
    overrides = dict(QUICK_WORLD) if args.quick else {}
    if args.quick:
        args.sequences, args.seq_len = QUICK_SEQUENCES, QUICK_SEQ_LEN
        for option, value in quick.items():
            setattr(args, option, value)
    out = Path(args.out or f"results/{name}{'-quick' if args.quick else ''}")
    out.mkdir(parents=True, exist_ok=True)
    return overrides, out


def world_threads(threads: int | None) -> int:
    """Numba threads for a study's world runs: ``threads``, or every core this process may use (at most
    Numba's ``NUMBA_NUM_THREADS``); ``ValueError`` naming the limit when ``threads`` is outside it."""
    import numba

    limit = numba.config.NUMBA_NUM_THREADS
    if threads is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, min(cores, limit))
    if not 1 <= threads <= limit:
        raise ValueError(f"--threads must be in [1, {limit}] (Numba's thread limit), got {threads}")
    return threads


def option_error(study: str, message: str) -> NoReturn:
    """A bad option, found before anything runs: one line on stderr and exit code 2, as the CLI answers."""
    print(f"{study}: {message}", file=sys.stderr)
    raise SystemExit(2)
