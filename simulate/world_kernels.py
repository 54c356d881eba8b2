"""Numba kernels of the synthetic worlds: latent states and target / draft rows.

A world is passed to kernels as a tuple ``W = (kind, ET, b, bq, fp, keys,
p_stat, q_stat)``:

- ``kind``: 0 latent-field world, 1 stationary world (p_stat / q_stat at every node);
- ``ET``: (d, V) codebook, transposed (unit rows of E);
- ``b`` / ``bq``: target / draft per-token biases, already divided by the temperature;
- ``fp``: float64 [beta/T, rho, sigma, beta_q/T, sigma_q, bmax, bqmax];
- ``keys``: uint64 [transition-noise key, drafter-noise key].

States live in per-step buffers indexed like the tree builder's nodes:
``zs[v]`` (unit vector), ``hs[v]`` (prefix hash), ``have[v]``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from simulate.rng import combine, normals

F_BETA, F_RHO, F_SIGMA, F_BETA_Q, F_SIGMA_Q, F_BMAX, F_BQMAX = range(7)
N_FPARAMS = 7
KIND_LATENT = 0
KIND_STATIONARY = 1

_INVLN2 = 1.4426950408889634
_LN2HI = 6.93147180369123816490e-01
_LN2LO = 1.90821492927058770002e-10
_MAGIC = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer in the low mantissa bits
_MAGIC_BITS = np.int64(np.array([_MAGIC]).view(np.int64)[0])


@njit(cache=True, error_model="numpy")
def normalise(z):
    """Scale ``z`` in place to unit Euclidean norm."""
    s = 0.0
    for j in range(z.shape[0]):
        s += z[j] * z[j]
    inv = 1.0 / math.sqrt(s)
    for j in range(z.shape[0]):
        z[j] *= inv


@njit(cache=True, error_model="numpy")
def softmax_rows(ET, bias, bmax, zb, out, kbuf):
    """``out = softmax(bias + E @ zb)`` over V, vectorised.

    The shift is the upper bound |zb| + max(bias) (code vectors are unit), so
    no max pass is needed; exp is a branch-free Cody-Waite reduction with a
    degree-11 polynomial (relative error < 1e-14) that LLVM vectorises, and
    the normaliser uses 8 independent partial sums. Falls back to the exact
    max when the bound underflows everything.
    """
    V = bias.shape[0]
    d = ET.shape[0]
    zn = 0.0
    for j in range(d):
        zn += zb[j] * zb[j]
    M = math.sqrt(zn) + bmax
    for x in range(V):
        out[x] = bias[x] - M
    for j in range(d):
        zj = zb[j]
        row = ET[j]
        for x in range(V):
            out[x] += row[x] * zj
    s = _exp_normalise(out, kbuf)
    if not s > 1e-250:  # the bound was far above the max: shift by the true max
        m = out[0]
        for x in range(V):
            out[x] = bias[x]
            for j in range(d):
                out[x] += ET[j, x] * zb[j]
        m = out[0]
        for x in range(1, V):
            m = max(m, out[x])
        for x in range(V):
            out[x] -= m
        _exp_normalise(out, kbuf)


@njit(cache=True, error_model="numpy")
def _exp_normalise(out, kbuf):
    V = out.shape[0]
    for x in range(V):
        y = max(out[x], -708.0)
        kf = y * _INVLN2 + _MAGIC
        k = kf - _MAGIC
        r = y - k * _LN2HI - k * _LN2LO
        out[x] = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (
            1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0 + r * (1.0 / 40320.0 + r * (
                1.0 / 362880.0 + r * (1.0 / 3628800.0 + r * (1.0 / 39916800.0)))))))))))
        kbuf[x] = kf
    ki = kbuf.view(np.int64)
    for x in range(V):
        ki[x] = (ki[x] - _MAGIC_BITS + 1023) << 52
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    x = 0
    while x + 8 <= V:
        out[x] *= kbuf[x]
        out[x + 1] *= kbuf[x + 1]
        out[x + 2] *= kbuf[x + 2]
        out[x + 3] *= kbuf[x + 3]
        out[x + 4] *= kbuf[x + 4]
        out[x + 5] *= kbuf[x + 5]
        out[x + 6] *= kbuf[x + 6]
        out[x + 7] *= kbuf[x + 7]
        s0 += out[x]
        s1 += out[x + 1]
        s2 += out[x + 2]
        s3 += out[x + 3]
        s4 += out[x + 4]
        s5 += out[x + 5]
        s6 += out[x + 6]
        s7 += out[x + 7]
        x += 8
    while x < V:
        out[x] *= kbuf[x]
        s0 += out[x]
        x += 1
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    if s > 1e-250:
        inv = 1.0 / s
        for x in range(V):
            out[x] *= inv
    return s


@njit(cache=True, error_model="numpy")
def transition(ET, fp, noise_key, z, h, x, z_out):
    """State after token x: normalise(rho z + (1 - rho) E_x + sigma xi); returns the new prefix hash.

    xi is keyed by (world noise key, new prefix hash), so a prefix always
    leads to the same state."""
    d = ET.shape[0]
    h2 = combine(h, x)
    xi = np.empty(d)
    normals(combine(noise_key, np.int64(h2 & np.uint64(0x7FFFFFFFFFFFFFFF))), xi)
    rho, sigma = fp[F_RHO], fp[F_SIGMA]
    for j in range(d):
        z_out[j] = rho * z[j] + (1.0 - rho) * ET[j, x] + sigma * xi[j]
    normalise(z_out)
    return h2


@njit(cache=True, error_model="numpy")
def initial_state(ET, noise_key, seq_key, z_out):
    """A sequence's first state (uniform on the sphere) and prefix hash, keyed by the sequence."""
    h = combine(seq_key, np.int64(0x5EED))
    normals(combine(noise_key, np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))), z_out)
    normalise(z_out)
    return h


