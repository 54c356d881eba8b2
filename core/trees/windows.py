"""Coupled Jacobi windows (SCD, SPEC 10.1) and SJD-PAC's proactive windows (SPEC 10.2) in the tree grammar.

Both are :class:`core.trees.jacobi.JacobiWindow` s (no drafter: a window of L sampled drafts verified by
one target forward) whose *next* drafts are formed differently; ``simulate.run`` decodes them with
:mod:`simulate.coupled`, and :mod:`theory.coupled` gives their exact laws on tiny targets.

=======================================================  =================================================
spec                                                     window
=======================================================  =================================================
``jacobi:L[,copy],coupled=principled|official|gumbel``   SCD: the next window's drafts are the maximal
                                                         coupling of the old ones with this forward's p
                                                         (``official``: a kept draft keeps its old q;
                                                         ``gumbel``: Gumbel-max with noise fixed per
                                                         absolute position)
``pac:L[,copy][,width=K][,depth=D][,ac=on|off]``         SJD-PAC: K candidates (the spine draft and K - 1
``[,siblings=principled|official]``                      drawn siblings) at the first D new columns,
                                                         verified as a tree by R2; ``ac=on`` couples the
                                                         spine (SCD's coupling, SPEC 10.2's AC)
=======================================================  =================================================

Defaults (dropped from the canonical spec): fresh ``uniform``, ``width=3``, ``depth=3`` (SJD-PAC's code
defaults; the paper says width 4), ``ac=on``, ``siblings=principled``. ``jacobi:L,coupled=none`` is
plain SJD, so it is written ``jacobi:L``.
"""

from __future__ import annotations

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.numbers import spec_int
from relaxspec.theory.coupled import SIBLING_LAWS, Coupling, Siblings
from relaxspec.theory.jacobi_sampler import DEFAULT_FRESH, FRESH_CHOICES, Fresh

COUPLINGS = tuple(c for c in Coupling if c.couples)
"""SCD's couplings (SPEC 10.1; :class:`theory.coupled.Coupling`): ``principled`` stores a redrawn or kept
draft with this forward's p, ``official`` (SCD's code) a kept draft with its old q, ``gumbel`` samples by
Gumbel-max. ``coupled=none`` is plain SJD (a :class:`JacobiWindow`)."""
SWITCHES = {"on": True, "off": False}
DEFAULT_WIDTH, DEFAULT_DEPTH = 3, 3
MAX_PAC_WIDTH, MAX_PAC_DEPTH = 8, 8
"""Bounds on PD's tree: at most 8 candidates at each of at most 8 columns."""
JACOBI_COUPLED_FORM = "jacobi:L[,uniform|copy][,coupled=principled|official|gumbel]"
PAC_FORM = "pac:L[,uniform|copy][,width=K][,depth=D][,ac=on|off][,siblings=principled|official]"


def _split(args: str, form: str) -> tuple[list[str], dict[str, str]]:
    """A spec's arguments as positional values and ``key=value`` settings (each key once)."""
    positional: list[str] = []
    keyed: dict[str, str] = {}
    for part in (args.split(",") if args else []):
        key, eq, value = part.partition("=")
        if not eq:
            if keyed:
                raise ValueError(f"a positional value {part.strip()!r} follows a key=value setting ({form})")
            positional.append(part)
            continue
        key = key.strip()
        if key in keyed:
            raise ValueError(f"{key} is given twice ({form})")
        keyed[key] = value.strip()
    return positional, keyed


def _fresh(positional: list[str], form: str) -> tuple[int, Fresh]:
    if len(positional) not in (1, 2):
        raise ValueError(f"needs 1 or 2 comma-separated values before any key=value ({form})")
    L = spec_int(positional[0], form)
    fresh = positional[1].strip() if len(positional) == 2 else DEFAULT_FRESH
    return L, Fresh(_choice(fresh, FRESH_CHOICES, "fresh"))


def _choice(value: str, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"{what} must be one of {choices}, got {value!r}")
    return value


def parse_jacobi(args: str) -> JacobiWindow:
    """The window ``jacobi:ARGS`` names: a plain :class:`JacobiWindow`, or a :class:`CoupledWindow` when
    ARGS sets ``coupled=`` (``coupled=none`` is plain SJD)."""
    positional, keyed = _split(args, JACOBI_COUPLED_FORM)
    unknown = set(keyed) - {"coupled"}
    if unknown:
        raise ValueError(f"unknown setting {sorted(unknown)[0]!r} ({JACOBI_COUPLED_FORM})")
    L, fresh = _fresh(positional, JACOBI_COUPLED_FORM)
    coupling = Coupling(_choice(keyed.get("coupled", Coupling.NONE), tuple(Coupling), "coupled"))
    return CoupledWindow(L, fresh, coupling) if coupling.couples else JacobiWindow(L, fresh)


