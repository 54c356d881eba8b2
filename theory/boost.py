"""Boosted sampled-draft acceptance (SPEC sections 9.2-9.5).

A sampled-draft test accepts a draft x ~ q with a0(x) = min(1, p(x)/q(x)) and
otherwise emits from the standard residual norm((p - q)^+). A *boost* changes
the acceptance to some a(x), usually >= a0(x), and keeps that residual:

- ``group`` (GSD, 9.2): a(x) = min(1, p(C)/q(C)) over x's group C(x): the
  tokens among the G ranks around x's rank in p whose probability is within
  ``tau`` of p(x) and whose embedding is within squared distance ``dist``;
- ``depth`` (Cool-SD, 9.3): a(x) = min(1, omega_i p(x)/q(x)) for a draft at
  depth i, with omega = (omega_1, ..., omega_D) (the last value holds deeper),
  given as a list or by the paper's annealing schedule (:func:`cool_schedule`);
- ``budget`` (ours, 9.5): the proximity boost scaled so that a node's total
  distortion stays within ``tv`` (issue 15).

By SPEC 9.4 such a rule emits a law whose TV to p is exactly
Delta = sum_x q(x) (a(x) - a0(x)) (:func:`boost_excess`); :func:`boosted_law`
and :func:`boosted_tv` give the law and its TV for any a. Depth boosts always
have a >= a0; GSD has it for one-hot drafts (a = p(C) >= p(x)) but not always for
sampled ones (a group's p/q can be below x's), where only the general formula of
:func:`boosted_tv` is exact (docs/theory.md, section 11).

A boost is written as a spec string: ``none``, ``gsd:G=10,tau=0.15,dist=0.5``
(optional ``window=principled|official`` and ``embedding=token|codebook``),
``cool:omega=2/1.5/1.2`` (per-depth list, ``/``-separated), ``cool:delta=2``
(the paper's schedule, optional ``nu=0.7`` and ``mu``: :func:`cool_schedule`) or
``budget:tv=0.05,k=8``; ``str(Boost.parse(s))`` gives the canonical form, and
numbers in it round-trip exactly.

Sources of the GSD and Cool-SD details: docs/frontier_sources.md.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.relax import Relax
from relaxspec.theory.stages import r2_stage, seqsum


class BoostKind(enum.StrEnum):
    """The boosts of a sampled-draft test (SPEC 9.2-9.5; a ``StrEnum``: a member equals its name)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    NONE = "none"
    """The standard test a0(x) = min(1, p(x)/q(x))."""
    GROUP = "group"
    """GSD (9.2): the acceptance of x's group C(x), read from an embedding table."""
    DEPTH = "depth"
    """Cool-SD (9.3): min(1, omega_i p(x)/q(x)) at depth i."""
    BUDGET = "budget"
    """The budgeted relaxation (9.5): the stages of a node share a TV budget ``tv``."""


BOOST_KINDS = tuple(BoostKind)
SPEC_NAMES = {"none": BoostKind.NONE, "gsd": BoostKind.GROUP, "cool": BoostKind.DEPTH,
              "budget": BoostKind.BUDGET}
"""Grammar name -> kind."""
WINDOWS = ("principled", "official")
EMBEDDINGS = ("token", "codebook")
OFFICIAL_BELOW, OFFICIAL_ABOVE = 7, 6
"""GSD's published code (junhyukso/GSD ``scheduler/jacobi_iteration_lumina_mgpt.py``): the window is the
7 ranks below x (less probable) and the 6 above it (more probable), SPEC 9.2; docs/frontier_sources.md."""
GSD_TAU, GSD_DIST = 0.15, 0.5
"""The GSD paper's defaults."""
COOL_NU = 0.7
"""Cool-SD's decay rate nu of omega_i = delta exp(-nu i - mu) (arXiv 2601.09212)."""
MAX_COOL_DEPTHS = 1024
"""The longest omega list an annealing schedule may need before it reaches 1 (then 1 holds deeper)."""


