"""Where a simulator configuration spends its CPU, per Numba kernel, sampled by Linux ``perf`` (issue 30).

    .venv/bin/python benchmarks/perf_profile.py jacobi:15 r4 [--world ambiguous] [--sequences 8]

Numba's JIT code has no symbols for ``perf``. So the configuration runs in a child process under
``perf record`` (software clock, 1 kHz) with a fresh ``NUMBA_CACHE_DIR``. It compiles every kernel anew:
a kernel loaded from the on-disk cache keeps no function list. At its end it writes
``/tmp/perf-<pid>.map``, every compiled function's address, each function's size taken as the gap to
the next address. The table gives each kernel's share of the samples in JIT code: compilation,
Python and NumPy are left out, and an inlined kernel counts as its caller. Takes a few minutes, mostly
compilation.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def write_perf_map() -> int:
    """``/tmp/perf-<pid>.map`` for every function Numba compiled in this process; returns their count."""
    from numba.core.registry import CPUDispatcher

    names = {}
    for obj in gc.get_objects():
        if not isinstance(obj, CPUDispatcher):
            continue
        for cres in obj.overloads.values():
            lib = cres.library
            module = getattr(lib, "_final_module", None)
            for fn in [] if module is None else module.functions:
                if not fn.is_declaration:
                    address = lib.get_pointer_to_function(fn.name)
                    if address:
                        names[address] = fn.name
    addresses = sorted(names)
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        for i, a in enumerate(addresses):
            size = addresses[i + 1] - a if i + 1 < len(addresses) else 4096
            f.write(f"{a:x} {min(size, 1 << 20):x} {names[a]}\n")
    return len(addresses)


def kernel_name(symbol: str) -> str | None:
    """``module.function`` of a Numba symbol (``_ZN9relaxspec8simulate13world_kernels9_exp_pass...``)."""
    if not symbol.startswith("_ZN"):
        return None
    parts, pos, text = [], 0, symbol[3:]
    while pos < len(text) and text[pos].isdigit():
        digits = re.match(r"\d+", text[pos:]).group(0)
        pos += len(digits)
        parts.append(text[pos:pos + int(digits)])
        pos += int(digits)
    return ".".join(parts[-2:]) if len(parts) >= 2 else None


def shares(report: str) -> tuple[float, list[tuple[str, float]]]:
    """(the JIT code's share of all samples, each kernel's share of the JIT samples) from ``perf report``."""
    per = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(\S+)", line)
        name = kernel_name(m.group(2)) if m else None
        if name:
            per[name] += float(m.group(1))
    total = sum(per.values())
    return total, [(k, 100 * v / total) for k, v in per.most_common()] if total else []


def child(args: argparse.Namespace) -> None:
    """Run the configuration (after a short run that compiles), then write the perf map."""
    from relaxspec.core.trees.spec import parse_tree
    from relaxspec.simulate.engine import run
    from relaxspec.simulate.worlds import LatentWorld

    world = LatentWorld.preset(args.world)
    tree = parse_tree(args.tree)
    run(world, tree, args.verification, n_sequences=1, seq_len=8, seed=0, threads=1)
    res = run(world, tree, args.verification, n_sequences=args.sequences, seq_len=args.seq_len, seed=0,
              threads=1)
    cpu = res.extra["cpu_seconds"]
    print(f"{res.n_steps} steps in {cpu:.2f} CPU s ({res.n_steps / cpu:.0f} steps per CPU-second); "
          f"{write_perf_map()} functions mapped", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", help="a tree spec, e.g. jacobi:15 or eagle2:10,4,59")
    ap.add_argument("verification", help="a verification, e.g. r4 or r1+lantern:k=1000,delta=0.1")
    ap.add_argument("--world", default="ambiguous")
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--top", type=int, default=20, help="kernels listed")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if shutil.which("perf") is None:
        print("perf_profile: perf is not installed (Linux perf: apt-get install linux-perf)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
        cmd = ["perf", "record", "-q", "-F", "1000", "-e", "cpu-clock", "-o", str(data), "--", sys.executable,
               __file__, *(argv if argv is not None else sys.argv[1:]), "--child"]
        if subprocess.run(cmd, env=env).returncode:
            print("perf_profile: the profiled run failed (its error is above)", file=sys.stderr)
            return 2
        report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "sym", "--stdio"],
                                capture_output=True, text=True).stdout
    jit, rows = shares(report)
    print(f"{args.tree} {args.verification} in {args.world}: JIT code is {jit:.1f}% of all samples "
          "(the rest is mostly compilation)\n")
    print("| kernel | share of the JIT samples |\n|---|---|")
    for name, share in rows[:args.top]:
        print(f"| {name} | {share:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
