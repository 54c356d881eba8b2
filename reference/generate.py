"""``relaxspec generate``: images, a per-step CSV and optionally a trace from local checkpoints.

Output directory::

    OUT/images/000000_class207.png   one PNG per sequence (written last: it marks the sequence done)
    OUT/tokens/000000.npy            the image tokens (grid^2,)
    OUT/steps.csv                    one row per decoding step (reference.decode.StepStats)
    OUT/trace/                       the trace (``--trace``), one chunk per sequence

A rerun with the same arguments skips finished sequences (resume); sequence i
of the run uses uniforms keyed by (seed, i), so a resumed run gives the same
images as an uninterrupted one.

Draft sources: a draft model (``--eagle-ckpt``, ``--draft-ckpt`` or the target
itself) growing the ``--tree`` (``vvs:K,D,M,uniform=I|dynamic``: EAGLE-2 with VVS's
skipped verification, SPEC 10.3; its dynamic schedule compares the VQ codebook's
vectors, which the trace stores), or windows of sampled drafts with no drafter: SJD's
(``--tree jacobi:L[,copy]``), SCD's coupled ones
(``jacobi:L,coupled=principled|official|gumbel``) and SJD-PAC's
(``pac:L[,width=K,depth=D,ac=on|off,siblings=..]``), verified by rule r2 (SPEC 10.1-10.2).
``--verification`` is the rule, its relaxation or boost and its variant as one spec
(``theory.verification``): ``r1``, ``r1+lantern:k=1000,delta=0.1``, ``r2+lantern++:k=1000,lam=2``;
``r4`` verifies the same sampled drafts by traversal (SPEC 9.6); ``r2+gsd:G=..`` / ``r2+cool:omega=..`` /
``r2+budget:tv=..,k=..`` (or ``r4+...``) raises rule R2's or R4's acceptance (GSD,
Cool-SD, the budgeted relaxation; SPEC 9.2-9.5) on a static tree or a window; GSD measures
distances in ``--gsd-embedding`` (``token``: the target's token embedding,
``codebook``: the VQ codebook), which the trace stores; the budget reads the
codebook's neighbour table (``--neighbours`` or computed), which the trace
stores too.

Device and precision: ``--dtype`` sets the weights and activations of the
target and drafter (default bfloat16 on CUDA, float32 on a CPU; the logits are
float32 whatever it is, and the trace header records it); ``--cuda-graphs``
replays the target's tree forward as CUDA graphs and ``--compile`` runs it
through ``torch.compile``; both pad every tree to the decoder's
``max_tree_nodes`` (``reference.tree_attention.TreeExecution``).
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from relaxspec.core.cost import DEFAULT_TABLE, CostModel
from relaxspec.core.trace import Sampling, TraceHeader, TraceWriter, array_sha256, file_sha256
from relaxspec.core.trees.spec import check_tree_spec, draft_source, parse_tree, tree_kind
from relaxspec.reference.decode import (
    VERIFIERS,
    VERIFY_DTYPES,
    Decoder,
    DecodeSettings,
    StepStats,
    gsd_embedding,
)
from relaxspec.reference.drafter import EagleDraftSession, EagleHead, GPTDraftSession
from relaxspec.reference.frontier import DEFAULT_TREE_NODES, check_frontier_rule, reads_codes, tree_slots
from relaxspec.reference.model import load_gpt
from relaxspec.reference.model_config import DTYPES, parse_dtype
from relaxspec.reference.tree_attention import TreeExecution
from relaxspec.reference.vq import VQModel, save_png, to_uint8, vq_config
from relaxspec.theory.boost import EMBEDDINGS
from relaxspec.theory.neighbours import DEFAULT_K_MAX, load_neighbours
from relaxspec.theory.verification import Verification

DEFAULT_TREE = "eagle2:10,4,59"
SIZED_KINDS = ("jacobi", "pac", "vvs")
"""Tree kinds whose largest forward sizes the decoder's caches (``reference.frontier.tree_slots``; they
parse without context)."""


def load_acceptance(text: str | None) -> list[float] | None:
    """Sequoia's positional acceptance vector from ``--acceptance``: a JSON list or a JSON file's path."""
    if text is None:
        return None
    source = Path(text).read_text() if not text.lstrip().startswith("[") else text
    try:
        vector = json.loads(source)
    except json.JSONDecodeError as err:
        raise ValueError(f"--acceptance must be a JSON list of probabilities or a file holding one: {err}") \
            from None
    if not isinstance(vector, list) or not all(isinstance(a, int | float) for a in vector):
        raise ValueError(f"--acceptance must be a JSON list of probabilities, got {source[:60]!r}")
    return [float(a) for a in vector]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``generate`` options."""
    g = p.add_argument_group("models (local files only; nothing is downloaded)")
    g.add_argument("--gpt-ckpt", required=True, help="LlamaGen c2i checkpoint (e.g. c2i_XL_384.pt)")
    g.add_argument("--gpt-model", default="GPT-XL", help="GPT-B, GPT-L, GPT-XL, GPT-XXL, GPT-3B, ...")
    g.add_argument("--vq-ckpt", required=True, help="VQ tokenizer checkpoint (vq_ds16_c2i.pt)")
    g.add_argument("--vq-model", default="VQ-16", help="VQ tokenizer architecture")
    g.add_argument("--codebook-size", type=int, default=16384, help="codes in the VQ codebook")
    g.add_argument("--codebook-embed-dim", type=int, default=8, help="dimension of a VQ code")
    g.add_argument("--image-size", type=int, default=256, help="256 or 384 for the official models")
    g.add_argument("--num-classes", type=int, default=1000, help="classes of the class-conditional model")
    g.add_argument("--draft-ckpt", help="an independent smaller LlamaGen GPT as drafter (with --draft-model)")
    g.add_argument("--draft-model", default="GPT-B", help="architecture of --draft-ckpt")
    g.add_argument("--eagle-ckpt", help="an EAGLE head (reference.train_drafter) as drafter")
    s = p.add_argument_group("decoding")
    s.add_argument("--classes", required=True, help="comma-separated class labels, e.g. 207,360")
    s.add_argument("--per-class", type=int, default=1, help="images per class")
    s.add_argument("--tree", default=None,
                   help="tree spec (core/trees/spec.py): ar, static:naive_extend_57, chain:N, "
                        "eagle2:K,D,M, ddd:K,CALLS,S1/S2/..,X,M, latent[-diverse|-walk]:K,D,M[,POOL], "
                        "sequoia[-MODE]:N,DEPTH, costaware:N,DEPTH[,MODE], jacobi:L[,copy], "
                        "jacobi:L,coupled=principled|official|gumbel (SCD), pac:L[,width=K,depth=D,ac=on|off,"
                        "siblings=principled|official] (SJD-PAC), vvs:K,D,M,uniform=I|dynamic[=S] (VVS) "
                        f"(default {DEFAULT_TREE}, LANTERN's LlamaGen setting)")
    s.add_argument("--gsd-embedding", default=None, metavar="|".join(EMBEDDINGS),
                   help="GSD's embedding: the target's token embedding (token, the default, as GSD's code) "
                        "or the VQ codebook (codebook)")
    s.add_argument("--acceptance", default=None,
                   help="Sequoia-type trees: the positional acceptance vector, a JSON list or a JSON file "
                        "(relaxspec trace-acceptance writes one)")
    s.add_argument("--cost-table", default=str(DEFAULT_TABLE),
                   help=f"costaware: latency table CSV (default: the shipped {DEFAULT_TABLE.name})")
    s.add_argument("--cost-model", default="GPT-B", help="costaware: target model in the cost table")
    s.add_argument("--verification", default=None, metavar="SPEC",
                   help="rule, relaxation or boost, variant (theory/verification.py; default r1, r2 with "
                        "--tree jacobi:L): r1 | r1+lantern:k=1000,delta=0.1 | r2+lantern++:k=1000,lam=2 | "
                        "r4 (traversal) | r2+gsd:G=10[,tau=0.15,dist=0.5,window=official] | "
                        "r2+cool:omega=2/1.5/1.2 | r2+budget:tv=0.05,k=8 (per-node TV <= tv, k latent "
                        "neighbours of the codebook's table); /official: as LANTERN's code does it")
    s.add_argument("--cfg-scale", type=float, default=2.0, help="classifier-free guidance scale")
    s.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature of target and drafter")
    s.add_argument("--top-k", type=int, default=0,
                   help="keep the k most likely codes (ties at the cut kept; 0: all)")
    s.add_argument("--top-p", type=float, default=1.0,
                   help="keep the smallest nucleus of this mass (1: all)")
    s.add_argument("--seed", type=int, default=0, help="sampling seed")
    s.add_argument("--neighbours", help="neighbour table .npy (default: computed from the codebook)")
    s.add_argument("--k-max", type=int, default=DEFAULT_K_MAX, help="columns of a computed neighbour table")
    s.add_argument("--neighbours-normalized", action="store_true",
                   help="rank neighbours on L2-normalised codes (LANTERN's script uses the raw codes)")
    o = p.add_argument_group("output")
    o.add_argument("--out", required=True, help="output directory")
    o.add_argument("--trace", action="store_true", help="write OUT/trace")
    o.add_argument("--logits-dtype", choices=("float16", "float32"), default="float16",
                   help="precision of the logits stored in the trace")
    d = p.add_argument_group("device")
    d.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="torch device of the models (default: cuda when available, else cpu)")
    d.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                   help="weights and activations of the models (default bfloat16 on cuda, float32 on cpu); "
                        "logits are float32 whatever it is")
    d.add_argument("--compile", action="store_true",
                   help="run the target's tree forward through torch.compile (padded to fixed shapes)")
    d.add_argument("--cuda-graphs", action="store_true",
                   help="replay the target's tree forward as CUDA graphs (padded to fixed shapes; needs "
                        "--device cuda)")
    d.add_argument("--verifier", choices=VERIFIERS, default="device",
                   help="device: verify where the logits are (reference.verify; only the accepted path and "
                        "bonus come back); theory: the float64 oracle on the host (all logits cross)")
    d.add_argument("--verify-dtype", choices=tuple(VERIFY_DTYPES), default="float64",
                   help="the device verifier's precision (float64: theory's decisions on CPU)")