def format_number(x: float) -> str:
    """The shortest text that parses back to the same float (``2`` for 2.0, ``0.15``, ``1e-07``)."""
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def _cool_factor(delta: float, nu: float, mu: float, depth: int) -> float:
    return delta * float(np.exp(-nu * depth - mu))


def _check_cool(delta: float, nu: float, mu: float) -> None:
    for name, v in (("delta", delta), ("nu", nu), ("mu", mu)):
        if not np.isfinite(v):
            raise ValueError(f"Cool-SD's {name} must be finite, got {v!r}")
    if delta <= 0:
        raise ValueError(f"Cool-SD's delta must be > 0, got {delta!r}")
    if nu < 0:
        raise ValueError(f"Cool-SD's decay nu must be >= 0 (omega may not grow with depth), got {nu!r}")
    first = _cool_factor(delta, nu, mu, 1)
    if first < 1.0:
        raise ValueError(f"Cool-SD's omega_1 = delta exp(-nu - mu) = {first!r} < 1: omega must be >= 1 "
                         "(the schedule would never relax the test)")


def cool_schedule(delta: float, depths: int, *, nu: float = COOL_NU, mu: float | None = None
                  ) -> tuple[float, ...]:
    """Cool-SD's annealed factors (omega_1, ..., omega_depths), omega_i = max(1, delta exp(-nu i - mu)).

    The exponential form and nu = 0.7 are the paper's (arXiv 2601.09212, section on the annealing
    schedule); ``mu`` defaults to -nu, so that omega_1 = delta; the floor at 1 is SPEC 9.3's
    omega >= 1 (docs/frontier_sources.md says what could not be checked). ``nu = 0`` is the paper's
    uniform baseline (a constant factor).
    """
    if isinstance(depths, bool) or int(depths) != depths or depths < 1:
        raise ValueError(f"the number of depths must be an integer >= 1, got {depths!r}")
    delta, nu = float(delta), float(nu)
    mu = -nu if mu is None else float(mu)
    _check_cool(delta, nu, mu)
    return tuple(max(1.0, _cool_factor(delta, nu, mu, i)) for i in range(1, int(depths) + 1))


def _cool_omegas(delta: float, nu: float, mu: float) -> tuple[float, ...]:
    """The schedule up to the first depth where it reaches 1 (which then holds at every deeper depth)."""
    _check_cool(delta, nu, mu)
    if nu == 0.0:
        return (_cool_factor(delta, nu, mu, 1),)
    om: list[float] = []
    for i in range(1, MAX_COOL_DEPTHS + 1):
        om.append(max(1.0, _cool_factor(delta, nu, mu, i)))
        if om[-1] == 1.0:
            return tuple(om)
    raise ValueError(f"Cool-SD's schedule (delta={delta!r}, nu={nu!r}, mu={mu!r}) stays above 1 beyond "
                     f"depth {MAX_COOL_DEPTHS}: use a larger nu, or nu=0 for a constant factor")


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


