"""``relaxspec train-mini``: train every component of the shipped mini model, in order.

Each component is written as ``NAME.safetensors`` + ``NAME.json`` (see
:mod:`mini.weights`) and skipped on a later run when both exist and match,
unless ``--force``: an interrupted run resumes at the first unfinished
component. The training budgets (steps, batch size) are explicit below so the
whole run fits in 60 minutes on 2 CPU cores, with the largest share for the
target (docs/mini_model.md has the measured times); ``--quick`` trains tiny
versions in about a minute into a temporary folder (never into ``weights/``).

Every card records the training loop's wall and CPU seconds, the whole
component's (data, token encoding, training, metric passes), the thread count
and the 1-minute load average at the component's start and end.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from mini import fashion_mnist
from mini.eagle_training import EagleBudget, eagle_metrics, train_eagle_head
from mini.evaluator import EvaluatorBudget, predict, train_evaluator
from mini.gpt_training import GPTBudget, token_nll, train_gpt
from mini.shipped import GRID_TOKENS, load_gpt_component, load_tokenizer
from mini.timing import Clock, load_average
from mini.tokenizer import TokenizerBudget, encode_images, tokenizer_metrics, train_tokenizer
from mini.weights import WEIGHTS_DIR, component_done, read_card, save_component
from reference.model import GPTConfig

# Full training uses both cores; the quick path's tiny matmuls run faster on one (no thread handoff).
TRAIN_THREADS = 2
QUICK_THREADS = 1


@dataclass(frozen=True)
class Budgets:
    """Training budgets of every component (steps x batch are what the 60 minutes buy)."""

    evaluator: EvaluatorBudget = field(default_factory=EvaluatorBudget)
    tokenizer: TokenizerBudget = field(default_factory=TokenizerBudget)
    target: GPTBudget = field(default_factory=lambda: GPTBudget(steps=3000, batch=64, lr=1.5e-3, warmup=100))
    eagle_head: EagleBudget = field(default_factory=EagleBudget)
    draft_gpt: GPTBudget = field(default_factory=lambda: GPTBudget(steps=1000, batch=64, lr=2e-3, warmup=50))
    target_shape: dict = field(default_factory=lambda: dict(TARGET_SHAPE))
    draft_shape: dict = field(default_factory=lambda: dict(DRAFT_SHAPE))
    n_metric_test: int = 0
    n_train_tokens: int = 0
    n_train_nll: int = 2000  # training grids the train NLL is measured on (an overfitting check)


# The target: the reference GPT-XS shape (6 layers, 4 heads, dim 256); the drafter: 2 layers of 128.
TARGET_SHAPE = {"dim": 256, "n_layer": 6, "n_head": 4}
DRAFT_SHAPE = {"dim": 128, "n_layer": 2, "n_head": 4}
FULL = Budgets()
QUICK = Budgets(
    evaluator=EvaluatorBudget(epochs=1, batch=128, n_train=3000),
    tokenizer=TokenizerBudget(steps=30, batch=16, ch=16, codebook_size=512, restart_every=10),
    target=GPTBudget(steps=30, batch=32, warmup=5),
    eagle_head=EagleBudget(steps=20, batch=32, warmup=5),
    draft_gpt=GPTBudget(steps=20, batch=32, warmup=5),
    target_shape={"dim": 64, "n_layer": 2, "n_head": 4},
    draft_shape={"dim": 32, "n_layer": 1, "n_head": 2},
    n_metric_test=1000,
    n_train_tokens=2000,
    n_train_nll=500,
)
# Floating tensors are stored in float32, except the target's (float16 keeps weights/ under 25 MB;
# metrics are measured on the float16-rounded weights).
STORAGE = {"target": torch.float16}
DATA_TRAIN = "Fashion-MNIST train split (60,000 images, padded to 32 x 32)"


@dataclass
class TrainContext:
    """What the component trainers share: data, budgets, the output folder and the command line."""

    out: Path
    budgets: Budgets
    seed: int
    progress: bool
    command: str
    threads: int = 1
    clock: Clock = field(default_factory=Clock)
    _cache: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> tuple[Any, Any]:
        """The full ``train`` or ``test`` split (loaded once)."""
        if name not in self._cache:
            self._cache[name] = fashion_mnist.load_split(name)
        return self._cache[name]

    def metric_split(self) -> tuple[Any, Any]:
        """Test images and labels the metrics are measured on (all 10,000 unless the budget says less)."""
        images, labels = self.split("test")
        n = self.budgets.n_metric_test or len(labels)
        return images[:n], labels[:n]

    def tokens(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Token grids of the ``train`` split or of the metric test images, from the trained tokenizer.

        Cached in ``out/.cache`` under the tokenizer's hash, so a resumed run does not re-encode.
        """
        key = f"tokens-{name}"
        if key not in self._cache:
            card = read_card(self.out, "tokenizer")
            tag = f"{card['weights_sha256'][:16]}-{self.budgets.n_metric_test}-{self.budgets.n_train_tokens}"
            cache = self.out / ".cache" / f"{name}-{tag}.npy"
            if name == "train":
                images, labels = self.split("train")
                n = self.budgets.n_train_tokens or len(labels)
                images, labels = images[:n], labels[:n]
            else:
                images, labels = self.metric_split()
            if cache.is_file():
                grids = np.load(cache)
            else:
                vq, _ = load_tokenizer(self.out)
                grids = encode_images(vq, images, progress=self.progress)
                cache.parent.mkdir(parents=True, exist_ok=True)
                np.save(cache, grids)
            self._cache[key] = (grids.astype(np.int64), labels)
        return self._cache[key]

    def gpt_config(self, shape: dict) -> GPTConfig:
        """A reference GPT config of ``shape`` for the tokenizer's vocabulary and the 8 x 8 grid."""
        vocab = read_card(self.out, "tokenizer")["config"]["codebook_size"]
        return GPTConfig(**shape, vocab_size=vocab, num_classes=fashion_mnist.NUM_CLASSES,
                         block_size=GRID_TOKENS, class_dropout_prob=0.1)

    def card(self, info: dict[str, Any], data: str, metrics: dict[str, Any]) -> dict[str, Any]:
        """A card from a trainer's fragment (config, budget, seconds) and the measured metrics."""
        return {"config": info["config"], "data": data, "training_command": self.command,
                "training_seconds": round(info["training_seconds"], 1),
                "training_cpu_seconds": round(info["training_cpu_seconds"], 1),
                "component_seconds": round(self.clock.wall(), 1),
                "component_cpu_seconds": round(self.clock.cpu(), 1),
                "threads": self.threads,
                "load_average": {"start": self.clock.load_at_start, "end": load_average()},
                "budget": info["budget"], "seed": self.seed, "metrics": metrics}


