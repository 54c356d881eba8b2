"""Numba kernels of a whole verification step on a tree (SPEC sections 3-4): the walk from the root,
the greedy (R3) path, the bonus token, and the step's exact expectations and TV.

Twins of ``theory.tree.sample_step`` and ``theory.tree.step_expectation`` built on the node kernels of
:mod:`simulate.verify_kernels` (same array conventions). Trees arrive as parent arrays in topological
order; children are handled as CSR (:func:`children_csr`).

R2 takes a boost ``bs`` (SPEC 9.2-9.5, :mod:`simulate.verify_kernels`): the children of u are tested
at depth ``depths[u] + 1``, and the TV of a boosted node is the sum of its tested stages' exact TVs
(the budget's: the sum of its tested stages' charges, at most delta per node). Rule 4 (traversal
verification, R4) is not a node-by-node walk: the dense kernels hand it to
:mod:`simulate.traversal_kernels`.

The exact outcome at one node (the twins of ``theory.verify.node_outcome``), which the step's TV and
expectation add up node by node, is in :mod:`simulate.outcome_kernels`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from relaxspec.simulate.boost_kernels import node_r2_kernel
from relaxspec.simulate.outcome_kernels import (
    node_outcome_r1_kernel,
    node_outcome_r2_kernel,
)
from relaxspec.simulate.traversal_kernels import traversal_step_expectation_kernel, traversal_step_kernel
from relaxspec.simulate.verify_kernels import (
    argmax_row,
    draw_token_kernel,
    draw_token_residual_kernel,
    greedy_acceptable_kernel,
    sample_node_r1_kernel,
    seqsum_kernel,
)
from relaxspec.theory.relax import RELAX_NONE
from relaxspec.theory.rules import BOOST_NONE, RULE_R1, RULE_R2, RULE_R3, RULE_R4


# ---------------------------------------------------------------- trees
@njit(cache=True, error_model="numpy")
def children_csr(parents, n, cstart, cidx):
    """Children of every node (increasing index) as CSR: cidx[cstart[v]:cstart[v+1]]."""
    for v in range(n + 1):
        cstart[v] = 0
    for v in range(1, n):
        cstart[parents[v] + 1] += 1
    for v in range(n):
        cstart[v + 1] += cstart[v]
    fill = cstart[:n].copy()
    for v in range(1, n):
        u = parents[v]
        cidx[fill[u]] = v
        fill[u] += 1


@njit(cache=True, error_model="numpy")
def child_tokens(tokens, cstart, cidx, u):
    """Tokens of u's children in order."""
    lo, hi = cstart[u], cstart[u + 1]
    kids = np.empty(hi - lo, dtype=np.int64)
    for j in range(hi - lo):
        kids[j] = tokens[cidx[lo + j]]
    return kids


@njit(cache=True, error_model="numpy")
def greedy_path_ok_kernel(parents, tokens, n, p_rows, prow, code, k, param, nb, ok, tops, start):
    """R3 acceptability of nodes ``start..n-1`` (root True, ``theory.tree.greedy_path``); resumable.

    ``start = 1`` begins (``ok[0] = True``, ``tops[:] = -1``). ``tops[u]`` gets
    argmax p_u for every acceptable node with children; rows of nodes under an
    unacceptable parent are never read. Returns n when done, or the node v
    whose parent's row is missing (``prow[parents[v]] < 0``): call again
    with ``start = v`` once it is there."""
    if start == 1:
        ok[0] = True
        for u in range(n):
            tops[u] = -1
    for v in range(start, n):
        u = parents[v]
        if not ok[u]:
            ok[v] = False
            continue
        if tops[u] < 0:
            if prow[u] < 0:
                return v
            tops[u] = argmax_row(p_rows[prow[u]])
        ok[v] = greedy_acceptable_kernel(p_rows[prow[u]], tops[u], tokens[v], nb, code, k, param)
    return n


@njit(cache=True, error_model="numpy")
def greedy_path_end_kernel(depths, n, ok):
    """End of the longest acceptable chain (first in node order among the deepest)."""
    best = 0
    for v in range(1, n):
        if ok[v] and depths[v] > depths[best]:
            best = v
    return best


