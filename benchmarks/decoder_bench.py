"""Latency table of the reference decoder for the cost model (SPEC section 8).

    python benchmarks/decoder_bench.py            # CUDA when present, always the CPU table
    python benchmarks/decoder_bench.py --quick    # fewer prefix lengths / tree sizes

Measures, with random weights and the CFG batch of 2:

- t_target(n): one target forward over a tree of n new tokens at prefix length
  L (n = 1 is the AR step), eager, and on CUDA also replayed as a CUDA graph;
- the drafter step: an EAGLE head forward over a beam of 10 nodes, and for
  GPT-XL the independent GPT-B drafter's t(10);
- the weight-bandwidth floor: weight bytes / measured device copy bandwidth.

On CUDA: GPT-B, GPT-L and GPT-XL shapes (V = 16384, 16 x 16 grid) in bf16,
prefix lengths 1..256 and n = 1..128. Without CUDA the script says so and
still measures a CPU table in float32 for small shapes (a Fashion-MNIST-sized
GPT-S, V = 1024 on an 8 x 8 grid, and GPT-B's real shape), clearly labelled
CPU. Each device's rows go to ``benchmarks/decoder_<device>.csv``; the summary
is printed as Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.cost import TABLES  # noqa: E402  (the packaged latency tables the cost model reads)
from reference.drafter import EagleHead  # noqa: E402
from reference.model import Transformer, gpt_config, run_layers, tree_inputs  # noqa: E402

FIELDS = ["device", "device_name", "model", "role", "dtype", "batch", "prefix", "n_tokens", "mode",
          "latency_ms", "weight_bytes", "floor_ms"]


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev: torch.device, reps: int) -> float:
    """Best wall time of ``fn()`` over ``reps`` calls in ms, after two warm-up calls (the minimum is
    the least disturbed by other processes on a shared machine)."""
    for _ in range(2):
        fn()
    out = []
    for _ in range(reps):
        sync(dev)
        t = time.perf_counter()
        fn()
        sync(dev)
        out.append((time.perf_counter() - t) * 1e3)
    return min(out)


def copy_bandwidth(dev: torch.device, mib: int) -> float:
    """Device copy bandwidth in bytes/s (read + write of a ``mib`` MiB buffer)."""
    a = torch.empty(mib << 20, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    ms = timed(lambda: b.copy_(a), dev, 5)
    return 2 * a.numel() / (ms / 1e3)


def tree_parents(n: int) -> np.ndarray:
    """A bushy tree of n nodes (root + 4 children per node, breadth first), as drafts look."""
    return np.array([-1] + [(v - 1) // 4 for v in range(1, n)], dtype=np.int64)


def graphed(fn):
    """``fn`` captured as a CUDA graph (after warm-up on a side stream); returns its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def target_step(model: Transformer, x: torch.Tensor, prefix: int):
    """One target forward over a tree of x.shape[1] nodes at ``prefix``, output head included."""
    n = x.shape[1]
    inputs = tree_inputs(model.rope, model.cache_len, tree_parents(n), np.arange(n), prefix, {}, 0, x.device)
    return lambda: model.logits(run_layers(model.layers, model.norm, x, *inputs))


def eagle_step(head: EagleHead, x: torch.Tensor, prefix: int):
    """One EAGLE-head forward over a beam-shaped tree of x.shape[1] nodes (features = x)."""
    n = x.shape[1]
    inputs = tree_inputs(head.rope, head.cache_len, tree_parents(n), np.arange(n), prefix, {},
                         head.cfg.cls_token_num, x.device)
    return lambda: run_layers(head.layers, torch.nn.Identity(), head.fc(torch.cat([x, x], -1)), *inputs)


