"""Numba kernels of VVS's skipped verification (SPEC 10.3) over EAGLE-2 trees in a world.

Twin of :mod:`simulate.vvs_oracle` (same decisions given the same uniforms, tested). Per step the
sequence builds EAGLE-2's tree with the world's drafter (``simulate.policy_kernels.build_dynamic``), then
either verifies it as ``simulate.engine`` does (rule R1, LANTERN's relaxation or none) or, on a skip
step, makes no target forward:

- the leaf: leaf ``floor(u n_leaves)`` in node order, u = node ``SKIP_NODE``'s ``U_TREE`` uniform of
  the step (an EAGLE-2 tree draws none of its own);
- gamma = min(depth(leaf), floor(Lbar)), Lbar = accepted drafts per verify step so far (integer
  division: exact);
- the bonus: a draw from the stale row (p where the last verify step drew its last token) with node
  ``SKIP_NODE``'s ``U_DRAW`` uniform.

``token_tv`` of a skip step is the exact TV (``theory.vvs.skip_step_tv``) of each emitted token's law
given the tree, summed: at a node u of depth i on the emitted path, the law is the leaves' mixture,
sum over children c of nleaf(c)/nleaf(u) on c's token if i < floor(Lbar) and u has children, else the
stale row; the target's row at u is computed after the fact (it is no forward of the decoder). A bounded
schedule (``tv=B``, ours: docs/theory.md 15.7) takes a skip the schedule asks for only when that TV is at
most B at every node of depth <= floor(Lbar) (:func:`skip_max_tv`: every token the skip can emit).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from relaxspec.core.trees.skips import Schedule
from relaxspec.simulate.policy_kernels import EXPAND_BATCH, build_dynamic
from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_counter, stream_key, uniform
from relaxspec.simulate.sequence_kernels import (
    advance_root,
    buffer_scratch,
    node_scratch,
    p_row,
    parent_rows,
    record_step,
    walk_step,
)
from relaxspec.simulate.step_kernels import children_csr, leaf_bonus, path_tv, step_expectation_kernel
from relaxspec.simulate.verify_kernels import draw_token_kernel
from relaxspec.simulate.world_kernels import initial_state, row_scratch, vocab_size

SCHEDULE_UNIFORM = 0
SCHEDULE_DYNAMIC = 1
SCHEDULE_CODES = {Schedule.UNIFORM: SCHEDULE_UNIFORM, Schedule.DYNAMIC: SCHEDULE_DYNAMIC}
SKIP_NODE = 0
"""The node whose uniforms a skip step spends: ``U_TREE`` picks the leaf, ``U_DRAW`` draws the bonus."""


@njit(cache=True, error_model="numpy")
def leaf_counts(parents, n, cstart, nleaf):
    """``nleaf[v]`` = leaves in v's subtree (parents before children); returns the tree's leaves."""
    for v in range(n):
        nleaf[v] = 1 if cstart[v + 1] == cstart[v] else 0
    for v in range(n - 1, 0, -1):
        nleaf[parents[v]] += nleaf[v]
    return nleaf[0]


@njit(cache=True, error_model="numpy")
def pick_leaf(n, cstart, u):
    """Leaf ``floor(u * n_leaves)`` of the tree's leaves in node order."""
    count = 0
    for v in range(n):
        if cstart[v + 1] == cstart[v]:
            count += 1
    j = min(int(u * count), count - 1)
    for v in range(n):
        if cstart[v + 1] == cstart[v]:
            if j == 0:
                return v
            j -= 1
    return -1


@njit(cache=True, error_model="numpy")
def path_similarity(parents, tokens, depths, n, cstart, emb, alpha):
    """The dynamic schedule's score (``simulate.vvs_oracle.path_similarity``): over depths l >= 1 at which
    at least two root-to-leaf paths have a node, the mean over those pairs of paths (leaves in node order)
    of the cosine of their tokens' code vectors (``emb``: unit rows), averaged with weights alpha^(l-1);
    NaN when no depth has two paths."""
    nl = 0
    dmax = 0
    for v in range(n):
        if cstart[v + 1] == cstart[v]:
            nl += 1
            dmax = max(dmax, depths[v])
    anc = np.full((nl, dmax + 1), -1, dtype=np.int64)  # anc[a, l]: leaf a's node at depth l
    a = 0
    for v in range(n):
        if cstart[v + 1] == cstart[v]:
            w = v
            while w > 0:
                anc[a, depths[w]] = w
                w = parents[w]
            a += 1
    num = 0.0
    den = 0.0
    weight = 1.0
    for lev in range(1, dmax + 1):
        total = 0.0
        pairs = 0
        for i in range(nl):
            if anc[i, lev] < 0:
                continue
            ei = emb[tokens[anc[i, lev]]]
            for j in range(i + 1, nl):
                if anc[j, lev] < 0:
                    continue
                ej = emb[tokens[anc[j, lev]]]
                dot = 0.0
                for c in range(ei.shape[0]):
                    dot += ei[c] * ej[c]
                total += dot
                pairs += 1
        if pairs > 0:
            num += weight * (total / pairs)
            den += weight
        weight *= alpha
    if den == 0.0:
        return math.nan
    return num / den


