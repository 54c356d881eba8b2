"""The image-quality evaluator: a small Fashion-MNIST CNN classifier.

It replaces FID and CLIP score (whose weights cannot be shipped): its
penultimate 128-dimensional features give a Frechet distance (FD) between
generated and real test images, and its predictions give the class accuracy
of class-conditional samples. The mean and covariance of the features of the
full 10,000-image test set are stored with the weights, so FD against the
whole test set works without the data set installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from relaxspec.mini.fashion_mnist import IMAGE_SIZE, NUM_CLASSES, pad_to_32, to_unit_range
from relaxspec.mini.timing import Clock
from relaxspec.mini.weights import WEIGHTS_DIR, load_component, load_state_strict

FEATURE_DIM = 128


@dataclass(frozen=True)
class EvaluatorConfig:
    """Channel widths of the classifier."""

    widths: tuple[int, int, int, int] = (16, 32, 64, 128)
    feature_dim: int = FEATURE_DIM


class FashionClassifier(nn.Module):
    """Conv classifier on 32 x 32 images in [-1, 1]; ``features`` are its penultimate activations."""

    def __init__(self, config: EvaluatorConfig = EvaluatorConfig()) -> None:
        super().__init__()
        self.config = config
        w1, w2, w3, w4 = config.widths

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU())

        self.body = nn.Sequential(
            block(1, w1), nn.MaxPool2d(2),                         # 16 x 16
            block(w1, w2), block(w2, w3), nn.MaxPool2d(2),         # 8 x 8
            block(w3, w4), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.fc = nn.Linear(w4, config.feature_dim)
        self.head = nn.Linear(config.feature_dim, NUM_CLASSES)
        self.register_buffer("fd_mu", torch.zeros(config.feature_dim))
        self.register_buffer("fd_sigma", torch.eye(config.feature_dim))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate features ``(N, feature_dim)`` of images ``(N, 1, 32, 32)``."""
        return F.relu(self.fc(self.body(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits ``(N, 10)``."""
        return self.head(self.features(x))


def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 images ``(N, 28|32, 28|32)`` as a float tensor ``(N, 1, 32, 32)`` in [-1, 1]."""
    images = np.asarray(images)
    if images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 in [0, 255], got {images.dtype}")
    if images.shape[-2:] == (28, 28):
        images = pad_to_32(images)
    if images.ndim != 3 or images.shape[-2:] != (IMAGE_SIZE, IMAGE_SIZE):
        raise ValueError(f"images must have shape (N, 32, 32) or (N, 28, 28), got {images.shape}")
    return torch.from_numpy(to_unit_range(images)).unsqueeze(1)


@torch.no_grad()
def predict(model: FashionClassifier, images: np.ndarray, batch: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Features ``(N, feature_dim)`` (float64) and predicted classes ``(N,)`` of uint8 images."""
    model.eval()
    x = images_to_tensor(images)
    feats, preds = [], []
    for i in range(0, len(x), batch):
        f = model.features(x[i:i + batch])
        feats.append(f.double().numpy())
        preds.append(model.head(f).argmax(1).numpy())
    return np.concatenate(feats), np.concatenate(preds)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Linear algebra on small matrices in one torch thread: multi-threaded BLAS on a loaded machine
    spends 100x the work waiting (a 128 x 128 eigendecomposition: 360 ms against 3 ms)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def feature_stats(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (unbiased) covariance of a feature matrix ``(N, D)``, N >= 2."""
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] < 2:
        raise ValueError(f"need a (N >= 2, D) feature matrix, got shape {features.shape}")
    with _one_thread():
        x = torch.from_numpy(features)
        mean = x.mean(0)
        centred = x - mean
        cov = centred.T @ centred / (x.shape[0] - 1)
    return mean.numpy(), cov.numpy()


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> float:
    """Frechet distance between Gaussians: |mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2)).

    tr (S1 S2)^(1/2) is the sum of the square roots of the eigenvalues of S1 S2, which are those of the
    symmetric R S2 R with R = S1^(1/2): two symmetric eigendecompositions (one thread), exact for
    singular covariances too (dead ReLU features), where the general matrix square root of S1 S2 is slow
    and needs a regularising epsilon."""
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    sigma1, sigma2 = np.asarray(sigma1, np.float64), np.asarray(sigma2, np.float64)
    if mu1.shape != mu2.shape or sigma1.shape != sigma2.shape or sigma1.shape != mu1.shape * 2:
        raise ValueError(f"mismatched statistics: {mu1.shape}, {sigma1.shape}, {mu2.shape}, {sigma2.shape}")
    with _one_thread():
        s1, s2 = torch.from_numpy(sigma1), torch.from_numpy(sigma2)
        w, U = torch.linalg.eigh(s1)
        r = (U * torch.sqrt(torch.clamp(w, min=0.0))) @ U.T
        middle = r @ s2 @ r
        eig = torch.linalg.eigvalsh((middle + middle.T) / 2.0)
        trace_sqrt = float(torch.sqrt(torch.clamp(eig, min=0.0)).sum())
    diff = mu1 - mu2
    return float(max(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2.0 * trace_sqrt, 0.0))


def image_quality(model: FashionClassifier, images: np.ndarray, labels: np.ndarray, *, bootstrap: int = 0,
                  seed: int = 0) -> dict[str, float]:
    """FD of ``images`` against the stored test-set statistics and the class accuracy w.r.t. ``labels``.

    With ``bootstrap`` > 0 also ``fd_bootstrap_sd``: the standard deviation of the
    FD over that many resamples (with replacement, generator ``seed``) of the
    images, a measure of its sampling noise at this number of images.
    """
    feats, preds = predict(model, images)
    ref_mu, ref_sigma = model.fd_mu.double().numpy(), model.fd_sigma.double().numpy()
    out = {"fd": frechet_distance(*feature_stats(feats), ref_mu, ref_sigma),
           "class_accuracy": float(np.mean(preds == np.asarray(labels))), "n_images": len(images)}
    if bootstrap:
        rng = np.random.default_rng(seed)
        picks = (rng.integers(0, len(feats), len(feats)) for _ in range(bootstrap))
        fds = [frechet_distance(*feature_stats(feats[i]), ref_mu, ref_sigma) for i in picks]
        out["fd_bootstrap_sd"] = float(np.std(fds, ddof=1))
    return out


def fd_between(model: FashionClassifier, a: np.ndarray, b: np.ndarray) -> float:
    """FD between two sets of uint8 images (in the evaluator's feature space)."""
    return frechet_distance(*feature_stats(predict(model, a)[0]), *feature_stats(predict(model, b)[0]))


@dataclass(frozen=True)
class EvaluatorBudget:
    """How long the classifier trains: ``epochs`` over ``n_train`` images (0 = all) in batches."""

    epochs: int = 4
    batch: int = 256
    lr: float = 4e-3
    n_train: int = 0


def train_evaluator(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    budget: EvaluatorBudget,
    *,
    config: EvaluatorConfig = EvaluatorConfig(),
    seed: int = 0,
    progress: bool = True,
) -> tuple[FashionClassifier, dict]:
    """Train the classifier (Adam, one-cycle cosine LR, random horizontal flips).

    Stores the test-set feature statistics in the model and returns it with a
    card fragment (config, budget, metrics, seconds).
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    images, labels = train
    if budget.n_train:
        images, labels = images[:budget.n_train], labels[:budget.n_train]
    x, y = images_to_tensor(images), torch.as_tensor(labels, dtype=torch.long)
    model = FashionClassifier(config)
    opt = torch.optim.Adam(model.parameters(), lr=budget.lr)
    steps = budget.epochs * ((len(x) + budget.batch - 1) // budget.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=budget.lr, total_steps=steps)
    clock = Clock()
    bar = tqdm(total=steps, desc="evaluator", disable=not progress, unit="step")
    for _ in range(budget.epochs):
        model.train()
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), budget.batch):
            idx = perm[i:i + budget.batch]
            xb = x[idx]
            flip = torch.rand(len(idx), generator=gen) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(-1), xb)
            loss = F.cross_entropy(model(xb), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            bar.update()
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    seconds, cpu_seconds = clock.wall(), clock.cpu()
    feats, preds = predict(model, test[0])
    mu, sigma = feature_stats(feats)
    model.fd_mu.copy_(torch.from_numpy(mu))
    model.fd_sigma.copy_(torch.from_numpy(sigma))
    metrics = {"test_accuracy": float(np.mean(preds == test[1])), "n_test": len(test[1])}
    return model, {"config": asdict(config), "budget": asdict(budget), "metrics": metrics,
                   "training_seconds": seconds, "training_cpu_seconds": cpu_seconds}


def load_evaluator(directory: Path = WEIGHTS_DIR) -> tuple[FashionClassifier, dict]:
    """The trained classifier in ``directory`` (default: the shipped weights) and its card."""
    state, card = load_component(directory, "evaluator")
    config = card["config"]
    try:
        cfg = EvaluatorConfig(widths=tuple(config["widths"]), feature_dim=int(config["feature_dim"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"evaluator card config {config!r} is malformed: {err}") from err
    model = FashionClassifier(cfg)
    load_state_strict(model, state, f"evaluator weights in {directory}")
    return model.eval(), card