@dataclass(frozen=True)
class Boost:
    """How a sampled-draft test is boosted; build with :meth:`none`, :meth:`group`, :meth:`depth`,
    :meth:`budget` or :meth:`parse`."""

    kind: BoostKind = BoostKind.NONE
    group_size: int = 0
    tau: float = 0.0
    dist: float = 0.0
    window: str = "principled"
    embedding: str = "token"
    omega: tuple[float, ...] = ()
    tv: float = 0.0
    """The budget's total variation per node (SPEC 9.5's delta; ``tv`` here, as LANTERN's and Cool-SD's
    ``delta`` are other quantities)."""
    k: int = 0
    anneal: tuple[float, ...] = ()
    """Cool-SD's schedule parameters (delta, nu, mu) when ``omega`` comes from :func:`cool_schedule`."""

    def __post_init__(self) -> None:
        if self.kind not in BOOST_KINDS:
            raise ValueError(f"unknown boost kind {self.kind!r}; expected one of "
                             f"{tuple(str(k) for k in BOOST_KINDS)}")
        object.__setattr__(self, "kind", BoostKind(self.kind))
        if self.reads_embedding:
            G = self.group_size
            if isinstance(G, bool) or int(G) != G or G < 1:
                raise ValueError(f"group size G must be an integer >= 1, got {G!r}")
            object.__setattr__(self, "group_size", int(G))
            object.__setattr__(self, "tau", _positive("tau", self.tau))
            object.__setattr__(self, "dist", _positive("dist", self.dist))
            if self.window not in WINDOWS:
                raise ValueError(f"unknown group window {self.window!r}; expected one of {WINDOWS}")
            if self.embedding not in EMBEDDINGS:
                raise ValueError(f"unknown embedding {self.embedding!r}; expected one of {EMBEDDINGS}")
        if self.scales_by_depth:
            if self.anneal:
                if len(self.anneal) != 3:
                    raise ValueError(f"anneal must be (delta, nu, mu), got {self.anneal!r}")
                delta, nu, mu = (float(v) for v in self.anneal)
                om = _cool_omegas(delta, nu, mu)
                if self.omega and tuple(float(w) for w in self.omega) != om:
                    raise ValueError("give a depth boost either omega or the schedule's anneal, not both")
                object.__setattr__(self, "anneal", (delta, nu, mu))
                object.__setattr__(self, "omega", om)
            om = tuple(float(w) for w in self.omega)
            if not om:
                raise ValueError("a depth-scaled boost needs at least one omega")
            for i, w in enumerate(om):
                if not (np.isfinite(w) and w >= 1.0):
                    raise ValueError(f"omega must be >= 1 at every depth, got {w!r} at depth {i + 1}")
            object.__setattr__(self, "omega", om)
        if self.uses_budget:
            if not (np.isfinite(self.tv) and 0.0 <= self.tv <= 1.0):
                raise ValueError(f"budget tv must be in [0, 1], got {self.tv!r}")
            if isinstance(self.k, bool) or int(self.k) != self.k or self.k < 0:
                raise ValueError(f"budget k must be a non-negative integer, got {self.k!r}")
            object.__setattr__(self, "tv", float(self.tv))
            object.__setattr__(self, "k", int(self.k))

    @classmethod
    def none(cls) -> Boost:
        """No boost: the standard sampled-draft test (R2 without relaxation)."""
        return cls()

    @classmethod
    def group(cls, G: int, tau: float = GSD_TAU, dist: float = GSD_DIST, *, window: str = "principled",
              embedding: str = "token") -> Boost:
        """GSD's group acceptance (SPEC 9.2)."""
        return cls(BoostKind.GROUP, group_size=G, tau=tau, dist=dist, window=window, embedding=embedding)

    @classmethod
    def depth(cls, omega: Sequence[float] | float) -> Boost:
        """Cool-SD's depth-scaled acceptance with per-depth factors ``omega`` (SPEC 9.3)."""
        om = (omega,) if np.isscalar(omega) else tuple(omega)
        return cls(BoostKind.DEPTH, omega=om)

    @classmethod
    def cool(cls, delta: float, nu: float = COOL_NU, mu: float | None = None) -> Boost:
        """Cool-SD's annealed schedule omega_i = max(1, delta exp(-nu i - mu)) (:func:`cool_schedule`;
        ``mu`` defaults to -nu, so that omega_1 = delta)."""
        return cls(BoostKind.DEPTH, anneal=(delta, nu, -nu if mu is None else mu))

    @classmethod
    def budget(cls, tv: float, k: int) -> Boost:
        """The budgeted relaxation of sampled drafts (SPEC 9.5): TV per node <= ``tv``, merging x's ``k``
        nearest latent neighbours."""
        return cls(BoostKind.BUDGET, tv=tv, k=k)

    @property
    def is_none(self) -> bool:
        """True for the standard (unboosted) test."""
        return self.kind is BoostKind.NONE

    @property
    def reads_embedding(self) -> bool:
        """True for GSD: x's group C(x) reads an embedding table (SPEC 9.2)."""
        return self.kind is BoostKind.GROUP

    @property
    def scales_by_depth(self) -> bool:
        """True for Cool-SD: the ratio is scaled by omega_i at depth i (SPEC 9.3)."""
        return self.kind is BoostKind.DEPTH

    @property
    def official_window(self) -> bool:
        """True for GSD's published window (6 ranks above x, 7 below, x alone near the bottom: SPEC 9.2)."""
        return self.reads_embedding and self.window == "official"

    @property
    def uses_budget(self) -> bool:
        """True for the budgeted relaxation: a node's stages share its TV budget ``tv`` (SPEC 9.5), so its
        acceptance depends on the node's history (theory.budget walks it, not stage by stage)."""
        return self.kind is BoostKind.BUDGET

    def omega_at(self, depth: int) -> float:
        """omega_i for a draft at ``depth`` >= 1 (the last factor holds beyond the list)."""
        if not self.scales_by_depth:
            return 1.0
        return self.omega[min(max(int(depth), 1), len(self.omega)) - 1]

    def __str__(self) -> str:
        if self.reads_embedding:
            s = f"gsd:G={self.group_size},tau={format_number(self.tau)},dist={format_number(self.dist)}"
            if self.window != "principled":
                s += f",window={self.window}"
            if self.embedding != "token":
                s += f",embedding={self.embedding}"
            return s
        if self.scales_by_depth:
            if self.anneal:
                delta, nu, mu = self.anneal
                s = f"cool:delta={format_number(delta)},nu={format_number(nu)}"
                return s if mu == -nu else s + f",mu={format_number(mu)}"
            return "cool:omega=" + "/".join(format_number(w) for w in self.omega)
        if self.uses_budget:
            return f"budget:tv={format_number(self.tv)},k={self.k}"
        return "none"

    @classmethod
    def parse(cls, text: str) -> Boost:
        """Parse a boost spec (see the module docstring); ``ValueError`` names what is wrong."""
        if not isinstance(text, str):
            raise ValueError(f"a boost spec must be a string, got {type(text).__name__}")
        name, _, rest = text.strip().partition(":")
        if name not in SPEC_NAMES:
            raise ValueError(f"unknown boost {name!r} in {text!r}; expected one of {tuple(SPEC_NAMES)}")
        kind = SPEC_NAMES[name]
        allowed = {BoostKind.NONE: (), BoostKind.GROUP: ("G", "tau", "dist", "window", "embedding"),
                   BoostKind.DEPTH: ("omega", "delta", "nu", "mu"), BoostKind.BUDGET: ("tv", "k")}[kind]
        args: dict[str, str] = {}
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or key not in allowed:
                raise ValueError(f"bad key {item!r} in boost {text!r}; {name} takes {allowed or 'no keys'}")
            if key in args:
                raise ValueError(f"key {key!r} repeated in boost {text!r}")
            args[key] = value.strip()
        try:
            if kind is BoostKind.NONE:
                return cls.none()
            if kind is BoostKind.GROUP:
                if "G" not in args:
                    raise ValueError(f"boost {text!r} needs G")
                return cls.group(int(args["G"]), float(args.get("tau", GSD_TAU)),
                                 float(args.get("dist", GSD_DIST)), window=args.get("window", "principled"),
                                 embedding=args.get("embedding", "token"))
            if kind is BoostKind.DEPTH:
                if ("omega" in args) == ("delta" in args):
                    raise ValueError(f"boost {text!r} needs either omega (a per-depth list) or delta "
                                     "(Cool-SD's schedule), not both")
                if "omega" in args:
                    if "nu" in args or "mu" in args:
                        raise ValueError(f"boost {text!r}: nu and mu go with delta, not with omega")
                    return cls.depth([float(w) for w in args["omega"].split("/")])
                return cls.cool(float(args["delta"]), float(args.get("nu", COOL_NU)),
                                float(args["mu"]) if "mu" in args else None)
            missing = [key for key in ("tv", "k") if key not in args]
            if missing:
                raise ValueError(f"boost {text!r} needs {', '.join(missing)}")
            return cls.budget(float(args["tv"]), int(args["k"]))
        except ValueError as e:
            if str(e).startswith(("could not convert", "invalid literal")):
                raise ValueError(f"bad number in boost {text!r}: {e}") from None
            raise


