"""One stage of node verification: the arithmetic shared by the exact analysis
(:mod:`theory.verify`) and the NumPy Monte Carlo oracle (:mod:`theory.sampler`).

The Numba kernels in ``simulate`` reproduce these functions operation for
operation, so that given the same uniforms all implementations take the same
decisions. Sums that decide anything are sequential (``seqsum``), never
NumPy's pairwise ``sum``.

Conventions (see docs/theory.md, "Arithmetic"):

- R1 keeps the residual ``r`` unnormalised with its mass ``Z`` tracked by
  subtraction: a rejection costs O(k), not O(V).
- R2 keeps ``r`` and the draft residual ``q'`` normalised (each rejection is
  O(V) anyway).
- A residual left with no mass becomes the uniform distribution over V, as in
  the official LANTERN code (``gtp = ones_like(gtp)``).
"""

from __future__ import annotations

import numpy as np

from relaxspec.theory.relax import Relax, Variant, merge_count


def seqsum(a: np.ndarray) -> float:
    """Sequential left-to-right float64 sum (what a plain loop computes)."""
    return float(np.add.accumulate(a, dtype=np.float64)[-1]) if a.size else 0.0


def zero_set(x: int, row: np.ndarray, J: int, relax: Relax, variant: str) -> np.ndarray:
    """Tokens a rejection of ``x`` removes from the residual.

    Principled: the proximity set {x, n_1..n_J}. Official (jadohu/LANTERN
    ``evaluate_posterior``): x, plus its first k + 1 neighbours whenever J >= 1
    (truncated to the table's width).
    """
    if variant == Variant.OFFICIAL and J >= 1:
        return np.concatenate(([x], row[: relax.k + 1]))
    return np.concatenate(([x], row[:J]))


def r1_stage(
    r: np.ndarray, Z: float, x: int, row: np.ndarray, relax: Relax, variant: str
) -> tuple[float, np.ndarray, int, float]:
    """Acceptance probability of candidate ``x`` under R1 on residual ``r`` of mass ``Z``.

    Returns ``(a, zeroed, J, merged)``: ``a = min(1, (r(x) + C_J) / Z)``, the
    tokens to zero on rejection, J and the merged mass C_J (unnormalised).
    """
    J, c = merge_count(r, Z, x, row, relax)
    a = min(1.0, (r[x] + c) / Z) if Z > 0 else 1.0
    return a, zero_set(x, row, J, relax, variant), J, c


EXHAUSTION_CHECK = 1e-9
"""Below this tracked mass R1 re-sums its residual: subtraction can leave Z ~ 1e-16 on an empty one."""


def r1_reject(r: np.ndarray, Z: float, zeroed: np.ndarray) -> float:
    """Zero ``zeroed`` in ``r`` in place and return the new mass ``Z - removed``.

    When that mass falls to :data:`EXHAUSTION_CHECK` or below it is re-summed from ``r`` itself (O(V),
    rare), so exhaustion is decided on the residual, not on rounding. A residual left without mass
    becomes uniform over V (in place)."""
    removed = 0.0
    for t in zeroed:
        removed += r[t]
        r[t] = 0.0
    Z = Z - removed
    if Z <= EXHAUSTION_CHECK:
        Z = seqsum(r)
    if Z <= 0.0:
        r[:] = 1.0
        Z = float(r.shape[0])
    return Z


def draft_residual(q: np.ndarray, drawn: np.ndarray) -> np.ndarray | None:
    """q' : the draft ``q`` with already-drawn tokens removed, renormalised.

    Returns ``None`` when nothing is left to draw."""
    qr = q.copy()
    qr[drawn] = 0.0
    s = seqsum(qr)
    if s <= 0.0:
        return None
    return qr / s


def r2_stage(
    r: np.ndarray, qp: np.ndarray, x: int, row: np.ndarray, relax: Relax, variant: str
) -> tuple[float, np.ndarray]:
    """R2 on normalised residual ``r`` and draft residual ``qp`` (q'_i) for drawn ``x``.

    Returns ``(a, r_next)``: ``a = min(1, r~(x) / q'(x))`` and the residual
    after a rejection. Principled: ``normalise(max(r~ - q', 0))``. Official
    (LANTERN++ code): ``normalise(max(r - q'', 0))`` where q'' is q' with the
    first k + 1 neighbours of x zeroed whenever J >= 1, and r is the
    unrelaxed residual.
    """
    J, c = merge_count(r, 1.0, x, row, relax)
    qx = qp[x]
    if qx <= 0.0:
        raise ValueError(f"drafted token {x} has zero draft probability")
    a = min(1.0, (r[x] + c) / qx)
    if variant == Variant.OFFICIAL:
        qz = qp.copy()
        if J >= 1:
            qz[row[: relax.k + 1]] = 0.0
        res = np.maximum(r - qz, 0.0)
    else:
        rt = r.copy()
        rt[row[:J]] = 0.0
        rt[x] = r[x] + c
        res = np.maximum(rt - qp, 0.0)
    s = seqsum(res)
    if s <= 0.0:
        return a, np.full_like(r, 1.0 / r.shape[0])
    return a, res / s


def greedy_acceptable(p: np.ndarray, x: int, row: np.ndarray, relax: Relax) -> bool:
    """R3: is ``x`` the argmax (lowest id among ties) of p with p(x) replaced by r~(x)?"""
    _, c = merge_count(p, 1.0, x, row, relax)
    mx = p[x] + c
    best = int(np.argmax(p))  # lowest id among ties
    if best == x:
        return True
    # x wins if it beats the best other token, or ties with it and has the lower id
    others = p.copy()
    others[x] = -1.0
    top = int(np.argmax(others))
    return mx > others[top] or (mx == others[top] and x < top)
