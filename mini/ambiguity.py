"""Token selection ambiguity of the mini model, measured as SPEC section 6 defines it for worlds.

Over generated sequences, at every position, the target's guided next-token
distribution p (classifier-free guidance, temperature 1) gives the mean top-1
probability, the mean entropy (nats) and the mean mass of the 10 most likely
tokens; each drafter's distribution q at the same prefix gives the mean
single-draft acceptance 1 - TV(p, q). The distributions are computed by one
teacher-forced pass over the sequences (identical to what the decoder sees at
a tree's root: the EAGLE head reads the target's real features there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mini.shipped import MiniModel


def distribution_stats(p: np.ndarray) -> dict[str, float]:
    """Mean top-1 probability, entropy (nats) and top-10 mass of the rows of ``p`` (n, V)."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 10:
        raise ValueError(f"need an (n, V >= 10) matrix of distributions, got shape {p.shape}")
    srt = -np.sort(-p, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(1)
    return {"top1": float(srt[:, 0].mean()), "entropy": float(ent.mean()),
            "top10_mass": float(srt[:, :10].sum(1).mean())}


def acceptance(p: np.ndarray, q: np.ndarray) -> float:
    """Mean single-draft acceptance sum_x min(p, q) = 1 - TV(p, q) over rows."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q differ in shape: {p.shape} vs {q.shape}")
    return float(np.minimum(p, q).sum(1).mean())


def _guided_probs(cond: torch.Tensor, uncond: torch.Tensor, cfg_scale: float) -> np.ndarray:
    logits = (uncond + (cond - uncond) * cfg_scale).double()
    return torch.softmax(logits, dim=-1).numpy()


@dataclass
class TeacherForced:
    """p of the target and q of both drafters at positions 1..63 of every sequence, flattened."""

    p: np.ndarray
    q_eagle: np.ndarray
    q_gpt: np.ndarray
    p_first: np.ndarray


@torch.no_grad()
def teacher_forced(mini: MiniModel, tokens: np.ndarray, labels: np.ndarray, cfg_scale: float,
                   batch: int = 50) -> TeacherForced:
    """Guided distributions of the target and the drafters along given token sequences (N, 64)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 2 or tokens.shape[1] != mini.target.cfg.block_size:
        raise ValueError(f"tokens must have shape (N, {mini.target.cfg.block_size}), got {tokens.shape}")
    tgt, head, dgpt = mini.target, mini.eagle_head, mini.draft_gpt
    null = tgt.cfg.null_class
    ps, qe, qg, pf = [], [], [], []
    for i in range(0, len(tokens), batch):
        x = torch.from_numpy(tokens[i:i + batch])
        y = torch.as_tensor(np.asarray(labels[i:i + batch], dtype=np.int64))
        yn = torch.full_like(y, null)
        out = {}
        for name, lab in (("c", y), ("u", yn)):
            logits, hidden = tgt(x[:, :-1], lab, return_hidden=True)
            pred = head(tgt.embed_tokens(x[:, :-1]), hidden[:, :-1])
            out[name] = (logits, tgt.logits(pred), dgpt(x[:, :-1], lab))
        p = _guided_probs(out["c"][0], out["u"][0], cfg_scale)       # rows 0..63
        q_e = _guided_probs(out["c"][1], out["u"][1], cfg_scale)     # rows for tokens 1..63
        q_g = _guided_probs(out["c"][2], out["u"][2], cfg_scale)
        ps.append(p[:, 1:].reshape(-1, p.shape[-1]))
        pf.append(p[:, 0])
        qe.append(q_e.reshape(-1, p.shape[-1]))
        qg.append(q_g[:, 1:].reshape(-1, p.shape[-1]))
    return TeacherForced(np.concatenate(ps), np.concatenate(qe), np.concatenate(qg), np.concatenate(pf))


def model_ambiguity(mini: MiniModel, tokens: np.ndarray, labels: np.ndarray, cfg_scale: float
                    ) -> dict[str, float]:
    """The world-stats figures of the mini model along ``tokens`` (positions 1..63)."""
    tf = teacher_forced(mini, tokens, labels, cfg_scale)
    return {**distribution_stats(tf.p), "accept_eagle": acceptance(tf.p, tf.q_eagle),
            "accept_draft_gpt": acceptance(tf.p, tf.q_gpt), "positions": int(tf.p.shape[0])}
