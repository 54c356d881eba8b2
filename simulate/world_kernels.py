"""Numba kernels of the synthetic worlds: latent states and target / draft rows.

A world is passed to kernels as a tuple ``W = (kind, ET, b, bq, fp, keys,
p_stat, q_stat, T)``:

- ``kind``: 0 latent-field world, 1 stationary world (p_stat / q_stat at every node);
- ``ET``: (D, V) float64 codebook, transposed (unit rows of E): the state transitions; D is the size of
  a state, d (the code dimension, ``len(fp) - N_FPARAMS``) for SPEC 6's worlds; a grid or
  position-keyed world's state has ``STATE_AUX + grid_width + 1`` entries more (:func:`state_size`),
  whose rows of ``ET`` are zero;
- ``b`` / ``bq``: float32 target / draft per-token biases, already divided by the temperature,
  padded to a multiple of LANES tokens (:func:`pad_bias`);
- ``fp``: float64 [beta/T, rho, sigma, beta_q/T, sigma_q, bmax, bqmax, beta_spread, drift, prefix_noise,
  grid_width, grid_above, grid_diagonal, lag1_noise, a_1..a_d]:
  a state z's inverse temperatures are beta·exp(beta_spread <a, z>) (target) and
  beta_q·exp(beta_spread <a, z_q>) (drafter, on its own view z_q), a the unit difficulty axis;
  the drafter's view below a step's root (depth d >= 1) has noise sqrt(sigma_q^2 + drift^2);
- ``keys``: uint64 [transition-noise key, drafter-noise key];
- ``T``: the codebook as padded float32 (:func:`pad_codebook`): the rows' logits.

Rows (the world's p and q) are defined by these kernels alone, and the NumPy
side (``LatentWorld.target_probs`` / ``draft_probs``, the oracle) calls them:
logits ``b + E (beta z)`` are evaluated in float32 (code dimension in order),
exponentiated in float32 (:func:`row_exp`), and normalised in float64. The
result agrees with the float64 formula to about 1e-5 relative (float32
logits); rule arithmetic on the rows stays float64 and sequential.

States live in per-step buffers indexed like the tree builder's nodes:
``zs[v]`` (unit vector), ``hs[v]`` (prefix hash), ``have[v]``.

Context sensitivity (SPEC 11). In SPEC 6's world the transition noise is keyed by the whole prefix, so
changing any earlier token redraws every later state. A world with ``prefix_noise`` f < 1 draws the
noise as ``sqrt(f) xi_prefix + sqrt(1 - f) xi_position``, xi_position keyed by (sequence, position), so
the token m back moves the state only through rho^m and the prefix-keyed part. A share ``lag1_noise`` g
of the variance may be keyed by (sequence, position, the token before) instead: ``sqrt(f) xi_prefix +
sqrt(g) xi_token + sqrt(1 - f - g) xi_position``, so the token just before a position moves its law more
than rho alone lets it (kappa_1 up, longer lags through rho). A world with a grid of
width W (``grid_width``) places token t at row t // W, column t % W, and adds to the transition into
position t ``grid_above E_{x_{t-W}} + grid_diagonal (E_{x_{t-W-1}} + E_{x_{t-W+1}})`` (the tokens above,
above-left and above-right, where the grid has them), so the token above matters as the token before
does. Such a state carries, after its d latent entries, ``STATE_AUX`` = 3 bookkeeping entries (the
position of the next token; the sequence's key as two 32-bit halves) and the last W + 1 tokens (-1
where the sequence has none), all small integers, exact in float64.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from relaxspec.simulate.rng import combine, normals

F_BETA, F_RHO, F_SIGMA, F_BETA_Q, F_SIGMA_Q, F_BMAX, F_BQMAX, F_SPREAD, F_DRIFT = range(9)
F_PREFIX, F_GRID_W, F_ABOVE, F_DIAG, F_LAG1 = range(9, 14)
N_FPARAMS = 14  # then the d entries of the difficulty axis (latent worlds)
# a grid / position-keyed state after its d latent entries: [position, key low 32 bits, key high 32 bits,
# token 1 back, ..., token W + 1 back]
A_POS, A_KEY_LO, A_KEY_HI = range(3)
STATE_AUX = 3
NO_TOKEN = -1.0
_POSITION_SALT = np.int64(0x9051)  # the position-keyed noise's stream, apart from the prefix-keyed one
_LAG1_SALT = np.int64(0x1A61)  # the (position, token before)-keyed noise's stream
_HALF = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
KIND_LATENT = 0
KIND_STATIONARY = 1

LANES = 16  # rows are padded to a multiple of this many tokens (one AVX-512 float32 vector)
GROUP = 8  # code dimensions per pass of the logits (the stored codebook pads d to a multiple)
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


def pad_codebook(ET: np.ndarray) -> np.ndarray:
    """The (d, V) codebook as float32 (GROUP ceil(d / GROUP), LANES ceil(V / LANES)), zero-padded
    (padding adds exact zeros to the logits)."""
    d, V = ET.shape
    T = np.zeros((GROUP * -(-d // GROUP), -(-V // LANES) * LANES), dtype=np.float32)
    T[:d, :V] = ET
    return T


def pad_bias(b: np.ndarray) -> np.ndarray:
    """Per-token biases as float32, padded like :func:`pad_codebook` with -inf (exp = 0)."""
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
def _block_logits(T, bias, Ms, zfs, x0, n, acc):
    """``acc[s, :n]`` = (bias - M_s) + E_0 z_s0 + E_1 z_s1 + ... for tokens x0..x0+n-1 and every
    state s, in float32, code dimensions in order (a block of the codebook is read once for all
    states; eight dimensions per pass)."""
    bb = bias[x0:x0 + n]
    for g in range(0, T.shape[0], GROUP):
        e0, e1, e2, e3 = T[g, x0:x0 + n], T[g + 1, x0:x0 + n], T[g + 2, x0:x0 + n], T[g + 3, x0:x0 + n]
        e4, e5, e6, e7 = T[g + 4, x0:x0 + n], T[g + 5, x0:x0 + n], T[g + 6, x0:x0 + n], T[g + 7, x0:x0 + n]
        for s in range(zfs.shape[0]):
            zf = zfs[s]
            z0, z1, z2, z3 = zf[g], zf[g + 1], zf[g + 2], zf[g + 3]
            z4, z5, z6, z7 = zf[g + 4], zf[g + 5], zf[g + 6], zf[g + 7]
            o = acc[s]
            if g == 0:
                M = Ms[s]
                for i in range(n):
                    o[i] = bb[i] - M
            for i in range(n):
                a = o[i]
                a += e0[i] * z0
                a += e1[i] * z1
                a += e2[i] * z2
                a += e3[i] * z3
                a += e4[i] * z4
                a += e5[i] * z5
                a += e6[i] * z6
                a += e7[i] * z7
                o[i] = a


@njit(cache=True, error_model="numpy")
def _exp_pass(T, bias, Ms, zfs, es, cmaxs, sums):
    """One fused pass over the codebook, BLOCK tokens at a time, for every state s:
    ``es[s] = exp(logits - M_s)`` in float32 (0 below e^-87), the chunk maxima ``cmaxs[s]``
    (float64) and the sum ``sums[s]`` (BLOCK float64 partial sums, fixed order)."""
    S = zfs.shape[0]
    acc = np.zeros((S, BLOCK), dtype=np.float32)
    flat = acc.reshape(S * BLOCK)
    kb = np.empty(S * BLOCK, dtype=np.float32)
    ki = kb.view(np.int32)
    part = np.zeros((S, BLOCK))
    # chunk maxima in two buffers, read from one and written to the other: a running max stored over
    # itself compiles to a masked store (vmaskmovps), several times slower than the rest of the pass
    cm = np.zeros((2, S, NCH), dtype=np.float32)
    j = 0
    for x0 in range(0, T.shape[1], BLOCK):
        n = min(BLOCK, T.shape[1] - x0)
        _block_logits(T, bias, Ms, zfs, x0, n, acc)
        used = (S - 1) * BLOCK + n  # every state's block in one loop (a state's slots past n: stale, unused)
        for i in range(used):
            y0 = flat[i]
            y = max(y0, _LOW)
            kf = y * _INVLN2 + _MAGIC
            k = kf - _MAGIC
            r = (y - k * _LN2HI) - k * _LN2LO
            p = _ONE + r * (_ONE + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * (_C6 + r * _C7))))))
            flat[i] = p if y0 >= _LOW else _ZERO
            kb[i] = kf
        for i in range(used):
            ki[i] = (ki[i] - _MAGIC_BITS + np.int32(127)) << np.int32(23)
        for s in range(S):
            ac = acc[s]
            two = kb[s * BLOCK:s * BLOCK + n]
            o = es[s, x0:x0 + n]
            cin, cout = cm[j, s], cm[1 - j, s]
            pa = part[s]
            for i in range(n):
                v = ac[i] * two[i]
                o[i] = v
                cout[i] = max(cin[i], v)
                pa[i] += np.float64(v)
            cout[n:] = cin[n:]  # chunks a short last block does not reach
        j = 1 - j
    for s in range(S):
        for c in range(NCH):
            cmaxs[s, c] = np.float64(cm[j, s, c])
        total = 0.0
        for i in range(BLOCK):
            total += part[s, i]
        sums[s] = total


@njit(cache=True, error_model="numpy")
def rows_exp(T, bias, bmax, zbs, es, cmaxs, sums):
    """Unnormalised softmax rows of the padded codebook ``T`` (:func:`pad_codebook`), one per state.

    For state s (row s of ``zbs``): ``es[s, x] = exp(l_x - M)`` (float32,
    padded to a multiple of LANES tokens with zeros) for ``l = bias + E zb_s`` evaluated in
    float32, code dimensions in order; ``sums[s]`` its sum. The shift M is
    the bound |zb_s| + max(bias) (code vectors are unit), so no max pass is
    needed; a row whose largest term falls below 2^-28 is redone with M = its
    largest logit, so every token within 67 nats of the largest logit is
    represented and only tokens below e^-87 relative to the shift (a mass
    under V e^-67 in all) are 0, as in a float32 softmax. ``cmaxs[s, c]``
    gets the largest ``es[s, x]`` over the tokens x = c mod NCH. A state's
    row does not depend on the other states.
    """
    S = zbs.shape[0]
    zfs = np.zeros((S, T.shape[0]), dtype=np.float32)
    Ms = np.empty(S, dtype=np.float32)
    for s in range(S):
        zn = 0.0
        for j in range(zbs.shape[1]):
            zn += zbs[s, j] * zbs[s, j]
            zfs[s, j] = np.float32(zbs[s, j])
        Ms[s] = np.float32(math.sqrt(zn) + bmax)
    _exp_pass(T, bias, Ms, zfs, es, cmaxs, sums)
    acc = np.empty((1, BLOCK), dtype=np.float32)
    for s in range(S):
        top = cmaxs[s, 0]
        for c in range(1, NCH):
            top = max(top, cmaxs[s, c])
        if top >= _LOOSE:
            continue
        M = np.full(1, -np.inf, dtype=np.float32)
        for x0 in range(0, T.shape[1], BLOCK):
            n = min(BLOCK, T.shape[1] - x0)
            _block_logits(T, bias, np.zeros(1, dtype=np.float32), zfs[s:s + 1], x0, n, acc)
            for i in range(n):
                M[0] = max(M[0], acc[0, i])
        _exp_pass(T, bias, M, zfs[s:s + 1], es[s:s + 1], cmaxs[s:s + 1], sums[s:s + 1])


@njit(cache=True, error_model="numpy")
def row_exp(T, bias, bmax, zb, e, cmax):
    """:func:`rows_exp` for one state: fills ``e`` and ``cmax``, returns the row's sum."""
    sums = np.empty(1)
    rows_exp(T, bias, bmax, zb.reshape((1, zb.shape[0])), e.reshape((1, e.shape[0])),
             cmax.reshape((1, cmax.shape[0])), sums)
    return sums[0]


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
def state_beta(fp, beta, z):
    """Inverse temperature at unit state z: ``beta`` times exp(beta_spread <a, z>) (``beta`` itself,
    bit for bit, when beta_spread is 0)."""
    spread = fp[F_SPREAD]
    if spread == 0.0:
        return beta
    dot = 0.0
    for j in range(fp.shape[0] - N_FPARAMS):  # the latent entries of z
        dot += fp[N_FPARAMS + j] * z[j]
    return beta * math.exp(spread * dot)


