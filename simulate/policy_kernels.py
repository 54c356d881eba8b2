"""Numba builders of the tree policies, fed by a world's in-kernel drafter.

Twins of the NumPy ``build`` methods in :mod:`core.trees.policies`: given the
same q rows they build the same tree (tested exactly). A builder works on
*buffer nodes* (static trees: template nodes; dynamic trees: node 0 = root,
node i + 1 = pool entry i) whose states live in the world buffers, and
returns the final tree in topological order with ``buf_of[v]``, the buffer
node behind final node v.

Buffers (allocated once per sequence by the engine)::

    bparent, btoken, bdepth : int64[n_buffer]     buffer tree
    zs, hs, have            : world states (see simulate.world_kernels)
    qrow                    : int64[n_buffer]     row of q_rows holding q at the node, or -1
    q_rows                  : float64[n_q, V]     normalised q per expanded node (keep_q), else row 0 scratch
    es, cmaxs               : row scratch (``row_scratch``): rows expanded together, unnormalised
    score                   : float64[n_buffer]   path log-probabilities (dynamic trees)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from relaxspec.simulate.latent_kernels import select_children
from relaxspec.simulate.row_kernels import keep_row, top_m, top_tokens  # noqa: F401  (top_tokens: re-exported)
from relaxspec.simulate.verify_kernels import cumulate_from, draw_cumulated
from relaxspec.simulate.world_kernels import (
    draft_exps,
    ensure_state,
    row_scratch,
    vocab_size,
)
from relaxspec.theory.tree import parent_depths

EXPAND_BATCH = 16  # drafter rows computed in one pass over the codebook (a beam, a tree level)


@njit(cache=True, error_model="numpy")
def safe_log(x):
    """log with log(0) = -inf."""
    if x > 0.0:
        return math.log(x)
    return -math.inf


@njit(cache=True, error_model="numpy")
def draw_without_replacement_kernel(q, u, m, qr, cum, out):
    """``theory.draw_without_replacement``: up to m successive draws, ``u[i]`` for draw i (``qr``,
    ``cum``: float64[V] scratch). A draw zeroes one token, which leaves the cumulative sum below it as it
    was: the next draw sums again from that token on (the same floats as a full pass)."""
    for x in range(q.shape[0]):
        qr[x] = q[x]
    cnt = 0
    start = 0
    for i in range(m):
        anymass = False
        for x in range(q.shape[0]):
            if qr[x] > 0.0:
                anymass = True
                break
        if not anymass:
            break
        cumulate_from(qr, cum, start)
        x = draw_cumulated(qr, u[i], cum)
        out[cnt] = x
        cnt += 1
        qr[x] = 0.0
        start = x
    return cnt


@njit(cache=True, error_model="numpy")
def _expand(W, nodes, bparent, btoken, bdepth, zs, hs, have, es, cmaxs, invs):
    """Drafter rows after the buffer nodes ``nodes``, in one pass over the codebook (row i of
    ``es`` / ``cmaxs`` / ``invs`` for ``nodes[i]``; see ``draft_exps``)."""
    for i in range(nodes.shape[0]):
        ensure_state(W, nodes[i], bparent, btoken, zs, hs, have)
    draft_exps(W, zs, hs, nodes, bdepth, es, cmaxs, invs)


@njit(cache=True, error_model="numpy")
def build_static(W, tparents, tranks, tdepths, draws, keep_q, utree, S, smark, bparent, btoken, bdepth, zs,
                 hs, have, qrow, q_rows, es, cmaxs, scratch, parents, tokens, depths, buf_of):
    """Static tree from a template (``StaticTree.build``); returns (n, draft calls).

    ``draws``: rank children by draws without replacement with ``utree[w]``
    drawing template node w (R2; ``scratch``: float64 (2, V)), else by
    ``select_children`` with the selection ``S`` (``smark``: its scratch, see
    :mod:`simulate.latent_kernels`). ``keep_q``: leave every expanded node's normalised q in its own
    row ``q_rows[qrow[v]]`` (R2 verifies with them), else ``qrow[v] = -1``.
    A level's rows are computed ``len(es)`` at a time in one codebook pass
    (``es`` / ``cmaxs``: ``row_scratch``). ``have[0]`` and the root's state
    must be set by the caller."""
    nt = tparents.shape[0]
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
    level = np.zeros(nt, dtype=np.int64)
    invs = np.empty(es.shape[0])
    _expand(W, level[:1], bparent, btoken, bdepth, zs, hs, have, es, cmaxs, invs)  # the root
    nq = 0
    calls = 1
    kids = np.empty(nt, dtype=np.int64)
    chosen = np.empty(nt, dtype=np.int64)
    vals = np.empty(nt)
    ukids = np.empty(nt)
    for d in range(maxdepth):
        nl = 0
        for v in range(nt):
            if tdepths[v] == d and exists[v] and haskids[v]:
                level[nl] = v
                nl += 1
        if nl == 0:
            break
        if d > 0:
            calls += 1
        for b0 in range(0, nl, es.shape[0]):
            cnt = min(es.shape[0], nl - b0)
            if d > 0:
                _expand(W, level[b0:b0 + cnt], bparent, btoken, bdepth, zs, hs, have, es, cmaxs, invs)
            for i in range(cnt):
                v = level[b0 + i]
                m = 0
                for w in range(nt):  # children in rank order (ranks are 0..m-1)
                    if tparents[w] == v and w > 0:
                        kids[tranks[w]] = w
                        m += 1
                q = q_rows[nq if keep_q else 0]
                if draws or keep_q:
                    keep_row(W, es, invs, i, q)
                if keep_q:
                    qrow[v] = nq
                    nq += 1
                if draws:
                    for j in range(m):
                        ukids[j] = utree[kids[j]]
                    got = draw_without_replacement_kernel(q, ukids, m, scratch[0], scratch[1], chosen)
                else:
                    got = select_children(W, es, cmaxs, invs, i, m, S, smark, chosen, vals)
                for j in range(got):
                    exists[kids[j]] = True
                    btoken[kids[j]] = chosen[j]
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
def _propose(W, es, cmaxs, invs, i, K, S, smark, b, nb, sel, vals, bparent, btoken, bdepth, score, qrow,
             have):
    """Add the K children of buffer node b (expanded row i) that the selection ``S`` picks to the pool
    from entry nb, scored by the log of their values (q, or q~); returns the new pool end."""
    got = select_children(W, es, cmaxs, invs, i, K, S, smark, sel, vals)
    for r in range(got):
        bparent[nb] = b
        btoken[nb] = sel[r]
        bdepth[nb] = bdepth[b] + 1
        score[nb] = score[b] + safe_log(vals[r])
        qrow[nb] = -1
        have[nb] = False
        nb += 1
    return nb


@njit(cache=True, error_model="numpy")
def build_dynamic(W, top_k, max_calls, total_tokens, check_steps, threshold, S, smark, keep_q, bparent,
                  btoken, bdepth, zs, hs, have, qrow, q_rows, es, cmaxs, score, parents, tokens, depths,
                  buf_of):
    """EAGLE-2 / DDD / latent-aware tree (``Eagle2Tree.build``); returns (n, draft calls).

    Children are picked by the selection ``S`` (``smark``: its scratch;
    :mod:`simulate.latent_kernels`) and scored by the log of their values.

    ``keep_q``, ``es``, ``cmaxs`` as in :func:`build_static` (the rules that verify dynamic
    trees never read q); a beam's rows are computed in one codebook pass."""
    K = min(top_k, vocab_size(W))
    qrow[0] = -1
    bdepth[0] = 0
    score[0] = 0.0
    beam = np.zeros(max(K, 1), dtype=np.int64)
    invs = np.empty(es.shape[0])
    _expand(W, beam[:1], bparent, btoken, bdepth, zs, hs, have, es, cmaxs, invs)  # the root
    calls = 1
    nq = 0
    sel = np.empty(max(K, total_tokens), dtype=np.int64)
    vals = np.empty(K)
    nb = _propose(W, es, cmaxs, invs, 0, K, S, smark, 0, 1, sel, vals, bparent, btoken, bdepth, score, qrow,
                  have)
    if keep_q:
        keep_row(W, es, invs, 0, q_rows[0])
        qrow[0] = 0
        nq = 1
    nbeam = nb - 1
    for r in range(nbeam):
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
        calls += 1
        start = nb
        for b0 in range(0, nbeam, es.shape[0]):
            cnt = min(es.shape[0], nbeam - b0)
            _expand(W, beam[b0:b0 + cnt], bparent, btoken, bdepth, zs, hs, have, es, cmaxs, invs)
            for i in range(cnt):
                b = beam[b0 + i]
                nb = _propose(W, es, cmaxs, invs, i, K, S, smark, b, nb, sel, vals, bparent, btoken, bdepth,
                              score, qrow, have)
                if keep_q:
                    keep_row(W, es, invs, i, q_rows[nq])
                    qrow[b] = nq
                    nq += 1
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
    """A ``draft(parents, tokens, nodes)`` callback backed by the world's drafter, from root state (z0, h0).

    With it, a policy's NumPy ``build`` sees exactly the q rows its Numba
    builder computes (used to test the builders against each other)."""
    from relaxspec.simulate.oracle import States, world_draft

    return world_draft(world, States(world, z0, np.uint64(h0)), temperature)


