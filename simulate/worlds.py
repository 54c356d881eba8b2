"""Synthetic and captured worlds to decode in (SPEC section 6).

- :class:`LatentWorld` (parameters and presets: :mod:`simulate.world_params`): a latent-field
  autoregressive model over V image tokens with a codebook, a per-token prior, a state z_t on the unit sphere
  and a drafter with its own noisy view of z. Parameters are plain data
  (:class:`LatentParams`); :data:`PRESETS` holds ``confident`` (LLM-like),
  ``ambiguous`` (LlamaGen-like) and ``mini`` (fitted to the shipped
  Fashion-MNIST model), all at V = 16384, d = 8.
- :class:`StationaryWorld`: the same p and q at every node.
- :class:`TraceWorld`: logits captured from a real model (``core.trace``).

Target logits at state z: ``beta(z) <E_x, z> + b_x`` with
``beta(z) = beta exp(beta_spread <a, z>)`` (``beta`` itself in the presets,
whose beta_spread is 0; a fitted world uses it for easy and hard stretches). After token x the state
moves to ``normalise(rho z + (1 - rho) E_x + sigma xi)`` with xi keyed by
(world seed, prefix hash), so every branch of a draft tree sees one world.
The drafter's logits are ``beta_q(z_q) <E_x, z_q> + b_x + tau g_x`` with
``z_q = normalise(z + sigma_q xi_q)`` (xi_q keyed by the drafter's seed and
the prefix) and g a fixed per-token error: sigma_q, beta_q and tau control
1 - TV(p, q). Rows are computed by one implementation, the kernels of
:mod:`simulate.world_kernels` (float32 logits and exp, float64 rows), which
the Python methods call too.

Over 400 lines: the three world kinds share one interface (target/draft rows, advance, the kernel
tuple) and their validation; one module keeps that interface in one view.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from relaxspec.core.trace import Trace, read_trace
from relaxspec.simulate.neighbour_cache import cached_neighbours
from relaxspec.simulate.rng import fmix, stream_key, uniform
from relaxspec.simulate.world_file import world_params
from relaxspec.simulate.world_kernels import (
    F_ABOVE,
    F_BETA,
    F_BETA_Q,
    F_BMAX,
    F_BQMAX,
    F_DIAG,
    F_DRIFT,
    F_GRID_W,
    F_LAG1,
    F_PREFIX,
    F_RHO,
    F_SIGMA,
    F_SIGMA_Q,
    F_SPREAD,
    KIND_LATENT,
    KIND_STATIONARY,
    N_FPARAMS,
    draft_row,
    initial_state,
    pad_bias,
    pad_codebook,
    row_scratch,
    state_size,
    target_row,
    transition,
)
from relaxspec.simulate.world_params import (  # re-exported: worlds are built from them
    CODEBOOKS,
    MAX_CODEBOOK_ENTRIES,
    MAX_DIM,
    MAX_VOCAB_SIZE,
    PRESETS,
    LatentParams,
)
from relaxspec.theory.boost import check_embedding
from relaxspec.theory.distributions import logits_to_probs, total_variation, validate_distribution
from relaxspec.theory.neighbours import check_neighbour_count

# The kernels evaluate logits in float32 (simulate.world_kernels): a logit of magnitude L carries a
# rounding error of about d L 2**-24 nats, and the float32 exp fails (NaN rows) once that error passes
# ~88. A temperature is refused when the world's logits could exceed 2**20 (errors under 1/16 nat per
# code dimension), far below that; such a row is a point mass anyway (greedy: temperature 0, rule r3).
MAX_KERNEL_LOGIT = 2.0**20


class World:
    """Base class of the worlds the engine decodes in."""

    name: str = "world"
    vocab_size: int

    def kernel_world(self, temperature: float) -> tuple:
        """The tuple the Numba engine takes (see :mod:`simulate.world_kernels`)."""
        raise NotImplementedError

    def neighbours(self, k: int) -> np.ndarray | None:
        """A neighbour table with at least k columns (None when the world has none)."""
        raise NotImplementedError

    def embedding(self) -> np.ndarray:
        """The (V, d) float64 embedding table GSD's groups read (SPEC 9.2); ``ValueError`` when the world
        has none."""
        raise ValueError(f"world {self.name!r} has no embedding table: GSD's group acceptance needs one")


class LatentWorld(World):
    """The latent-field world (SPEC section 6); build with :meth:`preset` or parameters."""

    def __init__(self, params: LatentParams | None = None, name: str | None = None, **overrides) -> None:
        params = replace(params or LatentParams(), **overrides)
        self.params = params
        self.name = name or "latent"
        self.vocab_size = params.vocab_size
        rng = np.random.default_rng([params.seed, 0x5EED])
        V, d = params.vocab_size, params.dim
        if params.codebook == "sphere":
            E = rng.standard_normal((V, d))
        else:
            centres = rng.standard_normal((params.n_clusters, d))
            centres /= np.linalg.norm(centres, axis=1, keepdims=True)
            noise = params.cluster_spread * rng.standard_normal((V, d))
            E = centres[rng.integers(0, params.n_clusters, V)] + noise
        E /= np.linalg.norm(E, axis=1, keepdims=True)
        self.codebook = E
        self.ET = np.ascontiguousarray(E.T)
        self.prior = params.prior_scale * rng.standard_normal(V)
        self.draft_prior = self.prior + params.draft_token_noise * rng.standard_normal(V)
        axis = np.random.default_rng([params.seed, 0xA515]).standard_normal(d)  # own stream: E, b unchanged
        self.difficulty_axis = axis / np.linalg.norm(axis)
        self.keys = np.array([fmix(np.uint64(params.seed) * np.uint64(2) + np.uint64(1)),
                              fmix(np.uint64(params.seed) * np.uint64(2) + np.uint64(2))], dtype=np.uint64)
        self._tables: dict[int, np.ndarray] = {}
        self._kernel_worlds: dict[float, tuple] = {}
        self._T = pad_codebook(self.ET)
        # the transitions' table: the codebook, with zero rows for a grid / position-keyed state's
        # bookkeeping entries (simulate.world_kernels; the ET itself otherwise)
        self.state_size = state_size(d, params.grid_width, params.stateful)
        self._ET_state = self.ET if self.state_size == d else np.ascontiguousarray(
            np.vstack([self.ET, np.zeros((self.state_size - d, V))]))

    @classmethod
    def preset(cls, name: str | Path, **overrides) -> LatentWorld:
        """A world of :data:`PRESETS` by name, or of a world file by its path (``*.toml``:
        :mod:`simulate.world_file`); overrides replace parameters, e.g. vocab_size for tests."""
        return cls(world_params(name), name=str(name), **overrides)

    @property
    def codebook_sha256(self) -> str:
        """Hash of the codebook (names the neighbour-table cache file)."""
        return hashlib.sha256(np.ascontiguousarray(self.codebook).tobytes()).hexdigest()

    def neighbours(self, k: int) -> np.ndarray:
        """Neighbour table of the codebook with ``min(k, V - 1)`` columns (cached on disk, checked on
        reading: :mod:`simulate.neighbour_cache`)."""
        k = min(int(k), self.vocab_size - 1)
        for width, table in self._tables.items():
            if width >= k:
                return table
        width = max(k, min(1024, self.vocab_size - 1))
        table = cached_neighbours(self.codebook, self.codebook_sha256, width)
        self._tables[width] = table
        return table

    @property
    def min_temperature(self) -> float:
        """The smallest temperature the kernels take: the world's logits (``beta(z) <E_x, z> + b_x``,
        ``|beta(z)| <= beta exp(beta_spread)``, unit codes and states) stay within ``MAX_KERNEL_LOGIT``."""
        p = self.params
        scale = max(p.beta, p.draft_beta) * math.exp(p.beta_spread)
        bias = max(float(np.abs(self.prior).max()), float(np.abs(self.draft_prior).max()))
        return (scale + bias) / MAX_KERNEL_LOGIT

    def check_temperature(self, temperature: float) -> float:
        """``temperature`` as a float, else a ``ValueError``: not finite and > 0, or below
        :attr:`min_temperature` (the float32 kernels' logits would overflow)."""
        if not (np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be finite and > 0 (greedy decoding is rule r3), "
                             f"got {temperature!r}")
        if temperature < self.min_temperature:
            raise ValueError(f"temperature {temperature:g} is too small for world {self.name!r}: its logits "
                             f"would exceed {MAX_KERNEL_LOGIT:.0f} (2**20) in magnitude, the float32 "
                             f"kernels' bound; the smallest it takes is {self.min_temperature:.3g} (for "
                             "greedy decoding use rule r3)")
        return float(temperature)

    def embedding(self) -> np.ndarray:
        """The codebook (unit rows, float64 (V, d)): GSD's embedding table in this world (the world has no
        other token embedding, so Boost's ``embedding=token|codebook`` setting reads it either way)."""
        return self.codebook

    def kernel_world(self, temperature: float) -> tuple:
        key = float(temperature)
        if key not in self._kernel_worlds:
            self.check_temperature(temperature)
            p = self.params
            b = pad_bias(self.prior / temperature)
            bq = pad_bias(self.draft_prior / temperature)
            fp = np.zeros(N_FPARAMS + p.dim)
            fp[F_BETA] = p.beta / temperature
            fp[F_RHO] = p.rho
            fp[F_SIGMA] = p.sigma
            fp[F_BETA_Q] = p.draft_beta / temperature
            fp[F_SIGMA_Q] = p.draft_sigma
            fp[F_BMAX] = float(b.max())
            fp[F_BQMAX] = float(bq.max())
            fp[F_SPREAD] = p.beta_spread
            fp[F_DRIFT] = p.draft_drift
            fp[F_PREFIX] = p.prefix_noise
            fp[F_GRID_W] = p.grid_width
            fp[F_ABOVE] = p.grid_above
            fp[F_DIAG] = p.grid_diagonal
            fp[F_LAG1] = p.lag1_noise
            fp[N_FPARAMS:] = self.difficulty_axis
            dummy = np.zeros(1)
            self._kernel_worlds[key] = (KIND_LATENT, self._ET_state, b, bq, fp, self.keys, dummy, dummy,
                                        self._T)
        return self._kernel_worlds[key]

    # ---- the world from Python: states and rows come from the kernels (one implementation)
    def initial(self, seq_key: np.uint64) -> tuple[np.ndarray, np.uint64]:
        """First state and prefix hash of the sequence keyed ``seq_key`` (a state has
        :attr:`state_size` entries: d, plus a grid / position-keyed world's bookkeeping)."""
        z = np.empty(self.state_size)
        h = initial_state(self._ET_state, self.kernel_world(1.0)[4], self.keys[0], np.uint64(seq_key), z)
        return z, np.uint64(h)

    def advance(self, z: np.ndarray, h: np.uint64, x: int) -> tuple[np.ndarray, np.uint64]:
        """State and prefix hash after token x."""
        out = np.empty_like(z)
        h2 = transition(self._ET_state, self.kernel_world(1.0)[4], self.keys[0], z, np.uint64(h), int(x), out)
        return out, np.uint64(h2)

    def target_probs(self, z: np.ndarray, temperature: float = 1.0) -> np.ndarray:
        """p at state z (the kernel's row: ``simulate.world_kernels.target_row``)."""
        W = self.kernel_world(temperature)
        out = np.empty(self.vocab_size)
        es, cmaxs = row_scratch(W, 1)
        target_row(W, z, out, es[0], cmaxs[0])
        return out

    def draft_probs(self, z: np.ndarray, h: np.uint64, temperature: float = 1.0,
                    depth: int = 0) -> np.ndarray:
        """q at state z with prefix hash h, ``depth`` below a step's root (the kernel's row:
        ``simulate.world_kernels.draft_row``)."""
        W = self.kernel_world(temperature)
        out = np.empty(self.vocab_size)
        es, cmaxs = row_scratch(W, 1)
        draft_row(W, z, np.uint64(h), int(depth), out, es[0], cmaxs[0])
        return out

    def __repr__(self) -> str:
        return f"LatentWorld({self.name!r}, {asdict(self.params)})"


class StationaryWorld(World):
    """The same target p and draft q at every node (the i.i.d. setting); ``embedding``: an optional
    (V, d) table for GSD's groups."""

    def __init__(self, p: np.ndarray, q: np.ndarray, neighbours: np.ndarray | None = None,
                 name: str = "stationary", embedding: np.ndarray | None = None) -> None:
        self.p = validate_distribution(p, name="p")
        self.q = validate_distribution(q, name="q", size=self.p.size)
        self.vocab_size = self.p.size
        self._neighbours = neighbours
        self._embedding = None if embedding is None else check_embedding(embedding, self.vocab_size)
        self.name = name

    def neighbours(self, k: int) -> np.ndarray | None:
        return self._neighbours

    def embedding(self) -> np.ndarray:
        """The table given as ``embedding``; ``ValueError`` when none was."""
        if self._embedding is None:
            raise ValueError(f"world {self.name!r} has no embedding table: GSD's group acceptance needs "
                             "one (StationaryWorld(p, q, embedding=E), E of shape (V, d))")
        return self._embedding

    @staticmethod
    def _tempered(p: np.ndarray, temperature: float) -> np.ndarray:
        """p^(1/T), normalised: ``theory.logits_to_probs`` of log p (which refuses a temperature whose
        logits overflow)."""
        if temperature == 1.0:
            return p
        with np.errstate(divide="ignore"):
            logp = np.log(p)
        return logits_to_probs(logp, temperature=temperature)

    def kernel_world(self, temperature: float) -> tuple:
        dummy = np.zeros((1, 1))
        return (KIND_STATIONARY, dummy, np.zeros(1, dtype=np.float32), np.zeros(1, dtype=np.float32),
                np.zeros(N_FPARAMS), np.zeros(2, dtype=np.uint64), self._tempered(self.p, temperature),
                self._tempered(self.q, temperature), pad_codebook(np.zeros((1, 1))))

    def target_probs(self, z=None, temperature: float = 1.0) -> np.ndarray:
        """p (at any node)."""
        return self._tempered(self.p, temperature)

    def draft_probs(self, z=None, h=None, temperature: float = 1.0, depth: int = 0) -> np.ndarray:
        """q (at any node and depth)."""
        return self._tempered(self.q, temperature)


class TraceWorld(World):
    """Logits captured from a real model: each recorded step is re-verified on its own tree.

    The trees, logits and uniforms are the trace's; only the rule, relaxation
    and variant change. ``neighbours`` overrides the table stored in the trace.
    """

    def __init__(self, path: str | Path, neighbours: np.ndarray | None = None) -> None:
        self.trace: Trace = read_trace(path)
        self.header = self.trace.header
        self.vocab_size = self.header.vocab_size
        self.name = f"trace:{Path(path).name}"
        self._neighbours = neighbours if neighbours is not None else self.trace.neighbours

    def neighbours(self, k: int) -> np.ndarray | None:
        return self._neighbours

    def embedding(self) -> np.ndarray:
        """The GSD embedding table the trace stores; ``ValueError`` when it has none."""
        emb = getattr(self.trace, "embedding", None)
        if emb is None:
            raise ValueError(f"trace {self.name!r} stores no embedding table: GSD's group acceptance needs "
                             "one (a trace captured with a gsd boost stores it)")
        return emb

    def kernel_world(self, temperature: float) -> tuple:
        raise ValueError("a TraceWorld is replayed step by step, not simulated by the kernel")


@dataclass(frozen=True)
class WorldStats:
    """Ambiguity of a world along sequences sampled from its target."""

    mean_top1: float
    mean_entropy: float  # nats
    mean_top10_mass: float
    mean_acceptance: float  # mean 1 - TV(p, q): single-draft acceptance
    n_positions: int


def ambiguity(p: np.ndarray) -> tuple[float, float, float]:
    """Top-1 probability, entropy (nats) and top-10 mass of one distribution."""
    srt = np.sort(p)[::-1]
    nz = p[p > 0]
    return float(srt[0]), float(-(nz * np.log(nz)).sum()), float(srt[:10].sum())


def trace_stats(world: TraceWorld) -> WorldStats:
    """Ambiguity at the root of every recorded step: the positions the captured model decoded.

    p and q come from the stored logits with the trace's sampling settings;
    1 - TV(p, q) is averaged over the steps with drafts (NaN when none has).
    """
    h = world.header
    stats, acc = [], []
    for step in world.trace.steps():
        p = h.target_sampling.probs(step.target_logits[0].astype(np.float64))
        stats.append(ambiguity(p))
        if step.parents.size > 1:  # the drafter ran at the root
            q = h.draft_sampling.probs(step.draft_logits[0].astype(np.float64))
            acc.append(1.0 - total_variation(p, q))
    if not stats:
        raise ValueError(f"trace {world.trace.path} holds no steps")
    top1, ent, top10 = np.mean(stats, axis=0)
    return WorldStats(float(top1), float(ent), float(top10), float(np.mean(acc)) if acc else float("nan"),
                      len(stats))


def sampled_nodes(world: LatentWorld | StationaryWorld, *, n_sequences: int = 8, seq_len: int = 64,
                  seed: int = 0, temperature: float = 1.0, draft_depth: int = 0,
                  greedy: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(p, q) at every position of ``n_sequences`` sequences of ``seq_len`` tokens sampled from the
    world's target (sequence s keyed by (seed, s)): the nodes a lossless decoder visits; q as the
    drafter sees a node ``draft_depth`` below a tree's root (0: at the root). ``greedy``: each
    sequence takes p's argmax (lowest id among ties), the path of greedy decoding (rule r3)."""
    if n_sequences < 1 or seq_len < 1:
        raise ValueError("n_sequences and seq_len must be >= 1")
    for s in range(n_sequences):
        key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
        if isinstance(world, LatentWorld):
            z, h = world.initial(key)
        else:
            z, h = np.empty(0), np.uint64(0)  # a stationary world has no state: it reads no z
        for t in range(seq_len):
            p = world.target_probs(z, temperature)
            yield p, world.draft_probs(z, h, temperature, depth=draft_depth)
            if greedy:
                x = int(np.argmax(p))
            else:
                x = int(np.searchsorted(np.cumsum(p), uniform(key, np.int64(t)) * p.sum(), side="right"))
                x = min(x, p.size - 1)
            if isinstance(world, LatentWorld):
                z, h = world.advance(z, h, x)


def world_stats(world: LatentWorld | StationaryWorld | TraceWorld, *, n_sequences: int = 8, seq_len: int = 64,
                seed: int = 0, temperature: float = 1.0) -> WorldStats:
    """Mean top-1 probability, entropy, top-10 mass and 1 - TV(p, q) over sampled sequences
    (:func:`sampled_nodes`; over the recorded steps for a :class:`TraceWorld`: :func:`trace_stats`,
    the other arguments are then unused)."""
    if isinstance(world, TraceWorld):
        return trace_stats(world)
    stats, acc = [], []
    for p, q in sampled_nodes(world, n_sequences=n_sequences, seq_len=seq_len, seed=seed,
                              temperature=temperature):
        stats.append(ambiguity(p))
        acc.append(1.0 - total_variation(p, q))
    top1, ent, top10 = np.mean(stats, axis=0)
    return WorldStats(float(top1), float(ent), float(top10), float(np.mean(acc)), len(stats))


def check_world_settings(name: str, overrides: dict, temperatures: list[float], widths: dict[str, int]
                         ) -> None:
    """Check a sweep's settings against preset ``name`` with ``overrides`` before anything is built:
    every temperature (:meth:`LatentWorld.check_temperature`) and every neighbour width (``widths``: spec
    -> k, each at most V - 1). Builds the world's codebook and priors, not its neighbour table."""
    world = LatentWorld.preset(name, **overrides)
    for spec, k in widths.items():
        check_neighbour_count(k, world.vocab_size, spec)
    for t in temperatures:
        world.check_temperature(t)


def make_world(name: str, **overrides) -> LatentWorld:
    """A preset world by name (``confident`` or ``ambiguous``)."""
    return LatentWorld.preset(name, **overrides)


__all__ = [
    "CODEBOOKS",
    "MAX_CODEBOOK_ENTRIES",
    "MAX_DIM",
    "MAX_KERNEL_LOGIT",
    "MAX_VOCAB_SIZE",
    "LatentParams",
    "LatentWorld",
    "PRESETS",
    "StationaryWorld",
    "TraceWorld",
    "check_world_settings",
    "World",
    "WorldStats",
    "ambiguity",
    "make_world",
    "sampled_nodes",
    "trace_stats",
    "world_stats",
    "fmix",
]