@njit(cache=True, error_model="numpy")
def transition(ET, fp, noise_key, z, h, x, z_out):
    """State after token x: normalise(rho z + (1 - rho) E_x + sigma xi); returns the new prefix hash.

    xi is keyed by (world noise key, new prefix hash), so a prefix always
    leads to the same state; a grid or position-keyed state (longer than d) moves by
    :func:`_grid_transition`."""
    d = fp.shape[0] - N_FPARAMS
    h2 = combine(h, x)
    xi = np.empty(d)
    normals(combine(noise_key, np.int64(h2 & np.uint64(0x7FFFFFFFFFFFFFFF))), xi)
    rho, sigma = fp[F_RHO], fp[F_SIGMA]
    if z.shape[0] > d:
        _grid_transition(ET, fp, noise_key, z, x, xi, z_out)
        return h2
    for j in range(d):
        z_out[j] = rho * z[j] + (1.0 - rho) * ET[j, x] + sigma * xi[j]
    normalise(z_out)
    return h2


@njit(cache=True, error_model="numpy")
def position_key(noise_key, z, d):
    """Key of the position-keyed noise of the transition out of state z: (world noise key, the
    sequence's key stored in z, the position of the token after z's next one)."""
    seq = np.uint64(z[d + A_KEY_LO]) | (np.uint64(z[d + A_KEY_HI]) << _HALF)
    key = combine(combine(noise_key, _POSITION_SALT), np.int64(seq & np.uint64(0x7FFFFFFFFFFFFFFF)))
    return combine(key, np.int64(z[d + A_POS]) + 1)


