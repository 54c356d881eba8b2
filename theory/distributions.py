"""Probability distributions over the image-token vocabulary.

Validation, logits -> probabilities (temperature, top-k, top-p), classifier-free
guidance and total variation, all in float64.
"""

from __future__ import annotations

import numpy as np

SUM_ATOL = 1e-6
# top-p: a cumulative mass this close to top_p counts as equal to it (float sums of tied
# probabilities land on either side of the exact value depending on summation order)
TOP_P_TOL = 1e-12


def validate_distribution(
    p: np.ndarray, *, name: str = "p", size: int | None = None, atol: float = SUM_ATOL
) -> np.ndarray:
    """Check that ``p`` is a probability vector and return it as float64.

    Raises ``ValueError`` naming the problem: wrong shape, NaN or infinite
    entries, negative entries, or a sum further than ``atol`` from 1.
    """
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if size is not None and arr.size != size:
        raise ValueError(f"{name} has {arr.size} entries, expected the vocabulary size {size}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name} has a NaN or infinite entry (index {bad})")
    if np.any(arr < 0):
        bad = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name} has a negative probability {arr[bad]!r} at index {bad}")
    total = float(arr.sum())
    if abs(total - 1.0) > atol:
        raise ValueError(f"{name} does not sum to 1 (sum = {total!r})")
    return arr


def validate_logits(logits: np.ndarray, *, name: str = "logits") -> np.ndarray:
    """Check that ``logits`` is a finite array (last axis = vocabulary) and return float64."""
    arr = np.asarray(logits, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) axis, got {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contain NaN")
    if np.isposinf(arr).any():
        raise ValueError(f"{name} contain +inf")
    if np.all(np.isneginf(arr), axis=-1).any():
        raise ValueError(f"{name} are -inf everywhere on some row: no token has mass")
    return arr


def cfg_logits(cond: np.ndarray, uncond: np.ndarray, scale: float) -> np.ndarray:
    """Classifier-free guidance: ``uncond + scale * (cond - uncond)``."""
    cond = validate_logits(cond, name="cond logits")
    uncond = validate_logits(uncond, name="uncond logits")
    if cond.shape != uncond.shape:
        raise ValueError(f"cond and uncond logits differ in shape: {cond.shape} vs {uncond.shape}")
    if not np.isfinite(scale):
        raise ValueError(f"cfg scale must be finite, got {scale!r}")
    return uncond + scale * (cond - uncond)


def logits_to_probs(
    logits: np.ndarray,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> np.ndarray:
    """Turn logits (last axis = vocabulary) into probabilities, float64.

    The filters of LlamaGen's sampler (``top_k_top_p_filtering``), in its order:
    divide by temperature; top-k keeps every token whose logit is at least the
    ``top_k``-th largest (0 = all), so ties at the cut are all kept; top-p sorts
    by probability (ties by lowest token id) and keeps each token whose
    preceding mass is at most ``top_p``: the smallest prefix whose mass exceeds
    ``top_p``, one token more than the smallest prefix reaching it when a
    prefix's mass equals ``top_p``. Masses within ``TOP_P_TOL`` of ``top_p``
    count as equal, so the kept set does not depend on summation order.
    Then softmax. ``temperature = 0`` gives the greedy point mass on the argmax
    (lowest id among ties). A temperature so small that a finite logit divided
    by it overflows float64 raises ``ValueError`` (the softmax would be NaN).
    """
    z = validate_logits(logits)
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    vocab = z.shape[-1]
    if not 0 <= int(top_k) <= vocab or int(top_k) != top_k:
        raise ValueError(f"top_k must be an integer in [0, {vocab}], got {top_k!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if temperature == 0:
        out = np.zeros_like(z)
        np.put_along_axis(out, np.argmax(z, axis=-1)[..., None], 1.0, axis=-1)
        return out
    with np.errstate(over="raise"):  # the flag costs nothing; +-inf (masked) logits do not set it
        try:
            z = z / temperature
        except FloatingPointError:
            top = float(np.max(np.abs(z[np.isfinite(z)])))
            raise ValueError(f"temperature {temperature!r} is too small for these logits: logits / "
                             f"temperature overflow float64 (largest |logit| {top:g}); temperature 0 is "
                             "greedy decoding") from None
    if top_k and top_k < vocab:
        cut = vocab - top_k  # the k-th largest value (a partition finds it without a full sort)
        kth = np.partition(z, cut, axis=-1)[..., cut:cut + 1]
        z = np.where(z < kth, -np.inf, z)
    probs = _softmax(z)
    if top_p < 1:
        order = np.argsort(-probs, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(probs, order, axis=-1)
        cum = np.cumsum(sorted_p, axis=-1)
        before = np.concatenate([np.zeros_like(cum[..., :1]), cum[..., :-1]], axis=-1)
        keep_sorted = before <= top_p + TOP_P_TOL
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        z = np.where(keep, z, -np.inf)
        probs = _softmax(z)
    return probs


def _softmax(z: np.ndarray) -> np.ndarray:
    m = np.max(z, axis=-1, keepdims=True)
    e = np.exp(z - m)
    return e / e.sum(axis=-1, keepdims=True)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance ``0.5 * sum |p - q|`` between two distributions.

    Both are validated (:func:`validate_distribution`): negative, non-finite or
    unnormalised input raises ``ValueError`` naming it.
    """
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q")
    if p.shape != q.shape:
        raise ValueError(f"distributions differ in shape: {p.shape} vs {q.shape}")
    return 0.5 * float(np.abs(p - q).sum())
