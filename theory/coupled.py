"""Exact sequence laws of coupled Jacobi windows (SCD, SPEC 10.1) and of SJD-PAC's adaptive continuation
(AC) and proactive draft trees (PD, SPEC 10.2) on tiny Markov targets (docs/theory.md, section 15).

The target is ``p(. | previous token) = trans[previous]``, the first token from ``start`` (as in
:mod:`theory.jacobi`, (b)). A window is L *columns*; column c holds the candidates for window position c
(one for SJD and SCD; up to K at the first D columns of a PD tree) and the law ``q_c`` they were drawn
from. The tree a forward verifies is the column product: every node at depth c - 1 has column c's
candidates as its children (SJD-PAC's code builds its trees this way), the root being the last committed
token. Verification is rule R2 with children drawn without replacement (test child i with
``min(1, r_i(x)/q'_i(x))``, on rejection ``r_{i+1} = norm((r_i - q'_i)^+)``, ``q'_{i+1}`` = q'_i without
x renormalised; a child with q'_i(x) = 0 passes iff r_i(x) > 0); after every child of a node fails the
forward emits ``y ~ r`` (the final residual) at that column j and stops; if all L columns pass it emits
the bonus ``t ~ p_{L+1}``.

The next window, after a rejection at column j (:class:`WindowRule`):

- its columns are this forward's positions k = j + 1..L + 1, each with ``P_k`` = the target after the
  *first* candidates of columns 1..k - 1 (the context the spine was drafted in; a Markov row);
- spine draft at k <= L: coupled (:class:`Coupling` ``principled`` or ``official``; SCD / AC): the old
  first candidate x (law q_k) is kept with probability ``min(1, P_k(x)/q_k(x))``, else redrawn from
  ``norm((P_k - q_k)^+)``; without coupling (``none``, SJD) a fresh ``t_k ~ P_k``. At k = L + 1 always
  ``t ~ P_{L+1}``;
- its stored law: ``P_k`` (coupling ``principled``), or for a kept token its old ``q_k``
  (coupling ``official``, SCD's code);
- PD (``width`` K > 1): the first ``depth`` D new columns get K - 1 more candidates drawn without
  replacement from the stored law (``siblings="principled"``), or as SJD-PAC's code draws them
  (``siblings="official"``): from the coupling's residual ``norm((P_k - q_k)^+)`` (``P_k`` when nothing
  was coupled), without replacement among themselves but not excluding a kept spine draft;
- the last j columns are fresh: one uniform random token each, stored one-hot (SJD's ``uniform``).

If all L columns pass the next window is all fresh. :func:`coupled_sequence_law` enumerates every
outcome and returns the exact law of the first n emitted tokens; :func:`coupled_tokens_per_forward` the
long-run tokens per forward over the reachable (context, window) chain.
"""

from __future__ import annotations

import enum
import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.boost import Boost
from relaxspec.theory.budget import budget_r2_given_states, check_budget
from relaxspec.theory.jacobi import (
    MAX_ENUM_TOKENS,
    MAX_ENUM_VOCAB,
    MAX_ENUM_WINDOW,
    Move,
    SequenceLaw,
    check_markov,
    long_run_reward,
)
from relaxspec.theory.rules import Rule
from relaxspec.theory.verification import Verification