NO_BOOST = Boost.none()


# ------------------------------------------------------------------ SPEC 9.4: the law of a boosted test
def standard_residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm((p - q)^+); uniform over V when p <= q everywhere (the suite's empty-residual convention)."""
    res = np.maximum(p - q, 0.0)
    s = seqsum(res)
    return res / s if s > 0.0 else np.full_like(p, 1.0 / p.size)


def base_acceptance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """a0(x) = min(1, p(x)/q(x)) for every x (1 where q = 0: such x is never drafted)."""
    return np.minimum(1.0, np.divide(p, q, out=np.ones_like(p), where=q > 0))


def _check_acceptance(a: np.ndarray, size: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.shape != (size,):
        raise ValueError(f"acceptance vector has shape {a.shape}, expected ({size},)")
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise ValueError("acceptance probabilities must lie in [0, 1]")
    return a


def boosted_law(p: np.ndarray, q: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The law a sampled-draft test with acceptance ``a`` emits: q a + (1 - sum q a) norm((p - q)^+)."""
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    a = _check_acceptance(a, p.size)
    accepted = q * a
    return accepted + max(0.0, 1.0 - float(accepted.sum())) * standard_residual(p, q)


def boost_excess(p: np.ndarray, q: np.ndarray, a: np.ndarray) -> float:
    """Delta = sum_x q(x) (a(x) - a0(x)): the exact TV of the law when a >= a0 (SPEC 9.4)."""
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    a = _check_acceptance(a, p.size)
    return float(np.sum(q * (a - base_acceptance(p, q))))


def boosted_tv(p: np.ndarray, q: np.ndarray, a: np.ndarray) -> float:
    """Exact TV(law, p) for any acceptance ``a``: (1/2) sum_y |q(y)(a(y) - a0(y)) - Delta res(y)| (SPEC 9.4).

    Equals :func:`boost_excess` when a >= a0 everywhere and p != q (theorem in docs/theory.md).
    """
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    a = _check_acceptance(a, p.size)
    a0 = base_acceptance(p, q)
    delta = float(np.sum(q * (a - a0)))
    res = np.maximum(p - q, 0.0)
    s = float(res.sum())
    if s <= 0.0:  # p == q: the lossless test never rejects; the residual is the uniform convention
        return 0.5 * float(np.abs(boosted_law(p, q, a) - p).sum())
    return 0.5 * float(np.abs(q * (a - a0) - delta * res / s).sum())


# ------------------------------------------------------------------ the boosts' acceptance
def check_embedding(emb: np.ndarray, vocab_size: int) -> np.ndarray:
    """An embedding table of ``vocab_size`` finite rows, float64; ``ValueError`` otherwise."""
    e = np.asarray(emb, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != vocab_size:
        raise ValueError(f"the embedding table has shape {e.shape}, expected ({vocab_size}, dim): "
                         "a table of another vocabulary size")
    if not np.all(np.isfinite(e)):
        raise ValueError("the embedding table has NaN or infinite entries")
    return e


def window_extent(G: int, window: str) -> tuple[int, int]:
    """How many ranks a GSD window reaches (more probable, less probable) than x: ``principled``
    ceil(G/2) - 1 and floor(G/2) (SPEC 9.2: floor(G/2) below x, ceil(G/2) - 1 above, in the target's
    logit order); ``official`` a fixed 6 and 7 (G unused: the code's slice ``[r - 7, r + 7)`` of the
    ascending logit sort), so ``principled`` with G = 14 is the official window. The kernels take
    these two numbers (``theory.rules.encode_boost``)."""
    if window == "principled":
        return (G + 1) // 2 - 1, G // 2
    return OFFICIAL_ABOVE, OFFICIAL_BELOW


def official_window_falls_back(rank: int | np.ndarray, vocab_size: int) -> bool | np.ndarray:
    """True where GSD's published code tests x alone (the standard test): fewer than 7 tokens are less
    probable than x (rank counted from the most probable, 0-based), so its slice ``[r - 7, r + 7)`` of
    the ascending sort starts below 0, comes out empty (V >= 14) and the code falls back to
    min(1, p(x)/q(x)) (docs/frontier_sources.md)."""
    return vocab_size - 1 - rank < OFFICIAL_BELOW


def rank_order(p: np.ndarray) -> np.ndarray:
    """Tokens by decreasing p, ties by lower id (rank 0 = most probable)."""
    return np.lexsort((np.arange(p.size), -p))


def rank_window(p: np.ndarray, x: int, G: int, window: str, order: np.ndarray | None = None) -> np.ndarray:
    """Tokens at the G ranks around x's rank in p (rank 0 = most probable, ties by lower id), clipped
    to the vocabulary (:func:`window_extent`; ``official``: x alone where
    :func:`official_window_falls_back`); ``order`` is :func:`rank_order` of p when already known."""
    if order is None:
        order = rank_order(p)
    r = int(np.flatnonzero(order == x)[0])
    before, after = window_extent(G, window)
    if window == "official" and official_window_falls_back(r, p.size):
        return order[r:r + 1]
    return order[max(0, r - before): min(p.size, r + after + 1)]


def group_members(p: np.ndarray, x: int, emb: np.ndarray, boost: Boost,
                  order: np.ndarray | None = None) -> np.ndarray:
    """C(x): x and every window token y with |p(y) - p(x)| < tau and ||e_y - e_x||^2 < dist (SPEC 9.2),
    in rank order (``order``: :func:`rank_order` of p when already known)."""
    if np.ndim(emb) != 2 or np.shape(emb)[0] != p.size:
        raise ValueError(f"the embedding table has shape {np.shape(emb)}, expected ({p.size}, dim): "
                         "a table of another vocabulary size")
    cand = rank_window(p, x, boost.group_size, boost.window, order)
    close = np.abs(p[cand] - p[x]) < boost.tau
    d2 = np.add.accumulate((emb[cand] - emb[x]) ** 2, axis=1)[:, -1]  # sequential, as the kernels sum
    keep = (close & (d2 < boost.dist)) | (cand == x)
    return cand[keep]


def onehot_acceptance(p: np.ndarray, boost: Boost, *, depth: int = 1, emb: np.ndarray | None = None
                      ) -> np.ndarray:
    """a(x) of a one-hot draft (q = point mass on x) for every token x at once: p(x) without a boost,
    min(1, omega_depth p(x)) for a depth boost and GSD's p(C(x)) for a group boost, bit for bit what
    :func:`boosted_acceptance` gives for each x (the group mass summed in rank order, sequentially).
    This is a fresh Jacobi token's acceptance (SPEC 9.1); O(V G) for GSD."""
    p = validate_distribution(p, name="p")
    if boost.uses_budget:
        raise ValueError("the budget boost depends on the node's stages; use the tree walk")
    if boost.scales_by_depth:
        return np.minimum(1.0, boost.omega_at(depth) * p)
    if not boost.reads_embedding:
        return p.copy()
    if emb is None:
        raise ValueError("group acceptance needs an embedding table")
    e = check_embedding(emb, p.size)
    V = p.size
    order = rank_order(p)
    rank = np.empty(V, dtype=np.int64)
    rank[order] = np.arange(V)
    tokens = np.arange(V)
    before, after = window_extent(boost.group_size, boost.window)
    alone = (official_window_falls_back(rank, V) if boost.official_window
             else np.zeros(V, dtype=bool))
    mass = np.zeros(V)
    for offset in range(-before, after + 1):  # the window in rank order, as group_members lists it
        r = rank + offset
        inside = (r >= 0) & (r < V) & (~alone | (offset == 0))
        y = order[np.clip(r, 0, V - 1)]
        d2 = np.zeros(V)
        for k in range(e.shape[1]):  # sequential over dimensions, as group_members sums
            d2 = d2 + (e[y, k] - e[tokens, k]) ** 2
        member = inside & (((np.abs(p[y] - p) < boost.tau) & (d2 < boost.dist)) | (y == tokens))
        mass = mass + np.where(member, p[y], 0.0)
    return np.minimum(1.0, mass)


def boosted_acceptance(p: np.ndarray, q: np.ndarray, x: int, boost: Boost, *, depth: int = 1,
                       emb: np.ndarray | None = None, order: np.ndarray | None = None) -> float:
    """a(x) for draft ``x`` at ``depth`` under ``boost`` (group and depth boosts; the budget boost reads
    the node's history and lives with the tree walk); ``order``: :func:`rank_order` of p if known."""
    if q[x] <= 0.0:
        raise ValueError(f"drafted token {x} has zero draft probability")
    if boost.reads_embedding:
        if emb is None:
            raise ValueError("group acceptance needs an embedding table")
        C = group_members(p, x, emb, boost, order)
        return min(1.0, seqsum(p[C]) / seqsum(q[C]))
    if boost.scales_by_depth:
        return min(1.0, boost.omega_at(depth) * p[x] / q[x])
    if boost.uses_budget:
        raise ValueError("the budget boost depends on the node's stages; use the tree walk")
    return min(1.0, p[x] / q[x])


def acceptance_vector(p: np.ndarray, q: np.ndarray, boost: Boost, *, depth: int = 1,
                      emb: np.ndarray | None = None) -> np.ndarray:
    """a(x) for every x with q(x) > 0 (1 elsewhere): the input of :func:`boosted_law`."""
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    if boost.reads_embedding:
        if emb is None:
            raise ValueError("group acceptance needs an embedding table")
        emb = check_embedding(emb, p.size)
    a = np.ones(p.size)
    order = rank_order(p) if boost.reads_embedding else None
    for x in np.flatnonzero(q > 0):
        a[x] = boosted_acceptance(p, q, int(x), boost, depth=depth, emb=emb, order=order)
    return a


def boosted_stage(
    r: np.ndarray, qp: np.ndarray, x: int, boost: Boost, depth: int, emb: np.ndarray | None
) -> tuple[float, np.ndarray]:
    """A boosted sampled-draft stage (SPEC 9.2-9.3) on residual ``r`` and draft residual ``qp`` for drawn
    ``x`` at ``depth``: ``(a, r_next)`` with a from :func:`boosted_acceptance` and the
    standard residual (never a relaxed one)."""
    a = boosted_acceptance(r, qp, x, boost, depth=depth, emb=emb)
    return a, standard_residual(r, qp)


def sampled_draft_stage(
    r: np.ndarray, qp: np.ndarray, x: int, row: np.ndarray, relax: Relax, variant: str, boost: Boost,
    depth: int, emb: np.ndarray | None
) -> tuple[float, np.ndarray]:
    """One stage of R2 (SPEC 3) for drawn ``x``: ``theory.stages.r2_stage`` without a boost (the
    unboosted rule bit for bit), :func:`boosted_stage` with one (``relax`` is then none:
    ``theory.rules.check_boost``)."""
    if boost.is_none:
        return r2_stage(r, qp, x, row, relax, variant)
    return boosted_stage(r, qp, x, boost, depth, emb)


def stage_tv(r: np.ndarray, qp: np.ndarray, boost: Boost, depth: int, emb: np.ndarray | None) -> float:
    """Exact TV(law of one sampled-draft stage, r) on residual ``r`` and draft residual ``qp``, the draft
    drawn from qp: :func:`boosted_tv` of :func:`acceptance_vector` (SPEC 9.4); 0 without a boost."""
    if boost.is_none:
        return 0.0
    return boosted_tv(r, qp, acceptance_vector(r, qp, boost, depth=depth, emb=emb))
