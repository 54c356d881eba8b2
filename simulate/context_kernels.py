"""Numba kernel of a world's context sensitivity kappa_m (SPEC 11; the Python layer:
:mod:`simulate.context`, whose ``backend="numpy"`` oracle this kernel matches bit for bit).

Sequence s of a run is sampled from the world's target with the uniforms ``uniform(stream_key(seed, s),
t)`` (the draws of :func:`simulate.worlds.sampled_nodes`, through the sequential inverse CDF of
``theory.sampler.draw_token``). For every position r but the last, the token at r is replaced by an
independent draw x' from the law at r (uniform ``uniform(replace_key(seed, s), r)``), the states after r
are recomputed along the original tokens, and the exact TV between the law at r + m under the two
prefixes is kappa_m's term at position r + m (m = 1..n_lags, while r + m is in the sequence).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from relaxspec.simulate.rng import combine, stream_key, uniform
from relaxspec.simulate.verify_kernels import draw_token_kernel
from relaxspec.simulate.world_kernels import initial_state, row_scratch, target_row, transition, vocab_size

REPLACE_SALT = np.int64(0xC0DE)  # the replacement draws' stream, apart from the path's


@njit(cache=True, error_model="numpy")
def replace_key(seed, s):
    """Key of sequence ``s``'s replacement draws."""
    return combine(stream_key(seed, s), REPLACE_SALT)


@njit(cache=True, error_model="numpy")
def row_tv(p, q):
    """0.5 sum |p - q|, summed in token order (the oracle sums the same way)."""
    total = 0.0
    for x in range(p.shape[0]):
        total += abs(p[x] - q[x])
    return 0.5 * total


@njit(cache=True, error_model="numpy")
def sequence_kappa(W, s, seed, seq_len, n_lags, sums):
    """Add sequence ``s``'s TVs at lag m to ``sums[m - 1]`` (module docstring)."""
    V = vocab_size(W)
    D = W[1].shape[0]
    key = stream_key(seed, s)
    rkey = replace_key(seed, s)
    zs = np.empty((seq_len, D))
    hs = np.empty(seq_len, dtype=np.uint64)
    rows = np.empty((seq_len, V))
    tokens = np.empty(seq_len, dtype=np.int64)
    es, cmaxs = row_scratch(W, 1)
    cum = np.empty(V)
    hs[0] = initial_state(W[1], W[4], W[5][0], key, zs[0])
    for t in range(seq_len):
        target_row(W, zs[t], rows[t], es[0], cmaxs[0])
        tokens[t] = draw_token_kernel(rows[t], uniform(key, t), cum)
        if t + 1 < seq_len:
            hs[t + 1] = transition(W[1], W[4], W[5][0], zs[t], hs[t], tokens[t], zs[t + 1])
    z = np.empty(D)
    z2 = np.empty(D)
    row = np.empty(V)
    for r in range(seq_len - 1):
        x = draw_token_kernel(rows[r], uniform(rkey, r), cum)
        h = transition(W[1], W[4], W[5][0], zs[r], hs[r], x, z)
        for m in range(1, min(n_lags, seq_len - 1 - r) + 1):
            t = r + m
            target_row(W, z, row, es[0], cmaxs[0])
            sums[m - 1] += row_tv(row, rows[t])
            if m < n_lags and t + 1 < seq_len:
                h = transition(W[1], W[4], W[5][0], z, h, tokens[t], z2)
                z, z2 = z2, z


@njit(parallel=True, cache=True, error_model="numpy")
def kappa_kernel(W, seed, seq_len, n_lags, sums):
    """Sequences 0..len(sums)-1 in parallel: ``sums[s, m - 1]`` = sequence s's summed TVs at lag m."""
    for s in prange(sums.shape[0]):
        sequence_kappa(W, np.int64(s), seed, seq_len, n_lags, sums[s])
