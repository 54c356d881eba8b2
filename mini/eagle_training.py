"""Training the reference EAGLE draft head on a frozen target's features (EAGLE-1 recipe).

For image token x_t the head reads (target feature at the position before
x_t, embedding of x_t) and predicts the target's feature at x_t's position
(see ``reference.drafter``). Loss = SmoothL1(predicted, true feature) + 0.1 x
cross-entropy between the target's next-token distribution (from the true
feature) and the head's (from the predicted feature, through the target's
output head), as in EAGLE and LANTERN's drafter training. The target runs
with the same classifier-free-guidance label dropout it was trained with, so
the head also learns the unconditional branch that guided decoding drafts.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mini.gpt_training import check_tokens, lr_factor
from reference.drafter import EagleHead
from reference.model import Transformer

CLS_WEIGHT = 0.1


@dataclass(frozen=True)
class EagleBudget:
    """``steps`` AdamW steps of ``batch`` token grids (same schedule shape as the GPTs)."""

    steps: int = 200
    batch: int = 64
    lr: float = 2e-3
    warmup: int = 20
    weight_decay: float = 0.0


def eagle_losses(head: EagleHead, target: Transformer, tokens: torch.Tensor, labels: torch.Tensor,
                 drop: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one batch of token grids (B, T) and its parts, plus top-1 agreement with the target."""
    with torch.no_grad():
        _, hidden = target(tokens[:, :-1], labels, drop_labels=drop, return_hidden=True)
        feats_in, feats_out = hidden[:, :-1], hidden[:, 1:]
        p_target = F.softmax(target.logits(feats_out), dim=-1)
        emb = target.embed_tokens(tokens[:, :-1])
    pred = head(emb, feats_in)
    reg = F.smooth_l1_loss(pred, feats_out)
    logq = F.log_softmax(target.logits(pred), dim=-1)
    cls = -(p_target * logq).sum(-1).mean()
    agree = (logq.argmax(-1) == p_target.argmax(-1)).float().mean().item()
    return reg + CLS_WEIGHT * cls, {"reg": reg.item(), "cls": cls.item(), "top1_agreement": agree}


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
    start = time.perf_counter()
    bar = tqdm(range(budget.steps), desc="eagle_head", disable=not progress, unit="step")
    for _ in bar:
        idx = torch.randint(len(x), (budget.batch,), generator=gen)
        drop = torch.rand(budget.batch, generator=gen) < cfg.class_dropout_prob
        loss, parts = eagle_losses(head, target, x[idx], y[idx], drop)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(reg=f"{parts['reg']:.3f}", cls=f"{parts['cls']:.3f}")
    head.eval()
    return head, {"config": {"target": cfg.to_dict(), "n_layer": 1}, "budget": asdict(budget),
                  "training_seconds": time.perf_counter() - start}


@torch.no_grad()
def eagle_metrics(head: EagleHead, target: Transformer, tokens: np.ndarray, labels: np.ndarray,
                  batch: int = 250) -> dict[str, float]:
    """Teacher-forced test metrics: regression loss, cross-entropy to the target, top-1 agreement."""
    x = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    sums = {"reg": 0.0, "cls": 0.0, "top1_agreement": 0.0}
    n = 0
    for i in range(0, len(x), batch):
        _, parts = eagle_losses(head, target, x[i:i + batch], y[i:i + batch])
        w = len(x[i:i + batch])
        for k in sums:
            sums[k] += parts[k] * w
        n += w
    return {k: v / n for k, v in sums.items()}
