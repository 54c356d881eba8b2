"""Train a drafter for a LlamaGen target: ``python -m relaxspec.reference.train_drafter ...``.

Data: token sequences sampled from the target itself (AR, with its class
dropout so that the unconditional half of CFG is covered too), as EAGLE and
LANTERN train on the target's own generations. Losses:

- EAGLE head: feature regression (smooth L1 between the predicted and the
  target's next feature) + 0.1 x cross-entropy of the head's next-token
  distribution against the target's (EAGLE's weights);
- independent GPT drafter: cross-entropy against the target's distributions
  (distillation).

Small sizes run on CPU in seconds (the tests do); full sizes want ``--device cuda``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from relaxspec.core.trace import Sampling
from relaxspec.reference.decode import Decoder, DecodeSettings
from relaxspec.reference.drafter import EagleHead
from relaxspec.reference.model import Transformer, load_gpt
from relaxspec.reference.model_config import gpt_config

FEATURE_WEIGHT, TOKEN_WEIGHT = 1.0, 0.1


@torch.no_grad()
def sample_training_data(target: Transformer, n: int, seed: int, sampling: Sampling,
                         drop_prob: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences (n, grid^2) from the target (no guidance) and their labels; a fraction
    ``drop_prob`` is conditioned on the null class."""
    rng = np.random.default_rng(seed)
    cfg = target.cfg
    labels = rng.integers(0, cfg.num_classes, n)
    if cfg.class_dropout_prob > 0:
        labels = np.where(rng.random(n) < drop_prob, cfg.null_class, labels)
    dec = Decoder(target, DecodeSettings(target_sampling=sampling))
    seqs = []
    for i, label in enumerate(tqdm(labels, desc="sampling", unit="seq", leave=False)):
        seqs.append(dec.generate(int(label), seed, sequence=i).tokens)
    dev = next(target.parameters()).device
    return torch.as_tensor(np.stack(seqs), device=dev), torch.as_tensor(labels, device=dev)


def eagle_loss(target: Transformer, head: EagleHead, tokens: torch.Tensor, labels: torch.Tensor, *,
               drop_labels: torch.Tensor | None = None,
               token_weight: float = TOKEN_WEIGHT) -> tuple[torch.Tensor, dict[str, float]]:
    """EAGLE loss on sequences (B, N): pairs (feature before x_t, x_t) predict the feature at x_t.

    Returns ``FEATURE_WEIGHT`` x smooth L1 on the features + ``token_weight`` x
    cross-entropy of the head's next-token distribution against the target's,
    and its parts as floats (``reg``, ``cls``, ``top1_agreement``: how often the
    head's argmax is the target's). ``drop_labels`` (bool, B) conditions those
    rows on the null class, as the target's classifier-free-guidance training did.
    """
    with torch.no_grad():
        logits, feats = target(tokens[:, :-1], labels, drop_labels=drop_labels, return_hidden=True)
        p_target = F.softmax(logits[:, 1:], dim=-1)
        emb = target.embed_tokens(tokens[:, :-1])
    pred = head(emb, feats[:, :-1])
    reg = F.smooth_l1_loss(pred.float(), feats[:, 1:].float())
    logq = F.log_softmax(target.logits(pred), dim=-1)
    ce = -(p_target * logq).sum(-1).mean()
    agree = (logq.argmax(-1) == p_target.argmax(-1)).float().mean()
    return FEATURE_WEIGHT * reg + token_weight * ce, {"reg": reg.item(), "cls": ce.item(),
                                                      "top1_agreement": agree.item()}


def distill_loss(target: Transformer, drafter: Transformer, tokens: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of the drafter's next-token distributions against the target's (and as a float)."""
    with torch.no_grad():
        p_target = F.softmax(target(tokens[:, :-1], labels), dim=-1)
    ce = -(p_target * F.log_softmax(drafter(tokens[:, :-1], labels), dim=-1)).sum(-1).mean()
    return ce, {"cls": ce.item()}


def train(target: Transformer, drafter: torch.nn.Module, tokens: torch.Tensor, labels: torch.Tensor, *,
          steps: int, batch: int, lr: float, seed: int) -> list[float]:
    """AdamW on random minibatches; returns the loss of every step."""
    target.eval()
    drafter.train()
    for p in target.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW([p for p in drafter.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    loss_fn = eagle_loss if isinstance(drafter, EagleHead) else distill_loss
    losses = []
    for _ in tqdm(range(steps), desc="training", unit="step", leave=False):
        idx = torch.randint(0, tokens.shape[0], (min(batch, tokens.shape[0]),), generator=gen)
        loss, _ = loss_fn(target, drafter, tokens[idx.to(tokens.device)], labels[idx.to(tokens.device)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    drafter.eval()
    return losses


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m relaxspec.reference.train_drafter",
                                description=__doc__.split("\n")[0])
    p.add_argument("--gpt-ckpt", required=True, help="the target's LlamaGen checkpoint")
    p.add_argument("--gpt-model", default="GPT-XL")
    p.add_argument("--codebook-size", type=int, default=16384)
    p.add_argument("--grid", type=int, default=16, help="token grid side (image size / downsampling)")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--kind", choices=("eagle", "gpt"), default="eagle")
    p.add_argument("--draft-model", default="GPT-B", help="shape of an independent drafter (--kind gpt)")
    p.add_argument("--sequences", type=int, default=64, help="training sequences sampled from the target")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--save", required=True, metavar="FILE", help="the drafter's state dict file to write")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    kw = {"vocab_size": args.codebook_size, "block_size": args.grid**2, "num_classes": args.num_classes}
    target = load_gpt(args.gpt_ckpt, args.gpt_model, **kw).to(args.device)
    tokens, labels = sample_training_data(target, args.sequences, args.seed, Sampling())
    if args.kind == "eagle":
        drafter: torch.nn.Module = EagleHead(target.cfg)
    else:
        drafter = Transformer(gpt_config(args.draft_model, **kw))
    drafter = drafter.to(args.device)
    losses = train(target, drafter, tokens, labels, steps=args.steps, batch=args.batch, lr=args.lr,
                   seed=args.seed)
    out = Path(args.save)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": drafter.state_dict()}, out)
    print(f"{args.kind} drafter: loss {losses[0]:.4f} -> {np.mean(losses[-10:]):.4f}; saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
