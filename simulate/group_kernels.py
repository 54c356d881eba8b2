"""GSD's group acceptance (SPEC 9.2) as Numba kernels on plain arrays: the rank order of a row and the
ratio r(C) / q'(C) over a draft's group, ``theory.boost``'s arithmetic (``simulate.verify_kernels`` and
``simulate.traversal_kernels`` call them)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def rank_order_kernel(r, order, rank):
    """``theory.boost.rank_order`` into ``order`` (tokens by decreasing r, ties by lower id; a stable
    sort), and ``rank[x]`` = x's position in it."""
    srt = np.argsort(-r, kind="mergesort")
    for j in range(r.shape[0]):
        order[j] = srt[j]
        rank[srt[j]] = j


@njit(cache=True, error_model="numpy")
def group_ratio_kernel(r, qp, x, before, after, fallback, tau, dist, emb, order, rank):
    """GSD's ratio r(C) / q'(C) over x's group C(x) in the rank window (``theory.boost.group_members``;
    ``order`` / ``rank`` from :func:`rank_order_kernel` of r; x alone when fewer than ``fallback`` tokens
    rank below it, ``theory.boost.rank_window``): R4's boosted edge ratio
    (``theory.traversal.edge_ratio``)."""
    V = r.shape[0]
    rx = rank[x]
    lo, hi = max(0, rx - before), min(V, rx + after + 1)
    if V - 1 - rx < fallback:
        lo, hi = rx, rx + 1
    ps, qs = 0.0, 0.0
    for j in range(lo, hi):
        y = order[j]
        keep = y == x
        if not keep and abs(r[y] - r[x]) < tau:
            d2 = 0.0
            for c in range(emb.shape[1]):
                diff = emb[y, c] - emb[x, c]
                d2 += diff * diff
            keep = d2 < dist
        if keep:
            ps += r[y]
            qs += qp[y]
    return ps / qs


@njit(cache=True, error_model="numpy")
def group_acceptance_kernel(r, qp, x, before, after, fallback, tau, dist, emb, order, rank):
    """``theory.boost.boosted_acceptance`` of GSD: min(1, :func:`group_ratio_kernel`)."""
    return min(1.0, group_ratio_kernel(r, qp, x, before, after, fallback, tau, dist, emb, order, rank))