@njit(cache=True, error_model="numpy")
def skip_node_tv(u, depth, cap, cstart, cidx, tokens, nleaf, p, stale, law):
    """TV between the law a skip step emits after node u (at ``depth``; ``cap`` = floor(Lbar)) and the
    target's row ``p`` at u (module docstring); ``law``: float64[V] zeros, left zero."""
    lo, hi = cstart[u], cstart[u + 1]
    tv = 0.0
    if depth < cap and hi > lo:
        for j in range(lo, hi):
            c = cidx[j]
            law[tokens[c]] += nleaf[c] / nleaf[u]
        for x in range(p.shape[0]):
            tv += abs(law[x] - p[x])
        for j in range(lo, hi):
            law[tokens[cidx[j]]] = 0.0
    else:
        for x in range(p.shape[0]):
            tv += abs(stale[x] - p[x])
    return 0.5 * tv


@njit(cache=True, error_model="numpy")
def skip_max_tv(W, cap, n, parents, tokens, depths, cstart, cidx, buf_of, bparent, btoken, zs, hs, have,
                p_rows, prow, psums, es, cmaxs, stale, law, nleaf):
    """The largest TV of a token a skip step can emit (``theory.vvs.SkipStepTV.max_tv``): over every node u
    of depth <= ``cap``, :func:`skip_node_tv` with the target's row at u. Leaves ``prow`` at -1."""
    leaf_counts(parents, n, cstart, nleaf)
    npr = 0
    worst = 0.0
    for u in range(n):
        if depths[u] <= cap:
            npr = p_row(W, u, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, npr)
            worst = max(worst, skip_node_tv(u, depths[u], cap, cstart, cidx, tokens, nleaf, p_rows[prow[u]],
                                            stale, law))
    for u in range(n):  # the rows' slots are the step's again
        prow[u] = -1
    return worst


@njit(cache=True, error_model="numpy")
def _skip_step(W, key, step, cap, n, parents, tokens, depths, cstart, cidx, buf_of, bparent, btoken, zs, hs,
               have, p_rows, prow, psums, es, cmaxs, stale, law, nleaf, path, cum, exact):
    """One skip step on the built tree: returns (path length gamma + 1, bonus, token TV, E[tokens],
    E[TV]); ``path[:gamma + 1]`` gets root..the last emitted node."""
    leaf = pick_leaf(n, cstart, uniform(key, step_counter(step, SKIP_NODE, U_TREE)))
    gamma = min(depths[leaf], cap)
    v = leaf
    while depths[v] > gamma:
        v = parents[v]
    for i in range(gamma, -1, -1):
        path[i] = v
        v = parents[v]
    bonus = draw_token_kernel(stale, uniform(key, step_counter(step, SKIP_NODE, U_DRAW)), cum)
    nl = leaf_counts(parents, n, cstart, nleaf)
    npr = 0
    t_tv = 0.0
    for i in range(gamma + 1):
        u = path[i]
        npr = p_row(W, u, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, npr)
        t_tv += skip_node_tv(u, i, cap, cstart, cidx, tokens, nleaf, p_rows[prow[u]], stale, law)
    e_tok, e_tv = math.nan, math.nan
    if exact:  # theory.vvs.skip_step_tv: every node at depth <= cap emits a token with P nleaf(u) / nl
        e_tok, e_tv = 0.0, 0.0
        for u in range(n):
            if depths[u] > cap:
                continue
            if prow[u] < 0:
                npr = p_row(W, u, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs,
                             npr)
            w = nleaf[u] / nl
            e_tok += w
            e_tv += w * skip_node_tv(u, depths[u], cap, cstart, cidx, tokens, nleaf, p_rows[prow[u]], stale,
                                     law)
    return gamma + 1, bonus, t_tv, e_tok, e_tv


