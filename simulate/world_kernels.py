"""Numba kernels of the synthetic worlds: latent states and target / draft rows.

A world is passed to kernels as a tuple ``W = (kind, ET, b, bq, fp, keys,
p_stat, q_stat, T)``:

- ``kind``: 0 latent-field world, 1 stationary world (p_stat / q_stat at every node);
- ``ET``: (d, V) float64 codebook, transposed (unit rows of E): the state transitions;
- ``b`` / ``bq``: float32 target / draft per-token biases, already divided by the temperature,
  padded to whole tiles (:func:`tile_bias`);
- ``fp``: float64 [beta/T, rho, sigma, beta_q/T, sigma_q, bmax, bqmax];
- ``keys``: uint64 [transition-noise key, drafter-noise key];
- ``T``: the codebook as float32 tiles (:func:`tile_codebook`): the rows' logits.

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

LANES = 16  # tokens per tile: a tile's logits are one AVX-512 float32 vector
GROUP = 8  # code dimensions per register group (the tiled codebook pads d to a multiple)
BLOCK = 256  # tokens per block of the fused row pass (a multiple of LANES); partial sums
NCH = BLOCK  # chunk maxima: chunk c holds the tokens x with x % NCH == c (lets top-k skip most tokens)

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


def tile_codebook(ET: np.ndarray) -> np.ndarray:
    """The (d, V) codebook as float32 tiles ``T[t, j, l] = E[LANES t + l, j]``, shape
    (ceil(V / LANES), GROUP ceil(d / GROUP), LANES), zero-padded (padding adds exact zeros)."""
    d, V = ET.shape
    nt, dg = -(-V // LANES), GROUP * -(-d // GROUP)
    T = np.zeros((dg, nt * LANES), dtype=np.float32)
    T[:d, :V] = ET
    return np.ascontiguousarray(T.reshape(dg, nt, LANES).transpose(1, 0, 2))


def tile_bias(b: np.ndarray) -> np.ndarray:
    """Per-token biases as float32, padded to whole tiles with -inf (padding tokens get exp = 0)."""
    V = b.shape[0]
    out = np.full(-(-V // LANES) * LANES, -np.inf, dtype=np.float32)
    out[:V] = b
    return out


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
def _block_logits(T, bias, M, zf, t0, t1, acc):
    """``acc`` = (bias - M) + E_0 z_0 + E_1 z_1 + ... for the tokens of tiles t0..t1-1, in float32,
    code dimensions in order (one vector per tile and register group)."""
    for t in range(t0, t1):
        Et = T[t]
        bb = bias[t * LANES:(t + 1) * LANES]
        o = acc[(t - t0) * LANES:(t - t0 + 1) * LANES]
        z0, z1, z2, z3, z4, z5, z6, z7 = zf[0], zf[1], zf[2], zf[3], zf[4], zf[5], zf[6], zf[7]
        for lane in range(LANES):
            a = bb[lane] - M
            a += Et[0, lane] * z0
            a += Et[1, lane] * z1
            a += Et[2, lane] * z2
            a += Et[3, lane] * z3
            a += Et[4, lane] * z4
            a += Et[5, lane] * z5
            a += Et[6, lane] * z6
            a += Et[7, lane] * z7
            o[lane] = a
        for g in range(GROUP, zf.shape[0], GROUP):
            z0, z1, z2, z3 = zf[g], zf[g + 1], zf[g + 2], zf[g + 3]
            z4, z5, z6, z7 = zf[g + 4], zf[g + 5], zf[g + 6], zf[g + 7]
            for lane in range(LANES):
                a = o[lane]
                a += Et[g, lane] * z0
                a += Et[g + 1, lane] * z1
                a += Et[g + 2, lane] * z2
                a += Et[g + 3, lane] * z3
                a += Et[g + 4, lane] * z4
                a += Et[g + 5, lane] * z5
                a += Et[g + 6, lane] * z6
                a += Et[g + 7, lane] * z7
                o[lane] = a


@njit(cache=True, error_model="numpy")
def _exp_pass(T, bias, M, zf, e, cmax):
    """One fused pass, BLOCK tokens at a time: ``e = exp(logits - M)`` in float32 (0 below e^-87),
    the chunk maxima ``cmax`` (float64) and the sum (BLOCK float64 partial sums, fixed order)."""
    acc = np.empty(BLOCK, dtype=np.float32)
    kb = np.empty(BLOCK, dtype=np.float32)
    ki = kb.view(np.int32)
    part = np.zeros(BLOCK)
    cm = np.zeros(NCH, dtype=np.float32)
    nt = T.shape[0]
    for t0 in range(0, nt, BLOCK // LANES):
        t1 = min(t0 + BLOCK // LANES, nt)
        n = (t1 - t0) * LANES
        _block_logits(T, bias, M, zf, t0, t1, acc)
        for i in range(n):
            y0 = acc[i]
            y = max(y0, _LOW)
            kf = y * _INVLN2 + _MAGIC
            k = kf - _MAGIC
            r = (y - k * _LN2HI) - k * _LN2LO
            p = _ONE + r * (_ONE + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * (_C6 + r * _C7))))))
            acc[i] = p if y0 >= _LOW else _ZERO
            kb[i] = kf
        for i in range(n):
            ki[i] = (ki[i] - _MAGIC_BITS + np.int32(127)) << np.int32(23)
        o = e[t0 * LANES:t0 * LANES + n]
        for i in range(n):
            v = acc[i] * kb[i]
            o[i] = v
            cm[i] = max(cm[i], v)
            part[i] += np.float64(v)
    for c in range(NCH):
        cmax[c] = np.float64(cm[c])
    s = 0.0
    for i in range(BLOCK):
        s += part[i]
    return s


@njit(cache=True, error_model="numpy")
def row_exp(T, bias, bmax, zb, e, cmax):
    """Unnormalised softmax row of the tiled codebook ``T`` (:func:`tile_codebook`): returns its sum.

    ``e[x] = exp(l_x - M)`` (float32, padded to whole tiles with zeros) for
    ``l = bias + E zb`` evaluated in float32, dimensions in order. The shift M
    is the bound |zb| + max(bias) (code vectors are unit), so no max pass is
    needed; when the largest term falls below 2^-28 the row is redone with M
    = the largest logit, so every token within 67 nats of the largest logit
    is represented and only tokens below e^-87 relative to the shift (a mass
    under V e^-67 in all) are 0, as in a float32 softmax. ``cmax[c]`` gets
    the largest ``e[x]`` over the tokens x = c mod NCH.
    """
    zf = np.zeros(T.shape[1], dtype=np.float32)
    zn = 0.0
    for j in range(zb.shape[0]):
        zn += zb[j] * zb[j]
        zf[j] = np.float32(zb[j])
    s = _exp_pass(T, bias, np.float32(math.sqrt(zn) + bmax), zf, e, cmax)
    top = cmax[0]
    for c in range(1, NCH):
        top = max(top, cmax[c])
    if top >= _LOOSE:
        return s
    acc = np.empty(BLOCK, dtype=np.float32)
    M = np.float32(-np.inf)
    nt = T.shape[0]
    for t0 in range(0, nt, BLOCK // LANES):
        t1 = min(t0 + BLOCK // LANES, nt)
        _block_logits(T, bias, _ZERO, zf, t0, t1, acc)
        for i in range((t1 - t0) * LANES):
            M = max(M, acc[i])
    return _exp_pass(T, bias, M, zf, e, cmax)


@njit(cache=True, error_model="numpy")
def scale_into(e, inv, out):
    """``out[x] = e[x] * inv`` (in float64) for x < len(out); returns the sum of ``out``
    (BLOCK partial sums, fixed order). ``e`` may be ``out`` itself."""
    V = out.shape[0]
    part = np.zeros(BLOCK)
    for x0 in range(0, V, BLOCK):
        n = min(BLOCK, V - x0)
        src = e[x0:x0 + n]
        o = out[x0:x0 + n]
        for i in range(n):
            o[i] = np.float64(src[i]) * inv
            part[i] += o[i]
    s = 0.0
    for i in range(BLOCK):
        s += part[i]
    return s


@njit(cache=True, error_model="numpy")
def chunk_maxima(row, cmax):
    """``cmax[c]`` = the largest ``row[x]`` over x = c mod NCH (0 for an empty chunk), as
    :func:`row_exp` records them."""
    for c in range(NCH):
        cmax[c] = 0.0
    for x in range(row.shape[0]):
        cmax[x % NCH] = max(cmax[x % NCH], row[x])


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
def target_row(W, z, out, e, cmax):
    """p at a node with state z (stationary: p_stat) into the float64 row ``out``; returns its sum.

    ``e`` (float32, whole tiles) and ``cmax`` (NCH) are scratch."""
    if W[0] == KIND_STATIONARY:
        out[:] = W[6]
        return scale_into(out, 1.0, out)  # times 1.0: unchanged
    d = z.shape[0]
    zb = np.empty(d)
    for j in range(d):
        zb[j] = W[4][F_BETA] * z[j]
    return scale_into(e, 1.0 / row_exp(W[8], W[2], W[4][F_BMAX], zb, e, cmax), out)


@njit(cache=True, error_model="numpy")
def draft_exp(W, z, h, e, row, cmax):
    """q at a node with state z and prefix hash h, unnormalised: returns ``inv``.

    Latent world: q = ``e * inv`` (``e`` float32, whole tiles; :func:`row_exp`)
    and ``row`` is untouched. Stationary world: ``row`` = q_stat (float64) and
    inv = 1. ``cmax`` gets the chunk maxima of whichever holds q. The drafter
    sees normalise(z + sigma_q xi_q), xi_q keyed by (drafter key, h)."""
    if W[0] == KIND_STATIONARY:
        row[:] = W[7]
        chunk_maxima(row, cmax)
        return 1.0
    d = z.shape[0]
    zq = np.empty(d)
    normals(combine(W[5][1], np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))), zq)
    for j in range(d):
        zq[j] = z[j] + W[4][F_SIGMA_Q] * zq[j]
    normalise(zq)
    for j in range(d):
        zq[j] *= W[4][F_BETA_Q]
    return 1.0 / row_exp(W[8], W[3], W[4][F_BQMAX], zq, e, cmax)


@njit(cache=True, error_model="numpy")
def draft_row(W, z, h, row, e, cmax):
    """q at a node, normalised, into the float64 ``row``: :func:`draft_exp` then the scaling."""
    inv = draft_exp(W, z, h, e, row, cmax)
    if W[0] != KIND_STATIONARY:
        scale_into(e, inv, row)


@njit(cache=True, error_model="numpy")
def row_scratch(W):
    """Scratch a world's rows need: (float32 e of whole tiles, float64 chunk maxima)."""
    return np.empty(W[8].shape[0] * LANES, dtype=np.float32), np.empty(NCH)
