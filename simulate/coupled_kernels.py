"""Numba kernels of coupled Jacobi windows (SCD, SPEC 10.1) and SJD-PAC windows (SPEC 10.2).

The twin of :mod:`simulate.coupled_oracle` (whose docstring states the rule and the uniforms' layout):
same uniforms, same decisions. A window is L columns of at most ``width`` candidates (``cand``,
``ncand``) with their stored law (``qcol``, full rows); one forward computes p along the spine, R2 walks
the column product (p off the spine computed along the path; with the budget boost of ``bs``, SPEC 9.5,
each node by ``simulate.verify_kernels.budget_r2_node_kernel``), and the next window's columns are formed
by sampling, maximal coupling or Gumbel-max, with PD's siblings at the first ``depth`` new columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.windows import MAX_PAC_WIDTH, CoupledWindow, PacWindow
from relaxspec.simulate.boost_kernels import budget_r2_node_kernel
from relaxspec.simulate.jacobi_kernels import F_ACCEPTED, F_CALLS, F_CHOICE, F_DEPTH, F_SIZE, F_TOKENS
from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE, combine, step_counter, stream_key, uniform
from relaxspec.simulate.verify_kernels import draw_token_kernel
from relaxspec.simulate.world_kernels import (
    KIND_LATENT,
    initial_state,
    row_scratch,
    target_row,
    transition,
    vocab_size,
)
from relaxspec.theory.coupled import Coupling, Siblings
from relaxspec.theory.jacobi_sampler import MAX_WINDOW
from relaxspec.theory.rules import BOOST_BUDGET

COUPLE_NONE, COUPLE_MAXIMAL, COUPLE_GUMBEL = 0, 1, 2
"""How the next window's spine drafts are formed: sampled afresh (SJD), maximal coupling, Gumbel-max."""
SIBLINGS_PRINCIPLED, SIBLINGS_OFFICIAL = 0, 1
U_COUPLE = 3
"""The purpose of the uniforms that form the next window (``simulate.rng`` reserves 4 purposes)."""
MAX_WIDTH = MAX_PAC_WIDTH
REDRAW_BASE = MAX_WINDOW + 1
SIBLING_BASE = 2 * (MAX_WINDOW + 1)
"""``U_COUPLE`` nodes: keep tests at kk, residual redraws at ``REDRAW_BASE + kk``, siblings from
``SIBLING_BASE + kk * MAX_WIDTH``."""
GUMBEL_STREAM = 0x6755_6D62  # the sequence's Gumbel noise is its own child stream (any fixed tag)
COUPLING_CODES = {Coupling.NONE: COUPLE_NONE, Coupling.PRINCIPLED: COUPLE_MAXIMAL,
                  Coupling.OFFICIAL: COUPLE_MAXIMAL, Coupling.GUMBEL: COUPLE_GUMBEL}
"""The kernel's code of each coupling (``official`` is maximal coupling with ``store_official``)."""
SIBLING_CODES = {Siblings.PRINCIPLED: SIBLINGS_PRINCIPLED, Siblings.OFFICIAL: SIBLINGS_OFFICIAL}


@dataclass(frozen=True)
class WindowCodes:
    """A coupled or PAC window as the kernel takes it (:func:`window_codes`)."""

    window: int
    copy: bool
    coupling: int
    store_official: bool
    width: int
    depth: int
    siblings: int


def window_codes(window: JacobiWindow) -> WindowCodes:
    """The codes of a :class:`CoupledWindow` or :class:`PacWindow`."""
    copy = window.fresh.copies
    if isinstance(window, CoupledWindow):
        return WindowCodes(window.window, copy, COUPLING_CODES[window.coupling],
                           window.coupling.keeps_old_law, 1, 0, SIBLINGS_PRINCIPLED)
    if isinstance(window, PacWindow):
        return WindowCodes(window.window, copy, COUPLING_CODES[window.coupling], False, window.width,
                           window.depth, SIBLING_CODES[window.siblings])
    raise ValueError(f"expected a coupled or pac window, got {window}")


