"""Numba pieces of one sequence's decoding that the engine (``simulate.engine``) and VVS's skip steps
(``simulate.vvs_kernels``) share: a sequence's scratch (the draft buffer and per-node arrays), p at a tree
node on demand (one node, every node with children, or where a step's R1-R3 walk asks for it), a step's
output row and the move of the world's state to the next root.

Moved verbatim from :mod:`simulate.engine` (names without the leading underscore).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from relaxspec.simulate.step_kernels import sample_step_walk_kernel
from relaxspec.simulate.world_kernels import ensure_state, target_row, transition


@njit(cache=True, error_model="numpy")
def p_row(W, v, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, npr):
    """p at final node v into the next free row ``p_rows[npr]``; returns the next free row."""
    b = buf_of[v]
    ensure_state(W, b, bparent, btoken, zs, hs, have)
    psums[v] = target_row(W, zs[b], p_rows[npr], es[0], cmaxs[0])
    prow[v] = npr
    return npr + 1


@njit(cache=True, error_model="numpy")
def parent_rows(W, n, cstart, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, npr):
    """p at every node of the tree (``n`` nodes, CSR children ``cstart``) that has children, as theory's
    expectation of the step reads them; returns the next free row."""
    for v in range(n):
        if cstart[v + 1] > cstart[v]:
            npr = p_row(W, v, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, npr)
    return npr


@njit(cache=True, error_model="numpy")
def walk_step(W, parents, tokens, depths, n, cstart, cidx, buf_of, bparent, btoken, zs, hs, have, p_rows,
              prow, psums, es, cmaxs, q_rows, qrow_f, ua, ud, rs, bs, mark, epoch, scratch, path, state,
              walk_tv, ok, tops, npr):
    """A step's R1-R3 walk (``step_kernels.sample_step_walk_kernel``, from a reset ``state``), p computed
    at each node where it asks for it; returns (accepted path length m, bonus token or -1, epoch, next
    free p row)."""
    state[0] = 0
    state[1] = 0
    while True:  # the walk asks for p where it goes
        m, bonus, epoch, need = sample_step_walk_kernel(parents, tokens, depths, n, cstart, cidx, p_rows,
                                                        prow, q_rows, qrow_f, ua, ud, rs, bs, mark, epoch,
                                                        scratch, path, state, walk_tv, ok, tops)
        if need < 0:
            return m, bonus, epoch, npr
        npr = p_row(W, need, buf_of, bparent, btoken, zs, hs, have, p_rows, prow, psums, es, cmaxs, npr)


@njit(cache=True, error_model="numpy")
def record_step(o, step, m, n, depths, path, cstart, cidx, calls, e_tok, e_tv, t_tv):
    """One step's row of the outputs ``o`` = (o_int, o_exp, o_tv, o_ttv) (``engine.STEP_FIELDS``)."""
    o_int, o_exp, o_tv, o_ttv = o
    depth = 0
    for v in range(n):
        depth = max(depth, depths[v])
    choice = -1
    if m > 1:
        choice = path[1] - cidx[cstart[0]]
    o_int[step, 0] = m
    o_int[step, 1] = n - 1
    o_int[step, 2] = depth
    o_int[step, 3] = m - 1
    o_int[step, 4] = calls
    o_int[step, 5] = choice
    o_exp[step] = e_tok
    o_tv[step] = e_tv
    o_ttv[step] = t_tv


@njit(cache=True, error_model="numpy")
def advance_root(W, last, bonus, bparent, btoken, zs, hs, have):
    """The new root: the world's state after the accepted path (ending at buffer node ``last``) and the
    bonus token (a latent world moves its state; a stationary or trace world keeps none)."""
    if W[0] == 0:
        ensure_state(W, last, bparent, btoken, zs, hs, have)
        znew = np.empty(zs.shape[1])
        hs[0] = transition(W[1], W[4], W[5][0], zs[last], hs[last], bonus, znew)
        zs[0, :] = znew
    have[0] = True


@njit(cache=True, error_model="numpy")
def buffer_scratch(max_buffer, d):
    """A sequence's draft buffer (every node a tree build may create): parent, token, depth, world
    state (z, key, whether computed), q row index and score per buffer node."""
    return (np.zeros(max_buffer, dtype=np.int64), np.zeros(max_buffer, dtype=np.int64),
            np.zeros(max_buffer, dtype=np.int64), np.zeros((max_buffer, d)),
            np.zeros(max_buffer, dtype=np.uint64), np.zeros(max_buffer, dtype=np.bool_),
            np.full(max_buffer, -1, dtype=np.int64), np.zeros(max_buffer))


@njit(cache=True, error_model="numpy")
def node_scratch(max_nodes):
    """A sequence's per-tree-node arrays: parents, tokens, depths, buffer node, p / q row indices, CSR
    children, the accepted path, argmax tops (int64); p sums, uniforms, edge and reach probabilities
    (float64); greedy flags (bool)."""
    ints = (np.empty(max_nodes, dtype=np.int64), np.empty(max_nodes, dtype=np.int64),
            np.empty(max_nodes, dtype=np.int64), np.empty(max_nodes, dtype=np.int64),
            np.full(max_nodes, -1, dtype=np.int64), np.full(max_nodes, -1, dtype=np.int64),
            np.empty(max_nodes + 1, dtype=np.int64), np.empty(max_nodes, dtype=np.int64),
            np.empty(max_nodes, dtype=np.int64), np.empty(max_nodes, dtype=np.int64))
    floats = (np.zeros(max_nodes), np.empty(max_nodes), np.empty(max_nodes), np.empty(max_nodes),
              np.empty(max_nodes))
    return ints + floats + (np.empty(max_nodes, dtype=np.bool_),)