class Coupling(enum.StrEnum):
    """How a window's next spine drafts are formed from this forward's p (SPEC 10.1-10.2; a ``StrEnum``:
    ``Coupling.OFFICIAL == "official"``, the spelling of ``jacobi:L,coupled=...``)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    NONE = "none"
    """No coupling: the tokens the forward samples become the next drafts (SJD; SJD-PAC without AC)."""
    PRINCIPLED = "principled"
    """Maximal coupling: the old draft kept with probability min(1, P/q), else redrawn from
    norm((P - q)^+); stored with P (SCD, SJD-PAC's AC)."""
    OFFICIAL = "official"
    """Maximal coupling as SCD's code stores it: a kept draft keeps its old q (not lossless)."""
    GUMBEL = "gumbel"
    """Every sampled token is a Gumbel-max with noise fixed per absolute position (SCD's ``gumbel``;
    its law: :mod:`theory.coupled_gumbel`)."""

    @property
    def couples(self) -> bool:
        """True when the next drafts depend on the old ones (maximal coupling or Gumbel-max)."""
        return self is not Coupling.NONE

    @property
    def keeps_old_law(self) -> bool:
        """True when a kept draft is stored with its old q (SCD's code)."""
        return self is Coupling.OFFICIAL

    @property
    def redraws_with_gumbel(self) -> bool:
        """True when tokens are sampled by Gumbel-max with per-position noise instead of keep-or-redraw."""
        return self is Coupling.GUMBEL

    @property
    def is_lossless(self) -> bool:
        """Whether the window emits the target's law (docs/theory.md 15.1-15.3: not ``official``)."""
        return not self.keeps_old_law


class Siblings(enum.StrEnum):
    """The law SJD-PAC's extra candidates (PD's siblings) are drawn from (SPEC 10.2; docs/theory.md 15.2)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    PRINCIPLED = "principled"
    """Without replacement from the spine's stored law: lossless."""
    OFFICIAL = "official"
    """As SJD-PAC's code draws them: from the coupling's residual, a kept spine not excluded."""

    @property
    def from_stored_law(self) -> bool:
        """True when the siblings come from the stored law (``principled``)."""
        return self is Siblings.PRINCIPLED

    @property
    def is_lossless(self) -> bool:
        """Whether a PD tree with these siblings emits the target's law."""
        return self.from_stored_law


COUPLINGS = tuple(Coupling)
SIBLING_LAWS = tuple(Siblings)
MAX_ENUM_WIDTH = 3
"""PD trees in the exact enumeration: at most 3 candidates per column."""
ONE_HOT = -1
"""The stored law of a fresh candidate: the point mass on the (single) candidate itself."""


def as_coupling(coupling: str | Coupling) -> Coupling:
    """``coupling`` as a :class:`Coupling`; ``ValueError`` names an unknown one."""
    if coupling not in COUPLINGS:
        raise ValueError(f"the coupling must be one of {COUPLINGS}, got {coupling!r}")
    return Coupling(coupling)


def as_siblings(siblings: str | Siblings) -> Siblings:
    """``siblings`` as a :class:`Siblings`; ``ValueError`` names an unknown one."""
    if siblings not in SIBLING_LAWS:
        raise ValueError(f"siblings must be one of {SIBLING_LAWS}, got {siblings!r}")
    return Siblings(siblings)


@dataclass(frozen=True)
class WindowRule:
    """How a Jacobi window's next drafts are formed (module docstring).

    ``coupling``: keep-or-redraw the old drafts (:class:`Coupling` ``principled`` or ``official``: SCD,
    SJD-PAC's AC) instead of sampling afresh (``none``: SJD); ``width``, ``depth``: PD's K candidates at the
    first D columns (width 1: a chain); ``siblings``: the law PD's extra candidates are drawn from."""

    coupling: Coupling = Coupling.NONE
    width: int = 1
    depth: int = 0
    siblings: Siblings = Siblings.PRINCIPLED

    def __post_init__(self) -> None:
        object.__setattr__(self, "coupling", as_coupling(self.coupling))
        object.__setattr__(self, "siblings", as_siblings(self.siblings))
        if self.coupling.redraws_with_gumbel:
            raise ValueError("the gumbel coupling's law is theory.coupled_gumbel.gumbel_sequence_law")
        for name, v, lo in (("width", self.width, 1), ("depth", self.depth, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.width > MAX_ENUM_WIDTH:
            raise ValueError(f"exact enumeration is limited to width <= {MAX_ENUM_WIDTH}, got {self.width}")

    @classmethod
    def sjd(cls) -> WindowRule:
        """SJD (SPEC 9.1): the tokens sampled in the forward become the next drafts."""
        return cls()

    @classmethod
    def scd(cls, coupling: str | Coupling = Coupling.PRINCIPLED) -> WindowRule:
        """SCD (SPEC 10.1): maximal coupling; ``official`` stores a kept draft with its old q."""
        return cls(coupling=coupling)

    @classmethod
    def pac(cls, *, ac: bool = True, width: int = 3, depth: int = 3,
            siblings: str | Siblings = Siblings.PRINCIPLED) -> WindowRule:
        """SJD-PAC (SPEC 10.2): AC (``ac``) and a PD tree of ``width`` candidates at ``depth`` columns."""
        return cls(coupling=Coupling.PRINCIPLED if ac else Coupling.NONE, width=width, depth=depth,
                   siblings=siblings)


Column = tuple[tuple[int, ...], int]
"""(candidates, stored law): a row id of the target, or ONE_HOT."""
Window = tuple[Column, ...]
Outcome = tuple[float, tuple[int, ...], int, tuple[float, ...]]
"""One forward's outcome: (probability, emitted tokens, rejected column, each token's budget charges)."""


def _without(law: np.ndarray, drawn: tuple[int, ...]) -> np.ndarray | None:
    out = law.copy()
    out[list(drawn)] = 0.0
    s = out.sum()
    return out / s if s > 0.0 else None


def _residual(r: np.ndarray, q: np.ndarray) -> np.ndarray | None:
    res = np.maximum(r - q, 0.0)
    s = res.sum()
    return res / s if s > 0.0 else None


def _wor(law: np.ndarray, first: tuple[int, ...], more: int) -> list[tuple[float, tuple[int, ...]]]:
    """Every way to draw ``more`` further tokens from ``law`` without replacement, excluding ``first``
    (fewer when the support runs out): ``(prob, first + drawn)``."""
    out = [(1.0, first)]
    for _ in range(more):
        nxt = []
        for pr, got in out:
            rest = _without(law, got)
            if rest is None:
                nxt.append((pr, got))
                continue
            nxt.extend((pr * rest[y], got + (int(y),)) for y in np.flatnonzero(rest > 0))
        out = nxt
    return out


class _Coupled:
    """One forward's outcomes and the next windows, with caches (distributions numbered once); ``boost``
    (with its int64 neighbour table ``nb``): the budgeted relaxation at every node (SPEC 9.5), else R2."""

    def __init__(self, start: np.ndarray, trans: np.ndarray, L: int, rule: WindowRule,
                 boost: Boost | None = None, nb: np.ndarray | None = None) -> None:
        self.V, self.L, self.rule, self.boost, self.nb = start.size, L, rule, boost, nb
        self.rows: list[np.ndarray] = []
        self.row_of = [self._row_id(trans[x]) for x in range(self.V)]
        self.start = self._row_id(start)
        self._verify: dict[tuple[int, Window], list[Outcome]] = {}
        self._next: dict[tuple[Window, int], list[tuple[float, tuple[Column, ...]]]] = {}

    def _row_id(self, row: np.ndarray) -> int:
        for i, r in enumerate(self.rows):
            if np.array_equal(r, row):
                return i
        self.rows.append(row)
        return len(self.rows) - 1

    def law(self, qid: int, cands: tuple[int, ...]) -> np.ndarray:
        if qid == ONE_HOT:
            q = np.zeros(self.V)
            q[cands[0]] = 1.0
            return q
        return self.rows[qid]

    def node(self, r: np.ndarray, col: Column) -> list[tuple[float, int, np.ndarray | None, float]]:
        """R2 at one node: ``(prob, i, None, charge)`` for child i accepted, ``(prob, -1, residual, charge)``
        if all fail; ``charge`` is the sum of the budget's charges of the stages tested (0 without it)."""
        if self.boost is not None:
            return self._budget_node(r, col)
        cands, qid = col
        qp: np.ndarray | None = self.law(qid, cands)
        out, reach = [], 1.0
        for i, x in enumerate(cands):
            qx = 0.0 if qp is None else qp[x]
            a = min(1.0, r[x] / qx) if qx > 0.0 else float(r[x] > 0.0)
            if a > 0.0:
                out.append((reach * a, i, None, 0.0))
            reach *= 1.0 - a
            if reach <= 0.0:
                return out
            nr = _residual(r, qp) if qp is not None else r
            r = nr if nr is not None else np.full(self.V, 1.0 / self.V)
            qp = None if qp is None else _without(qp, (x,))
        out.append((reach, -1, r, 0.0))
        return out

    def _budget_node(self, r: np.ndarray, col: Column) -> list[tuple[float, int, np.ndarray | None, float]]:
        """Budgeted R2 at one node (``theory.budget``): its candidates, drawn without replacement from the
        column's stored law, tested in order with the node's budget shared by its stages."""
        cands, qid = col
        kids = np.array(cands, dtype=np.int64)
        out: list[tuple[float, int, np.ndarray | None, float]] = []
        charged = 0.0
        for s in budget_r2_given_states(r, self.law(qid, cands), kids, self.nb, self.boost):
            if s.stage is None:
                out.append((s.weight, -1, s.r, charged))
                break
            charged += s.stage.charge
            a = float(s.stage.accept[s.stage.of(int(kids[s.index]))])
            if a > 0.0:
                out.append((s.weight * a, s.index, None, charged))
        return out

    def verify(self, ctx: int, w: Window) -> list[Outcome]:
        """Every outcome of one forward: ``(prob, emitted tokens, j, charges)``, j the rejected column (L + 1:
        all passed, the last token is the bonus) and ``charges`` the budget's charges of the stages the
        node that decided each emitted token tested (0 for the bonus and without the budget)."""
        key = (ctx, w)
        if key in self._verify:
            return self._verify[key]
        out: list[Outcome] = []

        def walk(c: int, row: int, path: tuple[int, ...], pr: float, ch: tuple[float, ...]) -> None:
            if c > self.L:
                bonus = self.rows[row]
                out.extend((pr * bonus[y], path + (int(y),), c, ch + (0.0,))
                           for y in np.flatnonzero(bonus > 0))
                return
            for pa, i, res, charge in self.node(self.rows[row], w[c - 1]):
                if i >= 0:
                    x = w[c - 1][0][i]
                    walk(c + 1, self.row_of[x], path + (x,), pr * pa, ch + (charge,))
                else:
                    out.extend((pr * pa * res[y], path + (int(y),), c, ch + (charge,))
                               for y in np.flatnonzero(res > 0))

        walk(1, ctx, (), 1.0, ())
        self._verify[key] = out
        return out

    def column(self, old: Column | None, P: int, new_index: int) -> list[tuple[float, Column]]:
        """The next window's column from this forward's row ``P`` and the ``old`` column (None: k = L + 1)."""
        rule, Pl = self.rule, self.rows[P]
        # (prob, spine token, stored qid, kept?, the law official siblings are drawn from)
        spines: list[tuple[float, int, int, bool, np.ndarray]] = []
        if rule.coupling.couples and old is not None:
            x, q = old[0][0], self.law(old[1], old[0])
            a = min(1.0, Pl[x] / q[x])
            res = _residual(Pl, q)
            if a > 0.0:
                kept_q = old[1] if rule.coupling.keeps_old_law else P
                spines.append((a, x, kept_q, True, res if res is not None else Pl))
            if a < 1.0 and res is not None:
                spines.extend(((1.0 - a) * res[y], int(y), P, False, res) for y in np.flatnonzero(res > 0))
        else:
            spines.extend((Pl[y], int(y), P, False, Pl) for y in np.flatnonzero(Pl > 0))
        more = rule.width - 1 if new_index <= rule.depth else 0
        out: list[tuple[float, Column]] = []
        for pr, y, qid, kept, res in spines:
            if more == 0 or qid == ONE_HOT:
                out.append((pr, ((y,), qid)))
            elif rule.siblings.from_stored_law:
                out.extend((pr * pw, (c, qid)) for pw, c in _wor(self.law(qid, (y,)), (y,), more))
            elif kept:  # SJD-PAC's code: the kept draft, then K - 1 draws from the residual (y not excluded)
                out.extend((pr * pw, ((y,) + c, qid)) for pw, c in _wor(res, (), more))
            else:  # a redrawn (or sampled) spine is the first of K draws without replacement from its law
                out.extend((pr * pw, (c, qid)) for pw, c in _wor(res, (y,), more))
        return out

    def next_windows(self, w: Window, j: int) -> list[tuple[float, Window]]:
        """The next window after a rejection at column ``j`` (module docstring), with probabilities."""
        key = (w, j)
        if key in self._next:
            return self._next[key]
        parts: list[list[tuple[float, tuple[Column, ...]]]] = []
        if j <= self.L:
            for k in range(j + 1, self.L + 2):
                P = self.row_of[w[k - 2][0][0]]  # the target after the first candidate of column k - 1
                old = w[k - 1] if k <= self.L else None
                parts.append([(pr, (col,)) for pr, col in self.column(old, P, k - j)])
        n_fresh = self.L - len(parts)
        parts.append([(self.V ** -n_fresh, tuple(((x,), ONE_HOT) for x in xs))
                      for xs in itertools.product(range(self.V), repeat=n_fresh)])
        out: dict[Window, float] = defaultdict(float)
        for combo in itertools.product(*parts):
            pr, cols = 1.0, ()
            for p_, c in combo:
                pr *= p_
                cols += c
            out[cols] += pr
        self._next[key] = [(pr, win) for win, pr in out.items()]
        return self._next[key]

    def first_windows(self) -> list[tuple[float, Window]]:
        return [(self.V ** -self.L, tuple(((x,), ONE_HOT) for x in xs))
                for xs in itertools.product(range(self.V), repeat=self.L)]


def _check(window: int, n_tokens: int | None, rule: WindowRule) -> int:
    if not isinstance(rule, WindowRule):
        raise ValueError(f"rule must be a WindowRule, got {type(rule).__name__}")
    if (isinstance(window, bool) or not isinstance(window, int | np.integer)
            or not 1 <= window <= MAX_ENUM_WINDOW):
        raise ValueError(f"exact enumeration needs a window L in [1, {MAX_ENUM_WINDOW}], got {window!r}")
    if n_tokens is not None and (isinstance(n_tokens, bool) or not isinstance(n_tokens, int | np.integer)
                                 or not 1 <= n_tokens <= MAX_ENUM_TOKENS):
        raise ValueError(f"n_tokens must be an integer in [1, {MAX_ENUM_TOKENS}], got {n_tokens!r}")
    return int(window)


def coupled_sequence_law(start: np.ndarray, trans: np.ndarray, window: int, n_tokens: int,
                         rule: WindowRule) -> np.ndarray:
    """The exact law (shape (V,) * n) of the first ``n_tokens`` tokens a window ``rule`` emits on the
    Markov target (``start``, ``trans``) from an empty prefix and an all-fresh first window;
    V <= 4, L <= 3, n <= 5 (module docstring)."""
    s, t = check_markov(start, trans)
    L = _check(window, n_tokens, rule)
    return _sequence_law(_Coupled(s, t, L, rule), int(n_tokens)).law


def coupled_budget_law(start: np.ndarray, trans: np.ndarray, window: int, n_tokens: int, rule: WindowRule, *,
                       verification: Verification | str, neighbours: np.ndarray | None) -> SequenceLaw:
    """:func:`coupled_sequence_law` with every node verified by ``verification``, R2 with the budgeted
    relaxation (``r2+budget:tv=..,k=..``, SPEC 9.5, docs/theory.md 15.6) over the (V, >= k) table
    ``neighbours``. Returns the exact law and E[sum over the first n tokens of the charges of the node that
    decided each] (0 for a bonus token), the bound of Theorem 15.3 on the law's TV to the target's."""
    s, t = check_markov(start, trans)
    L = _check(window, n_tokens, rule)
    boost = budget_of(verification)
    if rule.width > 1 and not rule.siblings.from_stored_law:
        raise ValueError("the budget tests candidates drawn without replacement from their column's stored "
                         "law: official siblings (which may repeat a token) are not")
    nb = check_budget(boost, neighbours, s.size)
    return _sequence_law(_Coupled(s, t, L, rule, boost, nb), int(n_tokens))


def budget_of(verification: Verification | str) -> Boost:
    """The budget boost of ``verification``, which must be rule R2 with the budgeted relaxation."""
    v = Verification.parse(verification)
    if v.rule != Rule.R2 or not v.uses_budget:
        raise ValueError(f"expected rule r2 with the budget (r2+budget:tv=..,k=..), got {v}")
    return v.boost


def _sequence_law(en: _Coupled, n: int) -> SequenceLaw:
    """Enumerate every forward until ``n`` tokens are emitted: the law and the expected charge sum."""
    law = np.zeros((en.V,) * n)
    charged = 0.0
    frontier: dict[tuple[tuple[int, ...], Window], float] = defaultdict(float)
    for pr, w in en.first_windows():
        frontier[((), w)] += pr
    while frontier:
        nxt: dict[tuple[tuple[int, ...], Window], float] = defaultdict(float)
        for (prefix, w), prob in frontier.items():
            ctx = en.row_of[prefix[-1]] if prefix else en.start
            for pr, emitted, j, charges in en.verify(ctx, w):
                seq = prefix + emitted
                charged += prob * pr * sum(charges[:n - len(prefix)])
                if len(seq) >= n:  # later forwards cannot change the first n tokens
                    law[seq[:n]] += prob * pr
                    continue
                for pw, w2 in en.next_windows(w, j):
                    nxt[(seq, w2)] += prob * pr * pw
        frontier = nxt
    return SequenceLaw(law, charged)


def coupled_tokens_per_forward(start: np.ndarray, trans: np.ndarray, window: int,
                               rule: WindowRule) -> float:
    """Long-run tokens per target forward of a window ``rule`` on the Markov target: the stationary
    average over the chain of (context, window) states reachable from the first window (V <= 4, L <= 3)."""
    s, t = check_markov(start, trans)
    L = _check(window, None, rule)
    en = _Coupled(s, t, L, rule)

    def moves(state: tuple[int, Window]) -> Iterator[Move[tuple[int, Window]]]:
        for pr, emitted, j, _ in en.verify(*state):
            yield pr * len(emitted), [(pr * pw, (en.row_of[emitted[-1]], w2)) for pw, w2 in
                                      en.next_windows(state[1], j)]

    return long_run_reward([(en.start, w) for _, w in en.first_windows()], moves)


__all__ = [
    "COUPLINGS",
    "MAX_ENUM_TOKENS",
    "MAX_ENUM_VOCAB",
    "MAX_ENUM_WIDTH",
    "ONE_HOT",
    "SIBLING_LAWS",
    "Coupling",
    "Siblings",
    "WindowRule",
    "as_coupling",
    "as_siblings",
    "budget_of",
    "coupled_budget_law",
    "coupled_sequence_law",
    "coupled_tokens_per_forward",
]
