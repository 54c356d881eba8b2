"""GSD's group acceptance (SPEC 9.2) as Numba kernels on plain arrays: the rank order of a row and the
ratio r(C) / q'(C) over a draft's group, ``theory.boost``'s arithmetic (``simulate.boost_kernels`` and
``simulate.traversal_kernels`` call them).

Two exact ways to the same window (``theory.boost_law.rank_window``), chosen by how many ratios a stage
needs. One draft's ratio (the test itself) needs only the ranks around it: :func:`group_ratio_kernel`
finds them in one pass over the row (its rank and the ``before`` / ``after`` tokens next to it), never
sorting V. Every draft's ratio (a stage's exact TV over a draft residual of wide support) needs the whole
order: :func:`rank_order_kernel` sorts it once (a radix sort of the float bits, ties by lower id, the
stable order) and :func:`group_ratios_sorted` walks the windows along it. Both sum a group in rank order,
so they give the same ratio bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

RADIX_BITS = 8  # digits of the radix sort: 8 passes over the 64 float bits, constant digits skipped
_RADIX = 1 << RADIX_BITS
_MASK = np.uint64(_RADIX - 1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, error_model="numpy")
def radix_argsort(values, descending, order):
    """The stable argsort of the non-negative, non-NaN ``values`` into ``order`` (ascending, or with
    ``descending`` decreasing; equal values keep their positions' order): ``np.argsort(values,
    kind="stable")`` (of ``-values`` when descending). A least-significant-digit radix sort of the float
    bits, which order like the values for values >= 0 (-0.0 is keyed as 0.0); digits on which every key
    agrees are skipped."""
    V = values.shape[0]
    f = np.empty(V)
    for x in range(V):
        f[x] = values[x] if values[x] != 0.0 else 0.0  # -0.0 -> +0.0: equal values, equal keys
    keys = f.view(np.uint64)
    flip = _ALL if descending else np.uint64(0)
    hist = np.zeros((64 // RADIX_BITS, _RADIX), dtype=np.int64)
    for x in range(V):
        k = keys[x] ^ flip
        keys[x] = k
        order[x] = x
        for d in range(64 // RADIX_BITS):
            hist[d, (k >> np.uint64(d * RADIX_BITS)) & _MASK] += 1
    k2 = np.empty(V, dtype=np.uint64)
    o2 = np.empty(V, dtype=np.int64)
    src_k, src_o, dst_k, dst_o = keys, order, k2, o2
    moved = False  # the order sits in o2
    for d in range(64 // RADIX_BITS):
        h = hist[d]
        shift = np.uint64(d * RADIX_BITS)
        if V == 0 or h[(src_k[0] >> shift) & _MASK] == V:  # every key has this digit: nothing moves
            continue
        pos = 0
        for b in range(_RADIX):
            c = h[b]
            h[b] = pos
            pos += c
        for i in range(V):
            k = src_k[i]
            b = (k >> shift) & _MASK
            j = h[b]
            h[b] = j + 1
            dst_k[j] = k
            dst_o[j] = src_o[i]
        src_k, src_o, dst_k, dst_o = dst_k, dst_o, src_k, src_o
        moved = not moved
    if moved:
        order[:] = o2


@njit(cache=True, error_model="numpy")
def rank_order_kernel(r, order, rank):
    """``theory.boost.rank_order`` into ``order`` (tokens by decreasing r, ties by lower id; a stable
    sort: :func:`radix_argsort`; r >= 0, a row or residual), and ``rank[x]`` = x's position in it
    (``rank`` may be empty: then it is not filled)."""
    V = r.shape[0]
    radix_argsort(r, True, order)
    if rank.shape[0] == V:
        for j in range(V):
            rank[order[j]] = j


@njit(cache=True, error_model="numpy")
def _keep(r, y, x, tau, dist, emb):
    """Whether window token y joins x's group: y is x, or within ``tau`` in r and squared embedding
    distance below ``dist`` (summed over dimensions in order)."""
    if y == x:
        return True
    if not abs(r[y] - r[x]) < tau:
        return False
    d2 = 0.0
    for c in range(emb.shape[1]):
        diff = emb[y, c] - emb[x, c]
        d2 += diff * diff
    return d2 < dist


@njit(cache=True, error_model="numpy")
def rank_window(r, x, before, after, above, below):
    """x's rank in r (0 = most probable, ties by lower id) and its window without sorting V: ``above``
    gets the (up to) ``before`` tokens ranked just above x, ``below`` the (up to) ``after`` just below,
    each in rank order; returns (rank, count above, count below).

    The rank is a count (a token before x outranks it when at least as probable, one after x when more
    probable). The lists come from one pass in token order: a token y seen later than every kept one ranks
    after them among equal values, so a full list admits y only inside the band (r of the lowest kept
    below, r of the highest kept above], and most tokens fall outside it."""
    V = r.shape[0]
    rx = r[x]
    rank = 0
    for y in range(x):
        rank += r[y] >= rx
    for y in range(x + 1, V):
        rank += r[y] > rx
    na, nb = 0, 0
    top, bottom = np.inf, -1.0  # the band: no bound while a list has room
    for y in range(V):
        ry = r[y]
        if ry > top or ry <= bottom or y == x:
            continue
        if ry > rx or (ry == rx and y < x):  # y ranks above x: keep the `before` ranked last
            if before == 0:
                continue
            if na == before:  # drop the highest-ranked kept token
                for i in range(na - 1):
                    above[i] = above[i + 1]
                na -= 1
            pos = na  # after every kept token with r >= ry (all have lower ids)
            while pos > 0 and r[above[pos - 1]] < ry:
                above[pos] = above[pos - 1]
                pos -= 1
            above[pos] = y
            na += 1
            if na == before:
                top = r[above[0]]
        else:  # below x: keep the `after` ranked first
            if after == 0:
                continue
            pos = nb if nb < after else after - 1
            while pos > 0 and r[below[pos - 1]] < ry:
                below[pos] = below[pos - 1]
                pos -= 1
            below[pos] = y
            if nb < after:
                nb += 1
            if nb == after:
                bottom = r[below[nb - 1]]
    return rank, na, nb


@njit(cache=True, error_model="numpy")
def group_ratio_kernel(r, qp, x, before, after, fallback, tau, dist, emb):
    """GSD's ratio r(C) / q'(C) over x's group C(x) in the rank window (``theory.boost.group_members``:
    the ``before`` ranks above x, the ``after`` below; x alone when fewer than ``fallback`` tokens rank
    below it, ``theory.boost.rank_window``), summed in rank order: R4's boosted edge ratio
    (``theory.traversal.edge_ratio``). One pass over r (:func:`rank_window`)."""
    above = np.empty(max(before, 1), dtype=np.int64)
    below = np.empty(max(after, 1), dtype=np.int64)
    rank, na, nb = rank_window(r, x, before, after, above, below)
    if r.shape[0] - 1 - rank < fallback:
        return r[x] / qp[x]
    ps, qs = 0.0, 0.0
    for i in range(na + 1 + nb):
        y = above[i] if i < na else (x if i == na else below[i - na - 1])
        if _keep(r, y, x, tau, dist, emb):
            ps += r[y]
            qs += qp[y]
    return ps / qs


@njit(cache=True, error_model="numpy")
def group_acceptance_kernel(r, qp, x, before, after, fallback, tau, dist, emb):
    """``theory.boost.boosted_acceptance`` of GSD: min(1, :func:`group_ratio_kernel`)."""
    return min(1.0, group_ratio_kernel(r, qp, x, before, after, fallback, tau, dist, emb))


@njit(cache=True, error_model="numpy")
def group_ratios_sorted(r, qp, order, before, after, fallback, tau, dist, emb, out):
    """:func:`group_ratio_kernel` of every token x with ``qp[x] > 0`` into ``out[x]`` (others untouched),
    along ``order`` (:func:`rank_order_kernel` of r): the same windows and sums in the same order.

    r, q' and the embedding rows are first gathered in rank order (one random read per token, not one per
    window slot), and the squared distance of every pair of positions at most ``max(before, after)``
    apart is summed once for both windows it serves, over the dimensions in order ((a - b)^2 = (b - a)^2
    exactly, so it is the same float either way round)."""
    V = r.shape[0]
    D = emb.shape[1]
    W = max(before, after)
    rs, qs = np.empty(V), np.empty(V)
    es = np.empty((D, V))
    for j in range(V):
        y = order[j]
        rs[j] = r[y]
        qs[j] = qp[y]
        for c in range(D):
            es[c, j] = emb[y, c]
    d2 = np.zeros((W + 1, V))  # d2[o, j]: positions j and j + o
    for o in range(1, min(W, V - 1) + 1):
        row = d2[o]
        for c in range(D):
            e = es[c]
            for j in range(V - o):
                diff = e[j + o] - e[j]
                row[j] += diff * diff
    # Every window at once, one offset o = t - j at a time (o from -before up to after), so that each
    # position's sums still add their window's slots in rank order; a slot outside a window, or a token
    # the group drops, adds 0.0, which leaves a sum of non-negative terms unchanged (the same floats as
    # walking each window alone), and the loops over positions vectorise.
    ps, qsum = np.zeros(V), np.zeros(V)
    short = max(0, V - fallback)  # positions j >= short have fewer than `fallback` tokens below: x alone
    for o in range(-min(before, V - 1), min(after, V - 1) + 1):
        if o == 0:
            for j in range(V):
                ps[j] += rs[j]
                qsum[j] += qs[j]
            continue
        row = d2[abs(o)]
        j0, j1, off = max(0, -o), min(V, V - o), min(o, 0)  # d2 is indexed by the lower position, min(j, t)
        for j in range(j0, min(j1, short)):
            t = j + o
            keep = abs(rs[t] - rs[j]) < tau and row[j + off] < dist
            ps[j] += rs[t] if keep else 0.0
            qsum[j] += qs[t] if keep else 0.0
    for j in range(V):
        if qs[j] > 0.0:
            out[order[j]] = ps[j] / qsum[j]
