"""Numba kernels of the synthetic worlds: latent states and target / draft rows.

A world is passed to kernels as a tuple ``W = (kind, ET, b, bq, fp, keys,
p_stat, q_stat, ET32)``:

- ``kind``: 0 latent-field world, 1 stationary world (p_stat / q_stat at every node);
- ``ET``: (d, V) float64 codebook, transposed (unit rows of E): the state transitions;
- ``b`` / ``bq``: float32 target / draft per-token biases, already divided by the temperature;
- ``fp``: float64 [beta/T, rho, sigma, beta_q/T, sigma_q, bmax, bqmax];
- ``keys``: uint64 [transition-noise key, drafter-noise key];
- ``ET32``: ``ET`` rounded to float32: the rows' logits.

Rows (the world's p and q) are defined by these kernels alone, and the NumPy
side (``LatentWorld.target_probs`` / ``draft_probs``, the oracle) calls them:
logits ``b + E (beta z)`` are evaluated in float32 (code dimension in order),
exponentiated in float32 (:func:`row_exp`), and normalised in float64. The
result agrees with the float64 formula to about 1e-5 relative (float32
logits); rule arithmetic on the rows stays float64 and sequential.

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

BLOCK = 256  # tokens per block of the fused row pass (a block's logits stay in L1)
CHUNK = 32  # tokens per chunk maximum (lets top-k selection skip most of a row)

# float32 exp: Cody-Waite reduction y = k ln2 + r (|r| <= ln2 / 2), degree-7 Taylor polynomial
# (truncation < 5e-9 relative), 2^k built in the exponent bits; branch-free, so LLVM vectorises it.
_F = np.float32
_INVLN2 = _F(1.4426950408889634)
_LN2HI = _F(0.693145751953125)  # 16 significant bits: k * _LN2HI is exact for |k| < 256
_LN2LO = _F(1.4286068203094172e-06)  # ln 2 - _LN2HI
_MAGIC = _F(12582912.0)  # 1.5 * 2**23: adding it rounds to an integer in the low mantissa bits
_MAGIC_BITS = np.int32(np.array([12582912.0], dtype=np.float32).view(np.int32)[0])
_LOW = _F(-87.0)  # exp is 0 below here (2^k stays a normal float32 above)
_C2, _C3, _C4 = _F(1 / 2), _F(1 / 6), _F(1 / 24)
_C5, _C6, _C7 = _F(1 / 120), _F(1 / 720), _F(1 / 5040)
_ONE = _F(1.0)
_ZERO = _F(0.0)
_LOOSE = 2.0**-28  # a shift this far above the largest logit (about 19.4 nats) is redone with the max


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
def _block_logits(ET, bias, M, zf, x0, n, acc):
    """``acc[:n] = (bias - M) + E_0 z_0 + ... + E_{d-1} z_{d-1}`` for tokens x0..x0+n-1, in float32."""
    bb = bias[x0:x0 + n]
    for i in range(n):
        acc[i] = bb[i] - M
    for j in range(ET.shape[0]):
        zj = zf[j]
        row = ET[j, x0:x0 + n]
        for i in range(n):
            acc[i] += row[i] * zj


@njit(cache=True, error_model="numpy")
def _block_exp(acc, kb, ki, n):
    """``acc[:n] = exp(acc)`` in float32, 0 below -87 (float32's range); ``kb`` / ``ki``: one scratch
    buffer seen as float / int."""
    for i in range(n):
        y = max(acc[i], _LOW)
        kf = y * _INVLN2 + _MAGIC
        k = kf - _MAGIC
        r = (y - k * _LN2HI) - k * _LN2LO
        e = _ONE + r * (_ONE + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * (_C6 + r * _C7))))))
        acc[i] = e if acc[i] >= _LOW else _ZERO
        kb[i] = kf
    for i in range(n):
        ki[i] = (ki[i] - _MAGIC_BITS + np.int32(127)) << np.int32(23)
    for i in range(n):
        acc[i] *= kb[i]


@njit(cache=True, error_model="numpy")
def _exp_pass(ET, bias, M, zf, out, cmax):
    """One fused pass: ``out = exp(logits - M)`` (float32 values stored as float64), the chunk
    maxima ``cmax`` and the sum (BLOCK partial sums added in a fixed order)."""
    V = bias.shape[0]
    acc = np.empty(BLOCK, dtype=np.float32)
    kb = np.empty(BLOCK, dtype=np.float32)
    ki = kb.view(np.int32)
    part = np.zeros(BLOCK)
    for x0 in range(0, V, BLOCK):
        n = min(BLOCK, V - x0)
        _block_logits(ET, bias, M, zf, x0, n, acc)
        _block_exp(acc, kb, ki, n)
        o = out[x0:x0 + n]
        for i in range(n):
            e = np.float64(acc[i])
            o[i] = e
            part[i] += e
        for c0 in range(0, n, CHUNK):
            m = o[c0]
            for i in range(c0 + 1, min(c0 + CHUNK, n)):
                m = max(m, o[i])
            cmax[(x0 + c0) // CHUNK] = m
    s = 0.0
    for i in range(BLOCK):
        s += part[i]
    return s


@njit(cache=True, error_model="numpy")
def row_exp(ET, bias, bmax, zb, out, cmax):
    """Unnormalised softmax row: ``out[x] = exp(l_x - M)``, ``l = bias + E zb`` in float32; returns its sum.

    The shift M is the bound |zb| + max(bias) (code vectors are unit), so no max
    pass is needed; when the largest term falls below 2^-28 the row is redone
    with M = the largest logit, so every token within 67 nats of the largest
    logit is represented and only tokens below e^-87 relative to the shift
    (a mass under V e^-67 in all) are 0, as in a float32 softmax.
    ``cmax[c]`` gets the largest entry of chunk c (tokens c CHUNK .. (c + 1)
    CHUNK - 1).
    """
    d = ET.shape[0]
    zf = np.empty(d, dtype=np.float32)
    zn = 0.0
    for j in range(d):
        zn += zb[j] * zb[j]
        zf[j] = np.float32(zb[j])
    s = _exp_pass(ET, bias, np.float32(math.sqrt(zn) + bmax), zf, out, cmax)
    top = cmax[0]
    for c in range(1, cmax.shape[0]):
        top = max(top, cmax[c])
    if top >= _LOOSE:
        return s
    V = bias.shape[0]
    acc = np.empty(BLOCK, dtype=np.float32)
    M = np.float32(-np.inf)
    for x0 in range(0, V, BLOCK):
        n = min(BLOCK, V - x0)
        _block_logits(ET, bias, np.float32(0.0), zf, x0, n, acc)
        for i in range(n):
            M = max(M, acc[i])
    return _exp_pass(ET, bias, M, zf, out, cmax)


@njit(cache=True, error_model="numpy")
def scale_row(row, inv):
    """``row *= inv`` in place; returns the sum of the result (BLOCK partial sums, fixed order)."""
    V = row.shape[0]
    part = np.zeros(BLOCK)
    for x0 in range(0, V, BLOCK):
        n = min(BLOCK, V - x0)
        o = row[x0:x0 + n]
        for i in range(n):
            o[i] *= inv
            part[i] += o[i]
    s = 0.0
    for i in range(BLOCK):
        s += part[i]
    return s


@njit(cache=True, error_model="numpy")
def chunk_maxima(row, cmax):
    """``cmax[c]`` = the largest entry of chunk c of ``row`` (what :func:`row_exp` records)."""
    V = row.shape[0]
    for c0 in range(0, V, CHUNK):
        m = row[c0]
        for x in range(c0 + 1, min(c0 + CHUNK, V)):
            m = max(m, row[x])
        cmax[c0 // CHUNK] = m


@njit(cache=True, error_model="numpy")
def n_chunks(vocab_size):
    """Length of the chunk-maximum buffer for a row over ``vocab_size`` tokens."""
    return (vocab_size + CHUNK - 1) // CHUNK


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
def target_row(W, z, out, cmax):
    """p at a node with state z (stationary: p_stat) into ``out``; returns its sum.

    ``cmax`` is chunk scratch (:func:`n_chunks` entries)."""
    if W[0] == KIND_STATIONARY:
        out[:] = W[6]
        return scale_row(out, 1.0)  # times 1.0: unchanged
    d = z.shape[0]
    zb = np.empty(d)
    for j in range(d):
        zb[j] = W[4][F_BETA] * z[j]
    s = row_exp(W[8], W[2], W[4][F_BMAX], zb, out, cmax)
    return scale_row(out, 1.0 / s)


@njit(cache=True, error_model="numpy")
def draft_exp(W, z, h, out, cmax):
    """q at a node with state z and prefix hash h, unnormalised: q = ``out * inv``; returns ``inv``.

    ``cmax`` gets the chunk maxima of ``out``. The drafter sees
    normalise(z + sigma_q xi_q), xi_q keyed by (drafter key, h). Stationary:
    ``out`` = q_stat and inv = 1."""
    if W[0] == KIND_STATIONARY:
        out[:] = W[7]
        chunk_maxima(out, cmax)
        return 1.0
    d = z.shape[0]
    zq = np.empty(d)
    normals(combine(W[5][1], np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))), zq)
    for j in range(d):
        zq[j] = z[j] + W[4][F_SIGMA_Q] * zq[j]
    normalise(zq)
    for j in range(d):
        zq[j] *= W[4][F_BETA_Q]
    return 1.0 / row_exp(W[8], W[3], W[4][F_BQMAX], zq, out, cmax)


@njit(cache=True, error_model="numpy")
def draft_row(W, z, h, out, cmax):
    """q at a node (normalised) into ``out``: :func:`draft_exp` then the scaling."""
    scale_row(out, draft_exp(W, z, h, out, cmax))