def kernel_build(policy, world, z0: np.ndarray, h0: np.uint64, temperature: float = 1.0,
                 u: np.ndarray | None = None):
    """Build one tree with the policy's Numba builder from root state (z0, h0).

    Returns ``(parents, tokens, q, draft_calls)`` with q the draft rows of the
    final nodes (uniform where never expanded), as ``BuiltTree`` holds them."""
    from relaxspec.core.trees.policies import KIND_STATIC

    policy.check_vocab(world.vocab_size)
    ps = policy.kernel_spec()
    W = world.kernel_world(float(temperature))
    V = world.vocab_size
    smark = np.zeros(V + 1, dtype=np.int64)
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
    es, cmaxs = row_scratch(W, EXPAND_BATCH)
    parents = np.empty(ps.max_nodes, dtype=np.int64)
    tokens = np.empty(ps.max_nodes, dtype=np.int64)
    depths = np.empty(ps.max_nodes, dtype=np.int64)
    buf_of = np.empty(ps.max_nodes, dtype=np.int64)
    if ps.kind == KIND_STATIC:
        tdepths = parent_depths(ps.parents)
        utree = np.zeros(ps.parents.size) if u is None else np.asarray(u, dtype=np.float64)
        n, calls = build_static(W, ps.parents, ps.ranks, tdepths, u is not None, True, utree, ps.selection,
                                smark, bparent, btoken, bdepth, zs, hs, have, qrow, q_rows, es, cmaxs,
                                np.empty((2, V)), parents, tokens, depths, buf_of)
    else:
        n, calls = build_dynamic(W, ps.top_k, ps.max_calls, ps.total_tokens, ps.check_steps, ps.threshold,
                                 ps.selection, smark, True, bparent, btoken, bdepth, zs, hs, have, qrow,
                                 q_rows, es, cmaxs, np.zeros(nbuf), parents, tokens, depths, buf_of)
    q = np.full((n, V), 1.0 / V)
    for v in range(n):
        if qrow[buf_of[v]] >= 0:
            q[v] = q_rows[qrow[buf_of[v]]]
    return parents[:n].copy(), tokens[:n].copy(), q, int(calls)
