"""Sweeps on Dask (issue 16): the demo grid serially and on a local cluster, Dask's per-task cost, and the
paper-size sweep projected onto a 64-worker cluster; prints a table and writes its section of BENCHMARKS.md.

    .venv/bin/python benchmarks/sweep_bench.py [--quick] [--report BENCHMARKS.md]

1. ``relaxspec demo``'s grid (its R1 grid and the static tree under R2: 128 configurations, 4 sequences x
   128 tokens each), run by ``run_sweep`` in this process (``--scheduler none``) and on a LocalCluster of
   2 single-threaded workers, each into a fresh CSV after a warm-up that fills the Numba and neighbour
   caches: wall clock, speed-up, and the overhead per task, (workers x wall - summed task time) / tasks,
   with each task's time taken from Dask's task stream (the time its worker spent computing it).
2. Dask's own cost per task: 2000 no-op tasks through the same cluster (throughput), and 200 one-task
   round trips (latency).
3. The paper-size sweep on 64 workers, simulated: each demo task's measured time split into its fixed
   part (tree, Sequoia vector, warm-up) and its decoding (the row's ``seconds``), the decoding scaled to
   the paper's sequences x tokens, the grid repeated over the paper's temperatures and seeds, then the
   tasks list-scheduled in submission order on 64 workers, each task paying the measured per-task cost.

Text after the section's "### Reading these figures" is kept when the section is rewritten (the analysis
is written by hand); the rest of BENCHMARKS.md is left as it is.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.simulate_bench import load, machine  # noqa: E402
from relaxspec.demo import DEMO_CONFIG, R2_CONFIG  # noqa: E402
from relaxspec.results import config_key  # noqa: E402
from relaxspec.sweep import SweepConfig, jobs, run_sweep  # noqa: E402

HEADING = "# Sweeps on Dask (`benchmarks/sweep_bench.py`)"
KEEP = "### Reading these figures"
WORKERS = 2
CLUSTER_WORKERS = 64
# the paper-size sweep: the demo grid at 100 sequences x 256 tokens (a 16 x 16 LlamaGen image), two
# temperatures and five seeds
PAPER = {"n_sequences": 100, "seq_len": 256, "temperatures": 2, "seeds": 5}


def _noop(i: int) -> int:
    return i


def grid_configs(quick: bool) -> list[SweepConfig]:
    """The demo's two grids (``--quick``: one world, three verifications)."""
    configs = [DEMO_CONFIG, R2_CONFIG]
    if quick:
        configs = [{**c, "worlds": ["ambiguous"], "verifications": c["verifications"][:3]} for c in configs]
    return [SweepConfig.from_dict(c, source="demo grid") for c in configs]


def raw_rows(path: Path) -> dict[str, dict]:
    """A results CSV's rows as written (strings), by configuration key."""
    with open(path, newline="") as f:
        return {config_key(r): r for r in csv.DictReader(f)}


def compute_seconds(stream: list[dict], prefix: str) -> dict[str, float]:
    """Seconds each task (key) of ``prefix`` spent computing, from Dask's task stream."""
    return {str(rec["key"]): sum(s["stop"] - s["start"] for s in rec["startstops"]
                                 if s["action"] == "compute")
            for rec in stream if str(rec["key"]).startswith(prefix)}


def timed_sweep(configs: list[SweepConfig], out: Path, scheduler: str, client: object = None) -> Sweep:
    """Run the grids into ``out`` (fresh); on a cluster, with each configuration's task time."""
    done = Sweep()
    t0 = time.perf_counter()
    for cfg in configs:
        if client is None:
            run_sweep(cfg, out, progress=False, scheduler=scheduler)
            continue
        from distributed import get_task_stream

        with get_task_stream(client=client) as ts:
            run_sweep(cfg, out, progress=False, scheduler=scheduler)
        compute = {int(k.rsplit("-", 1)[1]): t for k, t in compute_seconds(ts.data, "run_job-").items()}
        done.build_seconds += list(compute_seconds(ts.data, "shared-build_world").values())
        rows = raw_rows(out)
        todo = [config_key(j.row_config(cfg)) for j in jobs(cfg)]  # a fresh CSV: the whole grid, in order
        assert len(compute) == len(todo), (len(compute), len(todo))
        done.tasks += [(rows[key], compute[i]) for i, key in enumerate(todo)]
    done.wall = time.perf_counter() - t0
    return done


@dataclass
class Sweep:
    """A timed sweep: wall seconds, (row, task compute seconds) per configuration, world-building tasks."""

    wall: float = 0.0
    tasks: list[tuple[dict, float]] = field(default_factory=list)
    build_seconds: list[float] = field(default_factory=list)


