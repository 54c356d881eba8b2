"""Context sensitivity kappa_m of a world (SPEC 11): how much the law at a position moves when the
token m back changes.

kappa_m = E[TV(p(. | h), p(. | h'))], h' being h with the token m positions back replaced by an
independent draw from its own law, the expectation over positions and draws along sequences sampled
from the world's target. :func:`world_context_sensitivity` measures kappa_1..kappa_M with the exact
rows of the world (kernel: :mod:`simulate.context_kernels`; ``backend="numpy"``: its pure NumPy
oracle, equal bit for bit); ``mini.context_sensitivity`` measures the same on a trained model. Both
return a :class:`ContextSensitivity`: the mean over every (position, draw) pair at each lag, and its
standard error over the independent units (sequences or images: positions within one are
correlated, so each unit's mean is one observation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.simulate.context_kernels import kappa_kernel
from relaxspec.simulate.rng import check_seed, stream_key, uniform
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory.sampler import draw_token

BACKENDS = ("numba", "numpy")
# lags measured at most: the token above and above-left of a 256-wide grid (a 4096-px image of 16-px
# patches); a run costs n_sequences * seq_len * n_lags rows
MAX_LAGS = 257


@dataclass(frozen=True)
class ContextSensitivity:
    """kappa_1..kappa_M of a world or model.

    Attributes
    ----------
    kappa : (M,) mean TV at lag m = 1..M over every position with a token m back, in every unit.
    stderr : (M,) standard error of ``kappa``: the standard deviation of the units' own means over
        sqrt(units) (a unit is a sequence or image; every unit has the same positions at each lag, so
        ``kappa`` is the mean of the units' means).
    units : sampled sequences (world) or images (model).
    positions : (M,) positions per unit at each lag (tokens per unit minus m).
    """

    kappa: np.ndarray
    stderr: np.ndarray
    units: int
    positions: np.ndarray

    @property
    def lags(self) -> np.ndarray:
        """1..M."""
        return np.arange(1, self.kappa.size + 1)

    def as_dict(self) -> dict:
        """Plain data (JSON): lists of floats by lag, the sample sizes."""
        return {"kappa": [float(v) for v in self.kappa], "stderr": [float(v) for v in self.stderr],
                "units": self.units, "positions": [int(v) for v in self.positions]}

    @classmethod
    def from_dict(cls, d: dict) -> ContextSensitivity:
        """Inverse of :meth:`as_dict`."""
        return cls(np.asarray(d["kappa"], dtype=np.float64), np.asarray(d["stderr"], dtype=np.float64),
                   int(d["units"]), np.asarray(d["positions"], dtype=np.int64))


def summarise(sums: np.ndarray, positions: np.ndarray) -> ContextSensitivity:
    """A :class:`ContextSensitivity` from per-unit TV sums ``sums`` (units, M) over ``positions`` (M,)
    positions per unit and lag."""
    means = np.asarray(sums, dtype=np.float64) / positions
    units = means.shape[0]
    return ContextSensitivity(means.mean(axis=0), means.std(axis=0, ddof=1) / np.sqrt(units), units,
                              np.asarray(positions, dtype=np.int64))


def check_counts(n_lags: object, n_units: object, seq_len: object, units: str = "n_sequences") -> None:
    """``ValueError`` naming the first bad count: n_lags in [1, MAX_LAGS], at least two units (a
    standard error needs them), a sequence longer than n_lags (a position with a token n_lags back)."""
    for name, v, lo in (("n_lags", n_lags, 1), (units, n_units, 2), ("seq_len", seq_len, 2)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if n_lags > MAX_LAGS:
        raise ValueError(f"n_lags must be at most {MAX_LAGS}, got {n_lags}")
    if seq_len <= n_lags:
        raise ValueError(f"seq_len must exceed n_lags (a position needs a token n_lags back), got seq_len "
                         f"{seq_len} and n_lags {n_lags}")


def world_context_sensitivity(world: LatentWorld, n_lags: int, *, n_sequences: int = 16, seq_len: int = 256,
                              seed: int = 0, temperature: float = 1.0,
                              backend: str = "numba") -> ContextSensitivity:
    """kappa_1..kappa_{n_lags} of ``world`` along ``n_sequences`` sequences of ``seq_len`` tokens sampled
    from its target at ``temperature`` (SPEC 11; sample sizes: ``n_sequences`` units of ``seq_len - m``
    positions at lag m). ``backend="numpy"``: the NumPy oracle (slow; the same numbers bit for bit)."""
    if not isinstance(world, LatentWorld):
        raise ValueError(f"context sensitivity needs a LatentWorld, got {type(world).__name__} (a stationary "
                         "world's law does not depend on the prefix: its kappa is 0; a trace has no laws "
                         "off its recorded prefixes)")
    check_counts(n_lags, n_sequences, seq_len)
    seed = check_seed(seed)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    W = world.kernel_world(world.check_temperature(temperature))
    positions = seq_len - np.arange(1, n_lags + 1)
    if backend == "numba":
        sums = np.zeros((n_sequences, n_lags))
        kappa_kernel(W, np.int64(seed), np.int64(seq_len), np.int64(n_lags), sums)
    else:
        sums = np.array([_sequence_numpy(world, s, seed, seq_len, n_lags, temperature)
                         for s in range(n_sequences)])
    return summarise(sums, positions)


def _sequence_numpy(world: LatentWorld, s: int, seed: int, seq_len: int, n_lags: int,
                    temperature: float) -> np.ndarray:
    """The oracle of ``simulate.context_kernels.sequence_kappa``: sequence s's summed TVs by lag."""
    from relaxspec.simulate.context_kernels import replace_key

    key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
    rkey = np.uint64(replace_key(np.int64(seed), np.int64(s)))
    states, rows, tokens = [world.initial(key)], [], []
    for t in range(seq_len):
        rows.append(world.target_probs(states[t][0], temperature))
        tokens.append(draw_token(rows[t], uniform(key, t)))
        states.append(world.advance(*states[t], tokens[t]))
    sums = np.zeros(n_lags)
    for r in range(seq_len - 1):
        z, h = world.advance(*states[r], draw_token(rows[r], uniform(rkey, r)))
        for m in range(1, min(n_lags, seq_len - 1 - r) + 1):
            row = world.target_probs(z, temperature)
            sums[m - 1] += 0.5 * np.add.accumulate(np.abs(row - rows[r + m]))[-1]  # in token order
            z, h = world.advance(z, h, tokens[r + m])
    return sums
