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


@njit(cache=True, error_model="numpy")
def safe_log(x):
    """log with log(0) = -inf."""
    if x > 0.0:
        return math.log(x)
    return -math.inf


@njit(cache=True, error_model="numpy")
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


@njit(cache=True, error_model="numpy")
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


@njit(cache=True, error_model="numpy")
def _expand(W, v, bparent, btoken, zs, hs, have, qrow, q_rows, nq, kbuf):
    ensure_state(W, v, bparent, btoken, zs, hs, have)
    draft_row(W, zs[v], hs[v], q_rows[nq], kbuf)
    qrow[v] = nq
    return nq + 1


@njit(cache=True, error_model="numpy")
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


@njit(cache=True, error_model="numpy")
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


def kernel_draft(world, z0: np.ndarray, h0: np.uint64, temperature: float = 1.0):
    """A ``draft(parents, tokens, nodes)`` callback backed by the world's in-kernel drafter.

    With it, a policy's NumPy ``build`` sees exactly the q rows its Numba
    builder computes (used to test the builders against each other)."""
    from simulate.world_kernels import draft_row as _draft_row
    from simulate.world_kernels import transition as _transition

    W = world.kernel_world(float(temperature))
    V = world.vocab_size

    def state(parents, tokens, v):
        if v == 0:
            return z0, np.uint64(h0)
        z, h = state(parents, tokens, int(parents[v]))
        out = np.empty_like(z)
        h2 = _transition(W[1], W[4], W[5][0], z, np.uint64(h), int(tokens[v]), out)
        return out, np.uint64(h2)

    def draft(parents, tokens, nodes):
        rows = np.empty((len(nodes), V))
        for i, v in enumerate(nodes):
            z, h = state(parents, tokens, int(v)) if W[0] == 0 else (np.zeros(1), np.uint64(0))
            _draft_row(W, z, np.uint64(h), rows[i], np.empty(V))
        return rows

    return draft


def kernel_build(policy, world, z0: np.ndarray, h0: np.uint64, temperature: float = 1.0,
                 u: np.ndarray | None = None):
    """Build one tree with the policy's Numba builder from root state (z0, h0).

    Returns ``(parents, tokens, q, draft_calls)`` with q the draft rows of the
    final nodes (uniform where never expanded), as ``BuiltTree`` holds them."""
    from simulate.policies import KIND_STATIC

    ps = policy.kernel_spec()
    W = world.kernel_world(float(temperature))
    V = world.vocab_size
    d = W[1].shape[0]
    nbuf = ps.max_buffer
    bparent = np.zeros(nbuf, dtype=np.int64)
    btoken = np.zeros(nbuf, dtype=np.int64)
    bdepth = np.zeros(nbuf, dtype=np.int64)
    zs = np.zeros((nbuf, d))
    hs = np.zeros(nbuf, dtype=np.uint64)
    have = np.zeros(nbuf, dtype=np.bool_)
    if W[0] == 0:
        zs[0] = z0
        hs[0] = np.uint64(h0)
    have[0] = True
    qrow = np.full(nbuf, -1, dtype=np.int64)
    q_rows = np.empty((nbuf, V))
    kbuf = np.empty(V)
    parents = np.empty(ps.max_nodes, dtype=np.int64)
    tokens = np.empty(ps.max_nodes, dtype=np.int64)
    depths = np.empty(ps.max_nodes, dtype=np.int64)
    buf_of = np.empty(ps.max_nodes, dtype=np.int64)
    if ps.kind == KIND_STATIC:
        tdepths = np.zeros(ps.parents.size, dtype=np.int64)
        for v in range(1, ps.parents.size):
            tdepths[v] = tdepths[ps.parents[v]] + 1
        utree = np.zeros(ps.parents.size) if u is None else np.asarray(u, dtype=np.float64)
        n, calls = build_static(W, ps.parents, ps.ranks, tdepths, u is not None, utree, bparent, btoken,
                                bdepth, zs, hs, have, qrow, q_rows, kbuf, np.empty(V), parents, tokens,
                                depths, buf_of)
    else:
        n, calls = build_dynamic(W, ps.top_k, ps.max_calls, ps.total_tokens, ps.check_steps, ps.threshold,
                                 bparent, btoken, bdepth, zs, hs, have, qrow, q_rows, kbuf, np.zeros(nbuf),
                                 parents, tokens, depths, buf_of)
    q = np.full((n, V), 1.0 / V)
    for v in range(n):
        if qrow[buf_of[v]] >= 0:
            q[v] = q_rows[qrow[buf_of[v]]]
    return parents[:n].copy(), tokens[:n].copy(), q, int(calls)
