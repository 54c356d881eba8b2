"""VVS's skipped verification (SPEC 10.3) in the tree grammar: an EAGLE-2 tree with a skip schedule.

=============================================  ====================================================
spec                                           policy
=============================================  ====================================================
``vvs:K,D,M,uniform=I``                        EAGLE-2's tree ``eagle2:K,D,M``; every I-th step
                                               (steps 1, 1 + I, 1 + 2I, ...; I >= 2) is a skip step
``vvs:K,D,M,dynamic[=S][,alpha=A]``            a step is a skip step when the step before it was
                                               not and the tree's paths are alike: the weighted
                                               mean over depths l (weights alpha^l) of the mean
                                               pairwise cosine similarity of the paths' code
                                               vectors is >= S (defaults: VVS's code, S = 0.7,
                                               alpha = 0.9)
``...,tv=B`` (after either schedule)           ours, bounded skips (docs/theory.md 15.7): a step the
                                               schedule would skip is skipped only when every token
                                               it can emit has exact TV <= B to the target's law
                                               after its prefix (given the tree, the stale row and
                                               the target's rows there, which a world has); else it
                                               is verified
=============================================  ====================================================

A skip step makes no target forward: it emits the first gamma = min(L_s, floor(Lbar)) tokens of a
root-to-leaf path of the step's tree drawn uniformly over the leaves and a bonus token drawn from the
last target row held (``simulate.vvs``; its exact distortion: ``theory.vvs``). The other steps are
verified as EAGLE-2's trees are (R1, LANTERN's relaxation or none).

Why a tree spec and not a verification or a run argument: the schedule decides, from the drafted tree
and the steps before, whether the step's tree is verified at all; it reads no rule, relaxation or
uniform of the verifier, and a verify step is verified exactly as ``eagle2:K,D,M`` is. As a tree spec it
rides with the tree everywhere a tree goes (sweeps' ``trees`` lists, result rows' ``tree`` column, figure
labels) and ``str`` of the policy parses back to it, so a VVS row is told apart from an EAGLE-2 row by its
spec alone; a verification value is left to say how a forward's tokens are tested.

The canonical spec drops the dynamic schedule's defaults: ``vvs:10,4,59,dynamic`` is S = 0.7, alpha = 0.9;
no ``tv`` is VVS's unbounded schedule.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from relaxspec.core.trees.numbers import spec_float, spec_int
from relaxspec.core.trees.policies import Eagle2Tree
from relaxspec.theory.boost import format_number


class Schedule(enum.StrEnum):
    """VVS's skip schedules (SPEC 10.3; a ``StrEnum``: ``Schedule.DYNAMIC == "dynamic"``, its spelling in
    ``vvs:K,D,M,dynamic``)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    UNIFORM = "uniform"
    """Every I-th step is a skip step."""
    DYNAMIC = "dynamic"
    """A step skips when the step before did not and its tree's paths are alike (cosine similarity of
    their code vectors)."""

    @property
    def is_periodic(self) -> bool:
        """True when the skip steps are every ``interval``-th step (``uniform``)."""
        return self is Schedule.UNIFORM

    @property
    def reads_similarity(self) -> bool:
        """True when a skip is decided by the tree's path similarity (``dynamic``: reads the world's code
        vectors)."""
        return self is Schedule.DYNAMIC


SCHEDULES = tuple(Schedule)
"""VVS's skip schedules (SPEC 10.3)."""
DEFAULT_SIMILARITY, DEFAULT_ALPHA = 0.70, 0.9
"""The dynamic schedule's threshold S and depth decay alpha in VVS's code."""
MAX_INTERVAL = 1 << 20
"""The largest uniform interval I (a run of at most 2**20 steps per sequence skips at most once)."""
VVS_FORM = "vvs:K,D,M,uniform=I[,tv=B] or vvs:K,D,M,dynamic[=S][,alpha=A][,tv=B]"


