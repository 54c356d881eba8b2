"""Training the reference LlamaGen GPT on Fashion-MNIST token grids (the target and the draft GPT).

Next-token cross-entropy over the 64 image tokens after the class token, with
LlamaGen's classifier-free-guidance dropout (each label replaced by the null
class with probability ``class_dropout_prob``), AdamW (LlamaGen: betas 0.9 /
0.95, weight decay 0.05) with a warm-up and cosine decay, in bfloat16 mixed
precision (``torch.autocast``; LlamaGen trains in bf16 too): on a CPU with
AVX-512 BF16 a step costs about 0.64 of a float32 one. Metrics are measured
in float32.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from relaxspec.mini.checkpointing import LoopCheckpoint
from relaxspec.mini.timing import Clock
from relaxspec.reference.model import Transformer
from relaxspec.reference.model_config import GPTConfig


@dataclass(frozen=True)
class GPTBudget:
    """``steps`` AdamW steps of ``batch`` token grids; peak ``lr`` after ``warmup`` steps, cosine to 10%."""

    steps: int = 3000
    batch: int = 64
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.05
    precision: str = "bf16-mixed"


PRECISIONS = ("float32", "bf16-mixed")


def autocast(precision: str) -> contextlib.AbstractContextManager:
    """The autocast context of a budget's ``precision`` (``float32``: none; ``bf16-mixed``: CPU bf16)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")


def lr_factor(step: int, budget: GPTBudget) -> float:
    """Learning-rate multiplier at ``step``: linear warm-up, then cosine decay to 0.1."""
    if step < budget.warmup:
        return (step + 1) / budget.warmup
    t = (step - budget.warmup) / max(1, budget.steps - budget.warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))


def check_tokens(tokens: np.ndarray, labels: np.ndarray, cfg: GPTConfig) -> None:
    """Raise if token grids or labels do not fit the model's vocabulary, grid and classes."""
    if tokens.ndim != 2 or tokens.shape[1] != cfg.block_size:
        raise ValueError(f"token grids have shape {tokens.shape}; the model expects (N, {cfg.block_size})")
    if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
        raise ValueError(f"token ids reach {tokens.max()}, outside the model's vocabulary of "
                         f"{cfg.vocab_size} (checkpoint and codebook do not match)")
    if labels.shape != (len(tokens),) or labels.min() < 0 or labels.max() >= cfg.num_classes:
        raise ValueError(f"labels must be {len(tokens)} classes in [0, {cfg.num_classes})")


def optimise(module: torch.nn.Module, groups: list[dict], budget: GPTBudget,
             step_loss: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict[str, float]]], *,
             n_grids: int, class_dropout_prob: float, gen: torch.Generator, name: str,
             progress: bool, checkpoint: LoopCheckpoint | None = None) -> dict[str, float]:
    """The training loop both GPTs and the EAGLE head share: ``budget.steps`` AdamW steps (betas 0.9 /
    0.95, parameter ``groups`` with their weight decay, :func:`lr_factor` schedule, gradients clipped to
    norm 1) on ``budget.batch`` grids drawn from ``gen`` with labels dropped (CFG) at
    ``class_dropout_prob``; ``step_loss(idx, drop)`` returns the loss and the values the progress bar
    shows. With ``checkpoint`` the loop resumes from it and checkpoints as it goes
    (:mod:`mini.checkpointing`). Leaves ``module`` in eval mode; returns the loop's wall and CPU seconds
    (over every resumed segment)."""
    opt = torch.optim.AdamW(groups, lr=budget.lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, budget))
    state = {"module": module, "opt": opt, "sched": sched, "gen": gen}
    start = checkpoint.restore(state) if checkpoint else 0
    module.train()
    clock = Clock()
    bar = tqdm(range(start, budget.steps), desc=name, disable=not progress, unit="step", initial=start,
               total=budget.steps)
    for step in bar:
        idx = torch.randint(n_grids, (budget.batch,), generator=gen)
        drop = torch.rand(budget.batch, generator=gen) < class_dropout_prob
        with autocast(budget.precision):
            loss, shown = step_loss(idx, drop)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()})
        if checkpoint:
            checkpoint.after_step(step + 1, state, budget.steps)
    module.eval()
    if checkpoint:
        return {"training_seconds": checkpoint.wall(), "training_cpu_seconds": checkpoint.cpu()}
    return {"training_seconds": clock.wall(), "training_cpu_seconds": clock.cpu()}


def train_gpt(cfg: GPTConfig, tokens: np.ndarray, labels: np.ndarray, budget: GPTBudget, *, name: str,
              seed: int = 0, progress: bool = True,
              checkpoint: LoopCheckpoint | None = None) -> tuple[Transformer, dict]:
    """Train a fresh ``Transformer(cfg)`` (resuming from ``checkpoint`` if given); return it (eval mode)
    and a card fragment."""
    check_tokens(tokens, labels, cfg)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    model = Transformer(cfg)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": budget.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]

    def step_loss(idx: torch.Tensor, drop: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(x[idx, :-1], y[idx], drop_labels=drop)
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), x[idx].reshape(-1))
        return loss, {"loss": loss.item()}

    timing = optimise(model, groups, budget, step_loss, n_grids=len(x),
                      class_dropout_prob=cfg.class_dropout_prob,
                      gen=gen, name=name, progress=progress, checkpoint=checkpoint)
    return model, {"config": cfg.to_dict(), "budget": asdict(budget), **timing}


@torch.no_grad()
def token_nll(model: Transformer, tokens: np.ndarray, labels: np.ndarray, batch: int = 250) -> float:
    """Mean class-conditional negative log-likelihood per image token (nats)."""
    check_tokens(tokens, labels, model.cfg)
    model.eval()
    total, count = 0.0, 0
    x = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    for i in range(0, len(x), batch):
        logits = model(x[i:i + batch, :-1], y[i:i + batch])
        total += F.cross_entropy(logits.reshape(-1, model.cfg.vocab_size), x[i:i + batch].reshape(-1),
                                 reduction="sum").item()
        count += x[i:i + batch].numel()
    return total / count