def parse_pac(args: str) -> PacWindow:
    """The window ``pac:ARGS`` names (:data:`PAC_FORM`)."""
    positional, keyed = _split(args, PAC_FORM)
    unknown = set(keyed) - {"width", "depth", "ac", "siblings"}
    if unknown:
        raise ValueError(f"unknown setting {sorted(unknown)[0]!r} ({PAC_FORM})")
    L, fresh = _fresh(positional, PAC_FORM)
    width = spec_int(keyed["width"], PAC_FORM) if "width" in keyed else DEFAULT_WIDTH
    depth = spec_int(keyed["depth"], PAC_FORM) if "depth" in keyed else DEFAULT_DEPTH
    ac = SWITCHES[_choice(keyed.get("ac", "on"), tuple(SWITCHES), "ac")]
    siblings = Siblings(_choice(keyed.get("siblings", Siblings.PRINCIPLED), SIBLING_LAWS, "siblings"))
    return PacWindow(L, fresh, width=width, depth=depth, ac=ac, siblings=siblings)


class CoupledWindow(JacobiWindow):
    """SCD's coupled window (SPEC 10.1): L drafts, ``fresh`` tokens, the ``coupling`` of :data:`COUPLINGS`."""

    def __init__(self, window: int, fresh: str = DEFAULT_FRESH,
                 coupling: str | Coupling = Coupling.PRINCIPLED) -> None:
        super().__init__(window, fresh)
        self.coupling = Coupling(_choice(coupling, COUPLINGS, "coupled"))
        self.name = f"{self.name},coupled={self.coupling}"

    @property
    def follows_stored_laws(self) -> bool:
        """Whether every draft is distributed as the law it is stored with, given everything before its
        position (docs/theory.md 15.2-15.3 and 15.6: ``principled`` and ``gumbel``; not ``official``,
        whose kept draft keeps its old q): what makes the window lossless and the budget's bound hold."""
        return not self.coupling.keeps_old_law

    @property
    def lossless(self) -> bool:
        """Whether the emitted law is the target's (docs/theory.md 15.2-15.3: not for ``official``)."""
        return self.follows_stored_laws

    def __eq__(self, other: object) -> bool:
        return type(other) is CoupledWindow and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return f"CoupledWindow({self.window}, {self.fresh!r}, {self.coupling!r})"


class PacWindow(JacobiWindow):
    """SJD-PAC's window (SPEC 10.2): a spine of L drafts, ``width`` candidates at the first ``depth`` new
    columns after a rejection (PD), the spine coupled when ``ac`` (AC), siblings drawn as ``siblings``."""

    def __init__(self, window: int, fresh: str = DEFAULT_FRESH, *, width: int = DEFAULT_WIDTH,
                 depth: int = DEFAULT_DEPTH, ac: bool = True,
                 siblings: str | Siblings = Siblings.PRINCIPLED) -> None:
        super().__init__(window, fresh)
        for what, v, hi in (("width", width, MAX_PAC_WIDTH), ("depth", depth, MAX_PAC_DEPTH)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise ValueError(f"pac's {what} must be an integer in [1, {hi}], got {v!r}")
        if not isinstance(ac, bool):
            raise ValueError(f"pac's ac must be True or False, got {ac!r}")
        self.width, self.depth, self.ac = width, depth, ac
        self.siblings = Siblings(_choice(siblings, SIBLING_LAWS, "siblings"))
        parts = [f"pac:{self.window}"] + ([] if self.fresh == DEFAULT_FRESH else [self.fresh])
        parts += [f"width={width}"] if width != DEFAULT_WIDTH else []
        parts += [f"depth={depth}"] if depth != DEFAULT_DEPTH else []
        parts += [] if ac else ["ac=off"]
        parts += [] if self.siblings.from_stored_law else [f"siblings={self.siblings}"]
        self.name = ",".join(parts)

    @property
    def coupling(self) -> Coupling:
        """The spine's coupling: SCD's ``principled`` one with AC, none (SJD's sampling) without."""
        return Coupling.PRINCIPLED if self.ac else Coupling.NONE

    @property
    def follows_stored_laws(self) -> bool:
        """Whether every candidate is a draw (without replacement) from the law its column is stored with,
        given everything before its position (docs/theory.md 15.2 and 15.6): not for ``official`` siblings,
        drawn from the coupling's residual with a kept spine not excluded."""
        return self.siblings.is_lossless or self.width == 1

    @property
    def lossless(self) -> bool:
        """Whether the emitted law is the target's (docs/theory.md 15.2: not for ``official`` siblings)."""
        return self.follows_stored_laws

    def __eq__(self, other: object) -> bool:
        return type(other) is PacWindow and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return (f"PacWindow({self.window}, {self.fresh!r}, width={self.width}, depth={self.depth}, "
                f"ac={self.ac}, siblings={self.siblings!r})")


__all__ = ["COUPLINGS", "JACOBI_COUPLED_FORM", "PAC_FORM", "SIBLING_LAWS", "CoupledWindow", "PacWindow",
           "parse_jacobi", "parse_pac"]
