"""Latency table of the reference decoder for the cost model (SPEC section 8), and verification against
the tree forward.

    python benchmarks/decoder_bench.py            # CUDA when present, always the CPU tables
    python benchmarks/decoder_bench.py --quick    # fewer prefix lengths / tree sizes / repetitions
    python benchmarks/decoder_bench.py --verify   # only the verification table

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
CPU. Each device's rows go to ``core/tables/decoder_<device>.csv``; the summary
is printed as Markdown for BENCHMARKS.md.

The verification table (``--verify``, part of the full run) measures one
decoding step's verification against its tree forward: GPT-B shapes (V =
16384, random weights, CFG batch of 2), a 60-node tree at prefix 128. The
forward (embeddings in, float32 logits out; on CUDA bf16 replayed as a CUDA
graph, on the CPU float32 eager) against verification = guidance, logits ->
probabilities (temperature 1, top-k 0 or 2000; rule r2 also turns the draft
logits of the nodes with children, a second tensor, into q) and one tree
verification step, by (a) the host path of ``reference.decode`` (guided logits
to the host, float64 NumPy, ``theory.rule_step.sample_rule_step``) and (b) the
device verifier ``reference.verify.DeviceVerifier`` (float64, the decoder's default), with the bytes
each moves to the host per step (``reference.verify_ops.HostLink``) and how
many of the timed steps both decided alike. Times are medians of the
repetitions.
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

from relaxspec.core.cost import TABLES  # noqa: E402  (the packaged latency tables the cost model reads)
from relaxspec.core.trace import Sampling  # noqa: E402
from relaxspec.reference.cuda_graph import graphed  # noqa: E402
from relaxspec.reference.decode import guide  # noqa: E402
from relaxspec.reference.drafter import EagleHead  # noqa: E402
from relaxspec.reference.model import Transformer  # noqa: E402
from relaxspec.reference.model_config import gpt_config  # noqa: E402
from relaxspec.reference.tree_attention import TreeExecution, run_layers, tree_inputs  # noqa: E402
from relaxspec.reference.verify_ops import HostLink  # noqa: E402
from relaxspec.theory.relax import Relax  # noqa: E402
from relaxspec.theory.rule_step import sample_rule_step, step_neighbours  # noqa: E402
from relaxspec.theory.rules import Rule  # noqa: E402
from relaxspec.theory.sampler import draw_without_replacement  # noqa: E402
from relaxspec.theory.tree import Tree  # noqa: E402
from relaxspec.theory.verification import Verification  # noqa: E402

FIELDS = ["device", "device_name", "model", "role", "dtype", "batch", "prefix", "n_tokens", "mode",
          "latency_ms", "weight_bytes", "floor_ms"]


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev: torch.device, reps: int, stat=min) -> float:
    """Wall time of ``fn()`` in ms over ``reps`` calls after two warm-up calls: the best by default (the
    least disturbed by other processes on a shared machine), or ``stat`` of them (e.g. ``np.median``)."""
    for _ in range(2):
        fn()
    out = []
    for _ in range(reps):
        sync(dev)
        t = time.perf_counter()
        fn()
        sync(dev)
        out.append((time.perf_counter() - t) * 1e3)
    return float(stat(out))


def copy_bandwidth(dev: torch.device, mib: int) -> float:
    """Device copy bandwidth in bytes/s (read + write of a ``mib`` MiB buffer)."""
    a = torch.empty(mib << 20, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    ms = timed(lambda: b.copy_(a), dev, 5)
    return 2 * a.numel() / (ms / 1e3)


def tree_parents(n: int) -> np.ndarray:
    """A bushy tree of n nodes (root + 4 children per node, breadth first), as drafts look."""
    return np.array([-1] + [(v - 1) // 4 for v in range(1, n)], dtype=np.int64)


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


# -- verification against the tree forward ------------------------------------------------------------
VERIFY_NODES, VERIFY_PREFIX, VERIFY_CFG = 60, 128, 2.0
VERIFY_RULES = [("r1", "additive:k=8,delta=0.2"), ("r2", "none")]
VERIFY_RULES_FULL = [("r1", "none"), *VERIFY_RULES, ("r1", "additive:k=1000,delta=0.1")]
VERIFY_TOP_K = (0, 2000)


def ring_neighbours(vocab: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """A neighbour table (V, k): tokens on a random cycle, each token's k nearest along it (alternately
    after and before). Verification reads k columns whatever the codebook, so this stands in for one."""
    order = rng.permutation(vocab)
    where = np.empty(vocab, dtype=np.int64)
    where[order] = np.arange(vocab)
    steps = np.array([s for d in range(1, k // 2 + 2) for s in (d, -d)][:k])
    return order[(where[:, None] + steps[None, :]) % vocab].astype(np.int64)


def draft_tree(parents: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> Tree:
    """Tokens for ``parents``: each node's children drawn without replacement from its q row (valid for
    every rule; rule r2 requires it)."""
    tokens = np.zeros(parents.size, dtype=np.int64)
    tokens[0] = int(rng.integers(q.shape[1]))
    for v in range(parents.size):
        kids = np.flatnonzero(parents == v)
        if kids.size:
            tokens[kids] = draw_without_replacement(q[v], rng.random(kids.size))
    return Tree(parents, tokens)


def internal_nodes(tree: Tree) -> np.ndarray:
    """The nodes with children: the draft rows (q) a step reads (``reference.decode`` leaves the others
    zero)."""
    return np.unique(tree.parents[1:])


def device_verifier_class():
    """``reference.verify.DeviceVerifier``, or None (with a note) while it cannot be imported."""
    try:
        from relaxspec.reference.verify import DeviceVerifier
    except ImportError as err:
        print(f"decoder_bench: the device verifier is not importable ({err}): its column is left out")
        return None
    return DeviceVerifier


def tree_forward(dev: torch.device, dtype: torch.dtype, reps: int) -> tuple[float, str, torch.Tensor]:
    """Median ms of GPT-B's forward over the verification tree (embeddings in, float32 logits out), the
    forward's mode, and its raw logits (2, n, V)."""
    cfg = gpt_config("GPT-B")
    n = VERIFY_NODES
    torch.manual_seed(0)
    with torch.device(dev):
        model = Transformer(cfg).to(dtype).eval()
    model.setup_cache(2, n)
    mode = "cuda_graph" if dev.type == "cuda" else "eager"
    if mode == "cuda_graph":
        model.set_execution(TreeExecution(cuda_graphs=True))
    tokens = torch.randint(cfg.vocab_size, (n,), device=dev)
    x = model.embed_tokens(tokens)[None].expand(2, -1, -1)
    parents = tree_parents(n)

    def forward() -> torch.Tensor:
        return model.logits(model.forward_tree(x, parents, np.arange(n), VERIFY_PREFIX))

    with torch.no_grad():
        ms = timed(forward, dev, reps, np.median)
        return ms, f"{str(dtype).replace('torch.', '')} {mode}", forward()


