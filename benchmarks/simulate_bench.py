"""Speed of the Numba simulators (issue 3): prints a table and writes BENCHMARKS.md.

    .venv/bin/python benchmarks/simulate_bench.py [--quick] [--report BENCHMARKS.md]

1. Reference workload: `ambiguous` world (V = 16384, d = 8), EAGLE-2 (10, 4, 59), R1 additive k = 1000, delta
   = 0.1, seq_len 256: verification steps per second on 1 and 2 threads, and the same workload through the
   NumPy oracle in the same run (ratio); also with ``exact_expectations=True``.
2. One softmax row (logits + exp + sum over V = 16384, d = 8): the kernel alone and batched, against NumPy
   and against its floor (the logits pass alone, which any exact softmax must make); top-k selection.
3. Where a step's time goes, from the per-row costs and the rows a step computes.
4. Steps per second against V (1024 .. 65536, exact R1) and against tree size (EAGLE-2 total_tokens 8 .. 128).
5. Every rule x boost x draft source (``benchmarks/rule_speed.py``): steps per CPU-second against that
   configuration's own floor, measured in the same run; with ``--before CHECKOUT`` the same configurations
   in an older checkout too, side by side, and whether every per-step number is the same.
   ``--rules-only`` runs section 5 alone (with the row costs of section 2 that its floors need).

Every figure is given as wall-clock steps/s and as steps per CPU-second of this process (the machine may be
shared: CPU time counts only the time the process ran). Text after "## Reading these figures" in an
existing output file is kept (the analysis is written by hand).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

from relaxspec.theory.verification import Verification

# idle OpenBLAS threads spin after a BLAS call: on a 2-core machine they would steal the workers' cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.rule_speed import best_cpu, floor_costs, logits_pass, per_rule_table  # noqa: E402
from relaxspec.core.trees.policies import Eagle2Tree  # noqa: E402
from relaxspec.simulate.engine import run  # noqa: E402
from relaxspec.simulate.policy_kernels import top_tokens  # noqa: E402
from relaxspec.simulate.world_kernels import F_BQMAX, row_exp, row_scratch, rows_exp  # noqa: E402
from relaxspec.simulate.worlds import LatentWorld  # noqa: E402
from relaxspec.theory import Relax  # noqa: E402

KEEP = "## Reading these figures"
SECTION5 = "## 5. Every rule against its own floor"


def machine() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def timed_run(world, tree, relax, n_sequences, seq_len, threads, backend="numba", exact=False):
    """(result, wall seconds, CPU seconds of this process, load average before), decoding only."""
    la = load()
    res = run(world, tree, Verification(rule="r1", relax=relax), n_sequences=n_sequences, seq_len=seq_len,
              threads=threads,
              seed=1, backend=backend, exact_expectations=exact)
    return res, res.seconds, res.extra["cpu_seconds"], la


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sequences (a smoke run)")
    ap.add_argument("--report", default=str(Path(__file__).resolve().parents[1] / "BENCHMARKS.md"),
                    help="the Markdown file whose section is written (default: BENCHMARKS.md)")
    ap.add_argument("--before", default=None,
                    help="an older checkout (e.g. a git worktree with its own .venv) whose per-rule speed "
                         "section 5 measures beside this one's (default: none)")
    ap.add_argument("--rules-only", action="store_true", help="run section 5 alone")
    ap.add_argument("--rule-sequences", type=int, default=2,
                    help="sequences per configuration of section 5 (default 2)")
    ap.add_argument("--rule-seq-len", type=int, default=64,
                    help="tokens per sequence in section 5 (default 64)")
    args = ap.parse_args()
    nseq = 2 if args.quick else 100  # 10 s or more per row: shorter rows do not repeat within 10%
    lines: list[str] = []
    load_start = load()

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    world = LatentWorld.preset("ambiguous")
    relax = Relax.additive(1000, 0.1)
    tree = Eagle2Tree(10, 4, 59)
    world.neighbours(1000)
    if args.rules_only:
        t_one, t_floor = row_floors(world)
        rule_section(say, args, world, t_one, t_floor)
        return write_report(args, lines, load_start)
    for exact in (False, True):  # compile / warm up
        run(world, tree, Verification(rule="r1", relax=relax), n_sequences=2, seq_len=16, threads=1,
            exact_expectations=exact)
    say("## 1. Reference workload (ambiguous, V = 16384, EAGLE-2 (10, 4, 59), R1 additive k=1000 delta=0.1)")
    say("")
    say("| backend | threads | sequences x seq_len | steps | wall s | steps/s | CPU s | steps per CPU-s "
        "| load avg |")
    say("|---|---|---|---|---|---|---|---|---|")
    sps, cps = {}, {}
    for threads in (1, 2):
        res, wall, cpu, la = timed_run(world, tree, relax, nseq, 256, threads)
        sps[threads], cps[threads] = res.n_steps / wall, res.n_steps / cpu
        ref = res
        say(f"| numba | {threads} | {nseq} x 256 | {res.n_steps} | {wall:.2f} | {sps[threads]:.0f} | "
            f"{cpu:.2f} | {cps[threads]:.0f} | {la:.2f} |")
    res, wall, cpu, la = timed_run(world, tree, relax, nseq, 256, 1, exact=True)
    sps_exact = res.n_steps / wall
    say(f"| numba, exact_expectations | 1 | {nseq} x 256 | {res.n_steps} | {wall:.2f} | {sps_exact:.0f} | "
        f"{cpu:.2f} | {res.n_steps / cpu:.0f} | {la:.2f} |")
    res_np, wall, cpu, la = timed_run(world, tree, relax, 1, 320, None, backend="numpy")
    s_np, c_np = res_np.n_steps / wall, res_np.n_steps / cpu
    say(f"| numpy oracle | 1 | 1 x 320 | {res_np.n_steps} | {wall:.2f} | {s_np:.1f} | {cpu:.2f} | {c_np:.1f} "
        f"| {la:.2f} |")
    say("")
    say(f"Numba (1 thread) / NumPy oracle, same run: **{sps[1] / s_np:.0f}x** wall, {cps[1] / c_np:.0f}x per "
        f"CPU-second. 2 threads / 1 thread: {sps[2] / sps[1]:.2f}x wall. Goal: >= 1000 steps/s on 2 cores, "
        ">= 20x the oracle.")
    say("")

    # 2. one row
    V = world.vocab_size
    W = world.kernel_world(1.0)
    zbs, es, cmaxs = row_inputs(world)
    sums = np.empty(10)
    e, cmax = es[0], cmaxs[0]

    def one():
        return row_exp(W[8], W[3], W[4][F_BQMAX], zbs[0], e, cmax)

    def ten():
        rows_exp(W[8], W[3], W[4][F_BQMAX], zbs, es, cmaxs, sums)

    inv = 1.0 / one()
    out, vals = np.empty(10, dtype=np.int64), np.empty(10)
    ten()
    top_tokens(e, V, cmax, inv, 10, out, vals)
    t_one = best_cpu(one, reps=200)
    t_ten = best_cpu(ten, reps=20) / 10
    t_floor1, t_floor = row_floors(world)
    t_top = best_cpu(lambda: top_tokens(e, V, cmax, inv, 10, out, vals), reps=2000)
    E = world.codebook

    def numpy_row():
        logits = world.draft_prior + E @ zbs[0]
        x = np.exp(logits - logits.max())
        return x / x.sum()

    numpy_row()
    t_numpy = best_cpu(numpy_row, reps=20)
    say("## 2. One softmax row (logits + exp + sum over V = 16384, d = 8; CPU time, best of 7 rounds)")
    say("")
    say("| implementation | microseconds | ns per token |")
    say("|---|---|---|")
    for name, t in (("Numba row_exp, one state (a p row on the walk)", t_one),
                    ("Numba rows_exp, 10 states in one codebook pass, per row (a beam)", t_ten),
                    ("floor: the logits pass alone, one state", t_floor1),
                    ("floor: the logits pass alone, 10 states, per row", t_floor),
                    ("NumPy float64 (E @ z, np.exp, sum)", t_numpy),
                    ("top-k (k = 10) of a row with chunk maxima", t_top)):
        say(f"| {name} | {t * 1e6:.1f} | {t / V * 1e9:.2f} |")
    say("")

    # 3. where the time goes
    draft_rows = 1 + 10 * 4
    step_cpu = 1.0 / cps[1]
    p_rows = ref.mean_tokens_per_step  # the root and each accepted node: one per token of the path
    rows_t = (t_one + 40 * t_ten) + p_rows * t_one + draft_rows * t_top
    say("## 3. Where the time goes (1 thread)")
    say("")
    say(f"A step computes {draft_rows} draft rows (EAGLE-2: the root, then 4 beams of 10 in one codebook "
        f"pass each), p at about {p_rows:.1f} nodes (the root and each accepted node; mean accepted depth "
        f"{ref.mean_accepted_depth:.2f}) and {draft_rows} top-10 selections: "
        f"{t_one * 1e6:.0f} + 40 x {t_ten * 1e6:.1f} + {p_rows:.1f} x {t_one * 1e6:.0f} + {draft_rows} x "
        f"{t_top * 1e6:.1f} us = {rows_t * 1e3:.2f} ms of a measured {step_cpu * 1e3:.2f} ms of CPU per step "
        f"({min(rows_t / step_cpu, 1.0) * 100:.0f}%). The rest: state updates, the k = 1000 merges and exact "
        "per-node TV on the walk, the bonus draw (one sequential pass over V), the dynamic tree's pool "
        f"selection. Floor of this design: {draft_rows} rows at the logits-only cost, "
        f"{draft_rows * t_floor * 1e3:.2f} ms, i.e. {1 / (draft_rows * t_floor):.0f} steps per CPU-second.")
    say("")

    # 4. scaling
    say("## 4. Scaling (1 thread; exact R1 for V, additive k=1000 delta=0.1 for tree size)")
    say("")
    say("| V | steps/s | steps per CPU-s | load avg |")
    say("|---|---|---|---|")
    for v in (1024, 4096, 16384, 65536):
        w = LatentWorld.preset("ambiguous", vocab_size=v, n_clusters=max(8, v // 32))
        r, wall, cpu, la = timed_run(w, tree, Relax.none(), 2, 128, 1)
        say(f"| {v} | {r.n_steps / wall:.0f} | {r.n_steps / cpu:.0f} | {la:.2f} |")
    say("")
    say("| EAGLE-2 total_tokens (K = 10, D = 4) | mean tree size | steps/s | steps per CPU-s | load avg |")
    say("|---|---|---|---|---|")
    for m in (8, 16, 32, 64, 128):
        r, wall, cpu, la = timed_run(world, Eagle2Tree(10, 4, m), relax, 2, 128, 1)
        say(f"| {m} | {r.mean_tree_size:.0f} | {r.n_steps / wall:.0f} | {r.n_steps / cpu:.0f} | {la:.2f} |")
    say("")
    rule_section(say, args, world, t_floor1, t_floor)
    return write_report(args, lines, load_start)


def row_inputs(world):
    """Ten drafter states of norm 30 and row scratch for them (section 2's rows)."""
    W = world.kernel_world(1.0)
    zbs = np.random.default_rng(0).standard_normal((10, 8))
    zbs *= 30.0 / np.linalg.norm(zbs, axis=1, keepdims=True)
    es, cmaxs = row_scratch(W, 10)
    return zbs, es, cmaxs


def row_floors(world) -> tuple[float, float]:
    """CPU seconds of the logits pass alone (a pass over the codebook, nothing else: the floor of any exact
    softmax row) for one state, and per row for 10 states in one pass; one compiled loop over the blocks
    (``rule_speed.logits_pass``)."""
    W = world.kernel_world(1.0)
    zbs, _, _ = row_inputs(world)
    acc = np.empty((10, 256), dtype=np.float32)
    zfs = np.zeros((10, W[8].shape[0]), dtype=np.float32)
    zfs[:, :8] = zbs
    Ms = np.full(10, 30.0 + W[4][F_BQMAX], dtype=np.float32)
    one = best_cpu(lambda: logits_pass(W[8], W[3], Ms[:1], zfs[:1], acc[:1]), reps=200)
    ten = best_cpu(lambda: logits_pass(W[8], W[3], Ms, zfs, acc), reps=20) / 10
    return one, ten


def rule_section(say, args, world, t_floor1: float, t_floor10: float) -> None:
    """Section 5: the per-rule table (``benchmarks/rule_speed.py``), before and after when asked."""
    here = Path(__file__).resolve().parents[1]
    checkouts = {"after": here}
    if args.before:
        checkouts = {"before": Path(args.before).resolve(), "after": here}
    costs = floor_costs(world, t_floor1, t_floor10)
    say(f"{SECTION5} (V = {world.vocab_size}, {args.rule_sequences} sequences x "
        f"{args.rule_seq_len} tokens per configuration, one thread, steps per CPU-second)")
    say("")
    if args.before:
        say(f"before: `{checkouts['before']}` (commit {commit_of(checkouts['before'])}); after: this "
            f"checkout (commit {commit_of(here)}); each draft source's configurations run in a fresh "
            "interpreter of each checkout in turn.")
        say("")
    say(f"Floor costs measured in this run: logits pass {costs['row1'] * 1e6:.1f} us per row (1 state), "
        f"{costs['row10'] * 1e6:.1f} us per row (10 states); sequential pass over V "
        f"{costs['seq'] * 1e6:.1f} us; compare pass over V "
        f"{costs['pass'] * 1e6:.1f} us; "
        f"np.sort of V {costs['sort'] * 1e6:.0f} us; V embedding rows gathered in a random order "
        f"{costs['rows'] * 1e6:.0f} us; neighbour gather {costs['gather1'] * 1e9:.2f} ns per (token, "
        "neighbour).")
    say("")
    per_rule_table(say, costs, checkouts, {}, args.rule_sequences, args.rule_seq_len, world.vocab_size)
    say("")


def commit_of(path: Path) -> str:
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, check=False)
    return out.stdout.strip() or "unknown"


