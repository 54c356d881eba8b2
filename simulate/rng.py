"""Counter-based random numbers: every draw is a pure function of (key, counter).

A run never carries generator state between sequences: sequence s of a run
with seed S draws its uniforms from ``key = stream_key(S, s)`` and a counter
that names the draw (step, node, purpose). The same seed therefore gives the
same numbers on any thread count and in any order of evaluation, and a world
keyed by a prefix hash shows every branch of a draft tree the same state.

The mixer is the SplitMix64 finaliser (Steele, Lea & Flood 2014); a draw is
``fmix(key + (counter + 1) * GOLDEN)``, i.e. position ``counter`` of the
SplitMix64 stream that starts at ``key``. All functions are Numba ``njit``
and callable from Python as well.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_TWO_M53 = 1.0 / 9007199254740992.0

# Seeds are int64 in the kernels (``stream_key``) and a run derives others from its own (a sweep measures
# Sequoia's acceptance with seed + 1, a world keys its noise with 2 seed + 2 as uint64): 2**62 - 1 keeps
# every derived seed in range. One bound for configs, the command line, worlds and the engine.
MAX_SEED = 2**62 - 1

# purposes of the uniforms a step draws (the low bits of the counter)
U_ACCEPT = 0
U_DRAW = 1
U_TREE = 2
N_PURPOSES = 4


def check_seed(value: object, name: str = "seed") -> int:
    """``value`` as an int in ``[0, MAX_SEED]``, else a ``ValueError`` naming ``name`` and the bounds.

    The one seed rule: sweep configs, ``relaxspec world-stats --seed``, :class:`simulate.worlds.LatentParams`
    and :func:`simulate.engine.run` all call it.
    """
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool) and 0 <= value <= MAX_SEED
    if not ok:
        raise ValueError(f"{name} must be an integer in [0, {MAX_SEED}] (2**62 - 1), got {value!r}")
    return int(value)


@njit(cache=True, error_model="numpy")
def fmix(x: np.uint64) -> np.uint64:
    """SplitMix64 finaliser: a bijective 64-bit mixer."""
    x = np.uint64(x)
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


@njit(cache=True, error_model="numpy")
def combine(key: np.uint64, value: np.int64) -> np.uint64:
    """Key of a child stream: ``fmix(key + (value + 1) * GOLDEN)`` mixed once more."""
    return fmix(fmix(np.uint64(key) + (np.uint64(value) + _ONE) * GOLDEN))


@njit(cache=True, error_model="numpy")
def stream_key(seed: np.int64, index: np.int64) -> np.uint64:
    """Key of stream ``index`` of generator ``seed`` (e.g. one sequence of a run)."""
    return combine(fmix(np.uint64(seed) * GOLDEN + GOLDEN), index)


@njit(cache=True, error_model="numpy")
def uniform(key: np.uint64, counter: np.int64) -> float:
    """A uniform in [0, 1) with 53 random bits: draw ``counter`` of stream ``key``."""
    bits = fmix(np.uint64(key) + (np.uint64(counter) + _ONE) * GOLDEN)
    return float(bits >> _S11) * _TWO_M53


@njit(cache=True, error_model="numpy")
def normals(key: np.uint64, out: np.ndarray) -> None:
    """Fill ``out`` with standard normals (Box-Muller on draws 0, 1, 2, ... of ``key``)."""
    n = out.shape[0]
    for i in range(0, n, 2):
        u1 = 1.0 - uniform(key, i)  # in (0, 1]
        u2 = uniform(key, i + 1)
        rad = math.sqrt(-2.0 * math.log(u1))
        out[i] = rad * math.cos(2.0 * math.pi * u2)
        if i + 1 < n:
            out[i + 1] = rad * math.sin(2.0 * math.pi * u2)


@njit(cache=True, error_model="numpy")
def step_counter(step: np.int64, node: np.int64, purpose: np.int64) -> np.int64:
    """Counter of the uniform that ``node`` spends for ``purpose`` at decoding ``step``."""
    return (step * np.int64(1 << 20) + node) * N_PURPOSES + purpose


def step_uniforms(seed: int, sequence: int, step: int, n_nodes: int, purpose: int) -> np.ndarray:
    """The uniforms ``u[v]`` (v < n_nodes) that a run's kernel draws for one step (float64)."""
    key = np.uint64(stream_key(np.int64(seed), np.int64(sequence)))
    return np.array([uniform(key, step_counter(step, v, purpose)) for v in range(n_nodes)])
