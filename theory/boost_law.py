"""The law and acceptance of a boosted sampled-draft test (SPEC 9.2-9.4), for a :class:`~theory.boost.Boost`.

By SPEC 9.4 a test that accepts x ~ q with a(x) and otherwise emits from the standard residual
norm((p - q)^+) emits a law whose TV to p is exactly Delta = sum_x q(x) (a(x) - a0(x)) when a >= a0
(:func:`boost_excess`); :func:`boosted_law` and :func:`boosted_tv` give the law and its TV for any a.
The acceptance a(x) of each boost: GSD's group C(x) (:func:`group_members`, in the target's rank
order), Cool-SD's omega_i, and the stages theory's node walks test (:func:`sampled_draft_stage`).
"""

from __future__ import annotations

import numpy as np

from relaxspec.theory.boost import OFFICIAL_ABOVE, OFFICIAL_BELOW, Boost, GroupWindow, check_embedding
from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.relax import Relax
from relaxspec.theory.stages import r2_stage, seqsum


# ------------------------------------------------------------------ SPEC 9.4: the law of a boosted test
def standard_residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm((p - q)^+); uniform over V when p <= q everywhere (the suite's empty-residual convention)."""
    res = np.maximum(p - q, 0.0)
    s = seqsum(res)
    return res / s if s > 0.0 else np.full_like(p, 1.0 / p.size)


def base_acceptance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """a0(x) = min(1, p(x)/q(x)) for every x (1 where q = 0: such x is never drafted)."""
    return np.minimum(1.0, np.divide(p, q, out=np.ones_like(p), where=q > 0))


def _check_acceptance(a: np.ndarray, size: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.shape != (size,):
        raise ValueError(f"acceptance vector has shape {a.shape}, expected ({size},)")
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise ValueError("acceptance probabilities must lie in [0, 1]")
    return a


def boosted_law(p: np.ndarray, q: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The law a sampled-draft test with acceptance ``a`` emits: q a + (1 - sum q a) norm((p - q)^+)."""
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    a = _check_acceptance(a, p.size)
    accepted = q * a
    return accepted + max(0.0, 1.0 - float(accepted.sum())) * standard_residual(p, q)


def boost_excess(p: np.ndarray, q: np.ndarray, a: np.ndarray) -> float:
    """Delta = sum_x q(x) (a(x) - a0(x)): the exact TV of the law when a >= a0 (SPEC 9.4)."""
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    a = _check_acceptance(a, p.size)
    return float(np.sum(q * (a - base_acceptance(p, q))))


def boosted_tv(p: np.ndarray, q: np.ndarray, a: np.ndarray) -> float:
    """Exact TV(law, p) for any acceptance ``a``: (1/2) sum_y |q(y)(a(y) - a0(y)) - Delta res(y)| (SPEC 9.4).

    Equals :func:`boost_excess` when a >= a0 everywhere and p != q (theorem in docs/theory.md).
    """
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    a = _check_acceptance(a, p.size)
    a0 = base_acceptance(p, q)
    delta = float(np.sum(q * (a - a0)))
    res = np.maximum(p - q, 0.0)
    s = float(res.sum())
    if s <= 0.0:  # p == q: the lossless test never rejects; the residual is the uniform convention
        return 0.5 * float(np.abs(boosted_law(p, q, a) - p).sum())
    return 0.5 * float(np.abs(q * (a - a0) - delta * res / s).sum())


# ------------------------------------------------------------------ the boosts' acceptance
def window_extent(G: int, window: str) -> tuple[int, int]:
    """How many ranks a GSD window reaches (more probable, less probable) than x: ``principled``
    ceil(G/2) - 1 and floor(G/2) (SPEC 9.2: floor(G/2) below x, ceil(G/2) - 1 above, in the target's
    logit order); ``official`` a fixed 6 and 7 (G unused: the code's slice ``[r - 7, r + 7)`` of the
    ascending logit sort), so ``principled`` with G = 14 is the official window. The kernels take
    these two numbers (``theory.verification.Verification.encode``)."""
    if not GroupWindow(window).is_official:
        return (G + 1) // 2 - 1, G // 2
    return OFFICIAL_ABOVE, OFFICIAL_BELOW


def official_window_falls_back(rank: int | np.ndarray, vocab_size: int) -> bool | np.ndarray:
    """True where GSD's published code tests x alone (the standard test): fewer than 7 tokens are less
    probable than x (rank counted from the most probable, 0-based), so its slice ``[r - 7, r + 7)`` of
    the ascending sort starts below 0, comes out empty (V >= 14) and the code falls back to
    min(1, p(x)/q(x)) (docs/frontier_sources.md)."""
    return vocab_size - 1 - rank < OFFICIAL_BELOW


def rank_order(p: np.ndarray) -> np.ndarray:
    """Tokens by decreasing p, ties by lower id (rank 0 = most probable)."""
    return np.lexsort((np.arange(p.size), -p))


def rank_window(p: np.ndarray, x: int, G: int, window: str, order: np.ndarray | None = None) -> np.ndarray:
    """Tokens at the G ranks around x's rank in p (rank 0 = most probable, ties by lower id), clipped
    to the vocabulary (:func:`window_extent`; ``official``: x alone where
    :func:`official_window_falls_back`); ``order`` is :func:`rank_order` of p when already known."""
    if order is None:
        order = rank_order(p)
    r = int(np.flatnonzero(order == x)[0])
    before, after = window_extent(G, window)
    if GroupWindow(window).is_official and official_window_falls_back(r, p.size):
        return order[r:r + 1]
    return order[max(0, r - before): min(p.size, r + after + 1)]


def group_members(p: np.ndarray, x: int, emb: np.ndarray, boost: Boost,
                  order: np.ndarray | None = None) -> np.ndarray:
    """C(x): x and every window token y with |p(y) - p(x)| < tau and ||e_y - e_x||^2 < dist (SPEC 9.2),
    in rank order (``order``: :func:`rank_order` of p when already known)."""
    if np.ndim(emb) != 2 or np.shape(emb)[0] != p.size:
        raise ValueError(f"the embedding table has shape {np.shape(emb)}, expected ({p.size}, dim): "
                         "a table of another vocabulary size")
    cand = rank_window(p, x, boost.group_size, boost.window, order)
    close = np.abs(p[cand] - p[x]) < boost.tau
    d2 = np.add.accumulate((emb[cand] - emb[x]) ** 2, axis=1)[:, -1]  # sequential, as the kernels sum
    keep = (close & (d2 < boost.dist)) | (cand == x)
    return cand[keep]


def onehot_acceptance(p: np.ndarray, boost: Boost, *, depth: int = 1, emb: np.ndarray | None = None
                      ) -> np.ndarray:
    """a(x) of a one-hot draft (q = point mass on x) for every token x at once: p(x) without a boost,
    min(1, omega_depth p(x)) for a depth boost and GSD's p(C(x)) for a group boost, bit for bit what
    :func:`boosted_acceptance` gives for each x (the group mass summed in rank order, sequentially).
    This is a fresh Jacobi token's acceptance (SPEC 9.1); O(V G) for GSD."""
    p = validate_distribution(p, name="p")
    if boost.uses_budget:
        raise ValueError("the budget boost depends on the node's stages; use the tree walk")
    if boost.scales_by_depth:
        return np.minimum(1.0, boost.omega_at(depth) * p)
    if not boost.reads_embedding:
        return p.copy()
    if emb is None:
        raise ValueError("group acceptance needs an embedding table")
    e = check_embedding(emb, p.size)
    V = p.size
    order = rank_order(p)
    rank = np.empty(V, dtype=np.int64)
    rank[order] = np.arange(V)
    tokens = np.arange(V)
    before, after = window_extent(boost.group_size, boost.window)
    alone = (official_window_falls_back(rank, V) if boost.official_window
             else np.zeros(V, dtype=bool))
    mass = np.zeros(V)
    for offset in range(-before, after + 1):  # the window in rank order, as group_members lists it
        r = rank + offset
        inside = (r >= 0) & (r < V) & (~alone | (offset == 0))
        y = order[np.clip(r, 0, V - 1)]
        d2 = np.zeros(V)
        for k in range(e.shape[1]):  # sequential over dimensions, as group_members sums
            d2 = d2 + (e[y, k] - e[tokens, k]) ** 2
        member = inside & (((np.abs(p[y] - p) < boost.tau) & (d2 < boost.dist)) | (y == tokens))
        mass = mass + np.where(member, p[y], 0.0)
    return np.minimum(1.0, mass)


def boosted_acceptance(p: np.ndarray, q: np.ndarray, x: int, boost: Boost, *, depth: int = 1,
                       emb: np.ndarray | None = None, order: np.ndarray | None = None) -> float:
    """a(x) for draft ``x`` at ``depth`` under ``boost`` (group and depth boosts; the budget boost reads
    the node's history and lives with the tree walk); ``order``: :func:`rank_order` of p if known."""
    if q[x] <= 0.0:
        raise ValueError(f"drafted token {x} has zero draft probability")
    if boost.reads_embedding:
        if emb is None:
            raise ValueError("group acceptance needs an embedding table")
        C = group_members(p, x, emb, boost, order)
        return min(1.0, seqsum(p[C]) / seqsum(q[C]))
    if boost.scales_by_depth:
        return min(1.0, boost.omega_at(depth) * p[x] / q[x])
    if boost.uses_budget:
        raise ValueError("the budget boost depends on the node's stages; use the tree walk")
    return min(1.0, p[x] / q[x])


def acceptance_vector(p: np.ndarray, q: np.ndarray, boost: Boost, *, depth: int = 1,
                      emb: np.ndarray | None = None) -> np.ndarray:
    """a(x) for every x with q(x) > 0 (1 elsewhere): the input of :func:`boosted_law`."""
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    if boost.reads_embedding:
        if emb is None:
            raise ValueError("group acceptance needs an embedding table")
        emb = check_embedding(emb, p.size)
    a = np.ones(p.size)
    order = rank_order(p) if boost.reads_embedding else None
    for x in np.flatnonzero(q > 0):
        a[x] = boosted_acceptance(p, q, int(x), boost, depth=depth, emb=emb, order=order)
    return a


def boosted_stage(
    r: np.ndarray, qp: np.ndarray, x: int, boost: Boost, depth: int, emb: np.ndarray | None
) -> tuple[float, np.ndarray]:
    """A boosted sampled-draft stage (SPEC 9.2-9.3) on residual ``r`` and draft residual ``qp`` for drawn
    ``x`` at ``depth``: ``(a, r_next)`` with a from :func:`boosted_acceptance` and the
    standard residual (never a relaxed one)."""
    a = boosted_acceptance(r, qp, x, boost, depth=depth, emb=emb)
    return a, standard_residual(r, qp)


def sampled_draft_stage(
    r: np.ndarray, qp: np.ndarray, x: int, row: np.ndarray, relax: Relax, variant: str, boost: Boost,
    depth: int, emb: np.ndarray | None
) -> tuple[float, np.ndarray]:
    """One stage of R2 (SPEC 3) for drawn ``x``: ``theory.stages.r2_stage`` without a boost (the
    unboosted rule bit for bit), :func:`boosted_stage` with one (``relax`` is then none:
    ``theory.verification.Verification``: a boost takes no relaxation)."""
    if boost.is_none:
        return r2_stage(r, qp, x, row, relax, variant)
    return boosted_stage(r, qp, x, boost, depth, emb)


def stage_tv(r: np.ndarray, qp: np.ndarray, boost: Boost, depth: int, emb: np.ndarray | None) -> float:
    """Exact TV(law of one sampled-draft stage, r) on residual ``r`` and draft residual ``qp``, the draft
    drawn from qp: :func:`boosted_tv` of :func:`acceptance_vector` (SPEC 9.4); 0 without a boost."""
    if boost.is_none:
        return 0.0
    return boosted_tv(r, qp, acceptance_vector(r, qp, boost, depth=depth, emb=emb))