def makespan(durations: list[float], workers: int) -> float:
    """Finish time of tasks taken in order by the first free of ``workers`` (list scheduling)."""
    free = [0.0] * workers
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def main() -> int:
    from distributed import Client

    from relaxspec.core.execution import local_cluster

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller grid (a smoke run)")
    ap.add_argument("--report", default=str(Path(__file__).resolve().parents[1] / "BENCHMARKS.md"),
                    help="the Markdown file whose section is written (default: BENCHMARKS.md)")
    args = ap.parse_args()
    lines: list[str] = []
    load_start = load()

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    configs = grid_configs(args.quick)
    one_thread = [replace(c, threads=1) for c in configs]
    n_tasks = sum(1 for c in configs for _ in jobs(c))
    tmp = Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    runs: dict[str, tuple[Sweep, float, float]] = {}  # name -> (sweep, CPU seconds, load average before)
    with local_cluster(WORKERS) as cluster, Client(cluster) as client:
        address = cluster.scheduler_address
        timed_sweep(configs, tmp / "warm.csv", "none")  # Numba and neighbour-table caches, in this process
        timed_sweep(configs, tmp / "warm-dask.csv", address)  # ... and in the workers
        for name, grids in (("serial", configs), ("serial, 1 thread", one_thread)):
            la, cpu0 = load(), time.process_time()
            done = timed_sweep(grids, tmp / f"{name}.csv", "none")
            runs[name] = (done, time.process_time() - cpu0, la)
        la, cpu0 = load(), sum(client.run(time.process_time).values())
        done = timed_sweep(configs, tmp / "dask.csv", address, client)
        runs["dask"] = (done, sum(client.run(time.process_time).values()) - cpu0, la)
        # Dask's own cost per task: throughput of no-op tasks, and the round trip of one
        n_noop = 200 if args.quick else 2000
        t0 = time.perf_counter()
        client.gather(client.map(_noop, range(n_noop), pure=False))
        noop = (time.perf_counter() - t0) / n_noop
        t0 = time.perf_counter()
        for i in range(200):
            client.submit(_noop, i, pure=False).result()
        round_trip = (time.perf_counter() - t0) / 200
    serial_rows, dask_rows = raw_rows(tmp / "serial.csv"), raw_rows(tmp / "dask.csv")
    same = serial_rows.keys() == dask_rows.keys() and all(
        {c: v for c, v in r.items() if c != "seconds"}
        == {c: v for c, v in dask_rows[k].items() if c != "seconds"} for k, r in serial_rows.items())
    (serial, serial_cpu, _), (single, single_cpu, _), (dask, dask_cpu, _) = runs.values()
    compute = [t for _, t in dask.tasks]
    task_sum = sum(compute)
    wall_overhead = (WORKERS * dask.wall - task_sum) / n_tasks
    cpu_overhead = (dask_cpu - single_cpu) / n_tasks
    cpu_task = single_cpu / n_tasks

    say(f"## 1. The demo grid, serially and on a LocalCluster of {WORKERS} workers ({n_tasks} "
        "configurations)")
    say("")
    say("| run | wall s | CPU s | wall speed-up | load avg before |")
    say("|---|---|---|---|---|")
    labels = {"serial": "`--scheduler none` (this process, Numba on all cores: the default `threads`)",
              "serial, 1 thread": "`--scheduler none`, `threads = 1`",
              "dask": f"`--scheduler local --workers {WORKERS}` (one thread each; CPU of the workers)"}
    for name, (done, cpu, la) in runs.items():
        say(f"| {labels[name]} | {done.wall:.1f} | {cpu:.1f} | {serial.wall / done.wall:.2f}x | {la:.2f} |")
    say("")
    say(f"Wall-clock speed-up of {WORKERS} workers: {serial.wall / dask.wall:.2f}x over the default serial "
        f"run and {single.wall / dask.wall:.2f}x over one thread (goal >= 1.8x); on {WORKERS} idle cores, "
        f"from CPU time, {single_cpu / (dask_cpu / WORKERS):.2f}x over one thread. Dask's overhead per task "
        f"in CPU (the workers' CPU minus the one-thread run's, per task): {cpu_overhead * 1e3:.1f} ms, "
        f"{cpu_overhead / cpu_task * 100:.1f}% of this grid's mean task ({cpu_task * 1e3:.0f} ms of CPU) and "
        f"{cpu_overhead * 100:.1f}% of a 1-second task (goal <= 5% for tasks of a second or more). In wall "
        f"time, ({WORKERS} x wall - summed task time) / tasks = {wall_overhead * 1e3:.0f} ms, which also "
        "counts the workers' idle time at the end of each grid. Tasks computed for "
        f"{task_sum:.1f} s (mean {task_sum / n_tasks * 1e3:.0f} ms, max {max(compute) * 1e3:.0f} ms); the "
        f"worlds were built by {len(dask.build_seconds)} shared tasks in {sum(dask.build_seconds):.1f} s. "
        f"Rows identical to the serial run's (all columns but seconds): {'yes' if same else 'NO'}.")
    say("")
    say("## 2. Dask's own cost per task (the same cluster)")
    say("")
    say("| measure | ms per task |")
    say("|---|---|")
    say(f"| {n_noop} no-op tasks, submitted at once (scheduler throughput) | {noop * 1e3:.2f} |")
    say(f"| one no-op task, submit to result, 200 in a row (round trip) | {round_trip * 1e3:.2f} |")
    say("")

    # 3. the paper-size sweep on 64 workers: each task = its fixed part + its decoding scaled to paper size,
    # in CPU-equivalent seconds (the tasks' wall time times the workers' CPU / wall: a shared machine)
    busy = dask_cpu / task_sum
    scale = PAPER["n_sequences"] * PAPER["seq_len"] / (configs[0].n_sequences * configs[0].seq_len)
    decoding = [float(row["seconds"]) * busy for row, _ in dask.tasks]
    fixed = [max(t * busy - d, 0.0) for (_, t), d in zip(dask.tasks, decoding, strict=True)]
    repeats = PAPER["temperatures"] * PAPER["seeds"]
    paper = [f + d * scale for f, d in zip(fixed, decoding, strict=True)] * repeats
    per_task = max(noop, round_trip)
    build = max(dask.build_seconds, default=0.0)
    span = makespan([t + per_task for t in paper], CLUSTER_WORKERS) + build
    total = sum(paper)
    say(f"## 3. The paper-size sweep on {CLUSTER_WORKERS} workers (simulated from the measured tasks)")
    say("")
    say(f"Paper size: the demo grid at {PAPER['n_sequences']} sequences x {PAPER['seq_len']} tokens "
        f"({scale:.0f}x the demo's decoding per configuration), {PAPER['temperatures']} temperatures x "
        f"{PAPER['seeds']} seeds: {len(paper)} tasks. Each task: its measured fixed part (tree, Sequoia "
        f"vector, warm-up; {sum(fixed) / len(fixed):.2f} s mean) plus its measured decoding x {scale:.0f}, "
        f"both in CPU seconds (the tasks' wall times x {busy:.2f}, the workers' CPU / wall in section 1), "
        f"plus {per_task * 1e3:.1f} ms of Dask per task (section 2's round trip), taken in grid order by "
        f"the first free worker; the world tables first ({build:.1f} s).")
    say("")
    say("| | tasks | task time, sum | mean task | longest task | wall clock | efficiency |")
    say("|---|---|---|---|---|---|---|")
    say(f"| one core (serial) | {len(paper)} | {total / 3600:.1f} h | {total / len(paper):.1f} s | "
        f"{max(paper):.0f} s | {total / 3600:.1f} h | 100% |")
    say(f"| {CLUSTER_WORKERS} workers | {len(paper)} | {total / 3600:.1f} h | {total / len(paper):.1f} s | "
        f"{max(paper):.0f} s | {span / 60:.1f} min | {total / (CLUSTER_WORKERS * span) * 100:.0f}% |")
    say("")
    write_section(Path(args.report), lines, args.quick, load_start)
    return 0


def write_section(out: Path, lines: list[str], quick: bool, load_start: float) -> None:
    """Replace this benchmark's section of ``out`` (or append it), keeping its hand-written tail."""
    head = (f"{HEADING}\n\nCommand: `nice -n 5 .venv/bin/python benchmarks/sweep_bench.py"
            + (" --quick" if quick else "") + f"`\n\nMachine: {machine()}; load average {load_start:.2f} at "
            f"start, {load():.2f} at the end. Speed is measured here, never in tests.\n\n")
    text = "\n".join(line.replace("## ", "### ", 1) if line.startswith("## ") else line for line in lines)
    before, tail = out.read_text() if out.exists() else "", ""
    if HEADING in before:
        at = before.index(HEADING)
        nxt = before.find("\n# ", at + len(HEADING))
        section, rest = (before[at:nxt + 1], before[nxt + 1:]) if nxt >= 0 else (before[at:], "")
        if KEEP in section:
            tail = "\n" + section[section.index(KEEP):].rstrip("\n") + "\n"
        before = before[:at] + rest
    out.write_text(before.rstrip("\n") + "\n\n" + head + text + "\n" + tail)
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
