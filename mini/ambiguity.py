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

from relaxspec.mini.shipped import MiniModel
from relaxspec.simulate.worlds import ambiguity
from relaxspec.theory.distributions import total_variation


def position_stats(p: np.ndarray, drafters: dict[str, np.ndarray]) -> dict[str, float]:
    """Means over rows of ``p`` (n, V) of ``simulate.worlds.ambiguity`` (top-1, entropy, top-10 mass)
    and, per drafter ``name``, of 1 - TV(p, q) (key ``accept_<name>``): the world-stats figures."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 10:
        raise ValueError(f"need an (n, V >= 10) matrix of distributions, got shape {p.shape}")
    top1, entropy, top10 = np.mean([ambiguity(row) for row in p], axis=0)
    out = {"top1": float(top1), "entropy": float(entropy), "top10_mass": float(top10)}
    for name, q in drafters.items():
        q = np.asarray(q, dtype=np.float64)
        if q.shape != p.shape:
            raise ValueError(f"p and q of {name} differ in shape: {p.shape} vs {q.shape}")
        tv = [total_variation(a, b) for a, b in zip(p, q, strict=True)]
        out[f"accept_{name}"] = float(1.0 - np.mean(tv))
    return out


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
    q_eagle_deep: np.ndarray | None = None  # positions 2..63: the head one level below a tree's root


def comb_parents(n: int) -> np.ndarray:
    """Parents of a chain 0..n-1 with one leaf n+j below chain node j for j < n - 1 (a comb)."""
    return np.concatenate([np.arange(-1, n - 1), np.arange(n - 1)])


@torch.no_grad()
def eagle_below_root(head, target, tokens: torch.Tensor, hidden: torch.Tensor,
                     leaf_features: torch.Tensor | None = None) -> torch.Tensor:
    """The EAGLE head's logits one level below a tree's root, along ``tokens`` (B, T): at position
    j + 1 the head reads token x_{j+1} paired with its *own* predicted feature (the decoder's depth-1
    draft, see ``reference.drafter.EagleDraftSession.draft``) over the target's real features
    before it; rows are the next-token logits for tokens 2..T (B, T - 1, V). ``leaf_features``
    (B, T - 1, dim): the features the leaves read, by default the head's predictions at positions
    0..T-2 (a caller that has them passes them; a test hands in the real ones)."""
    B, T = tokens.shape
    emb = target.embed_tokens(tokens)
    if leaf_features is None:
        leaf_features = head(emb, hidden)[:, :-1]
    head.setup_cache(B, 2 * T)
    parents = comb_parents(T)
    x_emb = torch.cat([emb, emb[:, 1:]], dim=1)
    feats = torch.cat([hidden, leaf_features], dim=1)
    out = head.forward_tree(x_emb, feats, parents, np.arange(parents.size), 0, {})
    return target.logits(out[:, T:])


@torch.no_grad()
def teacher_forced(mini: MiniModel, tokens: np.ndarray, labels: np.ndarray, cfg_scale: float,
                   batch: int = 50, below_root: bool = False) -> TeacherForced:
    """Guided distributions of the target and the drafters along given token sequences (N, 64);
    ``below_root``: also the EAGLE head's one level below a tree's root (:func:`eagle_below_root`)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 2 or tokens.shape[1] != mini.target.cfg.block_size:
        raise ValueError(f"tokens must have shape (N, {mini.target.cfg.block_size}), got {tokens.shape}")
    tgt, head, dgpt = mini.target, mini.eagle_head, mini.draft_gpt
    null = tgt.cfg.null_class
    ps, qe, qg, pf, qd = [], [], [], [], []
    for i in range(0, len(tokens), batch):
        x = torch.from_numpy(tokens[i:i + batch])
        y = torch.as_tensor(np.asarray(labels[i:i + batch], dtype=np.int64))
        yn = torch.full_like(y, null)
        out, deep = {}, {}
        for name, lab in (("c", y), ("u", yn)):
            logits, hidden = tgt(x[:, :-1], lab, return_hidden=True)
            pred = head(tgt.embed_tokens(x[:, :-1]), hidden[:, :-1])
            out[name] = (logits, tgt.logits(pred), dgpt(x[:, :-1], lab))
            if below_root:
                deep[name] = eagle_below_root(head, tgt, x[:, :-1], hidden[:, :-1], pred[:, :-1])
        p = _guided_probs(out["c"][0], out["u"][0], cfg_scale)       # rows 0..63
        q_e = _guided_probs(out["c"][1], out["u"][1], cfg_scale)     # rows for tokens 1..63
        q_g = _guided_probs(out["c"][2], out["u"][2], cfg_scale)
        ps.append(p[:, 1:].reshape(-1, p.shape[-1]))
        pf.append(p[:, 0])
        qe.append(q_e.reshape(-1, p.shape[-1]))
        qg.append(q_g[:, 1:].reshape(-1, p.shape[-1]))
        if below_root:
            qd.append(_guided_probs(deep["c"], deep["u"], cfg_scale).reshape(-1, p.shape[-1]))
    return TeacherForced(np.concatenate(ps), np.concatenate(qe), np.concatenate(qg), np.concatenate(pf),
                         np.concatenate(qd) if below_root else None)


def model_ambiguity(mini: MiniModel, tokens: np.ndarray, labels: np.ndarray, cfg_scale: float,
                    tf: TeacherForced | None = None) -> dict[str, float]:
    """The world-stats figures of the mini model along ``tokens`` (positions 1..63; ``tf``: their
    :func:`teacher_forced` distributions when already computed)."""
    tf = tf or teacher_forced(mini, tokens, labels, cfg_scale)
    return {**position_stats(tf.p, {"eagle": tf.q_eagle, "draft_gpt": tf.q_gpt}),
            "positions": int(tf.p.shape[0])}
