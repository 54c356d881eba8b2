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

from relaxspec.mini.checkpointing import LoopCheckpoint
from relaxspec.mini.gpt_training import GPTBudget, check_tokens, optimise
from relaxspec.reference.drafter import EagleHead
from relaxspec.reference.model import Transformer
from relaxspec.reference.train_drafter import eagle_loss


@dataclass(frozen=True)
class EagleBudget(GPTBudget):
    """The GPTs' budget (same schedule shape) with the head's defaults."""

    steps: int = 500
    batch: int = 64
    lr: float = 2e-3
    warmup: int = 30
    weight_decay: float = 0.0
    precision: str = "bf16-mixed"


def train_eagle_head(target: Transformer, tokens: np.ndarray, labels: np.ndarray, budget: EagleBudget, *,
                     seed: int = 0, progress: bool = True,
                     checkpoint: LoopCheckpoint | None = None) -> tuple[EagleHead, dict]:
    """Train a fresh ``EagleHead`` for the frozen ``target`` (resuming from ``checkpoint`` if given);
    return it (eval mode) and a card fragment."""
    cfg = target.cfg
    check_tokens(tokens, labels, cfg)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(np.asarray(tokens, dtype=np.int64))
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    target.eval().requires_grad_(False)
    head = EagleHead(cfg)
    groups = [{"params": list(head.parameters()), "weight_decay": budget.weight_decay}]

    def step_loss(idx: torch.Tensor, drop: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        loss, parts = eagle_loss(target, head, x[idx], y[idx], drop_labels=drop)
        return loss, {"reg": parts["reg"], "cls": parts["cls"]}

    timing = optimise(head, groups, budget, step_loss, n_grids=len(x),
                      class_dropout_prob=cfg.class_dropout_prob,
                      gen=gen, name="eagle_head", progress=progress, checkpoint=checkpoint)
    return head, {"config": {"target": cfg.to_dict(), "n_layer": 1}, "budget": asdict(budget), **timing}


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