@njit(cache=True, error_model="numpy")
def _grid_transition(ET, fp, noise_key, z, x, xi, z_out):
    """:func:`transition` of a grid / position-keyed state (module docstring): the noise ``xi`` keyed by
    the prefix keeps variance share ``prefix_noise``, (sequence, position, token before) ``lag1_noise``,
    the rest is keyed by (sequence, position); the
    tokens above, above-left and above-right of the next position add their codes; the token memory
    shifts by one."""
    d = fp.shape[0] - N_FPARAMS
    base = d + STATE_AUX
    n_lags = z.shape[0] - base
    pos = int(z[d + A_POS]) + 1  # the position whose law the new state gives
    f, g = fp[F_PREFIX], fp[F_LAG1]
    if f < 1.0:
        xp = np.empty(d)
        key = position_key(noise_key, z, d)
        normals(key, xp)
        if g > 0.0:  # the share keyed by the token before too (x: the token the transition reads)
            xl = np.empty(d)
            normals(combine(combine(key, _LAG1_SALT), x), xl)
            a, c, b = math.sqrt(f), math.sqrt(g), math.sqrt(max(1.0 - f - g, 0.0))
            for j in range(d):
                xi[j] = a * xi[j] + c * xl[j] + b * xp[j]
        else:
            a, b = math.sqrt(f), math.sqrt(1.0 - f)
            for j in range(d):
                xi[j] = a * xi[j] + b * xp[j]
    rho, sigma = fp[F_RHO], fp[F_SIGMA]
    for j in range(d):
        z_out[j] = rho * z[j] + (1.0 - rho) * ET[j, x] + sigma * xi[j]
    for i in range(n_lags - 1, 0, -1):
        z_out[base + i] = z[base + i - 1]
    z_out[base] = x
    width = int(fp[F_GRID_W])
    if width > 0 and pos >= width:  # a row above: lag W above, W + 1 above-left, W - 1 above-right
        col = pos % width
        above, diag = fp[F_ABOVE], fp[F_DIAG]
        up = int(z_out[base + width - 1])
        left = int(z_out[base + width]) if col > 0 else -1
        right = int(z_out[base + width - 2]) if col < width - 1 else -1
        for j in range(d):
            v = above * ET[j, up]
            if left >= 0:
                v += diag * ET[j, left]
            if right >= 0:
                v += diag * ET[j, right]
            z_out[j] += v
    normalise(z_out[:d])
    z_out[d + A_POS] = pos
    z_out[d + A_KEY_LO] = z[d + A_KEY_LO]
    z_out[d + A_KEY_HI] = z[d + A_KEY_HI]


