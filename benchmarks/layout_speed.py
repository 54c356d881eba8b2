"""Simulator speed of two checkouts side by side (issue 13: a refactor must keep the speed).

    .venv/bin/python benchmarks/layout_speed.py OLD_CHECKOUT [NEW_CHECKOUT] [--sequences 100] [--rounds 2]

Runs simulate_bench.py's reference workload (`ambiguous` world, V = 16384, EAGLE-2 (10, 4, 59), R1
additive k = 1000 delta = 0.1, seq_len 256, one Numba thread) in a fresh interpreter per run, each
checkout's own code on its PYTHONPATH, alternating OLD, NEW, OLD, NEW, ... so that load drifts hit both
alike. Prints a Markdown table of steps per CPU-second (and wall) per run, the ratio of the medians, and
whether both give the same numbers (tokens per step, bit for bit). Make ``--sequences`` large enough
that a run takes 10 s or more: shorter runs do not repeat within 10% on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = """
import inspect, json, sys
if sys.argv[2] == "core":
    from relaxspec.core.trees import Eagle2Tree
else:  # checkouts before core/ (issue 13)
    from relaxspec.simulate.policies import Eagle2Tree
from relaxspec.simulate.engine import run
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory import Relax

n = int(sys.argv[1])
world, relax, tree = LatentWorld.preset("ambiguous"), Relax.additive(1000, 0.1), Eagle2Tree(10, 4, 59)
world.neighbours(1000)
if "verification" in inspect.signature(run).parameters:  # one verification value (issue 27)
    rule = {"verification": "r1+lantern:k=1000,delta=0.1"}
else:  # checkouts before it: rule and relaxation apart
    rule = {"rule": "r1", "relax": relax}
run(world, tree, n_sequences=2, seq_len=16, threads=1, **rule)  # compile or load
res = run(world, tree, n_sequences=n, seq_len=256, threads=1, seed=1, **rule)
print(json.dumps({"steps": res.n_steps, "wall": res.seconds, "cpu": res.extra["cpu_seconds"],
                  "tokens": repr(res.mean_tokens_per_step)}))
"""


def measure(checkout: Path, sequences: int) -> dict:
    """One run of the reference workload with ``checkout``'s code (a fresh interpreter): its own
    ``.venv`` when it has one (since the layers install as ``relaxspec.*`` through setuptools' package-dir
    mapping, only an install of the checkout imports its code), else this interpreter with the checkout on
    PYTHONPATH (checkouts before the mapping)."""
    own = checkout / ".venv" / "bin" / "python"
    python = str(own) if own.is_file() else sys.executable
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    if not own.is_file():
        env["PYTHONPATH"] = str(checkout)
    layout = "core" if (checkout / "core" / "trees").is_dir() else "old"
    out = subprocess.run([python, "-c", WORKER, str(sequences), layout], cwd=checkout, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"layout_speed: error: the run in {checkout} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="checkout before the change (e.g. a git worktree)")
    ap.add_argument("new", nargs="?", default=str(Path(__file__).resolve().parents[1]),
                    help="checkout after the change (default: this one)")
    ap.add_argument("--sequences", type=int, default=100,
                    help="sequences of 256 tokens per run (default 100)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each checkout, alternating (default 2)")
    args = ap.parse_args()
    trees = {"before": Path(args.old).resolve(), "after": Path(args.new).resolve()}
    for name, path in trees.items():
        if not (path / "simulate" / "engine.py").is_file():
            raise SystemExit(f"layout_speed: error: {path} is not a relaxspec checkout ({name})")
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; one Numba thread; {args.sequences} sequences x "
          "256 tokens per run")
    print()
    print("| run | code | steps | wall s | steps/s | CPU s | steps per CPU-s | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for i in range(args.rounds):
        for name, path in trees.items():
            load = os.getloadavg()[0]
            r = measure(path, args.sequences)
            runs[name].append(r)
            print(f"| {i + 1} | {name} | {r['steps']} | {r['wall']:.1f} | {r['steps'] / r['wall']:.0f} | "
                  f"{r['cpu']:.1f} | {r['steps'] / r['cpu']:.0f} | {load:.2f} |", flush=True)
    med = {n: statistics.median(r["steps"] / r["cpu"] for r in rs) for n, rs in runs.items()}
    same = len({r["tokens"] for rs in runs.values() for r in rs}) == 1
    print()
    print(f"after / before, median steps per CPU-second: **{med['after'] / med['before']:.3f}**; "
          f"tokens per step identical in every run: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
