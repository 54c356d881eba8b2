"""Synthetic and captured worlds to decode in (SPEC section 6).

- :class:`LatentWorld`: a latent-field autoregressive model over V image
  tokens with a codebook, a per-token prior, a state z_t on the unit sphere
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
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from core.trace import Trace, read_trace
from simulate.rng import fmix, stream_key, uniform
from simulate.world_kernels import (
    F_BETA,
    F_BETA_Q,
    F_BMAX,
    F_BQMAX,
    F_DRIFT,
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
    target_row,
    transition,
)
from theory.boost import check_embedding
from theory.distributions import total_variation, validate_distribution
from theory.neighbours import neighbour_table

CODEBOOKS = ("sphere", "clustered")


@dataclass(frozen=True)
class LatentParams:
    """Parameters of a :class:`LatentWorld` (plain data; presets are instances).

    Attributes
    ----------
    vocab_size, dim : V and the code dimension d.
    codebook : "sphere" (uniform unit vectors) or "clustered" (unit vectors
        around ``n_clusters`` random centres with spread ``cluster_spread``).
    prior_scale : std of the per-token prior b (Gaussian).
    beta : inverse temperature of the target's latent term.
    rho, sigma : state memory and state noise of the transition.
    draft_beta, draft_sigma, draft_token_noise : the drafter's beta, the
        noise of its view of z, and the std of its fixed per-token error.
    beta_spread : how ambiguity varies across states: at state z both
        inverse temperatures are multiplied by exp(beta_spread <a, z>), a a
        fixed unit "difficulty axis" (0: every state equally ambiguous; a
        real image model has easy and hard stretches, which tree decoding
        skips through or stops at).
    draft_drift : how the drafter's view degrades below a step's root: at
        depth d >= 1 its noise is sqrt(draft_sigma^2 + draft_drift^2) (an
        EAGLE head reads the target's features at the root and its own
        predicted features below it, a step change: in its traces acceptance
        drops one level down and little further; 0: every depth alike).
    seed : seed of the codebook, prior and noise keys.
    """

    vocab_size: int = 16384
    dim: int = 8
    codebook: str = "sphere"
    n_clusters: int = 512
    cluster_spread: float = 0.3
    prior_scale: float = 0.5
    beta: float = 10.0
    rho: float = 0.7
    sigma: float = 0.3
    draft_beta: float = 10.0
    draft_sigma: float = 0.2
    draft_token_noise: float = 0.2
    beta_spread: float = 0.0
    draft_drift: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if int(self.vocab_size) != self.vocab_size or self.vocab_size < 2:
            raise ValueError(f"vocab_size must be an integer >= 2, got {self.vocab_size!r}")
        if int(self.dim) != self.dim or self.dim < 1:
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        if self.codebook not in CODEBOOKS:
            raise ValueError(f"codebook must be one of {CODEBOOKS}, got {self.codebook!r}")
        if int(self.n_clusters) != self.n_clusters or self.n_clusters < 1:
            raise ValueError(f"n_clusters must be a positive integer, got {self.n_clusters!r}")
        for name in ("cluster_spread", "prior_scale", "beta", "sigma", "draft_beta", "draft_sigma",
                     "draft_token_noise", "beta_spread", "draft_drift"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")
        if not (np.isfinite(self.rho) and 0.0 <= self.rho <= 1.0):
            raise ValueError(f"rho must be in [0, 1], got {self.rho!r}")
        if int(self.seed) != self.seed:
            raise ValueError(f"seed must be an integer, got {self.seed!r}")


# Calibrated with `relaxspec world-stats`: `confident` (LLM-like) has mean top-1 target probability
# about 0.75 and mean 1 - TV(p, q) about 0.84; `ambiguous` (LlamaGen-like token selection ambiguity,
# the range the LANTERN papers report for ImageNet c2i) has top-1 about 0.09 with a drafter of similar
# quality (1 - TV about 0.74), so the two differ mainly in ambiguity. `mini` is fitted to the shipped
# Fashion-MNIST model (`relaxspec mini ambiguity --fit`, mini/calibration.py; the fit, the model's
# SHA-256 and the statistics are in docs/mini_model.md): beta and the drafter's errors are chosen so
# that the mean top-1 probability and 1 - TV(p, q) match. That model is less ambiguous than LlamaGen
# (top-1 above 0.25), which is why it is a preset of its own rather than the `ambiguous` one.
PRESETS: dict[str, LatentParams] = {
    "confident": LatentParams(codebook="sphere", prior_scale=0.5, beta=150.0, rho=0.6, sigma=0.3,
                              draft_beta=150.0, draft_sigma=0.02, draft_token_noise=0.1, seed=1),
    "ambiguous": LatentParams(codebook="clustered", n_clusters=512, cluster_spread=0.08, prior_scale=0.3,
                              beta=30.0, rho=0.6, sigma=0.3, draft_beta=30.0, draft_sigma=0.05,
                              draft_token_noise=0.3, seed=2),
    "mini": LatentParams(codebook="clustered", n_clusters=512, cluster_spread=0.08, prior_scale=0.3,
                         beta=100.479, rho=0.6, sigma=0.3, draft_beta=100.479, draft_sigma=0.03669,
                         draft_token_noise=0.22017, seed=2),
    # Fitted to the first shipped model (weights/, V = 512) by the fit below (`relaxspec mini ambiguity
    # --fit`); `mini` above is its earlier two-figure fit at V = 16384, kept for the results that use it.
    "mini-fit": LatentParams(vocab_size=512, codebook="clustered", n_clusters=512, cluster_spread=0.08,
                             prior_scale=0.3, beta=27.936, rho=0.8311, sigma=0.3, draft_beta=23.561,
                             draft_sigma=0.07747, draft_token_noise=0.46479, beta_spread=1.1284,
                             draft_drift=0.073, seed=2),
    "mini-fit-draft-gpt": LatentParams(vocab_size=512, codebook="clustered", n_clusters=512,
                                       cluster_spread=0.08, prior_scale=0.3, beta=27.936, rho=0.8311,
                                       sigma=0.3, draft_beta=20.196, draft_sigma=0.09271,
                                       draft_token_noise=0.55625, beta_spread=1.1284, seed=2),
    "mini-fit-greedy": LatentParams(vocab_size=512, codebook="clustered", n_clusters=512, cluster_spread=0.08,
                                    prior_scale=0.3, beta=31.225, rho=0.9499, sigma=0.3, draft_beta=27.137,
                                    draft_sigma=0.06316, draft_token_noise=0.37896, beta_spread=0.6216,
                                    draft_drift=0.0564, seed=2),
    # Fitted to the shipped `ambiguous` model (weights/ambiguous, V = 8192) by `relaxspec mini --weights
    # weights/ambiguous ambiguity --fit` (mini/calibration.py: top-1's mean, spread and persistence; each
    # drafter's ranked acceptance, flatness and, for the EAGLE head, its drift below the root), one world
    # per drafter and one along greedy paths; docs/mini_model.md has the figures of each.
    "mini-ambiguous": LatentParams(vocab_size=8192, codebook="clustered", n_clusters=512, cluster_spread=0.08,
                                   prior_scale=0.3, beta=38.101, rho=0.9499, sigma=0.3, draft_beta=23.79,
                                   draft_sigma=0.08005, draft_token_noise=0.48032, beta_spread=1.1567,
                                   draft_drift=0.06323, seed=2),
    "mini-ambiguous-draft-gpt": LatentParams(vocab_size=8192, codebook="clustered", n_clusters=512,
                                             cluster_spread=0.08, prior_scale=0.3, beta=38.101, rho=0.9499,
                                             sigma=0.3, draft_beta=17.568, draft_sigma=0.09393,
                                             draft_token_noise=0.56358, beta_spread=1.1567, seed=2),
    # the same fit along the model's greedy paths (one per class), for greedy decoding (rule r3)
    "mini-ambiguous-greedy": LatentParams(vocab_size=8192, codebook="clustered", n_clusters=512,
                                          cluster_spread=0.08, prior_scale=0.3, beta=45.944, rho=0.8135,
                                          sigma=0.3, draft_beta=30.808, draft_sigma=0.05906,
                                          draft_token_noise=0.35435, beta_spread=0.9907, draft_drift=0.05396,
                                          seed=2),
}


def _cache_dir() -> Path:
    return Path(os.environ.get("RELAXSPEC_CACHE", Path.home() / ".cache" / "relaxspec"))


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

    @classmethod
    def preset(cls, name: str, **overrides) -> LatentWorld:
        """A world of :data:`PRESETS` by name (overrides replace parameters, e.g. vocab_size for tests)."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"unknown world preset {name!r}; the presets are {', '.join(PRESETS)}")
        return cls(PRESETS[name], name=name, **overrides)

    @property
    def codebook_sha256(self) -> str:
        """Hash of the codebook (names the neighbour-table cache file)."""
        return hashlib.sha256(np.ascontiguousarray(self.codebook).tobytes()).hexdigest()

    def neighbours(self, k: int) -> np.ndarray:
        """Neighbour table of the codebook with ``min(k, V - 1)`` columns (cached on disk)."""
        k = min(int(k), self.vocab_size - 1)
        for width, table in self._tables.items():
            if width >= k:
                return table
        width = max(k, min(1024, self.vocab_size - 1))
        path = _cache_dir() / f"neighbours-{self.codebook_sha256[:16]}-{width}.npy"
        table = None
        if path.exists():
            try:
                table = np.load(path, allow_pickle=False)
            except (OSError, ValueError):
                table = None
        if table is None or table.shape != (self.vocab_size, width):
            table = neighbour_table(self.codebook, k_max=width)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                with open(tmp, "wb") as f:
                    np.save(f, table, allow_pickle=False)
                os.replace(tmp, path)
            except OSError:
                pass  # a read-only home: recompute next time
        self._tables[width] = table
        return table

    def embedding(self) -> np.ndarray:
        """The codebook (unit rows, float64 (V, d)): GSD's embedding table in this world (the world has no
        other token embedding, so Boost's ``embedding=token|codebook`` setting reads it either way)."""
        return self.codebook

    def kernel_world(self, temperature: float) -> tuple:
        key = float(temperature)
        if key not in self._kernel_worlds:
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
            fp[N_FPARAMS:] = self.difficulty_axis
            dummy = np.zeros(1)
            self._kernel_worlds[key] = (KIND_LATENT, self.ET, b, bq, fp, self.keys, dummy, dummy, self._T)
        return self._kernel_worlds[key]

    # ---- the world from Python: states and rows come from the kernels (one implementation)
    def initial(self, seq_key: np.uint64) -> tuple[np.ndarray, np.uint64]:
        """First state and prefix hash of the sequence keyed ``seq_key``."""
        z = np.empty(self.params.dim)
        h = initial_state(self.ET, self.keys[0], np.uint64(seq_key), z)
        return z, np.uint64(h)

    def advance(self, z: np.ndarray, h: np.uint64, x: int) -> tuple[np.ndarray, np.uint64]:
        """State and prefix hash after token x."""
        out = np.empty_like(z)
        h2 = transition(self.ET, self.kernel_world(1.0)[4], self.keys[0], z, np.uint64(h), int(x), out)
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
        if temperature == 1.0:
            return p
        with np.errstate(divide="ignore"):
            logp = np.log(p) / temperature
        e = np.exp(logp - logp.max())
        return e / e.sum()

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
            z, h = None, np.uint64(0)
        for t in range(seq_len):
            p = world.target_probs(z, temperature)
            yield p, world.draft_probs(z, h, temperature, depth=draft_depth)
            if greedy:
                x = int(np.argmax(p))
            else:
                x = int(np.searchsorted(np.cumsum(p), uniform(key, t) * p.sum(), side="right"))
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


def make_world(name: str, **overrides) -> LatentWorld:
    """A preset world by name (``confident`` or ``ambiguous``)."""
    return LatentWorld.preset(name, **overrides)


__all__ = [
    "LatentParams",
    "LatentWorld",
    "PRESETS",
    "StationaryWorld",
    "TraceWorld",
    "World",
    "WorldStats",
    "ambiguity",
    "make_world",
    "sampled_nodes",
    "trace_stats",
    "world_stats",
    "fmix",
]