def _train_evaluator_component(ctx: TrainContext) -> dict[str, Any]:
    model, info = train_evaluator(ctx.split("train"), ctx.metric_split(), ctx.budgets.evaluator,
                                  seed=ctx.seed, progress=ctx.progress)
    sample_images, sample_labels = fashion_mnist.load_sample()
    _, preds = predict(model, sample_images)
    info["metrics"]["sample_accuracy"] = float((preds == sample_labels).mean())
    card = ctx.card(info, f"{DATA_TRAIN} for training; the test split (10,000) for test_accuracy and the "
                          "stored FD statistics (fd_mu, fd_sigma); sample_accuracy on "
                          "data/fashion_mnist/test_sample_2000.npz", info["metrics"])
    return save_component(ctx.out, "evaluator", model.state_dict(), card)


def _train_tokenizer_component(ctx: TrainContext) -> dict[str, Any]:
    model, info = train_tokenizer(ctx.split("train")[0], ctx.budgets.tokenizer, seed=ctx.seed,
                                  progress=ctx.progress)
    metrics, _ = tokenizer_metrics(model, ctx.metric_split()[0])
    metrics["dead_code_restarts"] = info["dead_code_restarts"]
    metrics["n_test"] = len(ctx.metric_split()[0])
    card = ctx.card(info, f"{DATA_TRAIN}; PSNR and codebook usage on the test split", metrics)
    card = save_component(ctx.out, "tokenizer", model.state_dict(), card)
    for split in ("train", "test"):  # the token grids the GPTs train and are measured on (cached)
        ctx.tokens(split)
    return card


