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


def add_trace_rule_arguments(p: argparse.ArgumentParser) -> None:
    """``--relax``, ``--variant`` and ``--neighbours`` of a command that verifies a trace's steps again
    (``rescore``, ``trace-acceptance``)."""
    p.add_argument("--relax", default="none", help="none | additive:k=..,delta=.. | multiplicative:..")
    p.add_argument("--variant", choices=("principled", "official"), default="principled",
                   help="the relaxation as docs/SPEC.md states it (principled) or as LANTERN's code does it "
                        "(official)")
    p.add_argument("--neighbours", metavar="TABLE.npy",
                   help="neighbour table (V, K) of the trace's codebook (default: the table stored in the "
                        "trace, when it holds one)")


def add_rescore_arguments(res: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec rescore``."""
    from relaxspec.core.execution import add_scheduler_arguments

    res.add_argument("trace", nargs="+", help="trace directories (one task each: see --scheduler)")
    res.add_argument("--rule", choices=("r1", "r2", "r3", "r4"), required=True,
                     help="r2 and r4 (traversal) only on a trace recorded with r2 or r4 (children drawn "
                          "from q)")
    add_trace_rule_arguments(res)
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
    from relaxspec.theory.relax import Relax

    # one task per trace, printed as it finishes; each task reads its trace (and --neighbours) from its path
    relax = Relax.parse(args.relax)
    calls = [(trace, args.rule, relax, args.variant, args.neighbours) for trace in args.trace]
    with Executor(args.scheduler, args.workers, tasks=len(calls)) as executor:
        for i, res in executor.run(rescore, calls, labels=args.trace):
            where = f"{args.trace[i]}: " if len(calls) > 1 else ""
            print(f"{where}rule {args.rule} relax {args.relax} variant {args.variant}: {res['steps']} "
                  f"speculative steps, exact {res['exact_tokens_per_step']:.4f} tokens/step (recorded run: "
                  f"{res['recorded_tokens_per_step']:.4f})")
            sys.stdout.flush()
    return 0
