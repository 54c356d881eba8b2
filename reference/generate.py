"""``relaxspec generate``: images, a per-step CSV and optionally a trace from local checkpoints.

Output directory::

    OUT/images/000000_class207.png   one PNG per sequence (written last: it marks the sequence done)
    OUT/tokens/000000.npy            the image tokens (grid^2,)
    OUT/steps.csv                    one row per decoding step (reference.decode.StepStats)
    OUT/trace/                       the trace (``--trace``), one chunk per sequence

A rerun with the same arguments skips finished sequences (resume); sequence i
of the run uses uniforms keyed by (seed, i), so a resumed run gives the same
images as an uninterrupted one.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import re
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from reference.decode import Decoder, DecodeSettings, StepStats
from reference.drafter import EagleDraftSession, EagleHead, GPTDraftSession
from reference.model import load_gpt
from reference.vq import VQModel, save_png, to_uint8, vq_config
from simulate.cost import DEFAULT_TABLE, CostModel, choose_static_size
from simulate.latent import ChildSelector
from simulate.policies import DDDTree, Eagle2Tree, LatentAwareTree, StaticTree, TreePolicy
from simulate.sequoia import SequoiaTree
from simulate.trace import Sampling, TraceHeader, TraceWriter, array_sha256, file_sha256
from theory.neighbours import DEFAULT_K_MAX, load_neighbours
from theory.relax import Relax

TREES = ("ar", "static", "eagle2", "ddd", "latent", "sequoia", "costaware")
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_kv(text: str) -> dict[str, object]:
    """``a=1,b=2.5,c=name,d=[[0],[1]]`` -> dict (values parsed as JSON when they are JSON)."""
    out: dict[str, object] = {}
    for part in filter(None, (s.strip() for s in re.split(r",(?=\s*\w+=)", text))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"bad tree argument {part!r}; expected key=value")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def policy_from_spec(tree: str, *, relax: Relax = Relax.none(), neighbours: np.ndarray | None = None,
                     **kw: object) -> TreePolicy:
    """A ``simulate.policies`` tree builder by name: ``static`` (``choices``: ``mc_sim_7b_63``,
    ``naive_extend_57`` or a JSON list of rank paths), ``eagle2`` (``top_k``, ``depth``,
    ``total_tokens``; LANTERN's LlamaGen defaults 10, 4, 59), ``ddd`` (``top_k``, ``max_calls``,
    ``check_steps``, ``threshold``, ``total_tokens``; paper defaults 10, 11, [5, 7, 9], -0.3, 60),
    or the relaxation-aware trees of issue 7, which rank children with the verifier's ``relax`` and
    ``neighbours``: ``latent`` (``top_k``, ``depth``, ``total_tokens``, ``pool``, ``mode``: latent,
    diverse or walk), ``sequoia`` (``acceptance``: a JSON list, e.g. from ``relaxspec
    trace-acceptance``; ``n_nodes``, ``max_depth``, ``mode``: q, latent, diverse or walk) and
    ``costaware`` (the Sequoia tree of largest predicted speedup: ``acceptance``, ``max_nodes``,
    ``max_depth``, ``mode``, ``table``: a latency CSV, default the committed CPU table, ``model``)."""
    try:
        if tree == "static":
            choices = kw.pop("choices", "naive_extend_57")
            if kw:
                raise TypeError(f"unexpected arguments {sorted(kw)}")
            return StaticTree.builtin(choices) if isinstance(choices, str) else StaticTree(choices)
        if tree == "eagle2":
            return Eagle2Tree(**kw)  # type: ignore[arg-type]
        if tree == "ddd":
            return DDDTree(**kw)  # type: ignore[arg-type]
        if tree == "latent":
            return LatentAwareTree(relax=relax, neighbours=neighbours, **kw)  # type: ignore[arg-type]
        if tree in ("sequoia", "costaware"):
            if "acceptance" not in kw:
                raise ValueError(f"tree policy {tree!r} needs acceptance=[a_1, a_2, ...]")
            acceptance = kw.pop("acceptance")
            selector = ChildSelector(str(kw.pop("mode", "q")), relax, neighbours)
            if tree == "sequoia":
                return SequoiaTree(acceptance, selector=selector, **kw)  # type: ignore[arg-type]
            cost = CostModel.from_table(str(kw.pop("table", DEFAULT_TABLE)), str(kw.pop("model", "GPT-B")))
            chosen = choose_static_size(acceptance, cost, **kw)  # type: ignore[arg-type]
            return StaticTree(chosen.choices, name=f"costaware-{chosen.n_nodes}-{chosen.depth}",
                              selector=selector)
    except TypeError as err:
        raise ValueError(f"bad arguments for tree policy {tree!r}: {err}") from err
    raise ValueError(f"unknown tree policy {tree!r}; expected one of {TREES}")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``generate`` options."""
    g = p.add_argument_group("models (local files only; nothing is downloaded)")
    g.add_argument("--gpt-ckpt", required=True, help="LlamaGen c2i checkpoint (e.g. c2i_XL_384.pt)")
    g.add_argument("--gpt-model", default="GPT-XL", help="GPT-B, GPT-L, GPT-XL, GPT-XXL, GPT-3B, ...")
    g.add_argument("--vq-ckpt", required=True, help="VQ tokenizer checkpoint (vq_ds16_c2i.pt)")
    g.add_argument("--vq-model", default="VQ-16")
    g.add_argument("--codebook-size", type=int, default=16384)
    g.add_argument("--codebook-embed-dim", type=int, default=8)
    g.add_argument("--image-size", type=int, default=256, help="256 or 384 for the official models")
    g.add_argument("--num-classes", type=int, default=1000)
    g.add_argument("--draft-ckpt", help="an independent smaller LlamaGen GPT as drafter (with --draft-model)")
    g.add_argument("--draft-model", default="GPT-B")
    g.add_argument("--eagle-ckpt", help="an EAGLE head (reference.train_drafter) as drafter")
    s = p.add_argument_group("decoding")
    s.add_argument("--classes", required=True, help="comma-separated class labels, e.g. 207,360")
    s.add_argument("--per-class", type=int, default=1, help="images per class")
    s.add_argument("--tree", choices=TREES, default="eagle2")
    s.add_argument("--tree-args", default="", help="policy arguments, e.g. top_k=10,depth=4,total_tokens=59")
    s.add_argument("--rule", choices=("r1", "r2", "r3"), default="r1")
    s.add_argument("--relax", default="none",
                   help="none | additive:k=1000,delta=0.1 | multiplicative:k=1000,lam=2")
    s.add_argument("--variant", choices=("principled", "official"), default="principled")
    s.add_argument("--cfg-scale", type=float, default=2.0)
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--top-k", type=int, default=0)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--neighbours", help="neighbour table .npy (default: computed from the codebook)")
    s.add_argument("--k-max", type=int, default=DEFAULT_K_MAX, help="columns of a computed neighbour table")
    s.add_argument("--neighbours-normalized", action="store_true",
                   help="rank neighbours on L2-normalised codes (LANTERN's script uses the raw codes)")
    o = p.add_argument_group("output")
    o.add_argument("--out", required=True, help="output directory")
    o.add_argument("--trace", action="store_true", help="write OUT/trace")
    o.add_argument("--logits-dtype", choices=("float16", "float32"), default="float16")
    o.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    o.add_argument("--precision", choices=tuple(PRECISIONS), default=None,
                   help="weights dtype (default bf16 on cuda, fp32 on cpu)")


