"""Relaxations of the acceptance test: the proximity set (SPEC section 2).

For a candidate x and the current distribution r, let n_1, n_2, ... be row x of
the neighbour table truncated to k entries and C_j = r(n_1) + ... + r(n_j)
(a sequential sum). Then

- ``none``:                J = 0;
- ``additive(k, delta)``:  J = max{j <= k : C_j <= delta};          (LANTERN)
- ``multiplicative(k, lam)``: J = max{j <= k : C_j <= (lam-1) r(x)}. (LANTERN++)

A(x) = {x, n_1, ..., n_J} and the relaxed mass is r(x) + C_J.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.neighbours import validate_neighbour_rows, validate_neighbours


class RelaxKind(enum.StrEnum):
    """The relaxations of SPEC 2 (a ``StrEnum``: a member equals its name as a string)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    NONE = "none"
    """J = 0: the exact test."""
    ADDITIVE = "additive"
    """LANTERN: merge neighbours while their mass C_j <= delta."""
    MULTIPLICATIVE = "multiplicative"
    """LANTERN++: merge neighbours while their mass C_j <= (lam - 1) r(x)."""


class Variant(enum.StrEnum):
    """A relaxed rule's rejection update (SPEC 3): the principled one, or the published codes'."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    PRINCIPLED = "principled"
    OFFICIAL = "official"
    """Zeroes x and its first k + 1 neighbours on a rejection (reads k + 1 columns)."""

    @property
    def code(self) -> int:
        """The kernels' code."""
        return VARIANT_CODES[self]

    @property
    def is_official(self) -> bool:
        """True for the published codes' update."""
        return self is Variant.OFFICIAL


VARIANTS = tuple(Variant)
VARIANT_PRINCIPLED, VARIANT_OFFICIAL = 0, 1
"""The kernels' variant codes."""
VARIANT_CODES = {Variant.PRINCIPLED: VARIANT_PRINCIPLED, Variant.OFFICIAL: VARIANT_OFFICIAL}


def as_variant(variant: str | Variant) -> Variant:
    """``variant`` as a :class:`Variant`; ``ValueError`` names an unknown one."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {tuple(str(v) for v in VARIANTS)}")
    return Variant(variant)


KINDS = tuple(RelaxKind)
RELAX_NONE, RELAX_ADDITIVE, RELAX_MULTIPLICATIVE = 0, 1, 2
"""The kernels' relaxation codes (:attr:`Relax.code`)."""
RELAX_CODES = {RelaxKind.NONE: RELAX_NONE, RelaxKind.ADDITIVE: RELAX_ADDITIVE,
               RelaxKind.MULTIPLICATIVE: RELAX_MULTIPLICATIVE}
KEYS: dict[str, tuple[str, ...]] = {RelaxKind.NONE: (), RelaxKind.ADDITIVE: ("k", "delta"),
                                    RelaxKind.MULTIPLICATIVE: ("k", "lam")}
"""The keys each relaxation kind takes in :meth:`Relax.parse`."""
_KEYS_HELP = "none takes no keys; additive: k, delta; multiplicative: k, lam"


