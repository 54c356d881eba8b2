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
Delta = sum_x q(x) (a(x) - a0(x)) (``theory.boost_law``: ``boost_excess``; ``boosted_law``
and ``boosted_tv`` give the law and its TV for any a, with each boost's acceptance). Depth boosts always
have a >= a0; GSD has it for one-hot drafts (a = p(C) >= p(x)) but not always for
sampled ones (a group's p/q can be below x's), where only the general formula of
``boosted_tv`` is exact (docs/theory.md, section 11).

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
class GroupWindow(enum.StrEnum):
    """The ranks GSD's group is drawn from around x (SPEC 9.2; a ``StrEnum``: ``GroupWindow.OFFICIAL ==
    "official"``, the spelling of ``gsd:...,window=official``)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    PRINCIPLED = "principled"
    """The G ranks around x: floor(G/2) below, ceil(G/2) - 1 above (``theory.boost_law.window_extent``)."""
    OFFICIAL = "official"
    """GSD's published code: 7 ranks below x and 6 above whatever G, x alone near the bottom
    (``theory.boost_law.official_window_falls_back``)."""

    @property
    def is_official(self) -> bool:
        """True for the published code's fixed window."""
        return self is GroupWindow.OFFICIAL


WINDOWS = tuple(GroupWindow)


def as_group_window(window: str | GroupWindow) -> GroupWindow:
    """``window`` as a :class:`GroupWindow`; ``ValueError`` names an unknown one."""
    if window not in WINDOWS:
        raise ValueError(f"unknown group window {window!r}; expected one of {WINDOWS}")
    return GroupWindow(window)
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
    window: GroupWindow = GroupWindow.PRINCIPLED
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
            object.__setattr__(self, "window", as_group_window(self.window))
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
    def group(cls, G: int, tau: float = GSD_TAU, dist: float = GSD_DIST, *,
              window: str | GroupWindow = GroupWindow.PRINCIPLED, embedding: str = "token") -> Boost:
        """GSD's group acceptance (SPEC 9.2)."""
        return cls(BoostKind.GROUP, group_size=G, tau=tau, dist=dist, window=as_group_window(window),
                   embedding=embedding)

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
        return self.reads_embedding and self.window.is_official

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
            if self.window.is_official:
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


def check_embedding(emb: np.ndarray, vocab_size: int) -> np.ndarray:
    """An embedding table of ``vocab_size`` finite rows, float64; ``ValueError`` otherwise."""
    e = np.asarray(emb, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != vocab_size:
        raise ValueError(f"the embedding table has shape {e.shape}, expected ({vocab_size}, dim): "
                         "a table of another vocabulary size")
    if not np.all(np.isfinite(e)):
        raise ValueError("the embedding table has NaN or infinite entries")
    return e