def run(args: argparse.Namespace) -> int:
    """Generate every requested image (skipping finished ones)."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but CUDA is not available")
    dtype = PRECISIONS[args.precision or ("bf16" if device.type == "cuda" else "fp32")]
    try:
        classes = [int(c) for c in args.classes.split(",") if c.strip()]
    except ValueError as err:
        raise ValueError(f"--classes must be comma-separated class labels, e.g. 207,360; got "
                         f"{args.classes!r}") from err
    relax = Relax.parse(args.relax)
    sampling = Sampling(args.temperature, args.top_k, args.top_p)

    vq = VQModel.load(vq_config(args.vq_model, codebook_size=args.codebook_size,
                                codebook_embed_dim=args.codebook_embed_dim), args.vq_ckpt)
    if args.image_size % vq.cfg.downsample:
        raise ValueError(f"--image-size {args.image_size} is not a multiple of the VQ's {vq.cfg.downsample}")
    grid = args.image_size // vq.cfg.downsample
    gpt_kw = {"vocab_size": args.codebook_size, "block_size": grid * grid, "num_classes": args.num_classes}
    target = load_gpt(args.gpt_ckpt, args.gpt_model, **gpt_kw).to(device, dtype)
    vq = vq.to(device)

    drafter, draft_name, draft_sha = None, "none", ""
    if args.tree != "ar":
        if args.eagle_ckpt:
            head = EagleHead.load(target.cfg, args.eagle_ckpt).to(device, dtype)
            drafter, draft_name = EagleDraftSession(head, target), "eagle"
            draft_sha = file_sha256(args.eagle_ckpt)
        elif args.draft_ckpt:
            small = load_gpt(args.draft_ckpt, args.draft_model, **gpt_kw).to(device, dtype)
            drafter, draft_name = GPTDraftSession(small), args.draft_model
            draft_sha = file_sha256(args.draft_ckpt)
        else:
            print("relaxspec generate: no --eagle-ckpt or --draft-ckpt: the target drafts for itself "
                  "(an oracle drafter: an upper bound on acceptance, no speed-up)")
            drafter, draft_name = GPTDraftSession(copy.deepcopy(target)), "self"

    neighbours = None
    if args.neighbours:
        neighbours = load_neighbours(args.neighbours, args.codebook_size)
    elif args.trace or not relax.is_exact:
        neighbours = vq.neighbours(args.k_max, normalize=args.neighbours_normalized)
    policy = None if args.tree == "ar" else policy_from_spec(args.tree, relax=relax, neighbours=neighbours,
                                                             **parse_kv(args.tree_args))
    settings = DecodeSettings(rule=args.rule, relax=relax, variant=args.variant, target_sampling=sampling,
                              draft_sampling=sampling, cfg_scale=args.cfg_scale,
                              logits_dtype=args.logits_dtype)
    decoder = Decoder(target, settings, drafter=drafter, policy=policy, neighbours=neighbours)

    out = Path(args.out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "tokens").mkdir(exist_ok=True)
    jobs = [(i, c) for i, c in enumerate(c for c in classes for _ in range(args.per_class))]
    done = {i for i, c in jobs if image_path(out, i, c).exists()}
    csv_path = out / "steps.csv"
    keep_finished_rows(csv_path, done)
    writer = None
    if args.trace:
        header = TraceHeader(
            model=args.gpt_model, checkpoint_sha256=file_sha256(args.gpt_ckpt), vocab_size=args.codebook_size,
            codebook_sha256=array_sha256(vq.quantize.embedding.weight.detach().float().cpu().numpy()),
            rule=args.rule, relax=str(relax), variant=args.variant, tree=f"{args.tree}:{args.tree_args}",
            target_sampling=sampling, draft_sampling=sampling, logits_dtype=args.logits_dtype,
            extra={"cfg_scale": args.cfg_scale, "drafter": draft_name, "drafter_sha256": draft_sha,
                   "image_size": args.image_size, "grid": grid, "seed": args.seed,
                   "neighbours_normalized": bool(args.neighbours_normalized),
                   "draft_logits_unevaluated": "zero rows at nodes the drafter never ran"})
        writer = TraceWriter(out / "trace", header, neighbours, resume=True)
    todo = [(i, c) for i, c in jobs if i not in done]
    for i, c in tqdm(todo, desc="images", unit="img", disable=not todo):
        traced = writer if writer is not None and i not in writer.done_sequences else None
        result = decoder.generate(c, args.seed, sequence=i, trace=traced)
        append_rows(csv_path, result.steps)
        save_tokens(out / "tokens" / f"{i:06d}.npy", result.tokens)
        grid_tokens = torch.as_tensor(result.tokens, device=device).view(1, grid, grid)
        with torch.no_grad():
            save_png(to_uint8(vq.decode_codes(grid_tokens))[0], image_path(out, i, c))
    print(f"{len(jobs)} images in {out} ({len(done)} already there)")
    return 0


def image_path(out: Path, sequence: int, label: int) -> Path:
    return out / "images" / f"{sequence:06d}_class{label}.png"


def save_tokens(path: Path, tokens: np.ndarray) -> None:
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, tokens)
    os.replace(tmp, path)


CSV_FIELDS = [f.name for f in fields(StepStats)]


def keep_finished_rows(path: Path, done: set[int]) -> None:
    """Drop CSV rows of sequences that did not finish (an interrupted run's partial rows)."""
    if not path.exists():
        return
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(r["sequence"]) in done]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def append_rows(path: Path, steps: list[StepStats]) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS)
        if new:
            w.writeheader()
        w.writerows(asdict(s) for s in steps)