def _rounded(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Round a model's floating parameters to ``dtype`` (what storage keeps), in place."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).float())


def _train_gpt_component(ctx: TrainContext, name: str, shape: dict, budget: GPTBudget) -> dict[str, Any]:
    tokens, labels = ctx.tokens("train")
    model, info = train_gpt(ctx.gpt_config(shape), tokens, labels, budget, name=name, seed=ctx.seed,
                            progress=ctx.progress)
    _rounded(model, STORAGE.get(name, torch.float32))
    test_tokens, test_labels = ctx.tokens("test")
    nll = token_nll(model, test_tokens, test_labels)
    n_train = ctx.budgets.n_train_nll
    metrics = {"test_nll_per_token_nats": nll, "test_nll_per_token_bits": nll / math.log(2),
               "train_nll_per_token_nats": token_nll(model, tokens[:n_train], labels[:n_train]),
               "n_test": len(test_tokens), "n_train_nll": n_train}
    card = ctx.card(info, f"token grids of the {DATA_TRAIN} by the tokenizer in this folder; NLL on the "
                          "test split's token grids (class-conditional)", metrics)
    return save_component(ctx.out, name, model.state_dict(), card, STORAGE.get(name, torch.float32))


def _train_target_component(ctx: TrainContext) -> dict[str, Any]:
    return _train_gpt_component(ctx, "target", ctx.budgets.target_shape, ctx.budgets.target)


def _train_draft_gpt_component(ctx: TrainContext) -> dict[str, Any]:
    return _train_gpt_component(ctx, "draft_gpt", ctx.budgets.draft_shape, ctx.budgets.draft_gpt)


def _train_eagle_component(ctx: TrainContext) -> dict[str, Any]:
    tokens, labels = ctx.tokens("train")
    target, _ = load_gpt_component(ctx.out, "target")
    head, info = train_eagle_head(target, tokens, labels, ctx.budgets.eagle_head, seed=ctx.seed,
                                  progress=ctx.progress)
    test_tokens, test_labels = ctx.tokens("test")
    metrics = {**eagle_metrics(head, target, test_tokens, test_labels), "n_test": len(test_tokens)}
    card = ctx.card(info, f"token grids of the {DATA_TRAIN} and the features of the target in this folder; "
                          "metrics on the test split (teacher-forced)", metrics)
    return save_component(ctx.out, "eagle_head", head.state_dict(), card)


# Components in training order: later ones read earlier ones from the output folder.
COMPONENTS: list[tuple[str, Callable[[TrainContext], dict[str, Any]]]] = [
    ("evaluator", _train_evaluator_component),
    ("tokenizer", _train_tokenizer_component),
    ("target", _train_target_component),
    ("eagle_head", _train_eagle_component),
    ("draft_gpt", _train_draft_gpt_component),
]


def train_all(
    out: Path,
    *,
    quick: bool = False,
    force: bool = False,
    only: list[str] | None = None,
    seed: int = 0,
    progress: bool = True,
    command: str = "relaxspec train-mini",
    threads: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Train the components (all, or ``only``) into ``out``; return the card of each one trained now."""
    names = [n for n, _ in COMPONENTS]
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise ValueError(f"unknown components {unknown}; expected some of {names}")
    out = Path(out)
    if quick and out.resolve() == WEIGHTS_DIR.resolve():
        raise ValueError(f"--quick never writes into the shipped weights folder {WEIGHTS_DIR}")
    if not fashion_mnist.dataset_available():
        raise fashion_mnist.DatasetMissingError(
            f"training needs the full Fashion-MNIST data set in {fashion_mnist.DATASET_DIR}: "
            f"{fashion_mnist.INSTALL_HINT}")
    out.mkdir(parents=True, exist_ok=True)  # an unusable --out fails now, not after minutes of training
    threads = threads or (QUICK_THREADS if quick else TRAIN_THREADS)
    ctx = TrainContext(out=out, budgets=QUICK if quick else FULL, seed=seed, progress=progress,
                       command=command, threads=threads)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    trained: dict[str, dict[str, Any]] = {}
    total = Clock()
    try:
        for name, fn in COMPONENTS:
            if only and name not in only:
                continue
            if not force and component_done(out, name):
                tqdm.write(f"[train-mini] {name}: already in {out}, skipped (--force retrains)")
                continue
            tqdm.write(f"[train-mini] {name}: training (load average {load_average()})")
            ctx.clock = Clock()
            card = fn(ctx)
            trained[name] = card
            tqdm.write(f"[train-mini] {name}: {card['component_seconds']} s wall, "
                       f"{card['component_cpu_seconds']} s CPU, metrics {card['metrics']}")
    finally:
        torch.set_num_threads(previous_threads)
    tqdm.write(f"[train-mini] done in {total.wall():.0f} s wall, {total.cpu():.0f} s CPU; weights in {out}")
    return trained


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``relaxspec train-mini``."""
    parser = sub.add_parser(
        "train-mini", help="train the shipped Fashion-MNIST mini model (tokenizer, target, drafters, "
                           "evaluator); needs the dataset-fashion-mnist package")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output folder (default: {WEIGHTS_DIR}; with --quick a new temporary folder)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny budgets (about a minute), for tests; never writes into weights/")
    parser.add_argument("--force", action="store_true", help="retrain components that already exist")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated components to train, of {[n for n, _ in COMPONENTS]}")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--threads", type=int, default=None,
                        help=f"torch threads (default {TRAIN_THREADS}; {QUICK_THREADS} with --quick)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.set_defaults(func=_main)
    return parser


def _main(args: argparse.Namespace) -> int:
    out = args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="relaxspec-mini-quick-")) if args.quick else WEIGHTS_DIR
    parts = ["relaxspec train-mini"] + (["--quick"] if args.quick else [])
    if args.only:
        parts.append(f"--only {args.only}")
    if args.seed:
        parts.append(f"--seed {args.seed}")
    try:
        train_all(out, quick=args.quick, force=args.force,
                  only=[s.strip() for s in args.only.split(",")] if args.only else None,
                  seed=args.seed, progress=not args.no_progress, command=" ".join(parts),
                  threads=args.threads)
    except fashion_mnist.DatasetMissingError as err:
        print(f"relaxspec train-mini: error: {err}", file=sys.stderr)
        return 2
    return 0
