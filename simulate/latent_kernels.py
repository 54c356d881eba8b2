"""Numba twin of :meth:`core.trees.selection.ChildSelector.select` on a world's expanded draft rows.

The selection is passed as the tuple ``S = (mode, pool, code, k, param, nb)``
(``ChildSelector.kernel_args``): mode 0 q, 1 latent, 2 diverse; the
relaxation as the verification kernels take it; ``nb`` int32 (V, k). For the
latent modes the expanded row is first written out as the float64 row the
NumPy oracle receives (``keep_row``), and q~ is ``merge_count_row_kernel`` on it with
total 1.0: ``theory.relax.merge_count``'s arithmetic, bit for bit.

``mark`` (int64[V + 1]) is per-sequence scratch for the diverse and walk
modes: ``mark[y] == mark[V]`` means token y lies in a chosen sibling's
proximity set (diverse) or was removed from the walk's residual (walk, the
implicit residual of ``simulate.verify_kernels``); ``mark[V]`` is the epoch,
bumped per selection, so the array is never cleared. Mode 3 (walk) runs
``merge_count_kernel`` / ``r1_reject_kernel`` on the q row: the verifier's own R1 arithmetic.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from relaxspec.core.trees.selection import MODE_LATENT, MODE_Q, MODE_WALK
from relaxspec.simulate.row_kernels import keep_row, top_of_row
from relaxspec.simulate.verify_kernels import (
    merge_count_kernel,
    merge_count_row_kernel,
    r1_reject_kernel,
    r1_value,
)
from relaxspec.theory.relax import RELAX_NONE


@njit(cache=True, error_model="numpy")
def _walk(row, cand, order, cnt, m, code, k, param, nb, mark, out, vals):
    """Mode walk (``ChildSelector._walk``): R1 on the q row over ``cand[order[:cnt]]``; returns the count."""
    V = mark.shape[0] - 1
    mark[V] += 1
    epoch = mark[V]
    unif = False
    Z = 1.0
    got = 0
    for r in range(cnt):
        if got == m:
            break
        x = cand[order[r]]
        rx = r1_value(row, mark, epoch, unif, x)
        if rx == 0.0:
            continue
        J, c = merge_count_kernel(row, mark, epoch, unif, Z, x, nb, code, k, param)
        out[got] = x
        vals[got] = min(Z, rx + c)
        got += 1
        Z, epoch, unif = r1_reject_kernel(row, mark, epoch, unif, Z, x, J, nb, k, 0)
        if unif:  # the residual ran out of mass: nothing is left
            break
    mark[V] = epoch
    return got


@njit(cache=True, error_model="numpy")
def select_children(W, es, cmaxs, invs, i, m, S, mark, out, vals):
    """Up to m children of expanded row i in rank order into ``out`` and their values (q or q~) into
    ``vals``; returns the count (``ChildSelector.select``)."""
    mode = S[0]
    code, k, param, nb = S[2], S[3], S[4], S[5]
    if mode == MODE_Q or (mode == MODE_WALK and (code == RELAX_NONE or k == 0)):
        return top_of_row(W, es, cmaxs, invs, i, m, out, vals)
    V = mark.shape[0] - 1
    row = np.empty(V)
    keep_row(W, es, invs, i, row)
    M = max(S[1], m)
    cand = np.empty(M, dtype=np.int64)
    qt = np.empty(M)
    J = np.empty(M, dtype=np.int64)
    cnt = top_of_row(W, es, cmaxs, invs, i, M, cand, qt)
    for j in range(cnt):
        nj, c = merge_count_row_kernel(row, 1.0, cand[j], nb, code, k, param)
        J[j] = nj
        qt[j] = qt[j] + c
    order = np.empty(cnt, dtype=np.int64)  # stable sort of the pool by q~, descending (insertion)
    for j in range(cnt):
        pos = j
        while pos > 0 and qt[j] > qt[order[pos - 1]]:
            order[pos] = order[pos - 1]
            pos -= 1
        order[pos] = j
    if mode == MODE_LATENT:
        got = min(m, cnt)
        for r in range(got):
            out[r] = cand[order[r]]
            vals[r] = qt[order[r]]
        return got
    if mode == MODE_WALK:
        return _walk(row, cand, order, cnt, m, code, k, param, nb, mark, out, vals)
    mark[V] += 1
    epoch = mark[V]
    got = 0
    for r in range(cnt):
        if got == m:
            break
        j = order[r]
        x = cand[j]
        hit = mark[x] == epoch
        for t in range(J[j]):
            hit = hit or mark[nb[x, t]] == epoch
        if hit:
            continue
        mark[x] = epoch
        for t in range(J[j]):
            mark[nb[x, t]] = epoch
        out[got] = x
        vals[got] = qt[j]
        got += 1
    return got