def write_report(args, lines: list[str], load_start: float) -> int:
    """Write the sections run into ``args.report``: the whole head and sections 1-5, or (``--rules-only``)
    section 5 alone in place of the report's section 5; the hand-written text after KEEP stays."""
    text = "\n".join(lines)
    command = " ".join(["benchmarks/simulate_bench.py", *sys.argv[1:]])
    out = Path(args.report)
    old = out.read_text() if out.exists() else ""
    tail = "\n" + old[old.index(KEEP):] if KEEP in old else ""
    if args.rules_only:
        note = (f"Command: `.venv/bin/python {command}`; {machine()}; load average {load_start:.2f} at "
                f"start, {load():.2f} at the end.\n\n")
        section = text.split("\n", 2)
        block = "\n".join(section[:2]) + "\n" + note + section[2] + "\n"
        body = old[:old.index(KEEP)] if KEEP in old else old
        if SECTION5 in body:
            start = body.index(SECTION5)
            nxt = body.find("\n## ", start + 1)
            body = body[:start] + block + ("\n" + body[nxt + 1:] if nxt >= 0 else "\n")
        else:
            body = body.rstrip("\n") + "\n\n" + block + "\n"
        out.write_text(body + tail.lstrip("\n") if tail else body)
        print(f"wrote section 5 of {out}")
        return 0
    head = (f"# Simulator benchmarks\n\nCommand: `.venv/bin/python {command}`\n\nMachine: {machine()}; load "
            f"average {load_start:.2f} at start, {load():.2f} at the end.\nSpeed is measured here, never in "
            "tests. Ratios are measured side by side in one run.\n\n")
    head += f"Commit: {commit_of(Path(__file__).resolve().parents[1])}.\n\n"
    out.write_text(head + text + "\n" + tail)
    print(f"wrote {out}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