@njit(cache=True, error_model="numpy")
def noise_key(key, position):
    """The key of the Gumbel noise at absolute ``position`` of the sequence keyed ``key``."""
    return combine(combine(key, np.int64(GUMBEL_STREAM)), np.int64(position))


@njit(cache=True, error_model="numpy")
def noise_uniforms(key, position, out):
    """The uniforms ``out[y]`` of the Gumbel noise g_{position, y} (``g = -log(-log u)``)."""
    gk = noise_key(key, position)
    for y in range(out.shape[0]):
        out[y] = uniform(gk, y)


@njit(cache=True, error_model="numpy")
def gumbel_max_kernel(P, key, position):
    """``argmax_y log P(y) + g_{position, y}`` over tokens with P > 0 (ties: the lowest token)."""
    gk = noise_key(key, position)
    best, arg = -math.inf, 0
    for y in range(P.shape[0]):
        if P[y] > 0.0:
            s = math.log(P[y]) - math.log(-math.log(uniform(gk, y)))
            if s > best:
                best, arg = s, y
    return arg


@njit(cache=True, error_model="numpy")
def _normalise_into(w, out):
    """``out = w / sum(w)`` (sequential sum); returns False, leaving ``out``, when the sum is not > 0."""
    s = 0.0
    for y in range(w.shape[0]):
        s += w[y]
    if s <= 0.0:
        return False
    for y in range(w.shape[0]):
        out[y] = w[y] / s
    return True


@njit(cache=True, error_model="numpy")
def _residual_into(r, q, tmp, out):
    """``out = norm((r - q)^+)``; False (``out`` untouched) when it has no mass."""
    for y in range(r.shape[0]):
        t = r[y] - q[y]
        tmp[y] = t if t > 0.0 else 0.0
    return _normalise_into(tmp, out)


@njit(cache=True, error_model="numpy")
def _siblings(law, y, exclude_y, more, key, step, kk, cand_row, rest, tmp, cum):
    """``more`` draws without replacement from ``law`` (y excluded when ``exclude_y``) into
    ``cand_row[1:]``; returns how many were drawn."""
    rest[:] = law
    if exclude_y:
        rest[y] = 0.0
    n = 0
    for i in range(more):
        if not _normalise_into(rest, tmp):
            break
        z = draw_token_kernel(tmp, uniform(key, step_counter(step, SIBLING_BASE + kk * MAX_WIDTH + 1 + i,
                                                              U_COUPLE)), cum)
        cand_row[1 + i] = z
        rest[z] = 0.0
        n += 1
    return n


