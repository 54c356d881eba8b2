"""``relaxspec generate``, ``relaxspec replay`` and ``relaxspec rescore`` (the reference decoder)."""

from __future__ import annotations

import argparse
import sys


def add_generate_arguments(gen: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec generate``."""
    from relaxspec.reference.generate import add_arguments

    add_arguments(gen)
    gen.set_defaults(func=_generate)


def add_replay_arguments(rep: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec replay``."""
    rep.add_argument("trace", help="trace directory")
    rep.add_argument("--require-simulate", action="store_true",
                     help="fail when simulate's Numba verifier is not installed")
    rep.set_defaults(func=_replay)


def add_trace_rule_arguments(p: argparse.ArgumentParser, rules: str, default: str | None = None) -> None:
    """``--verification`` (unboosted: ``rules``) and ``--neighbours`` of a command that verifies a trace's
    steps again (``rescore``, ``trace-acceptance``); ``default`` None makes ``--verification`` required."""
    p.add_argument("--verification", metavar="SPEC", default=default, required=default is None,
                   help=f"rule ({rules}) and relaxation, theory/verification.py: e.g. r1, "
                        "r1+lantern:k=1000,delta=0.1, r1+lantern++:k=1000,lam=2, /official for LANTERN's "
                        "code" + ("" if default is None else f" (default {default})"))
    p.add_argument("--neighbours", metavar="TABLE.npy",
                   help="neighbour table (V, K) of the trace's codebook (default: the table stored in the "
                        "trace, when it holds one)")


def add_rescore_arguments(res: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec rescore``."""
    from relaxspec.core.execution import add_scheduler_arguments

    res.add_argument("trace", nargs="+", help="trace directories (one task each: see --scheduler)")
    add_trace_rule_arguments(res, "r1, r2, r3 or r4; r2 and r4 (traversal) only on a trace recorded with r2 "
                                  "or r4: children drawn from q")
    add_scheduler_arguments(res)
    res.set_defaults(func=_rescore)


def _generate(args: argparse.Namespace) -> int:
    from relaxspec.reference.generate import run

    return run(args)


def _replay(args: argparse.Namespace) -> int:
    from relaxspec.reference.replay import replay

    report = replay(args.trace, require_simulate=args.require_simulate)
    for line in report.mismatches[:50]:
        print(line)
    engines = ", ".join(report.engines)
    missing = f" ({', '.join(report.missing_engines)} not installed)" if report.missing_engines else ""
    print(f"{report.steps} steps replayed with {engines}{missing}: {len(report.mismatches)} mismatches")
    return 0 if report.ok else 1


def _rescore(args: argparse.Namespace) -> int:
    from relaxspec.core.execution import Executor
    from relaxspec.reference.replay import rescore
    from relaxspec.theory.verification import Verification

    # one task per trace, printed as it finishes; each task reads its trace (and --neighbours) from its path
    verification = Verification.parse(args.verification)
    calls = [(trace, verification, args.neighbours) for trace in args.trace]
    with Executor(args.scheduler, args.workers, tasks=len(calls)) as executor:
        for i, res in executor.run(rescore, calls, labels=args.trace):
            where = f"{args.trace[i]}: " if len(calls) > 1 else ""
            print(f"{where}verification {verification}: {res['steps']} "
                  f"speculative steps, exact {res['exact_tokens_per_step']:.4f} tokens/step (recorded run: "
                  f"{res['recorded_tokens_per_step']:.4f})")
            sys.stdout.flush()
    return 0