def run(args: argparse.Namespace) -> int:
    """Generate every requested image (skipping finished ones)."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but CUDA is not available")
    if args.cuda_graphs and device.type != "cuda":
        where = "" if torch.cuda.is_available() else " (CUDA is not available here)"
        raise ValueError(f"--cuda-graphs replays the forward on a GPU: it needs --device cuda, got --device "
                         f"{args.device}{where}")
    dtype_name = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    dtype = parse_dtype(dtype_name)
    try:
        classes = [int(c) for c in args.classes.split(",") if c.strip()]
    except ValueError as err:
        raise ValueError(f"--classes must be comma-separated class labels, e.g. 207,360; got "
                         f"{args.classes!r}") from err
    tree = args.tree or DEFAULT_TREE
    check_tree_spec(tree)
    is_ar, is_jacobi = tree_kind(tree) == "ar", draft_source(tree).is_window
    nodes = tree_slots(parse_tree(tree)) if tree_kind(tree) in SIZED_KINDS else DEFAULT_TREE_NODES
    verification = parse_verification(args.verification or ("r2" if is_jacobi else "r1"), args.gsd_embedding)
    if is_jacobi and (args.eagle_ckpt or args.draft_ckpt):
        raise ValueError(f"{tree} drafts from the target's own samples: drop --eagle-ckpt / --draft-ckpt")
    acceptance = load_acceptance(args.acceptance)
    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    settings = DecodeSettings(verification, target_sampling=sampling, draft_sampling=sampling,
                              cfg_scale=args.cfg_scale, logits_dtype=args.logits_dtype,
                              verifier=args.verifier, verify_dtype=args.verify_dtype, max_tree_nodes=nodes)
    settings.verification.check_source(draft_source(tree), f"--tree {tree}")  # before any model loads
    if tree_kind(tree) in SIZED_KINDS:
        check_frontier_rule(parse_tree(tree), verification)

    vq = VQModel.load(vq_config(args.vq_model, codebook_size=args.codebook_size,
                                codebook_embed_dim=args.codebook_embed_dim), args.vq_ckpt)
    if args.image_size % vq.cfg.downsample:
        raise ValueError(f"--image-size {args.image_size} is not a multiple of the VQ's {vq.cfg.downsample}")
    grid = args.image_size // vq.cfg.downsample
    gpt_kw = {"vocab_size": args.codebook_size, "block_size": grid * grid, "num_classes": args.num_classes}
    target = load_gpt(args.gpt_ckpt, args.gpt_model, **gpt_kw).to(device, dtype)
    vq = vq.to(device)

    drafter, draft_name, draft_sha = None, "none", ""
    if is_jacobi:
        draft_name = "jacobi"
    elif not is_ar:
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
    target.set_execution(TreeExecution(cuda_graphs=args.cuda_graphs, compile=args.compile))

    neighbours = None
    if args.neighbours:
        neighbours = load_neighbours(args.neighbours, args.codebook_size)
    elif args.trace or verification.neighbour_k:
        neighbours = vq.neighbours(args.k_max, normalize=args.neighbours_normalized)
    tree_context = {"tree_acceptance": acceptance} if acceptance is not None else {}
    if tree_kind(tree) == "costaware":
        tree_context["tree_cost"] = {"table": args.cost_table, "model": args.cost_model}
    policy = parse_tree(tree, relax=verification.relax, neighbours=neighbours, acceptance=acceptance,
                        cost=lambda: CostModel.from_table(args.cost_table, args.cost_model))
    embedding = (gsd_embedding(verification.boost.embedding, target, vq.codebook())
                 if verification.reads_embedding else None)
    codes = vq.codebook().astype(np.float32) if reads_codes(policy) else None
    decoder = Decoder(target, settings, drafter=drafter, policy=policy, neighbours=neighbours,
                      embedding=embedding, codes=codes)

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
            verification=verification, tree=str(policy) if policy else "ar",
            target_sampling=sampling, draft_sampling=sampling, logits_dtype=args.logits_dtype,
            extra={"cfg_scale": args.cfg_scale, "drafter": draft_name, "drafter_sha256": draft_sha,
                   "image_size": args.image_size, "grid": grid, "seed": args.seed, "dtype": dtype_name,
                   "verifier": args.verifier, "verify_dtype": args.verify_dtype,
                   "neighbours_normalized": bool(args.neighbours_normalized), **tree_context,
                   "draft_logits_unevaluated": "zero rows at nodes the drafter never ran",
                   **({} if embedding is None else
                      {"gsd_embedding_sha256": array_sha256(embedding.astype(np.float32))})})
        writer = TraceWriter(out / "trace", header, neighbours, resume=True,
                             embedding=None if embedding is None else embedding.astype(np.float32),
                             codes=decoder.code_table)
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


def parse_verification(spec: str, embedding: str | None) -> Verification:
    """``--verification`` with GSD's ``--gsd-embedding`` (when given) written into its boost."""
    verification = Verification.parse(spec)
    if embedding is None:
        return verification
    if embedding not in EMBEDDINGS:
        raise ValueError(f"--gsd-embedding must be one of {EMBEDDINGS}, got {embedding!r}")
    if not verification.reads_embedding:
        raise ValueError(f"--gsd-embedding chooses GSD's embedding; --verification {spec} is not gsd")
    if "embedding=" in spec and verification.boost.embedding != embedding:
        raise ValueError(f"--gsd-embedding {embedding} contradicts --verification {spec}")
    return replace(verification, boost=replace(verification.boost, embedding=embedding))


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