@njit(cache=True, error_model="numpy")
def initial_state(ET, fp, noise_key, seq_key, z_out):
    """A sequence's first state (uniform on the sphere) and prefix hash, keyed by the sequence (a grid /
    position-keyed state: position 0, the sequence's key, no tokens yet)."""
    d = fp.shape[0] - N_FPARAMS
    h = combine(seq_key, np.int64(0x5EED))
    zl = z_out[:d]
    normals(combine(noise_key, np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))), zl)
    normalise(zl)
    if z_out.shape[0] > d:
        z_out[d + A_POS] = 0.0
        z_out[d + A_KEY_LO] = np.float64(h & _LOW32)
        z_out[d + A_KEY_HI] = np.float64(h >> _HALF)
        for i in range(d + STATE_AUX, z_out.shape[0]):
            z_out[i] = NO_TOKEN
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


def state_size(dim: int, grid_width: int, position_keyed: bool) -> int:
    """Entries of a world's state: d, plus ``STATE_AUX + grid_width + 1`` for a grid or position-keyed
    world."""
    return dim + STATE_AUX + grid_width + 1 if grid_width > 0 or position_keyed else dim


@njit(cache=True, error_model="numpy")
def vocab_size(W):
    """V of a kernel world."""
    return W[1].shape[1] if W[0] == KIND_LATENT else W[6].shape[0]