@njit(cache=True, error_model="numpy")
def sample_step_walk_kernel(parents, tokens, depths, n, cstart, cidx, p_rows, prow, q_rows, qrow, u_accept,
                            u_draw, rs, bs, mark, epoch, scratch, path, state, walk_tv, ok,
                            tops):
    """One verification step (``theory.tree.sample_step``, rules 1-3; rule 4 walks with
    ``simulate.traversal_kernels.traversal_walk_kernel``) on the rows computed so far; resumable.

    p_v is read from ``p_rows[prow[v]]`` (and q_v from ``q_rows[qrow[v]]``
    for R2) only where the walk needs it: the root, each accepted node and
    (R3) every node on an acceptable chain. Where ``prow[v] < 0`` the walk
    returns ``need = v``; the caller computes the row, sets ``prow[v]`` and
    calls again with the same ``state``, ``walk_tv``, ``path``, ``ok``, ``tops`` (int64[2]
    ``state`` = [path length so far, R3's next node]: zeros to start). A boosted R2 walk
    keeps in ``walk_tv[0]`` (float64[1]) the sum of the exact TVs of the stages it tested, which
    :func:`path_tv` returns instead of running those stages again (the same sum, same order).

    Returns ``(path_len, bonus, epoch, need)``; with ``need = -1`` the walk is
    done and ``path[:path_len]`` holds the accepted path. ``bonus = -1``
    means it ended at the leaf ``path[path_len - 1]`` and the bonus is drawn
    from (R3: is the argmax of) that leaf's p with ``u_draw[leaf]``, which
    the caller computes. ``scratch`` is (3, V) float64; R3's ``ok`` / ``tops``
    hold one entry per node (``tops[u]`` = argmax p_u where read). ``bs``: R2's boost.
    """
    rule, code, k, param, variant, nb = rs
    if rule == RULE_R3:
        v = greedy_path_ok_kernel(parents, tokens, n, p_rows, prow, code, k, param, nb, ok, tops,
                                  max(state[1], 1))
        state[1] = v
        if v < n:
            return 0, -1, epoch, parents[v]
        end = greedy_path_end_kernel(depths, n, ok)
        m = depths[end] + 1
        v = end
        for i in range(m - 1, -1, -1):
            path[i] = v
            v = parents[v]
        if cstart[end + 1] > cstart[end]:
            return m, tops[end], epoch, -1
        return m, -1, epoch, -1
    boosted = rule == RULE_R2 and bs[0] != BOOST_NONE
    if state[0] == 0:
        path[0] = 0
        state[0] = 1
        walk_tv[0] = 0.0
    m = state[0]
    while True:
        u = path[m - 1]
        lo, hi = cstart[u], cstart[u + 1]
        if hi == lo:
            return m, -1, epoch, -1
        if prow[u] < 0:
            return m, -1, epoch, u
        kids = child_tokens(tokens, cstart, cidx, u)
        ukids = np.empty(hi - lo)
        for j in range(hi - lo):
            ukids[j] = u_accept[cidx[lo + j]]
        p = p_rows[prow[u]]
        if rule == RULE_R1:
            i, epoch, unif = sample_node_r1_kernel(p, kids, ukids, mark, epoch, code, k, param, variant, nb)
            if i < 0:
                return m, draw_token_residual_kernel(p, mark, epoch, unif, u_draw[u], scratch[0]), epoch, -1
        else:
            i, tv_u = node_r2_kernel(p, q_rows[qrow[u]], kids, ukids, code, k, param, variant, nb, scratch[0],
                                     scratch[1], scratch[2], depths[u] + 1, bs, boosted)
            if boosted:
                walk_tv[0] += tv_u
            if i < 0:
                return m, draw_token_kernel(scratch[0], u_draw[u], scratch[1]), epoch, -1
        u = cidx[lo + i]
        path[m] = u
        m += 1
        state[0] = m