@njit(cache=True, error_model="numpy")
def _sequence(s, W, ps, rs, bs, sc, emb, exact, seq_len, seed, o, skipped, n_steps):
    """Decode sequence ``s`` (``ps``: EAGLE-2's policy tuple; ``rs``, ``bs``: R1's rule and the empty boost;
    ``sc`` = (schedule code, interval, similarity, alpha, TV bound or -1)); per-step outputs ``o`` as
    ``simulate.engine``'s, ``skipped[step]`` True for a skip step."""
    top_k, max_calls, total_tokens, check_steps, threshold, S, max_nodes, max_buffer = ps
    sched, interval, similarity, alpha, bound = sc
    V = vocab_size(W)
    bparent, btoken, bdepth, zs, hs, have, qrow, score = buffer_scratch(max_buffer, W[1].shape[0])
    q_rows = np.empty((1, V))
    p_rows = np.empty((max_nodes + 1, V))
    es, cmaxs = row_scratch(W, EXPAND_BATCH)
    scratch = np.empty((3, V))
    parents, tokens, depths, buf_of, prow, qrow_f, cstart, cidx, path, tops, psums, ua, ud, edge, reach, \
        ok = node_scratch(max_nodes)
    state = np.zeros(2, dtype=np.int64)
    walk_tv = np.zeros(1)  # a boosted R2 walk's stage TVs (path_tv reads them)
    mark = np.zeros(V, dtype=np.int64)
    seen = np.zeros(V, dtype=np.int64)
    smark = np.zeros(V + 1, dtype=np.int64)
    stale = np.empty(V)
    law = np.zeros(V)
    nleaf = np.empty(max_nodes, dtype=np.int64)
    epoch = 0
    key = stream_key(seed, s)
    if W[0] == 0:
        hs[0] = initial_state(W[1], W[4], W[5][0], key, zs[0])
    have[0] = True
    pos = 0
    step = 0
    accepted = 0  # accepted drafts over the verify steps so far
    verified = 0  # verify steps so far
    last_skip = False
    while pos < seq_len:
        n, calls = build_dynamic(W, top_k, max_calls, total_tokens, check_steps, threshold, S, smark, False,
                                 bparent, btoken, bdepth, zs, hs, have, qrow, q_rows, es, cmaxs, score,
                                 parents, tokens, depths, buf_of)
        children_csr(parents, n, cstart, cidx)
        for v in range(n):
            qrow_f[v] = -1
            prow[v] = -1
        skip = False
        if verified > 0 and not last_skip:  # a skip needs a stale row; never two in a row
            if sched == SCHEDULE_UNIFORM:
                skip = step % interval == 1
            else:
                skip = path_similarity(parents, tokens, depths, n, cstart, emb, alpha) >= similarity
        if skip and bound >= 0.0:  # ours: only a skip whose every token is within the bound
            skip = skip_max_tv(W, accepted // verified, n, parents, tokens, depths, cstart, cidx, buf_of,
                               bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, stale, law,
                               nleaf) <= bound
        if skip:
            m, bonus, t_tv, e_tok, e_tv = _skip_step(W, key, step, accepted // verified, n, parents, tokens,
                                                     depths, cstart, cidx, buf_of, bparent, btoken, zs, hs,
                                                     have, p_rows, prow, psums, es, cmaxs, stale, law, nleaf,
                                                     path, scratch[0], exact)
        else:
            for v in range(n):
                ua[v] = uniform(key, step_counter(step, v, U_ACCEPT))
                ud[v] = uniform(key, step_counter(step, v, U_DRAW))
            npr = 0
            e_tok, e_tv = math.nan, math.nan
            if exact:
                npr = parent_rows(W, n, cstart, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums,
                                  es, cmaxs, npr)
                e_tok, e_tv, epoch = step_expectation_kernel(parents, tokens, depths, n, cstart, cidx, p_rows,
                                                             prow, psums, q_rows, qrow_f, rs, bs, mark, seen,
                                                             epoch, scratch, edge, reach)
            m, bonus, epoch, npr = walk_step(W, parents, tokens, depths, n, cstart, cidx, buf_of, bparent,
                                             btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, q_rows,
                                             qrow_f, ua, ud, rs, bs, mark, epoch, scratch, path, state,
                                             walk_tv, ok, tops, npr)
            end = path[m - 1]
            if prow[end] < 0:
                npr = p_row(W, end, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs,
                             npr)
            if bonus < 0:
                bonus = leaf_bonus(p_rows[prow[end]], ud[end], rs[0], scratch[0])
            stale[:] = p_rows[prow[end]]  # the last target row held: where this step drew its last token
            t_tv, epoch = path_tv(parents, tokens, depths, path, m, cstart, cidx, p_rows, prow, psums, q_rows,
                                  qrow_f, rs, bs, walk_tv, mark, seen, epoch)
            accepted += m - 1
            verified += 1
        record_step(o, step, m, n, depths, path, cstart, cidx, calls, e_tok, e_tv, t_tv)
        skipped[step] = skip
        last_skip = skip
        advance_root(W, buf_of[path[m - 1]], bonus, bparent, btoken, zs, hs, have)
        pos += m
        step += 1
    n_steps[s] = step


@njit(parallel=True, cache=True, error_model="numpy")
def vvs_kernel(W, ps, rs, bs, sc, emb, exact, n_seq, seq_len, seed, out, skipped, n_steps):
    """Decode ``n_seq`` sequences in parallel into ``out`` = (o_int, o_exp, o_tv, o_ttv) and ``skipped``
    (each (n_seq, seq_len, ...))."""
    # tuples holding arrays are taken apart here and rebuilt in the loop (as simulate.engine does)
    top_k, max_calls, total_tokens, check_steps, threshold, S, max_nodes, max_buffer = ps
    rule, code, k, param, variant, nb = rs
    bkind, before, after, fallback, tau, dist, omega, bemb, delta, table = bs
    o_int, o_exp, o_tv, o_ttv = out
    for s in prange(n_seq):
        _sequence(np.int64(s), W,
                  (top_k, max_calls, total_tokens, check_steps, threshold, S, max_nodes, max_buffer),
                  (rule, code, k, param, variant, nb),
                  (bkind, before, after, fallback, tau, dist, omega, bemb, delta, table), sc, emb, exact,
                  seq_len, seed, (o_int[s], o_exp[s], o_tv[s], o_ttv[s]), skipped[s], n_steps)
