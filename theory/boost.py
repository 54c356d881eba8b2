"""Boosted sampled-draft acceptance (SPEC sections 9.2-9.5).

A sampled-draft test accepts a draft x ~ q with a0(x) = min(1, p(x)/q(x)) and
otherwise emits from the standard residual norm((p - q)^+). A *boost* raises
the acceptance to a(x) >= a0(x) and keeps that residual:

- ``group`` (GSD, 9.2): a(x) = min(1, p(C)/q(C)) over x's group C(x): the
  tokens among the G ranks around x's rank in p whose probability is within
  ``tau`` of p(x) and whose embedding is within squared distance ``dist``;
- ``depth`` (Cool-SD, 9.3): a(x) = min(1, omega_i p(x)/q(x)) for a draft at
  depth i, with omega = (omega_1, ..., omega_D) (the last value holds deeper);
- ``budget`` (ours, 9.5): the proximity boost scaled so that a node's total
  distortion stays within ``delta`` (issue 15).

By SPEC 9.4 such a rule emits a law whose TV to p is exactly
Delta = sum_x q(x) (a(x) - a0(x)) (:func:`boost_excess`); :func:`boosted_law`
and :func:`boosted_tv` give the law and its TV for any a.

A boost is written as a spec string: ``none``, ``gsd:G=10,tau=0.15,dist=0.5``
(optional ``window=principled|official`` and ``embedding=token|codebook``),
``cool:omega=2/1.5/1.2`` (per-depth list, ``/``-separated) or
``budget:delta=0.05,k=8``; ``str(Boost.parse(s))`` gives the canonical form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from theory.distributions import validate_distribution
from theory.stages import seqsum

BOOST_KINDS = ("none", "group", "depth", "budget")
SPEC_NAMES = {"none": "none", "gsd": "group", "cool": "depth", "budget": "budget"}
WINDOWS = ("principled", "official")
EMBEDDINGS = ("token", "codebook")
OFFICIAL_BELOW, OFFICIAL_ABOVE = 7, 6
"""GSD's published code: the window is 7 ranks on one side of x and 6 on the other (SPEC 9.2)."""
GSD_TAU, GSD_DIST = 0.15, 0.5
"""The GSD paper's defaults."""


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


@dataclass(frozen=True)
class Boost:
    """How a sampled-draft test is boosted; build with :meth:`none`, :meth:`group`, :meth:`depth`,
    :meth:`budget` or :meth:`parse`."""

    kind: str = "none"
    group_size: int = 0
    tau: float = 0.0
    dist: float = 0.0
    window: str = "principled"
    embedding: str = "token"
    omega: tuple[float, ...] = ()
    delta: float = 0.0
    k: int = 0

    def __post_init__(self) -> None:
        if self.kind not in BOOST_KINDS:
            raise ValueError(f"unknown boost kind {self.kind!r}; expected one of {BOOST_KINDS}")
        if self.kind == "group":
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
        if self.kind == "depth":
            om = tuple(float(w) for w in self.omega)
            if not om:
                raise ValueError("a depth-scaled boost needs at least one omega")
            for i, w in enumerate(om):
                if not (np.isfinite(w) and w >= 1.0):
                    raise ValueError(f"omega must be >= 1 at every depth, got {w!r} at depth {i + 1}")
            object.__setattr__(self, "omega", om)
        if self.kind == "budget":
            if not (np.isfinite(self.delta) and 0.0 <= self.delta <= 1.0):
                raise ValueError(f"budget delta must be in [0, 1], got {self.delta!r}")
            if isinstance(self.k, bool) or int(self.k) != self.k or self.k < 0:
                raise ValueError(f"budget k must be a non-negative integer, got {self.k!r}")
            object.__setattr__(self, "delta", float(self.delta))
            object.__setattr__(self, "k", int(self.k))

    @classmethod
    def none(cls) -> Boost:
        """No boost: the standard sampled-draft test (R2 without relaxation)."""
        return cls()

    @classmethod
    def group(cls, G: int, tau: float = GSD_TAU, dist: float = GSD_DIST, *, window: str = "principled",
              embedding: str = "token") -> Boost:
        """GSD's group acceptance (SPEC 9.2)."""
        return cls("group", group_size=G, tau=tau, dist=dist, window=window, embedding=embedding)

    @classmethod
    def depth(cls, omega: Sequence[float] | float) -> Boost:
        """Cool-SD's depth-scaled acceptance with per-depth factors ``omega`` (SPEC 9.3)."""
        om = (omega,) if np.isscalar(omega) else tuple(omega)
        return cls("depth", omega=om)

    @classmethod
    def budget(cls, delta: float, k: int) -> Boost:
        """The budgeted relaxation of sampled drafts (SPEC 9.5)."""
        return cls("budget", delta=delta, k=k)

    @property
    def is_none(self) -> bool:
        return self.kind == "none"

    def omega_at(self, depth: int) -> float:
        """omega_i for a draft at ``depth`` >= 1 (the last factor holds beyond the list)."""
        if self.kind != "depth":
            return 1.0
        return self.omega[min(max(int(depth), 1), len(self.omega)) - 1]

    def __str__(self) -> str:
        if self.kind == "group":
            s = f"gsd:G={self.group_size},tau={self.tau:g},dist={self.dist:g}"
            if self.window != "principled":
                s += f",window={self.window}"
            if self.embedding != "token":
                s += f",embedding={self.embedding}"
            return s
        if self.kind == "depth":
            return "cool:omega=" + "/".join(f"{w:g}" for w in self.omega)
        if self.kind == "budget":
            return f"budget:delta={self.delta:g},k={self.k}"
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
        allowed = {"none": (), "group": ("G", "tau", "dist", "window", "embedding"), "depth": ("omega",),
                   "budget": ("delta", "k")}[kind]
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
            if kind == "none":
                return cls.none()
            if kind == "group":
                if "G" not in args:
                    raise ValueError(f"boost {text!r} needs G")
                return cls.group(int(args["G"]), float(args.get("tau", GSD_TAU)),
                                 float(args.get("dist", GSD_DIST)), window=args.get("window", "principled"),
                                 embedding=args.get("embedding", "token"))
            if kind == "depth":
                if "omega" not in args:
                    raise ValueError(f"boost {text!r} needs omega")
                return cls.depth([float(w) for w in args["omega"].split("/")])
            missing = [key for key in ("delta", "k") if key not in args]
            if missing:
                raise ValueError(f"boost {text!r} needs {', '.join(missing)}")
            return cls.budget(float(args["delta"]), int(args["k"]))
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