# ---------------------------------------------------------------- a step's exact TV and expectation
@njit(cache=True, error_model="numpy")
def path_tv(parents, tokens, depths, path, m, cstart, cidx, p_rows, prow, psums, q_rows, qrow, rs, bs,
            walk_tv, mark, seen, epoch):
    """TV of the tokens one step emitted, from the nodes that decided them; returns (TV, epoch).

    Each node on the accepted path with children decided one token (the next
    accepted child, or its residual draw); a leaf's bonus is a draw from p
    (TV 0). Sums TV(law the node emits, its target) over those nodes, exact
    (``theory.node_outcome(...).tv``): R1 by :func:`node_outcome_r1_kernel`; R3 1 per
    accepted child that is not argmax p of its parent; R2 0 with ``none``,
    else NaN (exact only averaged over draw orders); boosted R2 the exact TVs of
    the stages each deciding node tested (``theory.tree.path_tv``), which the walk
    (:func:`sample_step_walk_kernel`) summed in ``walk_tv[0]`` as it tested them. Reads p only on
    the path.
    """
    rule, code, k, param, variant, nb = rs
    if rule == RULE_R3:
        tv = 0.0
        for i in range(m - 1):
            if tokens[path[i + 1]] != argmax_row(p_rows[prow[path[i]]]):
                tv += 1.0
        return tv, epoch
    if rule == RULE_R2 and bs[0] != BOOST_NONE:  # the walk's stages' TVs, summed as it tested them
        return walk_tv[0], epoch
    if code == RELAX_NONE or k == 0:
        return 0.0, epoch
    if rule == RULE_R2:
        return math.nan, epoch
    tv = 0.0
    for i in range(m):
        u = path[i]
        if cstart[u + 1] == cstart[u]:
            continue
        kids = child_tokens(tokens, cstart, cidx, u)
        acc = np.empty(kids.shape[0])
        tv_u, epoch = node_outcome_r1_kernel(p_rows[prow[u]], psums[u], kids, mark, seen, epoch, code, k,
                                             param, variant, nb, acc)
        tv += tv_u
    return tv, epoch


@njit(cache=True, error_model="numpy")
def step_expectation_kernel(parents, tokens, depths, n, cstart, cidx, p_rows, prow, psums, q_rows, qrow, rs,
                            bs, mark, seen, epoch, scratch, edge, reach):
    """Exact expectations of one step given the tree and rows (p at every node with children).

    Fills ``edge[v]`` = P(v accepted | parent reached) and ``reach[v]`` =
    P(v on the accepted path). Returns ``(E[tokens], E[TV bound], epoch)``:
    E[tokens] = 1 + sum of reach over non-root nodes (R3: 1 + greedy depth);
    the TV bound is sum over internal nodes u of reach[u] * TV_u, the TV of
    the token u emits from p_u (R3: from the greedy point mass; R2: NaN when
    relaxed, since it is exact only averaged over draw orders; boosted by ``bs``:
    ``NodeOutcome.stage_tv``): the expectation of :func:`path_tv` given the
    tree and state.
    """
    rule, code, k, param, variant, nb = rs
    edge[0] = 1.0
    reach[0] = 1.0
    relaxed = not (code == RELAX_NONE or k == 0)
    if rule == RULE_R3:
        tops = np.empty(n, dtype=np.int64)
        ok = np.empty(n, dtype=np.bool_)
        greedy_path_ok_kernel(parents, tokens, n, p_rows, prow, code, k, param, nb, ok, tops, 1)
        end = greedy_path_end_kernel(depths, n, ok)
        for v in range(1, n):
            edge[v] = 0.0
            reach[v] = 0.0
        m = depths[end] + 1
        path = np.empty(m, dtype=np.int64)
        v = end
        for i in range(m - 1, -1, -1):
            path[i] = v
            edge[v] = 1.0
            reach[v] = 1.0
            v = parents[v]
        tv, epoch = path_tv(parents, tokens, depths, path, m, cstart, cidx, p_rows, prow, psums, q_rows, qrow,
                            rs, bs, np.zeros(1), mark, seen, epoch)
        return 1.0 + depths[end], tv, epoch
    tvs = np.zeros(n)
    for u in range(n):
        lo, hi = cstart[u], cstart[u + 1]
        if hi == lo:
            continue
        kids = child_tokens(tokens, cstart, cidx, u)
        acc = np.empty(hi - lo)
        if rule == RULE_R1:
            tv_u, epoch = node_outcome_r1_kernel(p_rows[prow[u]], psums[u], kids, mark, seen, epoch, code, k,
                                                 param, variant, nb, acc)
        else:
            tv_u = node_outcome_r2_kernel(p_rows[prow[u]], q_rows[qrow[u]], kids, code, k, param, variant, nb,
                                          acc, scratch[0], scratch[1], scratch[2], depths[u] + 1, bs)
            if relaxed:
                tv_u = math.nan
        for j in range(hi - lo):
            edge[cidx[lo + j]] = acc[j]
        tvs[u] = tv_u
    total = 1.0
    etv = 0.0
    for v in range(1, n):
        reach[v] = reach[parents[v]] * edge[v]
        total += reach[v]
    for u in range(n):
        if cstart[u + 1] > cstart[u]:
            etv += reach[u] * tvs[u]
    return total, etv, epoch