@dataclass(frozen=True)
class SkipSchedule:
    """When a step skips its target forward: ``uniform`` every ``interval``-th step, or ``dynamic`` when the
    tree's paths' similarity is >= ``similarity`` (depth weights ``alpha ** l``); with a ``tv`` bound
    (ours), only when every token the skip can emit has exact TV <= ``tv`` (None: VVS's, unbounded)."""

    kind: Schedule
    interval: int = 0
    similarity: float = DEFAULT_SIMILARITY
    alpha: float = DEFAULT_ALPHA
    tv: float | None = None

    @property
    def bounded(self) -> bool:
        """True when a skip is taken only within the TV bound :attr:`tv` (docs/theory.md 15.7)."""
        return self.tv is not None

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"the skip schedule must be one of {SCHEDULES}, got {self.kind!r}")
        object.__setattr__(self, "kind", Schedule(self.kind))
        if self.kind.is_periodic:
            i = self.interval
            if isinstance(i, bool) or not isinstance(i, int) or not 2 <= i <= MAX_INTERVAL:
                raise ValueError(f"uniform's interval I must be an integer in [2, {MAX_INTERVAL}] (I = 1 "
                                 f"would skip two steps in a row), got {i!r}")
        else:
            s, a = self.similarity, self.alpha
            if isinstance(s, bool) or not isinstance(s, int | float) or not -1.0 <= s <= 1.0:
                raise ValueError(f"dynamic's similarity threshold S must be a number in [-1, 1] (a cosine), "
                                 f"got {s!r}")
            if isinstance(a, bool) or not isinstance(a, int | float) or not 0.0 < a <= 1.0:
                raise ValueError(f"dynamic's depth decay alpha must be a number in (0, 1], got {a!r}")
        b = self.tv
        if b is not None and (isinstance(b, bool) or not isinstance(b, int | float) or not 0.0 <= b <= 1.0):
            raise ValueError(f"the skip's TV bound tv must be a number in [0, 1], got {b!r}")

    def __str__(self) -> str:
        bound = "" if self.tv is None else f",tv={format_number(self.tv)}"
        if self.kind.is_periodic:
            return f"{self.kind}={self.interval}{bound}"
        s = self.similarity
        out = str(self.kind) if s == DEFAULT_SIMILARITY else f"{self.kind}={format_number(s)}"
        return out + ("" if self.alpha == DEFAULT_ALPHA else f",alpha={format_number(self.alpha)}") + bound


def parse_schedule(parts: list[str]) -> SkipSchedule:
    """The schedule of a ``vvs`` spec's arguments after K,D,M (:data:`VVS_FORM`)."""
    if not parts:
        raise ValueError(f"needs a skip schedule after K,D,M ({VVS_FORM})")
    name, eq, value = (s.strip() for s in parts[0].partition("="))
    if name not in SCHEDULES:
        raise ValueError(f"the skip schedule must be one of {SCHEDULES}, got {name!r} ({VVS_FORM})")
    kind = Schedule(name)
    allowed = ("tv",) if kind.is_periodic else ("alpha", "tv")
    settings: dict[str, float] = {}
    for extra in parts[1:]:
        key, eq2, val = (s.strip() for s in extra.partition("="))
        if key not in allowed or not eq2:
            raise ValueError(f"unknown setting {extra.strip()!r} ({VVS_FORM})")
        if key in settings:
            raise ValueError(f"{key} is given twice ({VVS_FORM})")
        settings[key] = spec_float(val, f"{key} ({VVS_FORM})")
    if kind.is_periodic:
        if not eq:
            raise ValueError(f"uniform takes its interval: uniform=I ({VVS_FORM})")
        return SkipSchedule(kind, interval=spec_int(value, VVS_FORM), tv=settings.get("tv"))
    similarity = spec_float(value, f"S ({VVS_FORM})") if eq else DEFAULT_SIMILARITY
    return SkipSchedule(kind, similarity=similarity, alpha=settings.get("alpha", DEFAULT_ALPHA),
                        tv=settings.get("tv"))


class VvsTree(Eagle2Tree):
    """EAGLE-2's tree (``top_k``, ``depth``, ``total_tokens``) whose steps skip verification by
    ``schedule`` (a :class:`SkipSchedule`); builds and kernel spec are EAGLE-2's."""

    def __init__(self, top_k: int = 10, depth: int = 4, total_tokens: int = 59, *,
                 schedule: SkipSchedule) -> None:
        if not isinstance(schedule, SkipSchedule):
            raise ValueError(f"schedule must be a SkipSchedule, got {type(schedule).__name__}")
        super().__init__(top_k, depth, total_tokens)
        self.schedule = schedule
        self.name = f"vvs:{self.top_k},{self.depth},{self.total_tokens},{schedule}"

    @classmethod
    def parse(cls, args: str) -> VvsTree:
        """The policy of a spec's arguments ``K,D,M,SCHEDULE`` (:data:`VVS_FORM`)."""
        parts = args.split(",") if args else []
        if len(parts) < 4:
            raise ValueError(f"needs K,D,M and a skip schedule ({VVS_FORM})")
        k, d, m = (spec_int(p, VVS_FORM) for p in parts[:3])
        return cls(k, d, m, schedule=parse_schedule(parts[3:]))

    @property
    def eagle2(self) -> Eagle2Tree:
        """The tree every step drafts (and a verify step verifies)."""
        return Eagle2Tree(self.top_k, self.depth, self.total_tokens)

    def __eq__(self, other: object) -> bool:
        return type(other) is VvsTree and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"VvsTree({self.top_k}, {self.depth}, {self.total_tokens}, schedule={self.schedule!r})"


__all__ = ["DEFAULT_ALPHA", "DEFAULT_SIMILARITY", "SCHEDULES", "VVS_FORM", "Schedule", "SkipSchedule",
           "VvsTree", "parse_schedule"]