def rank_window(p: np.ndarray, x: int, G: int, window: str) -> np.ndarray:
    """Tokens at the G ranks around x's rank in p (rank 0 = most probable, ties by lower id), clipped
    to the vocabulary: ``principled`` floor(G/2) more probable and ceil(G/2) - 1 less probable than x;
    ``official`` a fixed 7 and 6 (G unused)."""
    order = np.lexsort((np.arange(p.size), -p))
    r = int(np.flatnonzero(order == x)[0])
    before, after = (G // 2, (G + 1) // 2 - 1) if window == "principled" else (OFFICIAL_BELOW, OFFICIAL_ABOVE)
    return order[max(0, r - before): min(p.size, r + after + 1)]


def group_members(p: np.ndarray, x: int, emb: np.ndarray, boost: Boost) -> np.ndarray:
    """C(x): x and every window token y with |p(y) - p(x)| < tau and ||e_y - e_x||^2 < dist (SPEC 9.2),
    in rank order."""
    cand = rank_window(p, x, boost.group_size, boost.window)
    close = np.abs(p[cand] - p[x]) < boost.tau
    d2 = np.sum((emb[cand] - emb[x]) ** 2, axis=1)
    keep = (close & (d2 < boost.dist)) | (cand == x)
    return cand[keep]


def boosted_acceptance(p: np.ndarray, q: np.ndarray, x: int, boost: Boost, *, depth: int = 1,
                       emb: np.ndarray | None = None) -> float:
    """a(x) for draft ``x`` at ``depth`` under ``boost`` (group and depth boosts; the budget boost reads
    the node's history and lives with the tree walk)."""
    if q[x] <= 0.0:
        raise ValueError(f"drafted token {x} has zero draft probability")
    if boost.kind == "group":
        if emb is None:
            raise ValueError("group acceptance needs an embedding table")
        C = group_members(p, x, emb, boost)
        return min(1.0, seqsum(p[C]) / seqsum(q[C]))
    if boost.kind == "depth":
        return min(1.0, boost.omega_at(depth) * p[x] / q[x])
    if boost.kind == "budget":
        raise ValueError("the budget boost depends on the node's stages; use the tree walk")
    return min(1.0, p[x] / q[x])


def acceptance_vector(p: np.ndarray, q: np.ndarray, boost: Boost, *, depth: int = 1,
                      emb: np.ndarray | None = None) -> np.ndarray:
    """a(x) for every x with q(x) > 0 (1 elsewhere): the input of :func:`boosted_law`."""
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    if boost.kind == "group":
        if emb is None:
            raise ValueError("group acceptance needs an embedding table")
        emb = check_embedding(emb, p.size)
    a = np.ones(p.size)
    for x in np.flatnonzero(q > 0):
        a[x] = boosted_acceptance(p, q, int(x), boost, depth=depth, emb=emb)
    return a


def boosted_stage(
    r: np.ndarray, qp: np.ndarray, x: int, boost: Boost, depth: int, emb: np.ndarray | None
) -> tuple[float, np.ndarray]:
    """A boosted sampled-draft stage (SPEC 9.2-9.3) on residual ``r`` and draft residual ``qp`` for drawn
    ``x`` at ``depth``: ``(a, r_next)`` with a from :func:`boosted_acceptance` and the
    standard residual (never a relaxed one)."""
    a = boosted_acceptance(r, qp, x, boost, depth=depth, emb=emb)
    return a, standard_residual(r, qp)
