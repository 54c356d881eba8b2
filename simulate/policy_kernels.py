"""Numba builders of the tree policies, fed by a world's in-kernel drafter.

Twins of the NumPy ``build`` methods in :mod:`simulate.policies`: given the
same q rows they build the same tree (tested exactly). A builder works on
*buffer nodes* (static trees: template nodes; dynamic trees: node 0 = root,
node i + 1 = pool entry i) whose states live in the world buffers, and
returns the final tree in topological order with ``buf_of[v]``, the buffer
node behind final node v.

Buffers (allocated once per sequence by the engine)::

    bparent, btoken, bdepth : int64[n_buffer]     buffer tree
    zs, hs, have            : world states (see simulate.world_kernels)
    qrow                    : int64[n_buffer]     row of q_rows holding q at the node, or -1
    q_rows                  : float64[n_q, V]
    score                   : float64[n_buffer]   path log-probabilities (dynamic trees)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from simulate.verify_kernels import draw_token
from simulate.world_kernels import draft_row, ensure_state


@njit(cache=True)
def safe_log(x):
    """log with log(0) = -inf."""
    if x > 0.0:
        return math.log(x)
    return -math.inf


@njit(cache=True)
def top_m(values, lo, hi, m, out):
    """Indices in [lo, hi) of the m largest ``values`` (ties: lower index first), in rank order.

    Equivalent to ``lo + np.argsort(-values[lo:hi], kind="stable")[:m]``; returns the count."""
    cnt = 0
    for x in range(lo, hi):
        vx = values[x]
        if cnt == m and not vx > values[out[m - 1]]:
            continue
        pos = cnt if cnt < m else m - 1
        while pos > 0 and vx > values[out[pos - 1]]:
            if pos < m:
                out[pos] = out[pos - 1]
            pos -= 1
        out[pos] = x
        if cnt < m:
            cnt += 1
    return cnt


@njit(cache=True)
def draws_without_replacement(q, u, m, qr, out):
    """``theory.draw_without_replacement``: up to m successive draws, ``u[i]`` for draw i."""
    for x in range(q.shape[0]):
        qr[x] = q[x]
    cnt = 0
    for i in range(m):
        anymass = False
        for x in range(q.shape[0]):
            if qr[x] > 0.0:
                anymass = True
                break
        if not anymass:
            break
        x = draw_token(qr, u[i])
        out[cnt] = x
        cnt += 1
        qr[x] = 0.0
    return cnt


@njit(cache=True)
def _expand(W, v, bparent, btoken, zs, hs, have, qrow, q_rows, nq, kbuf):
    ensure_state(W, v, bparent, btoken, zs, hs, have)
    draft_row(W, zs[v], hs[v], q_rows[nq], kbuf)
    qrow[v] = nq
    return nq + 1


@njit(cache=True)
def build_static(W, tparents, tranks, tdepths, draws, utree, bparent, btoken, bdepth, zs, hs, have, qrow,
                 q_rows, kbuf, scratch, parents, tokens, depths, buf_of):
    """Static tree from a template (``StaticTree.build``); returns (n, draft calls).

    ``draws``: rank children by draws without replacement with ``utree[w]``
    drawing template node w (R2), else by top-rank. ``have[0]`` and the
    root's state must be set by the caller."""
    nt = tparents.shape[0]
    V = kbuf.shape[0]
    exists = np.zeros(nt, dtype=np.bool_)
    exists[0] = True
    haskids = np.zeros(nt, dtype=np.bool_)
    maxdepth = 0
    for w in range(nt):
        bparent[w] = tparents[w]
        bdepth[w] = tdepths[w]
        qrow[w] = -1
        btoken[w] = 0
        if w > 0:
            haskids[tparents[w]] = True
            have[w] = False
        maxdepth = max(maxdepth, tdepths[w])
    nq = _expand(W, 0, bparent, btoken, zs, hs, have, qrow, q_rows, 0, kbuf)
    calls = 1
    kids = np.empty(nt, dtype=np.int64)
    chosen = np.empty(nt, dtype=np.int64)
    ukids = np.empty(nt)
    for d in range(maxdepth):
        level = 0
        for v in range(nt):
            if tdepths[v] == d and exists[v] and haskids[v]:
                level += 1
        if level == 0:
            break
        if d > 0:
            for v in range(nt):
                if tdepths[v] == d and exists[v] and haskids[v]:
                    nq = _expand(W, v, bparent, btoken, zs, hs, have, qrow, q_rows, nq, kbuf)
            calls += 1
        for v in range(nt):
            if not (tdepths[v] == d and exists[v] and haskids[v]):
                continue
            m = 0
            for w in range(nt):  # children in rank order (ranks are 0..m-1)
                if tparents[w] == v and w > 0:
                    kids[tranks[w]] = w
                    m += 1
            q = q_rows[qrow[v]]
            if draws:
                for i in range(m):
                    ukids[i] = utree[kids[i]]
                got = draws_without_replacement(q, ukids, m, scratch, chosen)
            else:
                got = top_m(q, 0, V, m, chosen)
            for i in range(got):
                exists[kids[i]] = True
                btoken[kids[i]] = chosen[i]
    n = 0
    index = np.full(nt, -1, dtype=np.int64)
    for w in range(nt):
        if exists[w]:
            index[w] = n
            buf_of[n] = w
            parents[n] = -1 if w == 0 else index[tparents[w]]
            tokens[n] = btoken[w]
            depths[n] = tdepths[w]
            n += 1
    return n, calls