def host_verification(raw: torch.Tensor, q_logits: torch.Tensor, tree: Tree, sampling: Sampling,
                      verification: Verification, neighbours: np.ndarray, uniforms: list, out: list):
    """The host path of ``reference.decode`` as one call per step: guided logits (and r2's draft logits)
    to the host through ``link``, float64 NumPy probabilities, ``theory.rule_step.sample_rule_step``.
    Appends each (path, bonus) to ``out``; returns the step and its HostLink."""
    link, it = HostLink(), iter(uniforms)
    inner = internal_nodes(tree)

    def step() -> None:
        ua, ud = next(it)
        p = sampling.probs(link.read(guide(raw, VERIFY_CFG).float()).astype(np.float64))
        q = None
        if verification.rule == Rule.R2:
            q = np.zeros(p.shape)
            q[inner] = sampling.probs(link.read(q_logits[inner].float()).astype(np.float64))
        path, bonus = sample_rule_step(tree, p, ua, ud, verification, neighbours=neighbours, q_dists=q)
        out.append((list(path), int(bonus)))

    return step, link


def device_verification(verifier, raw: torch.Tensor, q_logits: torch.Tensor, tree: Tree, sampling: Sampling,
                        uniforms: list, out: list):
    """The same step by the device verifier: ``probs`` on the device, then ``step``."""
    it = iter(uniforms)
    inner = torch.as_tensor(internal_nodes(tree), device=raw.device)

    def step() -> None:
        ua, ud = next(it)
        p = verifier.probs(guide(raw, VERIFY_CFG), sampling)
        q = None
        if verifier.rule == Rule.R2:
            q = torch.zeros_like(p)
            q[inner] = verifier.probs(q_logits[inner], sampling)
        path, bonus = verifier.step(tree, p, ua, ud, q=q, checked=True)  # rows made by probs, as the decoder
        out.append((list(path), int(bonus)))

    return step


