"""Context sensitivity kappa_m (SPEC 11) of a trained model, teacher-forced along its own samples.

For every image and every position r but the last, the token at r is replaced by an independent draw
from the model's law at r (the guided law the sample was drawn from; the uniforms of
``simulate.context``: ``uniform(replace_key(seed, i), r)`` for image i, the inverse CDF of
``theory.sampler.draw_token``), and one teacher-forced pass over the changed sequence gives the laws
at r + 1 .. r + M: kappa_m's terms are the TVs between those and the original laws at the same
positions. The changed sequences of an image go through the model in batches (CPU, torch); the
result is a ``simulate.context.ContextSensitivity`` with standard errors over images, the same
figure :func:`simulate.context.world_context_sensitivity` measures in a world.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from relaxspec.core.trace_header import Sampling
from relaxspec.mini.ambiguity import _guided_probs
from relaxspec.mini.shipped import MiniModel
from relaxspec.reference.decode import guide
from relaxspec.reference.model import Transformer
from relaxspec.simulate.context import ContextSensitivity, check_counts, summarise
from relaxspec.simulate.context_kernels import replace_key
from relaxspec.simulate.rng import check_seed, uniform
from relaxspec.theory.sampler import draw_token

# a law function: (sequences (B, T) int64, image index) -> the laws of tokens 0..T-1 along each, (B, T, V)
Laws = Callable[[np.ndarray, int], np.ndarray]


# the replaced token: a draw from its position's law (SPEC 11's kappa), or a uniformly drawn code
REPLACEMENTS = ("law", "uniform")


def entropy(rows: np.ndarray) -> np.ndarray:
    """Entropy in nats of each row of ``rows`` (..., V) (0 log 0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(rows > 0, rows * np.log(rows), 0.0)
    return -terms.sum(axis=-1)


def replaced_sums(laws: Laws, tokens: np.ndarray, n_lags: int, *, seed: int = 0, batch: int = 32,
                  kinds: tuple[str, ...] = ("law",), entropies: bool = False
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The pass behind kappa_m: for every image i and position r < T - 1 of ``tokens`` (N, T), the token
    at r replaced (each of ``kinds``: ``law``, a draw from the law at r with ``uniform(replace_key(seed,
    i), r)``, the inverse CDF of ``theory.sampler.draw_token``; ``uniform``, the code floor(V u) with u =
    ``uniform(replace_key(seed, i), T + r)``), and one call of ``laws`` per ``batch`` changed sequences.
    Returns, per kind, the (N, n_lags) sums of the TVs at lags 1..n_lags, and with ``entropies`` each
    image's mean entropy of the law right after the replaced token (per kind, and ``original``: as
    sampled)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be an (N, T) integer array, got {tokens.dtype} of shape "
                         f"{tokens.shape} (integers >= 0)")
    n, T = tokens.shape
    check_counts(n_lags, n, T, units="images")
    seed = check_seed(seed)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    if (tokens < 0).any():
        raise ValueError("tokens must be >= 0")
    if not kinds or any(k not in REPLACEMENTS for k in kinds):
        raise ValueError(f"kinds must name some of {REPLACEMENTS}, got {kinds!r}")
    sums = {kind: np.zeros((n, n_lags)) for kind in kinds}
    ent = {kind: np.zeros(n) for kind in ("original", *kinds)} if entropies else {}
    for i in range(n):
        x = tokens[i].astype(np.int64)
        p = laws(x[None], i)[0]
        V = p.shape[1]
        if p.shape[0] != T:
            raise ValueError(f"the laws of image {i} have {p.shape[0]} rows for its {T} tokens")
        if (x >= V).any():
            raise ValueError(f"tokens of image {i} must lie in [0, {V}) (the model's V)")
        rkey = np.uint64(replace_key(np.int64(seed), np.int64(i)))
        if entropies:
            ent["original"][i] = entropy(p[1:]).mean()
        for kind in kinds:
            changed = np.tile(x, (T - 1, 1))
            for r in range(T - 1):
                changed[r, r] = draw_token(p[r], uniform(rkey, r)) if kind == "law" else \
                    min(V - 1, int(V * uniform(rkey, T + r)))
            after = np.zeros(T - 1)
            for r0 in range(0, T - 1, batch):
                q = laws(changed[r0:r0 + batch], i)
                for j in range(q.shape[0]):
                    r = r0 + j
                    if entropies:
                        after[r] = entropy(q[j, r + 1])
                    for m in range(1, min(n_lags, T - 1 - r) + 1):
                        sums[kind][i, m - 1] += 0.5 * float(np.abs(q[j, r + m] - p[r + m]).sum())
            if entropies:
                ent[kind][i] = after.mean()
    return sums, ent