@njit(cache=True)
def build_dynamic(W, top_k, max_calls, total_tokens, check_steps, threshold, bparent, btoken, bdepth, zs,
                  hs, have, qrow, q_rows, kbuf, score, parents, tokens, depths, buf_of):
    """EAGLE-2 / DDD tree (``Eagle2Tree.build``); returns (n, draft calls)."""
    V = kbuf.shape[0]
    K = min(top_k, V)
    qrow[0] = -1
    nq = _expand(W, 0, bparent, btoken, zs, hs, have, qrow, q_rows, 0, kbuf)
    calls = 1
    sel = np.empty(max(K, total_tokens), dtype=np.int64)
    got = top_m(q_rows[0], 0, V, K, sel)
    nb = 1
    for r in range(got):
        bparent[nb] = 0
        btoken[nb] = sel[r]
        bdepth[nb] = 1
        score[nb] = safe_log(q_rows[0][sel[r]])
        qrow[nb] = -1
        have[nb] = False
        nb += 1
    beam = np.empty(K, dtype=np.int64)
    nbeam = got
    for r in range(got):
        beam[r] = 1 + r
    for call in range(2, max_calls + 1):
        check = False
        for c in check_steps:
            if c == call:
                check = True
        if check:
            s = 0.0
            for i in range(nbeam):
                s += math.exp(score[beam[i]])
            if safe_log(s) < threshold:
                break
        for i in range(nbeam):
            nq = _expand(W, beam[i], bparent, btoken, zs, hs, have, qrow, q_rows, nq, kbuf)
        calls += 1
        start = nb
        for i in range(nbeam):
            b = beam[i]
            q = q_rows[qrow[b]]
            got = top_m(q, 0, V, K, sel)
            for r in range(got):
                bparent[nb] = b
                btoken[nb] = sel[r]
                bdepth[nb] = bdepth[b] + 1
                score[nb] = score[b] + safe_log(q[sel[r]])
                qrow[nb] = -1
                have[nb] = False
                nb += 1
        nbeam = top_m(score, start, nb, K, beam)
    keep = np.empty(total_tokens - 1, dtype=np.int64)
    nk = top_m(score, 1, nb, total_tokens - 1, keep)
    keep[:nk].sort()
    index = np.full(nb, -1, dtype=np.int64)
    index[0] = 0
    parents[0] = -1
    tokens[0] = 0
    depths[0] = 0
    buf_of[0] = 0
    for i in range(nk):
        b = keep[i]
        index[b] = i + 1
        parents[i + 1] = index[bparent[b]]
        tokens[i + 1] = btoken[b]
        depths[i + 1] = bdepth[b]
        buf_of[i + 1] = b
    return nk + 1, calls
