"""Kernels on a world's expanded draft rows: ranking (the m largest entries, ties by lower index) and reading.

The ranking kernels are Numba twins of ``np.argsort(-values, kind="stable")[:m]``.
Row i of an expansion holds q_i = ``es[i] * invs[i]`` (latent world) or
q_stat (stationary world), as :func:`simulate.world_kernels.draft_exps`
leaves them. Tree builders (:mod:`simulate.policy_kernels`) and child
selection (:mod:`simulate.latent_kernels`) use them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from relaxspec.simulate.world_kernels import KIND_STATIONARY, scale_into, vocab_size


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
def _insert(vx, x, m, cnt, out, vals):
    """Insert token x of value vx into the ranked ``out[:cnt]`` / ``vals`` (value desc, then id asc,
    keeping m); returns the new count."""
    if cnt == m and not (vx > vals[m - 1] or (vx == vals[m - 1] and x < out[m - 1])):
        return cnt
    pos = cnt if cnt < m else m - 1
    while pos > 0 and (vx > vals[pos - 1] or (vx == vals[pos - 1] and x < out[pos - 1])):
        out[pos] = out[pos - 1]
        vals[pos] = vals[pos - 1]
        pos -= 1
    out[pos] = x
    vals[pos] = vx
    return min(cnt + 1, m)


@njit(cache=True, error_model="numpy")
def top_tokens(e, V, cmax, inv, m, out, vals):
    """The m largest of q[x] = ``e[x] * inv`` (float64) over x < V, ties by lower id, in rank order
    (``np.argsort(-q, kind="stable")[:m]``); ``vals`` gets their q. Returns the count.

    ``cmax[c]`` bounds ``e`` on the chunk x = c mod NCH (``simulate.world_kernels``).
    Rounding is monotone, so after scanning the m chunks with the largest
    maxima only chunks whose maximum times ``inv`` reaches the m-th value so
    far can still hold a winner; the ranking is by (value, id), so the scan
    order does not matter."""
    nch = cmax.shape[0]
    chunks = np.empty(max(m, 1), dtype=np.int64)
    nc = top_m(cmax, 0, nch, m, chunks)
    done = np.zeros(nch, dtype=np.bool_)
    cnt = 0
    for i in range(nc):
        c = chunks[i]
        done[c] = True
        for x in range(c, V, nch):
            cnt = _insert(e[x] * inv, x, m, cnt, out, vals)
    for c in range(nch):
        if not done[c] and (cnt < m or cmax[c] * inv >= vals[m - 1]):
            for x in range(c, V, nch):
                cnt = _insert(e[x] * inv, x, m, cnt, out, vals)
    return cnt


@njit(cache=True, error_model="numpy")
def top_of_row(W, es, cmaxs, invs, i, m, out, vals):
    """The m most probable tokens of expanded row i (:func:`top_tokens`; row i as
    ``simulate.policy_kernels`` expands them); ``vals`` gets their q."""
    if W[0] == KIND_STATIONARY:
        return top_tokens(W[7], W[7].shape[0], cmaxs[i], invs[i], m, out, vals)
    return top_tokens(es[i], vocab_size(W), cmaxs[i], invs[i], m, out, vals)


@njit(cache=True, error_model="numpy")
def keep_row(W, es, invs, i, row):
    """The normalised q of expanded row i into the float64 ``row``."""
    if W[0] == KIND_STATIONARY:
        row[:] = W[7]
    else:
        scale_into(es[i], invs[i], row)
