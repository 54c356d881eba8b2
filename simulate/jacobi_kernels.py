"""Numba kernels of speculative Jacobi decoding (SPEC 9.1) with boosted acceptance (9.2-9.4).

Twins of :mod:`theory.jacobi_sampler`: a window is verified as rule R2 on a chain (node j holds d_j,
tested at depth j) by ``simulate.step_kernels.sample_step_kernel``, the twin of
``theory.tree.sample_step``, with its TV (``path_tv``) and, on request, its exact expectations
(``expected_tokens_per_step_kernel``); with ``rs`` of rule R4 the same kernels verify the chain by
traversal verification (``simulate.traversal_kernels``, the twin of ``theory.traversal``), and the
budget boost of SPEC 9.5 works for both; this module adds the window's life: the fresh tokens that fill
it, the target forward along it (the world's rows only) and the sampled tokens the next window keeps.

A sequence draws its uniforms from ``stream_key(seed, s)`` at counters ``step_counter(step, j,
purpose)``: ``U_ACCEPT`` j tests d_{j+1}, ``U_DRAW`` j is position j + 1's residual draw or sampled
token (j = L: the bonus), ``U_TREE`` k fills window slot k with a fresh uniform token. The rule travels
as ``rs`` (``theory.verification.KernelArgs.rs`` of unrelaxed R2 or R4) and the boost as ``bs``
(``theory.verification.Verification.encode``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_counter, stream_key, uniform
from relaxspec.simulate.step_kernels import expected_tokens_per_step_kernel, sample_step_kernel
from relaxspec.simulate.verify_kernels import draw_token_kernel
from relaxspec.simulate.world_kernels import (
    KIND_LATENT,
    initial_state,
    row_scratch,
    target_row,
    transition,
    vocab_size,
)

FRESH_UNIFORM, FRESH_COPY = 0, 1
F_TOKENS, F_SIZE, F_DEPTH, F_ACCEPTED, F_CALLS, F_CHOICE = range(6)


# ---------------------------------------------------------------- one sequence
@njit(cache=True, error_model="numpy")
def _fill_window(key, step, n_kept, last, fresh, drafts, q_rows):
    """``theory.jacobi_sampler.fill_window``: slots n_kept..L-1 get fresh tokens with one-hot q."""
    L = drafts.shape[0]
    V = q_rows.shape[1]
    left = drafts[n_kept - 1] if n_kept > 0 else last
    for k in range(n_kept, L):
        if fresh == FRESH_COPY and left >= 0:
            tok = left
        else:
            tok = min(int(uniform(key, step_counter(step, k, U_TREE)) * V), V - 1)
        drafts[k] = tok
        for y in range(V):
            q_rows[k, y] = 0.0
        q_rows[k, tok] = 1.0
        left = tok


@njit(cache=True, error_model="numpy")
def _sequence(s, W, L, fresh, rs, bs, exact, seq_len, seed, o_int, o_exp, o_tv, o_ttv, o_seq, n_steps):
    """Decode sequence ``s`` with windows of L drafts; fills its per-step rows, its tokens ``o_seq`` and
    ``n_steps[s]``."""
    V = vocab_size(W)
    d = W[1].shape[0]
    key = stream_key(seed, s)
    zs = np.zeros((L + 1, d))
    hs = np.zeros(L + 1, dtype=np.uint64)
    znew = np.zeros(d)
    if W[0] == KIND_LATENT:
        hs[0] = initial_state(W[1], W[4], W[5][0], key, zs[0])
    parents = np.arange(-1, L, dtype=np.int64)  # the chain: node j holds d_j
    depths = np.arange(L + 1, dtype=np.int64)
    tokens = np.zeros(L + 1, dtype=np.int64)
    drafts = tokens[1:]
    p_rows = np.empty((L + 1, V))
    q_rows = np.full((L + 1, V), 1.0 / V)  # row L (the leaf's) is never read
    ua = np.zeros(L + 1)
    ud = np.empty(L + 1)
    es, cmaxs = row_scratch(W, 1)
    cum = np.empty(V)
    n_kept = 0
    last = -1
    pos = 0
    step = 0
    while pos < seq_len:
        _fill_window(key, step, n_kept, last, fresh, drafts, q_rows)
        for j in range(L + 1):  # the target forward: p_1..p_{L+1} along the window's drafts
            if j > 0 and W[0] == KIND_LATENT:
                hs[j] = transition(W[1], W[4], W[5][0], zs[j - 1], hs[j - 1], drafts[j - 1], zs[j])
            target_row(W, zs[j], p_rows[j], es[0], cmaxs[0])
            if j > 0:
                ua[j] = uniform(key, step_counter(step, j - 1, U_ACCEPT))
            ud[j] = uniform(key, step_counter(step, j, U_DRAW))
        path, token, t_tv = sample_step_kernel(parents, tokens, depths, p_rows, q_rows, ua, ud, rs, bs)
        a = path.shape[0] - 1
        e_tok, e_tv = math.nan, math.nan
        if exact:
            e_tok, e_tv, _, _ = expected_tokens_per_step_kernel(parents, tokens, depths, p_rows, q_rows, rs,
                                                                bs)
        o_int[step, F_TOKENS] = a + 1
        o_int[step, F_SIZE] = L
        o_int[step, F_DEPTH] = L
        o_int[step, F_ACCEPTED] = a
        o_int[step, F_CALLS] = 0
        o_int[step, F_CHOICE] = 0 if a > 0 else -1
        o_exp[step] = e_tok
        o_tv[step] = e_tv
        o_ttv[step] = t_tv
        if W[0] == KIND_LATENT:  # commit d_1..d_a and the token: the state after them is the new root
            hs[0] = transition(W[1], W[4], W[5][0], zs[a], hs[a], token, znew)
            zs[0, :] = znew
        for i in range(a):
            o_seq[pos + i] = drafts[i]
        o_seq[pos + a] = token
        n_kept = L - a  # the next window keeps t_{a+2}..t_{L+1}, q := the p each was drawn from
        for i in range(n_kept):
            k = a + 1 + i
            drafts[i] = draw_token_kernel(p_rows[k], ud[k], cum)
            q_rows[i, :] = p_rows[k, :]
        last = token
        pos += a + 1
        step += 1
    n_steps[s] = step


@njit(parallel=True, cache=True, error_model="numpy")
def jacobi_kernel(W, L, fresh, rs, bs, exact, n_seq, seq_len, seed, out, seqs, n_steps):
    """Decode ``n_seq`` sequences in parallel; per-step outputs ``out`` = (o_int, o_exp, o_tv, o_ttv),
    each (n_seq, seq_len, ...), with ``engine.STEP_FIELDS`` as o_int's columns; ``seqs`` (n_seq,
    seq_len + L) gets each sequence's tokens (the last step may overshoot seq_len)."""
    rule, code, k, param, variant, nb = rs  # taken apart and rebuilt: see engine.simulate_kernel
    kind, before, after, fallback, tau, dist, omega, emb, delta, table = bs
    o_int, o_exp, o_tv, o_ttv = out
    for s in prange(n_seq):
        _sequence(np.int64(s), W, L, fresh, (rule, code, k, param, variant, nb),
                  (kind, before, after, fallback, tau, dist, omega, emb, delta, table), exact, seq_len, seed,
                  o_int[s], o_exp[s], o_tv[s], o_ttv[s], seqs[s], n_steps)