@njit(cache=True, error_model="numpy")
def target_row(W, z, out, e, cmax):
    """p at a node with state z (stationary: p_stat) into the float64 row ``out``; returns its sum.

    ``e`` / ``cmax``: one row of :func:`row_scratch`."""
    if W[0] == KIND_STATIONARY:
        out[:] = W[6]
        return scale_into(out, 1.0, out)  # times 1.0: unchanged
    d = W[4].shape[0] - N_FPARAMS  # the latent entries of z
    zb = np.empty(d)
    beta = state_beta(W[4], W[4][F_BETA], z)
    for j in range(d):
        zb[j] = beta * z[j]
    return scale_into(e, 1.0 / row_exp(W[8], W[2], W[4][F_BMAX], zb, e, cmax), out)


@njit(cache=True, error_model="numpy")
def draft_exps(W, zs, hs, nodes, depths, es, cmaxs, invs):
    """q after each of the buffer nodes ``nodes`` (states ``zs[v]``, prefix hashes ``hs[v]``, depths
    below the step's root ``depths[v]``), unnormalised, in one pass over the codebook.

    Latent world: q_i = ``es[i] * invs[i]`` (float32 rows, padded,
    :func:`rows_exp`); stationary world: q_i = q_stat (``W[7]``), invs[i] = 1.
    ``cmaxs[i]`` gets the chunk maxima of q_i's values. The drafter sees
    normalise(z + sigma_q(d) xi_q), xi_q keyed by (drafter key, h), sigma_q(d) = sqrt(sigma_q^2 +
    min(d, 1) drift^2) (sigma_q itself at the root and when drift is 0)."""
    cnt = nodes.shape[0]
    if W[0] == KIND_STATIONARY:
        for i in range(cnt):
            chunk_maxima(W[7], cmaxs[i])
            invs[i] = 1.0
        return
    d = W[4].shape[0] - N_FPARAMS  # the latent entries of a state
    zq = np.empty((cnt, d))
    for i in range(cnt):
        v = nodes[i]
        normals(combine(W[5][1], np.int64(hs[v] & np.uint64(0x7FFFFFFFFFFFFFFF))), zq[i])
        sigma_q = W[4][F_SIGMA_Q]
        if W[4][F_DRIFT] != 0.0:
            sigma_q = math.sqrt(sigma_q * sigma_q + min(depths[v], 1) * W[4][F_DRIFT] * W[4][F_DRIFT])
        for j in range(d):
            zq[i, j] = zs[v, j] + sigma_q * zq[i, j]
        normalise(zq[i])
        beta_q = state_beta(W[4], W[4][F_BETA_Q], zq[i])
        for j in range(d):
            zq[i, j] *= beta_q
    sums = np.empty(cnt)
    rows_exp(W[8], W[3], W[4][F_BQMAX], zq, es[:cnt], cmaxs[:cnt], sums)
    for i in range(cnt):
        invs[i] = 1.0 / sums[i]


@njit(cache=True, error_model="numpy")
def draft_row(W, z, h, depth, row, e, cmax):
    """q at a node with state z, prefix hash h and depth below the step's root ``depth``, normalised,
    into the float64 ``row``
    (:func:`draft_exps` then the scaling; ``e`` / ``cmax``: one row of :func:`row_scratch`)."""
    if W[0] == KIND_STATIONARY:
        row[:] = W[7]
        return
    inv = np.empty(1)
    draft_exps(W, z.reshape((1, z.shape[0])), np.full(1, h, dtype=np.uint64), np.zeros(1, dtype=np.int64),
               np.full(1, depth, dtype=np.int64), e.reshape((1, e.shape[0])),
               cmax.reshape((1, cmax.shape[0])), inv)
    scale_into(e, inv[0], row)


@njit(cache=True, error_model="numpy")
def row_scratch(W, n):
    """Scratch for n rows of a world: (float32 (n, padded V) unnormalised rows, float64 (n, NCH)
    chunk maxima)."""
    return np.empty((n, W[8].shape[1]), dtype=np.float32), np.empty((n, NCH))