@dataclass(frozen=True)
class Relax:
    """A relaxation rule; build it with :meth:`none`, :meth:`additive` or :meth:`multiplicative`."""

    kind: RelaxKind = RelaxKind.NONE
    k: int = 0
    delta: float = 0.0
    lam: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown relaxation kind {self.kind!r}; expected one of "
                             f"{tuple(str(k) for k in KINDS)}")
        object.__setattr__(self, "kind", RelaxKind(self.kind))
        if int(self.k) != self.k or self.k < 0:
            raise ValueError(f"k must be a non-negative integer, got {self.k!r}")
        if not (np.isfinite(self.delta) and 0.0 <= self.delta <= 1.0):
            raise ValueError(f"delta must be in [0, 1], got {self.delta!r}")
        if not (np.isfinite(self.lam) and self.lam >= 1.0):
            raise ValueError(f"lam must be >= 1, got {self.lam!r}")
        if not self.merges_neighbours and (self.k or self.delta or self.lam != 1.0):
            raise ValueError("Relax.none() takes no k, delta or lam")
        if self.is_additive and self.lam != 1.0:
            raise ValueError("an additive relaxation takes delta, not lam")
        if self.is_multiplicative and self.delta != 0.0:
            raise ValueError("a multiplicative relaxation takes lam, not delta")
        object.__setattr__(self, "k", int(self.k))
        object.__setattr__(self, "delta", float(self.delta))
        object.__setattr__(self, "lam", float(self.lam))

    @classmethod
    def none(cls) -> Relax:
        """The exact (lossless) test."""
        return cls(RelaxKind.NONE)

    @classmethod
    def additive(cls, k: int, delta: float) -> Relax:
        """LANTERN: merge up to k nearest neighbours while their mass stays <= delta."""
        return cls(RelaxKind.ADDITIVE, k=k, delta=delta)

    @classmethod
    def multiplicative(cls, k: int, lam: float) -> Relax:
        """LANTERN++: merge up to k neighbours while their mass stays <= (lam - 1) r(x)."""
        return cls(RelaxKind.MULTIPLICATIVE, k=k, lam=lam)

    @classmethod
    def parse(cls, text: str) -> Relax:
        """Parse ``none``, ``additive:k=1000,delta=0.1`` or ``multiplicative:k=1000,lam=2``.

        Raises
        ------
        ValueError
            Naming the unknown kind, or the unknown, missing, repeated or
            non-numeric key, and the keys each kind takes (:data:`KEYS`).
        """
        if not isinstance(text, str):
            raise ValueError(f"a relaxation must be a string such as 'additive:k=1000,delta=0.1', "
                             f"got {text!r}")
        text = text.strip()
        m = re.fullmatch(r"(\w+)(?::(.*))?", text)
        if not m or m.group(1) not in KINDS:
            raise ValueError(f"cannot parse relaxation {text!r}; expected none, additive:k=1000,delta=0.1 "
                             "or multiplicative:k=1000,lam=2")
        kind, rest = RelaxKind(m.group(1)), m.group(2) or ""
        args: dict[str, float] = {}
        for part in filter(None, (s.strip() for s in rest.split(","))):
            key, sep, value = (s.strip() for s in part.partition("="))
            if key not in KEYS[kind]:
                raise ValueError(f"relaxation {text!r}: {kind} does not take {key!r} ({_KEYS_HELP})")
            if key in args:
                raise ValueError(f"relaxation {text!r} gives {key} twice")
            if not sep or not value:
                raise ValueError(f"relaxation {text!r}: {key} needs a value ({key}=...)")
            try:
                args[key] = float(value)
            except ValueError as err:
                raise ValueError(f"relaxation {text!r}: {key}={value!r} is not a number") from err
        missing = [key for key in KEYS[kind] if key not in args]
        if missing:
            raise ValueError(f"relaxation {text!r} needs {' and '.join(missing)} ({_KEYS_HELP})")
        if kind is RelaxKind.NONE:
            return cls.none()
        if not (np.isfinite(args["k"]) and args["k"] == int(args["k"])):
            raise ValueError(f"relaxation {text!r}: k must be an integer, got {args['k']:g}")
        try:
            if kind is RelaxKind.ADDITIVE:
                return cls.additive(int(args["k"]), args["delta"])
            return cls.multiplicative(int(args["k"]), args["lam"])
        except ValueError as err:
            raise ValueError(f"relaxation {text!r}: {err}") from err

    @property
    def code(self) -> int:
        """The kernels' code (:data:`RELAX_CODES`)."""
        return RELAX_CODES[self.kind]

    @property
    def param(self) -> float:
        """delta for additive, lam for multiplicative, 0 for none."""
        if self.is_additive:
            return self.delta
        return self.lam if self.is_multiplicative else 0.0

    @property
    def merges_neighbours(self) -> bool:
        """True for LANTERN and LANTERN++ (a proximity set beyond x), whatever k."""
        return self.kind is not RelaxKind.NONE

    @property
    def is_additive(self) -> bool:
        """True for LANTERN: the merged mass is capped by delta (of the distribution's total)."""
        return self.kind is RelaxKind.ADDITIVE

    @property
    def is_multiplicative(self) -> bool:
        """True for LANTERN++: the merged mass is capped by (lam - 1) r(x)."""
        return self.kind is RelaxKind.MULTIPLICATIVE

    @property
    def is_exact(self) -> bool:
        """True when the rule merges nothing (none, k = 0)."""
        return not self.merges_neighbours or self.k == 0

    def merge_cap(self, total: float, rx: float) -> float:
        """The bound on C_j (module docstring): delta * total (additive) or (lam - 1) r(x)
        (multiplicative); 0 for none."""
        if self.is_additive:
            return self.delta * total
        return (self.lam - 1.0) * rx if self.is_multiplicative else 0.0

    def __str__(self) -> str:
        if self.is_additive:
            return f"additive:k={self.k},delta={self.delta:g}"
        if self.is_multiplicative:
            return f"multiplicative:k={self.k},lam={self.lam:g}"
        return "none"