@njit(cache=True, error_model="numpy")
def _sequence(s, W, L, copy, coupling, store_official, K, depth, siblings, bs, exact, seq_len, seed, o_int,
              o_exp, o_tv, o_ttv, o_seq, n_steps):
    V = vocab_size(W)
    budget = bs[0] == BOOST_BUDGET
    ukids, acc_b, ch_b = np.empty(K), np.empty(K), np.empty(K)
    d = W[1].shape[0]
    key = stream_key(seed, s)
    latent = W[0] == KIND_LATENT
    zs = np.zeros((L + 1, d))
    hs = np.zeros(L + 1, dtype=np.uint64)
    zp, zt = np.zeros(d), np.zeros(d)
    hp = np.uint64(0)
    if latent:
        hs[0] = initial_state(W[1], W[4], W[5][0], key, zs[0])
    cand, cand2 = np.zeros((L, K), dtype=np.int64), np.zeros((L, K), dtype=np.int64)
    ncand, ncand2 = np.zeros(L, dtype=np.int64), np.zeros(L, dtype=np.int64)
    qcol, q2 = np.zeros((L, V)), np.zeros((L, V))
    P = np.empty((L + 1, V))
    prow, r, qp, tmp = np.empty(V), np.empty(V), np.empty(V), np.empty(V)
    res, rest, tmp2, cum = np.empty(V), np.empty(V), np.empty(V), np.empty(V)
    es, cmaxs = row_scratch(W, 1)
    n_kept, last, pos, step = 0, -1, 0, 0
    while pos < seq_len:
        left = cand[n_kept - 1, 0] if n_kept > 0 else last  # fresh slots (SJD's fill)
        for k in range(n_kept, L):
            tok = left if copy and left >= 0 else min(int(uniform(key, step_counter(step, k, U_TREE)) * V),
                                                      V - 1)
            cand[k, 0] = tok
            ncand[k] = 1
            qcol[k, :] = 0.0
            qcol[k, tok] = 1.0
            left = tok
        for j in range(L + 1):  # the forward along the spine
            if j > 0 and latent:
                hs[j] = transition(W[1], W[4], W[5][0], zs[j - 1], hs[j - 1], cand[j - 1, 0], zs[j])
            target_row(W, zs[j], P[j], es[0], cmaxs[0])
        # R2 over the column product
        on_spine, choice, a, c, token = True, -1, 0, L, -1
        t_tv = 0.0
        prow[:] = P[0]
        for col in range(L):
            r[:] = prow
            qp[:] = qcol[col]
            alive = True
            hit = -1
            if budget:  # SPEC 9.5: the node's stages share its budget; the charges of those tested
                m = ncand[col]
                for i in range(m):
                    ukids[i] = uniform(key, step_counter(step, col * K + i, U_ACCEPT))
                tested, hit = budget_r2_node_kernel(prow, qcol[col], cand[col, :m], ukids[:m], True, bs[8],
                                                    bs[9], r, qp, res, acc_b, ch_b, m)
                node_tv = 0.0
                for i in range(tested):
                    node_tv += ch_b[i]
                t_tv += node_tv
            for i in range(0 if budget else ncand[col]):
                x = cand[col, i]
                qx = qp[x] if alive else 0.0
                acc = min(1.0, r[x] / qx) if qx > 0.0 else (1.0 if r[x] > 0.0 else 0.0)
                if uniform(key, step_counter(step, col * K + i, U_ACCEPT)) < acc:
                    hit = i
                    break
                if alive:
                    if not _residual_into(r, qp, tmp, r):
                        r[:] = 1.0 / V
                    qp[x] = 0.0
                    alive = _normalise_into(qp, qp)
            if hit < 0:
                c = col
                token = draw_token_kernel(r, uniform(key, step_counter(step, col, U_DRAW)), cum)
                break
            x = cand[col, hit]
            if col == 0:
                choice = hit
            o_seq[pos + a] = x
            a += 1
            if on_spine and hit == 0:
                prow[:] = P[col + 1]
            else:
                if latent:
                    if on_spine:
                        hp = transition(W[1], W[4], W[5][0], zs[col], hs[col], x, zt)
                    else:
                        hp = transition(W[1], W[4], W[5][0], zp, hp, x, zt)
                    zp[:] = zt
                on_spine = False
                target_row(W, zp, prow, es[0], cmaxs[0])
        if c == L:  # the bonus from the path's p
            if coupling == COUPLE_GUMBEL:
                token = gumbel_max_kernel(prow, key, pos + L)
            else:
                token = draw_token_kernel(prow, uniform(key, step_counter(step, L, U_DRAW)), cum)
        size, level, single = 0, 1, True
        for col in range(L):
            level *= ncand[col]
            size += level
            single = single and ncand[col] == 1
        e_tok, e_tv = math.nan, math.nan
        if exact and single:
            reach, e_tok, e_tv = 1.0, 1.0, 0.0
            for col in range(L):
                x = cand[col, 0]
                if budget:  # the one stage of a single candidate, with the node's whole budget
                    budget_r2_node_kernel(P[col], qcol[col], cand[col, :1], ukids[:1], False, bs[8], bs[9], r,
                                          qp, res, acc_b, ch_b, 1)
                    e_tv += reach * ch_b[0]
                    reach *= acc_b[0]
                else:
                    reach *= min(1.0, P[col, x] / qcol[col, x])
                e_tok += reach
        o_int[step, F_TOKENS] = a + 1
        o_int[step, F_SIZE] = size
        o_int[step, F_DEPTH] = L
        o_int[step, F_ACCEPTED] = a
        o_int[step, F_CALLS] = 0
        o_int[step, F_CHOICE] = choice
        o_exp[step] = e_tok
        if exact:
            o_tv[step] = e_tv
        o_ttv[step] = t_tv
        o_seq[pos + a] = token
        # the next window's columns from old columns c + 1..L
        n_new = 0
        for kk in range(c + 1, L + 1):  # none when all L passed (c = L)
            Pk = P[kk]
            kept = False
            store_old = False
            res[:] = Pk
            if coupling == COUPLE_GUMBEL:
                y = gumbel_max_kernel(Pk, key, pos + kk)
            elif kk == L or coupling == COUPLE_NONE:
                y = draw_token_kernel(Pk, uniform(key, step_counter(step, kk, U_DRAW)), cum)
            else:
                x = cand[kk, 0]
                acc = min(1.0, Pk[x] / qcol[kk, x])
                has_res = _residual_into(Pk, qcol[kk], tmp, res)
                if uniform(key, step_counter(step, kk, U_COUPLE)) < acc or not has_res:
                    y, kept, store_old = x, True, store_official
                else:
                    u_redraw = uniform(key, step_counter(step, REDRAW_BASE + kk, U_COUPLE))
                    y = draw_token_kernel(res, u_redraw, cum)
            cand2[n_new, 0] = y
            q2[n_new, :] = qcol[kk] if store_old else Pk
            n = 1
            if K > 1 and kk - c <= depth:
                if siblings == SIBLINGS_OFFICIAL:
                    n += _siblings(res, y, not kept, K - 1, key, step, kk, cand2[n_new], rest, tmp2, cum)
                else:
                    n += _siblings(q2[n_new], y, True, K - 1, key, step, kk, cand2[n_new], rest, tmp2, cum)
            ncand2[n_new] = n
            n_new += 1
        cand, cand2 = cand2, cand
        ncand, ncand2 = ncand2, ncand
        qcol, q2 = q2, qcol
        n_kept = n_new
        if latent:  # the committed state after the path and the token
            if on_spine:
                hs[0] = transition(W[1], W[4], W[5][0], zs[a], hs[a], token, zt)
            else:
                hs[0] = transition(W[1], W[4], W[5][0], zp, hp, token, zt)
            zs[0, :] = zt
        last = token
        pos += a + 1
        step += 1
    n_steps[s] = step