def laws_context_sensitivity(laws: Laws, tokens: np.ndarray, n_lags: int, *, seed: int = 0,
                             batch: int = 32) -> ContextSensitivity:
    """kappa_1..kappa_{n_lags} of the model whose laws ``laws`` gives, along the sequences ``tokens``
    (N, T) (module docstring; ``batch`` changed sequences per call of ``laws``)."""
    sums, _ = replaced_sums(laws, tokens, n_lags, seed=seed, batch=batch)
    return summarise(sums["law"], np.asarray(tokens).shape[1] - np.arange(1, n_lags + 1))


def transformer_laws(target: Transformer, labels: np.ndarray, cfg_scale: float,
                     sampling: Sampling | None = None) -> Laws:
    """The laws of a reference GPT ``target`` (a shipped model's or a LlamaGen checkpoint's) along
    sequences of image i's class ``labels[i]``: classifier-free guidance ``cfg_scale`` (1: the
    conditional logits alone, as the decoder does), then ``sampling`` (a trace header's temperature,
    top-k, top-p; None: temperature 1 in torch, :mod:`mini.ambiguity`'s law)."""
    labels = np.asarray(labels, dtype=np.int64)

    @torch.no_grad()
    def laws(seqs: np.ndarray, i: int) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(seqs[:, :-1]))
        y = torch.full((x.shape[0],), int(labels[i]), dtype=torch.int64)
        cond = target(x, y)
        if sampling is None:
            return _guided_probs(cond, target(x, torch.full_like(y, target.cfg.null_class)), cfg_scale)
        raw = torch.stack([cond, target(x, torch.full_like(y, target.cfg.null_class))]) if cfg_scale > 1 \
            else cond[None]
        logits = guide(raw, cfg_scale).double().numpy()
        return sampling.probs(logits.reshape(-1, logits.shape[-1])).reshape(logits.shape)

    return laws


def guided_laws(mini: MiniModel, labels: np.ndarray, cfg_scale: float) -> Laws:
    """The target's guided laws (classifier-free guidance ``cfg_scale``, temperature 1) along sequences
    of image i's class ``labels[i]``: the law :mod:`mini.ambiguity` measures the model's figures with."""
    return transformer_laws(mini.target, labels, cfg_scale)


def model_context_sensitivity(mini: MiniModel, tokens: np.ndarray, labels: np.ndarray, cfg_scale: float,
                              n_lags: int, *, seed: int = 0, batch: int = 32) -> ContextSensitivity:
    """kappa_1..kappa_{n_lags} of ``mini``'s target along its samples ``tokens`` (N, 64) of classes
    ``labels`` (N,), guided with ``cfg_scale``: one unit per image."""
    tokens = np.asarray(tokens)
    labels = np.asarray(labels)
    if tokens.ndim != 2 or tokens.shape[1] != mini.target.cfg.block_size:
        raise ValueError(f"tokens must have shape (N, {mini.target.cfg.block_size}), got {tokens.shape}")
    if labels.shape != (tokens.shape[0],):
        raise ValueError(f"labels must have shape ({tokens.shape[0]},) (one class per image), got "
                         f"{labels.shape}")
    if tokens.size and tokens.max() >= mini.vocab_size:
        raise ValueError(f"tokens must lie in [0, {mini.vocab_size}) (the model's codebook), got "
                         f"{tokens.max()}")
    return laws_context_sensitivity(guided_laws(mini, labels, cfg_scale), tokens, n_lags, seed=seed,
                                    batch=batch)