NO_RELAX = Relax.none()
"""The exact rule, usable as a default argument (``Relax`` is immutable)."""


def merge_count(
    r: np.ndarray, total: float, x: int, row: np.ndarray, relax: Relax
) -> tuple[int, float]:
    """J and C_J for candidate ``x`` on the (possibly unnormalised) distribution ``r``.

    ``total`` is the mass of ``r``: the additive threshold is ``delta * total``
    so an unnormalised residual behaves as its normalisation would. ``row`` is
    row ``x`` of the neighbour table. This is the arithmetic the Numba kernels
    reproduce exactly: a sequential running sum that stops at the first j whose
    C_j exceeds the bound (C is non-decreasing, so that j bounds the maximum).
    """
    if relax.is_exact:
        return 0, 0.0
    bound = relax.merge_cap(total, r[x])
    c = 0.0
    for j in range(relax.k):
        nxt = c + r[row[j]]
        if nxt > bound:
            return j, c
        c = nxt
    return relax.k, c


def proximity_set(
    r: np.ndarray, x: int, neighbours: np.ndarray | None, relax: Relax
) -> tuple[np.ndarray, float]:
    """Proximity set A(x) and its relaxed mass r(A(x)) = r(x) + C_J.

    ``r`` is a probability vector over V tokens. Returns ``(members, mass)``
    with ``members = [x, n_1, ..., n_J]`` (int64).
    """
    r = validate_distribution(r, name="r")
    V = r.shape[0]
    x = check_token(x, V, "x")
    if relax.is_exact:
        return np.array([x], dtype=np.int64), float(r[x])
    if neighbours is None:
        raise ValueError(f"relaxation {relax} needs a neighbour table")
    validate_neighbours(neighbours, V, relax.k)
    validate_neighbour_rows(neighbours, np.array([x]), relax.k)
    row = neighbours[x].astype(np.int64)
    J, c = merge_count(r, 1.0, x, row, relax)
    return np.concatenate(([x], row[:J])).astype(np.int64), float(r[x] + c)


def check_token(x: int, vocab_size: int, name: str = "token") -> int:
    """Return ``x`` as int after checking it is a token id in [0, V)."""
    if isinstance(x, bool) or int(x) != x:
        raise ValueError(f"{name} must be an integer token id, got {x!r}")
    x = int(x)
    if not 0 <= x < vocab_size:
        raise ValueError(f"{name} {x} is out of range for a vocabulary of {vocab_size}")
    return x
