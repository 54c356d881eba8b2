"""``relaxspec train-mini``: train every component of the shipped mini model, in order.

Each component is written as ``NAME.safetensors`` + ``NAME.json`` (see
:mod:`mini.weights`) and skipped on a later run when both exist and match,
unless ``--force``: an interrupted run resumes at the first unfinished
component. The training budgets (steps, batch size) are explicit below so the
whole run fits in 60 minutes on 2 CPU cores; ``--quick`` trains tiny versions
in about a minute into a temporary folder (never into ``weights/``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from mini import fashion_mnist
from mini.evaluator import EvaluatorBudget, predict, train_evaluator
from mini.weights import WEIGHTS_DIR, component_done, save_component

TRAIN_THREADS = 2


@dataclass(frozen=True)
class Budgets:
    """Training budgets of every component."""

    evaluator: EvaluatorBudget = field(default_factory=EvaluatorBudget)


FULL = Budgets()
QUICK = Budgets(evaluator=EvaluatorBudget(epochs=1, batch=128, n_train=3000))


@dataclass
class TrainContext:
    """What the component trainers share: data, budgets, the output folder and the command line."""

    out: Path
    budgets: Budgets
    seed: int
    progress: bool
    command: str
    _cache: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> tuple[Any, Any]:
        """The full ``train`` or ``test`` split (loaded once)."""
        if name not in self._cache:
            self._cache[name] = fashion_mnist.load_split(name)
        return self._cache[name]


def _train_evaluator_component(ctx: TrainContext) -> dict[str, Any]:
    model, info = train_evaluator(ctx.split("train"), ctx.split("test"), ctx.budgets.evaluator,
                                  seed=ctx.seed, progress=ctx.progress)
    sample_images, sample_labels = fashion_mnist.load_sample()
    _, preds = predict(model, sample_images)
    info["metrics"]["sample_accuracy"] = float((preds == sample_labels).mean())
    card = {
        "config": info["config"],
        "data": "Fashion-MNIST train (60,000) for training; test (10,000) for accuracy and the stored "
                "FD statistics (fd_mu, fd_sigma); sample_accuracy on data/fashion_mnist/test_sample_2000.npz",
        "training_command": ctx.command,
        "training_seconds": round(info["training_seconds"], 1),
        "budget": info["budget"],
        "seed": ctx.seed,
        "metrics": info["metrics"],
    }
    return save_component(ctx.out, "evaluator", model.state_dict(), card)


# Components in training order: later ones read earlier ones from the output folder.
COMPONENTS: list[tuple[str, Callable[[TrainContext], dict[str, Any]]]] = [
    ("evaluator", _train_evaluator_component),
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
    ctx = TrainContext(out=out, budgets=QUICK if quick else FULL, seed=seed, progress=progress,
                       command=command)
    torch.set_num_threads(TRAIN_THREADS)
    trained: dict[str, dict[str, Any]] = {}
    total = time.perf_counter()
    for name, fn in COMPONENTS:
        if only and name not in only:
            continue
        if not force and component_done(out, name):
            tqdm.write(f"[train-mini] {name}: already in {out}, skipped (--force retrains)")
            continue
        tqdm.write(f"[train-mini] {name}: training")
        card = fn(ctx)
        trained[name] = card
        tqdm.write(f"[train-mini] {name}: {card['training_seconds']} s, metrics {card['metrics']}")
    tqdm.write(f"[train-mini] done in {time.perf_counter() - total:.0f} s; weights in {out}")
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
    train_all(out, quick=args.quick, force=args.force,
              only=[s.strip() for s in args.only.split(",")] if args.only else None,
              seed=args.seed, progress=not args.no_progress, command=" ".join(parts))
    return 0