@njit(parallel=True, cache=True, error_model="numpy")
def coupled_kernel(W, L, copy, coupling, store_official, width, depth, siblings, bs, exact, n_seq, seq_len,
                   seed, out, seqs, n_steps):
    """Decode ``n_seq`` sequences in parallel into ``out`` = (o_int (n_seq, seq_len, 6:
    ``engine.STEP_FIELDS``), o_exp and o_tv (E[tokens] and E[TV] of single-candidate windows when
    ``exact``), o_ttv (the budget's charges of the nodes that decided the emitted tokens; 0 unboosted)),
    ``seqs`` (n_seq, seq_len + L) and ``n_steps``; ``bs``: ``Verification.encode``'s boost tuple (the
    budget, or none). Every uniform comes from ``stream_key(seed, s)`` (thread-count invariant)."""
    kind, before, after, fallback, tau, dist, omega, emb, delta, table = bs  # rebuilt: engine.simulate_kernel
    o_int, o_exp, o_tv, o_ttv = out
    for s in prange(n_seq):
        _sequence(np.int64(s), W, L, copy, coupling, store_official, width, depth, siblings,
                  (kind, before, after, fallback, tau, dist, omega, emb, delta, table), exact, seq_len, seed,
                  o_int[s], o_exp[s], o_tv[s], o_ttv[s], seqs[s], n_steps)


__all__ = ["COUPLE_GUMBEL", "COUPLE_MAXIMAL", "COUPLE_NONE", "MAX_WIDTH", "REDRAW_BASE", "SIBLING_BASE",
           "SIBLINGS_OFFICIAL", "SIBLINGS_PRINCIPLED", "U_COUPLE", "WindowCodes", "coupled_kernel",
           "gumbel_max_kernel", "noise_uniforms", "window_codes"]
