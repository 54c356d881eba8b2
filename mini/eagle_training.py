"""Training the reference EAGLE draft head on a frozen target's features (EAGLE-1 recipe).

For image token x_t the head reads (target feature at the position before
x_t, embedding of x_t) and predicts the target's feature at x_t's position
(see ``reference.drafter``). The loss is ``reference.train_drafter.eagle_loss``
(smooth L1 on the feature + 0.1 x cross-entropy to the target's next-token
distribution, as in EAGLE and LANTERN's drafter training), here on the
training set's token grids rather than on the target's own samples. The
target runs with the same classifier-free-guidance label dropout it was
trained with, so the head also learns the unconditional branch that guided
decoding drafts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from mini.gpt_training import autocast, check_tokens, lr_factor
from mini.timing import Clock
from reference.drafter import EagleHead
from reference.model import Transformer
from reference.train_drafter import eagle_loss


@dataclass(frozen=True)
class EagleBudget:
    """``steps`` AdamW steps of ``batch`` token grids (same schedule shape as the GPTs)."""

    steps: int = 500
    batch: int = 64
    lr: float = 2e-3
    warmup: int = 30
    weight_decay: float = 0.0
    precision: str = "bf16-mixed"


def train_eagle_head(target: Transformer, tokens: np.ndarray, labels: np.ndarray, budget: EagleBudget, *,
                     seed: int = 0, progress: bool = True) -> tuple[EagleHead, dict]:
    """Train a fresh ``EagleHead`` for the frozen ``target``; return it (eval mode) and a card fragment."""
    cfg = target.cfg
    check_tokens(tokens, labels, cfg)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    target.eval().requires_grad_(False)
    head = EagleHead(cfg)
    opt = torch.optim.AdamW(head.parameters(), lr=budget.lr, betas=(0.9, 0.95),
                            weight_decay=budget.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, budget))  # type: ignore[arg-type]
    head.train()
    clock = Clock()
    bar = tqdm(range(budget.steps), desc="eagle_head", disable=not progress, unit="step")
    for _ in bar:
        idx = torch.randint(len(x), (budget.batch,), generator=gen)
        drop = torch.rand(budget.batch, generator=gen) < cfg.class_dropout_prob
        with autocast(budget.precision):
            loss, parts = eagle_loss(target, head, x[idx], y[idx], drop_labels=drop)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(reg=f"{parts['reg']:.3f}", cls=f"{parts['cls']:.3f}")
    head.eval()
    return head, {"config": {"target": cfg.to_dict(), "n_layer": 1}, "budget": asdict(budget),
                  "training_seconds": clock.wall(), "training_cpu_seconds": clock.cpu()}


@torch.no_grad()
def eagle_metrics(head: EagleHead, target: Transformer, tokens: np.ndarray, labels: np.ndarray,
                  batch: int = 250) -> dict[str, float]:
    """Teacher-forced test metrics: regression loss, cross-entropy to the target, top-1 agreement."""
    x = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    sums = {"reg": 0.0, "cls": 0.0, "top1_agreement": 0.0}
    n = 0
    for i in range(0, len(x), batch):
        _, parts = eagle_loss(target, head, x[i:i + batch], y[i:i + batch])
        w = len(x[i:i + batch])
        for k in sums:
            sums[k] += parts[k] * w
        n += w
    return {k: v / n for k, v in sums.items()}