@njit(cache=True, error_model="numpy")
def leaf_bonus(p_leaf, u, rule, cum):
    """Bonus token at a leaf: a draw from p (R1, R2) or its argmax (R3); ``cum``: float64[V] scratch."""
    if rule == RULE_R3:
        return argmax_row(p_leaf)
    return draw_token_kernel(p_leaf, u, cum)


@njit(cache=True, error_model="numpy")
def _dense_step(parents, V):
    """What a step on rows given for every node needs besides the rows: n, the children as CSR, the
    identity row map and R1's scratch (``mark``, ``seen``: int64[V]; ``scratch``: float64[3, V])."""
    n = parents.shape[0]
    cstart = np.empty(n + 1, dtype=np.int64)
    cidx = np.empty(max(n - 1, 1), dtype=np.int64)
    children_csr(parents, n, cstart, cidx)
    return (n, cstart, cidx, np.arange(n), np.zeros(V, dtype=np.int64), np.zeros(V, dtype=np.int64),
            np.empty((3, V)))


@njit(cache=True, error_model="numpy")
def sample_step_kernel(parents, tokens, depths, p_rows, q_rows, u_accept, u_draw, rs, bs):
    """A whole verification step on rows given for every node; returns (path, bonus, TV of the emitted
    tokens as :func:`path_tv`; R4: the Deltas of the stages it entered,
    ``simulate.traversal_kernels.traversal_step_kernel``)."""
    rule, code, k, param, variant, nb = rs
    n, cstart, cidx, rows, mark, seen, scratch = _dense_step(parents, p_rows.shape[1])
    if rule == RULE_R4:
        return traversal_step_kernel(parents, depths, n, cstart, cidx, tokens, p_rows, q_rows, rows, u_accept,
                                     u_draw, bs)
    path = np.empty(n, dtype=np.int64)
    state = np.zeros(2, dtype=np.int64)
    walk_tv = np.zeros(1)
    m, bonus, epoch, _ = sample_step_walk_kernel(parents, tokens, depths, n, cstart, cidx, p_rows, rows,
                                                 q_rows, rows, u_accept, u_draw, rs, bs, mark, 0, scratch,
                                                 path, state, walk_tv, np.empty(n, dtype=np.bool_),
                                                 np.empty(n, dtype=np.int64))
    if bonus < 0:
        leaf = path[m - 1]
        bonus = leaf_bonus(p_rows[leaf], u_draw[leaf], rule, scratch[0])
    psums = np.empty(n)
    for i in range(m):
        psums[path[i]] = seqsum_kernel(p_rows[path[i]])
    tv, _ = path_tv(parents, tokens, depths, path, m, cstart, cidx, p_rows, rows, psums, q_rows, rows, rs, bs,
                    walk_tv, mark, seen, epoch)
    return path[:m].copy(), bonus, tv


@njit(cache=True, error_model="numpy")
def expected_tokens_per_step_kernel(parents, tokens, depths, p_rows, q_rows, rs, bs):
    """Exact expectations of a step on rows given for every node: (E[tokens], E[TV], edge, reach); R4:
    ``simulate.traversal_kernels.traversal_step_expectation_kernel`` (E[TV]: Theorem 12.3's bound)."""
    n, cstart, cidx, rows, mark, seen, scratch = _dense_step(parents, p_rows.shape[1])
    edge = np.empty(n)
    reach = np.empty(n)
    if rs[0] == RULE_R4:
        tokens_e, tv_e = traversal_step_expectation_kernel(parents, depths, n, cstart, cidx, tokens, p_rows,
                                                           q_rows, rows, bs, edge, reach)
        return tokens_e, tv_e, edge, reach
    psums = np.empty(n)
    for v in range(n):
        psums[v] = seqsum_kernel(p_rows[v])
    tokens_e, tv_e, _ = step_expectation_kernel(parents, tokens, depths, n, cstart, cidx, p_rows, rows, psums,
                                                q_rows, rows, rs, bs, mark, seen,
                                                0, scratch, edge, reach)
    return tokens_e, tv_e, edge, reach