def verify_rows(dev: torch.device, dtype: torch.dtype, label: str, rules: list[tuple[str, str]],
                reps: int) -> list[dict]:
    """Per rule and top-k: the tree forward's and each verification path's median ms per step."""
    V, n, calls = gpt_config("GPT-B").vocab_size, VERIFY_NODES, reps + 2  # timed() warms up twice
    forward_ms, mode, raw = tree_forward(dev, dtype, reps)
    rng = np.random.default_rng(0)
    # the drafter's logits: the target's guided logits plus noise, a drafter that roughly agrees
    q_logits = guide(raw, VERIFY_CFG) + 0.5 * torch.randn(n, V, device=dev)
    k_max = max((Relax.parse(r).k for _, r in rules if not Relax.parse(r).is_exact), default=0)
    table = ring_neighbours(V, k_max, rng) if k_max else None
    DeviceVerifier = device_verifier_class()
    rows = []
    for rule, relax_text in rules:
        relax = Relax.parse(relax_text)
        verification = Verification(rule, relax)
        neighbours = step_neighbours(table, V, verification)
        for top_k in VERIFY_TOP_K:
            sampling = Sampling(1.0, top_k, 1.0)
            tree = draft_tree(tree_parents(n), sampling.probs(q_logits.cpu().numpy().astype(np.float64)), rng)
            uniforms = [(rng.random(n), rng.random(n)) for _ in range(calls)]
            host_out: list = []
            step, link = host_verification(raw, q_logits, tree, sampling, verification, neighbours, uniforms,
                                           host_out)
            row = {"device": label, "forward_mode": mode, "forward_ms": forward_ms, "rule": rule,
                   "relax": relax_text, "top_k": top_k, "host_ms": timed(step, dev, reps, np.median),
                   "host_bytes": link.bytes // calls, "device_ms": None, "device_bytes": None, "agree": None}
            if DeviceVerifier is not None:
                verifier = DeviceVerifier(verification, vocab_size=V, neighbours=table, device=dev,
                                          dtype=torch.float64)
                verifier.link.reset()
                device_out: list = []
                step = device_verification(verifier, raw, q_logits, tree, sampling, uniforms, device_out)
                row["device_ms"] = timed(step, dev, reps, np.median)
                row["device_bytes"] = verifier.link.bytes // calls
                row["agree"] = f"{sum(a == b for a, b in zip(host_out, device_out, strict=True))}/{calls}"
            rows.append(row)
    return rows


def verify_summary(rows: list[dict]) -> str:
    """Markdown: per device, rule and top-k, forward vs verification ms, ratios and host bytes."""
    out = ["| device | forward | rule | relax | top-k | forward (ms) | verify, host path (ms) | "
           "verify, device path (ms) | host / forward | device / forward | bytes to host, host path | "
           "bytes to host, device path | same decisions |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        f = r["forward_ms"]
        dev_ms = "-" if r["device_ms"] is None else f"{r['device_ms']:.2f}"
        dev_ratio = "-" if r["device_ms"] is None else f"{100 * r['device_ms'] / f:.1f}%"
        dev_bytes = "-" if r["device_bytes"] is None else f"{r['device_bytes']:,}"
        out.append(f"| {r['device']} | {r['forward_mode']} | {r['rule']} | {r['relax']} | {r['top_k']} | "
                   f"{f:.1f} | {r['host_ms']:.2f} | {dev_ms} | {100 * r['host_ms'] / f:.1f}% | {dev_ratio} | "
                   f"{r['host_bytes']:,} | {dev_bytes} | {r['agree'] or '-'} |")
    return "\n".join(out)


def print_verify(rows: list[dict], label: str) -> None:
    print(f"## Verification vs tree forward, {label}: GPT-B shapes (V = 16384, random weights), CFG batch 2, "
          f"{VERIFY_NODES}-node tree at prefix {VERIFY_PREFIX}; medians per step\n\n{verify_summary(rows)}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="fewer prefix lengths, tree sizes, rules and repetitions")
    p.add_argument("--no-cpu", action="store_true", help="skip the CPU tables")
    p.add_argument("--verify", action="store_true",
                   help="only the verification table (verification vs tree forward per step)")
    args = p.parse_args(argv)
    rules = VERIFY_RULES if args.quick else VERIFY_RULES_FULL
    verify_reps = 3 if args.quick else 9
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        label = torch.cuda.get_device_name(dev)
        if not args.verify:
            bw = copy_bandwidth(dev, 1024)
            rows: list[dict] = []
            prefixes = [1, 64, 256] if args.quick else [1, 32, 64, 128, 192, 256]
            sizes = [1, 16, 64] if args.quick else [1, 2, 4, 8, 10, 16, 32, 48, 60, 64, 96, 128]
            for name in ("GPT-B", "GPT-L", "GPT-XL"):  # GPT-B's t(10) is its step as GPT-XL's drafter
                bench_model(name, {}, dev, torch.bfloat16, prefixes, sizes, 20, bw, label, rows)
            write_csv(rows, TABLES / "decoder_cuda.csv")
            print(f"## CUDA: {label}, copy bandwidth {bw / 1e9:.0f} GB/s\n\n{summary(rows)}\n")
        print_verify(verify_rows(dev, torch.bfloat16, label, rules, verify_reps), label)
    else:
        print("decoder_bench: no CUDA device here: the GPU tables (GPT-B/L/XL latencies and verification, "
              "bf16) are not measured; run this script on a GPU machine to write "
              "core/tables/decoder_cuda.csv.")
    if not args.no_cpu:
        # one thread: on a shared machine, OpenMP barriers under contention stall multi-threaded
        # forwards for hundreds of ms; one thread gives stable, reproducible latencies
        torch.set_num_threads(1)
        dev = torch.device("cpu")
        label = "CPU (1 thread)"
        if not args.verify:
            bw = copy_bandwidth(dev, 256)
            rows = []
            prefixes = [1, 64] if args.quick else [1, 32, 64]
            sizes = [1, 4, 16] if args.quick else [1, 4, 16, 60]
            bench_model("GPT-S", {"vocab_size": 1024, "block_size": 64, "num_classes": 10}, dev,
                        torch.float32, prefixes, sizes, 15, bw, label, rows)
            bench_model("GPT-B", {}, dev, torch.float32, [p * 4 for p in prefixes], sizes, 7, bw, label, rows)
            write_csv(rows, TABLES / "decoder_cpu.csv")
            print(f"## CPU (1 thread), copy bandwidth {bw / 1e9:.1f} GB/s\n\n{summary(rows)}\n")
        print_verify(verify_rows(dev, torch.float32, label, rules, verify_reps), label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