@njit(cache=True, error_model="numpy")
def ensure_state(W, v, bparent, btoken, zs, hs, have):
    """Compute the state of buffer node v (and any missing ancestors) from its parent chain."""
    if have[v] or W[0] != KIND_LATENT:
        return
    chain = np.empty(bparent.shape[0], dtype=np.int64)
    n = 0
    u = v
    while not have[u]:
        chain[n] = u
        n += 1
        u = bparent[u]
    for i in range(n - 1, -1, -1):
        w = chain[i]
        hs[w] = transition(W[1], W[4], W[5][0], zs[bparent[w]], hs[bparent[w]], btoken[w], zs[w])
        have[w] = True


@njit(cache=True, error_model="numpy")
def target_row(W, z, out, kbuf):
    """p at a node with state z (stationary: p_stat)."""
    if W[0] == KIND_STATIONARY:
        out[:] = W[6]
        return
    d = z.shape[0]
    zb = np.empty(d)
    for j in range(d):
        zb[j] = W[4][F_BETA] * z[j]
    softmax_rows(W[1], W[2], W[4][F_BMAX], zb, out, kbuf)


@njit(cache=True, error_model="numpy")
def draft_row(W, z, h, out, kbuf):
    """q at a node with state z and prefix hash h (stationary: q_stat).

    The drafter sees normalise(z + sigma_q xi_q), xi_q keyed by (drafter key, h)."""
    if W[0] == KIND_STATIONARY:
        out[:] = W[7]
        return
    d = z.shape[0]
    zq = np.empty(d)
    normals(combine(W[5][1], np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))), zq)
    for j in range(d):
        zq[j] = z[j] + W[4][F_SIGMA_Q] * zq[j]
    normalise(zq)
    for j in range(d):
        zq[j] *= W[4][F_BETA_Q]
    softmax_rows(W[1], W[3], W[4][F_BQMAX], zq, out, kbuf)
