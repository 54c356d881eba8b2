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
import contextlib
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from relaxspec.mini import ambiguous_model, fashion_mnist
from relaxspec.mini.checkpointing import (
    CheckpointPolicy,
    LoopCheckpoint,
    TrainingInterrupted,
    stop_requested,
    termination_handler,
)
from relaxspec.mini.eagle_training import EagleBudget, eagle_metrics, train_eagle_head
from relaxspec.mini.evaluator import EvaluatorBudget, predict, train_evaluator
from relaxspec.mini.gpt_training import GPTBudget, token_nll, train_gpt
from relaxspec.mini.run_ledger import RunLedger
from relaxspec.mini.shipped import GRID_TOKENS, load_gpt_component, load_tokenizer
from relaxspec.mini.timing import Clock, load_average
from relaxspec.mini.tokenizer import (
    TokenizerBudget,
    codebook_geometry,
    codebook_usage,
    encode_images,
    tokenizer_metrics,
    train_tokenizer,
)
from relaxspec.mini.weights import WEIGHTS_DIR, component_done, read_card, save_component
from relaxspec.reference.model_config import GPTConfig

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
    storage: dict[str, torch.dtype] = field(default_factory=lambda: dict(STORAGE))
    checkpoints: CheckpointPolicy | None = None
    loop: LoopCheckpoint | None = None
    notes: dict[str, str] = field(default_factory=dict)
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
            cache = self._token_cache(name)
            images, labels = self.token_images(name)
            if cache.is_file():
                grids = np.load(cache)
            else:
                vq, _ = load_tokenizer(self.out)
                grids = encode_images(vq, images, progress=self.progress)
                cache.parent.mkdir(parents=True, exist_ok=True)
                np.save(cache, grids)
            self._cache[key] = (grids.astype(np.int64), labels)
        return self._cache[key]

    def token_images(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The images (and labels) whose token grids :meth:`tokens` returns."""
        if name == "train":
            images, labels = self.split("train")
            n = self.budgets.n_train_tokens or len(labels)
            return images[:n], labels[:n]
        return self.metric_split()

    def _token_cache(self, name: str) -> Path:
        card = read_card(self.out, "tokenizer")
        tag = f"{card['weights_sha256'][:16]}-{self.budgets.n_metric_test}-{self.budgets.n_train_tokens}"
        return self.out / ".cache" / f"{name}-{tag}.npy"

    def store_tokens(self, name: str, grids: np.ndarray) -> None:
        """Cache grids already encoded by the saved tokenizer (saves encoding them again)."""
        cache = self._token_cache(name)
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, grids)

    def loop_checkpoint(self, name: str, fingerprint: dict[str, Any]) -> LoopCheckpoint | None:
        """The checkpoint of component ``name``'s training loop (``None`` when the run has none)."""
        if self.checkpoints is None:
            return None
        key = {"component": name, "seed": self.seed, "threads": self.threads}  # threads: exact resumes
        self.loop = self.checkpoints.loop(name, {**key, **fingerprint})
        return self.loop

    def gpt_config(self, shape: dict) -> GPTConfig:
        """A reference GPT config of ``shape`` for the tokenizer's vocabulary and the 8 x 8 grid."""
        vocab = read_card(self.out, "tokenizer")["config"]["codebook_size"]
        return GPTConfig(**shape, vocab_size=vocab, num_classes=fashion_mnist.NUM_CLASSES,
                         block_size=GRID_TOKENS, class_dropout_prob=0.1)

    def card(self, info: dict[str, Any], data: str, metrics: dict[str, Any],
             name: str | None = None) -> dict[str, Any]:
        """A card from a trainer's fragment (config, budget, seconds) and the measured metrics (a resumed
        component's seconds include its loop's earlier segments)."""
        prior_wall, prior_cpu = (self.loop.prior_wall, self.loop.prior_cpu) if self.loop else (0.0, 0.0)
        return {"config": info["config"], "data": data, "training_command": self.command,
                "training_seconds": round(info["training_seconds"], 1),
                "training_cpu_seconds": round(info["training_cpu_seconds"], 1),
                "component_seconds": round(self.clock.wall() + prior_wall, 1),
                "component_cpu_seconds": round(self.clock.cpu() + prior_cpu, 1),
                "threads": self.threads,
                "load_average": {"start": self.clock.load_at_start, "end": load_average()},
                "budget": info["budget"], "seed": self.seed, "metrics": metrics,
                **({"notes": self.notes[name]} if name in self.notes else {})}


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
    budget = ctx.budgets.tokenizer
    model, info = train_tokenizer(ctx.split("train")[0], budget, seed=ctx.seed, progress=ctx.progress,
                                  checkpoint=ctx.loop_checkpoint("tokenizer", {"budget": asdict(budget)}))
    metrics, test_grids = tokenizer_metrics(model, ctx.metric_split()[0])
    train_grids = encode_images(model, ctx.token_images("train")[0], progress=ctx.progress)
    metrics["train_usage"] = codebook_usage(train_grids, model.cfg.codebook_size)
    metrics.update(codebook_geometry(model, ctx.metric_split()[0][:1000]))
    metrics["dead_code_restarts"] = info["dead_code_restarts"]
    metrics["n_test"] = len(ctx.metric_split()[0])
    card = ctx.card(info, f"{DATA_TRAIN}; PSNR and codebook usage on the test split (train_usage: on the "
                          "training images), code spacing on the first 1,000 test images", metrics,
                    "tokenizer")
    card = save_component(ctx.out, "tokenizer", model.state_dict(), card)
    ctx.store_tokens("train", train_grids)  # the token grids the GPTs train and are measured on (cached)
    ctx.store_tokens("test", test_grids)
    return card


def _rounded(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Round a model's floating parameters to ``dtype`` (what storage keeps), in place."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).float())


def _train_gpt_component(ctx: TrainContext, name: str, shape: dict, budget: GPTBudget) -> dict[str, Any]:
    tokens, labels = ctx.tokens("train")
    cfg = ctx.gpt_config(shape)
    loop = ctx.loop_checkpoint(name, {"config": cfg.to_dict(), "budget": asdict(budget),
                                      "tokenizer": read_card(ctx.out, "tokenizer")["weights_sha256"]})
    model, info = train_gpt(cfg, tokens, labels, budget, name=name, seed=ctx.seed, progress=ctx.progress,
                            checkpoint=loop)
    dtype = ctx.storage.get(name, torch.float32)
    _rounded(model, dtype)
    test_tokens, test_labels = ctx.tokens("test")
    nll = token_nll(model, test_tokens, test_labels)
    n_train = ctx.budgets.n_train_nll
    metrics = {"test_nll_per_token_nats": nll, "test_nll_per_token_bits": nll / math.log(2),
               "train_nll_per_token_nats": token_nll(model, tokens[:n_train], labels[:n_train]),
               "n_test": len(test_tokens), "n_train_nll": n_train}
    card = ctx.card(info, f"token grids of the {DATA_TRAIN} by the tokenizer in this folder; NLL on the "
                          "test split's token grids (class-conditional)", metrics, name)
    return save_component(ctx.out, name, model.state_dict(), card, dtype)


def _train_target_component(ctx: TrainContext) -> dict[str, Any]:
    return _train_gpt_component(ctx, "target", ctx.budgets.target_shape, ctx.budgets.target)


def _train_draft_gpt_component(ctx: TrainContext) -> dict[str, Any]:
    return _train_gpt_component(ctx, "draft_gpt", ctx.budgets.draft_shape, ctx.budgets.draft_gpt)


def _train_eagle_component(ctx: TrainContext) -> dict[str, Any]:
    tokens, labels = ctx.tokens("train")
    target, target_card = load_gpt_component(ctx.out, "target")
    budget = ctx.budgets.eagle_head
    loop = ctx.loop_checkpoint("eagle_head", {"budget": asdict(budget),
                                              "target": target_card["weights_sha256"]})
    head, info = train_eagle_head(target, tokens, labels, budget, seed=ctx.seed, progress=ctx.progress,
                                  checkpoint=loop)
    dtype = ctx.storage.get("eagle_head", torch.float32)
    _rounded(head, dtype)
    test_tokens, test_labels = ctx.tokens("test")
    metrics = {**eagle_metrics(head, target, test_tokens, test_labels), "n_test": len(test_tokens)}
    card = ctx.card(info, f"token grids of the {DATA_TRAIN} and the features of the target in this folder; "
                          "metrics on the test split (teacher-forced)", metrics, "eagle_head")
    return save_component(ctx.out, "eagle_head", head.state_dict(), card, dtype)


# Components in training order: later ones read earlier ones from the output folder.
COMPONENTS: list[tuple[str, Callable[[TrainContext], dict[str, Any]]]] = [
    ("evaluator", _train_evaluator_component),
    ("tokenizer", _train_tokenizer_component),
    ("target", _train_target_component),
    ("eagle_head", _train_eagle_component),
    ("draft_gpt", _train_draft_gpt_component),
]


@dataclass(frozen=True)
class ModelSpec:
    """What ``train-mini --model NAME`` trains: budgets (full and ``--quick``), storage dtypes, the
    components in order, the default folder, and whether loops checkpoint (with a wall-time budget
    counted over resumed segments, :mod:`mini.run_ledger`)."""

    name: str
    full: Budgets
    quick: Budgets
    out: Path
    components: tuple[str, ...]
    storage: dict[str, torch.dtype]
    checkpointed: bool = False
    budget_seconds: float = 3600.0
    note: str = ""
    card_notes: dict[str, str] = field(default_factory=dict)
    threads: int = TRAIN_THREADS


_HALF = {name: torch.float16 for name in ("target", "eagle_head", "draft_gpt")}
MODELS: dict[str, ModelSpec] = {
    "mini": ModelSpec("mini", FULL, QUICK, WEIGHTS_DIR, tuple(n for n, _ in COMPONENTS), STORAGE),
    "ambiguous": ModelSpec(
        "ambiguous",
        Budgets(tokenizer=ambiguous_model.TOKENIZER, target=ambiguous_model.TARGET,
                eagle_head=ambiguous_model.EAGLE_HEAD, draft_gpt=ambiguous_model.DRAFT_GPT,
                target_shape=dict(ambiguous_model.TARGET_SHAPE),
                draft_shape=dict(ambiguous_model.DRAFT_SHAPE)),
        Budgets(tokenizer=ambiguous_model.QUICK_TOKENIZER, target=ambiguous_model.QUICK_TARGET,
                eagle_head=ambiguous_model.QUICK_EAGLE_HEAD, draft_gpt=ambiguous_model.QUICK_DRAFT_GPT,
                target_shape=dict(ambiguous_model.QUICK_TARGET_SHAPE),
                draft_shape=dict(ambiguous_model.QUICK_DRAFT_SHAPE),
                n_metric_test=1000, n_train_tokens=2000, n_train_nll=500),
        ambiguous_model.AMBIGUOUS_DIR, ambiguous_model.COMPONENTS, _HALF, checkpointed=True,
        budget_seconds=ambiguous_model.BUDGET_SECONDS, threads=ambiguous_model.THREADS,
        note=" (the evaluator is shared: the first model's, in weights/)",
        card_notes={n: f"{v}; evaluator: {ambiguous_model.SHARED_EVALUATOR}"
                    for n, v in ambiguous_model.NOTES.items()}),
}


def model_spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``--model NAME``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    return MODELS[name]


def train_all(
    out: Path,
    *,
    model: str = "mini",
    quick: bool = False,
    force: bool = False,
    only: list[str] | None = None,
    seed: int = 0,
    progress: bool = True,
    command: str = "relaxspec train-mini",
    threads: int | None = None,
    resume: bool = False,
    checkpoint_every: float = 300.0,
    stop_at: dict[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Train the components of ``model`` (all, or ``only``) into ``out``; return the card of each one
    trained now.

    Finished components are skipped (``force`` retrains them). For a checkpointed model (``ambiguous``)
    the loops write ``out/checkpoints/NAME.pt`` every ``checkpoint_every`` seconds and on SIGTERM /
    SIGINT (then :class:`~mini.checkpointing.TrainingInterrupted` is raised), and a later call resumes
    from them (``resume=True`` insists that there is something to resume); ``stop_at`` stops a loop
    after a step as SIGTERM would. Every segment's time goes to ``out/training_log.json``.
    """
    spec = model_spec(model)
    names = list(spec.components)
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise ValueError(f"unknown components {unknown} of model {model!r}; expected some of "
                         f"{names}{spec.note}")
    unknown = sorted(set(stop_at or {}) - set(names))
    if unknown:
        raise ValueError(f"stop_at names unknown components {unknown}; expected some of {names}")
    if resume and force:
        raise ValueError("--resume continues a run and --force retrains from scratch: pass one of them")
    if not checkpoint_every > 0:
        raise ValueError(f"--checkpoint-every must be > 0 seconds, got {checkpoint_every}")
    if (stop_at or resume) and not spec.checkpointed:
        raise ValueError(f"model {model!r} resumes whole components only (a rerun skips finished ones): "
                         "--resume and stop_at need a checkpointed model (--model ambiguous)")
    out = Path(out)
    shipped = {m.out.resolve() for m in MODELS.values()}
    if quick and out.resolve() in shipped:
        raise ValueError(f"--quick never writes into the shipped weights folder {out}")
    if not quick and spec.name != "mini" and out.resolve() == WEIGHTS_DIR.resolve():
        raise ValueError(f"model {model!r} must not be trained into the first model's folder {WEIGHTS_DIR}")
    ckpt_dir = out / "checkpoints"
    if resume and not (any(component_done(out, n) for n in names) or any(ckpt_dir.glob("*.pt"))):
        raise ValueError(f"--resume: nothing to resume in {out} (no checkpoint, no finished component); "
                         "drop --resume to start a new run")
    if not fashion_mnist.dataset_available():
        raise fashion_mnist.DatasetMissingError(
            f"training needs the full Fashion-MNIST data set in {fashion_mnist.DATASET_DIR}: "
            f"{fashion_mnist.INSTALL_HINT}")
    out.mkdir(parents=True, exist_ok=True)  # an unusable --out fails now, not after minutes of training
    threads = threads or (QUICK_THREADS if quick else spec.threads)
    ledger = RunLedger(out, spec.budget_seconds) if spec.checkpointed else None
    policy = (CheckpointPolicy(ckpt_dir, checkpoint_every, dict(stop_at or {}), ledger.update)
              if ledger else None)
    ctx = TrainContext(out=out, budgets=spec.quick if quick else spec.full, seed=seed, progress=progress,
                       command=command, threads=threads, storage=dict(spec.storage), checkpoints=policy,
                       notes=dict(spec.card_notes))
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    trained: dict[str, dict[str, Any]] = {}
    total = Clock()
    if ledger:
        ledger.start(command, threads)
    try:
        with termination_handler() if spec.checkpointed else contextlib.nullcontext():
            for name, fn in COMPONENTS:
                if name not in names or (only and name not in only):
                    continue
                if force:
                    (ckpt_dir / f"{name}.pt").unlink(missing_ok=True)
                elif component_done(out, name):
                    (ckpt_dir / f"{name}.pt").unlink(missing_ok=True)  # left by a crash after the save
                    tqdm.write(f"[train-mini] {name}: already in {out}, skipped (--force retrains)")
                    continue
                if stop_requested():
                    raise TrainingInterrupted(f"stopped ({stop_requested()}) before {name}")
                tqdm.write(f"[train-mini] {name}: training (load average {load_average()})")
                ctx.clock, ctx.loop = Clock(), None
                card = fn(ctx)
                if ctx.loop:
                    ctx.loop.discard()
                if ledger:
                    ledger.update(component=name)
                trained[name] = card
                tqdm.write(f"[train-mini] {name}: {card['component_seconds']} s wall, "
                           f"{card['component_cpu_seconds']} s CPU, metrics {card['metrics']}")
    except TrainingInterrupted:
        if ledger:
            ledger.update(status="interrupted")
            tqdm.write(f"[train-mini] interrupted; {ledger.summary()}")
        raise
    except BaseException:
        if ledger:
            ledger.update(status="failed")
        raise
    finally:
        torch.set_num_threads(previous_threads)
    tqdm.write(f"[train-mini] done in {total.wall():.0f} s wall, {total.cpu():.0f} s CPU; weights in {out}")
    if ledger:
        ledger.update(status="finished")
        over = "; OVER BUDGET" if ledger.wall_seconds() > ledger.budget_seconds else ""
        tqdm.write(f"[train-mini] run total: {ledger.summary()}{over}")
    return trained


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec train-mini``."""
    parser.add_argument("--model", choices=sorted(MODELS), default="mini",
                        help="mini: the first model (512 codes, weights/); ambiguous: 8,192 codes, "
                             f"LlamaGen's regime ({ambiguous_model.AMBIGUOUS_DIR}, checkpointed)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: the model's folder under weights/; with --quick a new "
                             "temporary folder)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny budgets (about a minute), for tests; never writes into weights/")
    parser.add_argument("--force", action="store_true", help="retrain components that already exist")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run from its checkpoints (resuming is automatic; this "
                             "makes it an error when there is nothing to resume)")
    parser.add_argument("--checkpoint-every", type=float, default=300.0, metavar="SECONDS",
                        help="checkpoint interval of the training loops (--model ambiguous)")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated components to train, of {[n for n, _ in COMPONENTS]}")
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--threads", type=int, default=None,
                        help=f"torch threads (default {TRAIN_THREADS}, --model ambiguous "
                             f"{ambiguous_model.THREADS}; {QUICK_THREADS} with --quick)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    spec = model_spec(args.model)
    out = args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="relaxspec-mini-quick-")) if args.quick else spec.out
    parts = ["relaxspec train-mini"] + ([f"--model {args.model}"] if args.model != "mini" else [])
    parts += ["--quick"] if args.quick else []
    if args.only:
        parts.append(f"--only {args.only}")
    if args.seed:
        parts.append(f"--seed {args.seed}")
    try:
        train_all(out, model=args.model, quick=args.quick, force=args.force,
                  only=[s.strip() for s in args.only.split(",")] if args.only else None,
                  seed=args.seed, progress=not args.no_progress, command=" ".join(parts),
                  threads=args.threads, resume=args.resume, checkpoint_every=args.checkpoint_every)
    except fashion_mnist.DatasetMissingError as err:
        print(f"relaxspec train-mini: error: {err}", file=sys.stderr)
        return 2
    except TrainingInterrupted as err:
        print(f"relaxspec train-mini: {err}; run the same command again to resume", file=sys.stderr)
        return 3
    return 0