def bench_model(name: str, overrides: dict, dev: torch.device, dtype: torch.dtype, prefixes: list[int],
                sizes: list[int], reps: int, bandwidth: float, label: str, rows: list[dict]) -> None:
    """Append the target's t(n) and its EAGLE head's beam step at every prefix to ``rows``."""
    cfg = gpt_config(name, **overrides)
    torch.manual_seed(0)
    with torch.device(dev):
        model = Transformer(cfg).to(dtype).eval()
        head = EagleHead(cfg).to(dtype).eval()
    model.setup_cache(2, max(sizes))
    head.setup_cache(2, max(sizes))
    modes = ["eager"] + (["cuda_graph"] if dev.type == "cuda" else [])
    common = {"device": dev.type, "device_name": label, "dtype": str(dtype).replace("torch.", ""), "batch": 2}
    cases = [("target", name, model, target_step, n) for n in sizes]
    cases.append(("drafter", f"EAGLE head ({name})", head, eagle_step, 10))
    with torch.no_grad():
        for prefix in prefixes:
            prefix = min(prefix, cfg.seq_len - 8)  # room for the deepest tree (depth 4 at n = 128)
            for role, label_model, module, make, n in cases:
                wbytes = sum(p.numel() * p.element_size() for p in module.parameters())
                x = torch.randn(2, n, cfg.dim, device=dev, dtype=dtype)
                at = prefix if role == "target" else max(0, prefix - cfg.cls_token_num)
                for mode in modes:
                    try:
                        fn = make(module, x, at)
                        ms = timed(graphed(fn) if mode == "cuda_graph" else fn, dev, reps)
                    except RuntimeError as err:  # a graph that cannot be captured: say so, keep going
                        print(f"{label_model} {mode} n={n}: {err}", file=sys.stderr)
                        continue
                    rows.append({**common, "model": label_model, "role": role, "prefix": prefix,
                                 "n_tokens": n, "mode": mode, "latency_ms": round(ms, 4),
                                 "weight_bytes": wbytes, "floor_ms": round(wbytes / bandwidth * 1e3, 4)})
    del model, head
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)


def summary(rows: list[dict]) -> str:
    """Markdown: per model, AR step vs floor and t(n) / t(1) at the largest prefix."""
    out = ["| device | model | dtype | prefix | mode | AR step (ms) | floor (ms) | t(16)/t(1) | t(60)/t(1) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = sorted({(r["device_name"], r["model"], r["mode"]) for r in rows if r["role"] == "target"})
    for dev, model, mode in keys:
        sel = [r for r in rows if (r["device_name"], r["model"], r["mode"]) == (dev, model, mode)]
        prefix = max(r["prefix"] for r in sel)
        t = {r["n_tokens"]: r["latency_ms"] for r in sel if r["prefix"] == prefix}
        r16, r60 = (f"{t[n] / t[1]:.2f}" if n in t else "-" for n in (16, 60))
        out.append(f"| {dev} | {model} | {sel[0]['dtype']} | {prefix} | {mode} | {t[1]:.2f} | "
                   f"{sel[0]['floor_ms']:.2f} | {r16} | {r60} |")
    for r in rows:
        if r["role"] == "drafter" and r["prefix"] == max(x["prefix"] for x in rows):
            out.append(f"| {r['device_name']} | {r['model']}, beam of 10 | {r['dtype']} | {r['prefix']} | "
                       f"{r['mode']} | {r['latency_ms']:.2f} | {r['floor_ms']:.3f} | - | - |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer prefix lengths and tree sizes")
    p.add_argument("--no-cpu", action="store_true", help="skip the CPU table")
    args = p.parse_args(argv)
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        label = torch.cuda.get_device_name(dev)
        bw = copy_bandwidth(dev, 1024)
        rows: list[dict] = []
        prefixes = [1, 64, 256] if args.quick else [1, 32, 64, 128, 192, 256]
        sizes = [1, 16, 64] if args.quick else [1, 2, 4, 8, 10, 16, 32, 48, 60, 64, 96, 128]
        for name in ("GPT-B", "GPT-L", "GPT-XL"):  # GPT-B's t(10) is its step as GPT-XL's drafter
            bench_model(name, {}, dev, torch.bfloat16, prefixes, sizes, 20, bw, label, rows)
        write_csv(rows, TABLES / "decoder_cuda.csv")
        print(f"## CUDA: {label}, copy bandwidth {bw / 1e9:.0f} GB/s\n\n{summary(rows)}\n")
    else:
        print("decoder_bench: no CUDA device here: the GPU table (GPT-B/L/XL, bf16) is not measured; "
              "run this script on a GPU machine to write core/tables/decoder_cuda.csv.")
    if not args.no_cpu:
        # one thread: on a shared machine, OpenMP barriers under contention stall multi-threaded
        # forwards for hundreds of ms; one thread gives stable, reproducible latencies
        torch.set_num_threads(1)
        dev = torch.device("cpu")
        bw = copy_bandwidth(dev, 256)
        rows = []
        prefixes = [1, 64] if args.quick else [1, 32, 64]
        sizes = [1, 4, 16] if args.quick else [1, 4, 16, 60]
        bench_model("GPT-S", {"vocab_size": 1024, "block_size": 64, "num_classes": 10}, dev, torch.float32,
                    prefixes, sizes, 15, bw, "CPU (1 thread)", rows)
        bench_model("GPT-B", {}, dev, torch.float32, [p * 4 for p in prefixes], sizes, 7, bw,
                    "CPU (1 thread)", rows)
        write_csv(rows, TABLES / "decoder_cpu.csv")
        print(f"## CPU (1 thread), copy bandwidth {bw / 1e9:.1f} GB/s\n\n"
              f"{summary(rows)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
