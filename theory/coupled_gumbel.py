"""Exact sequence law of SCD's `gumbel` coupling (SPEC 10.1) on tiny Markov targets (docs/theory.md, 15.3).

As SCD's code (junhyukso/SCD, ``lumina1/scheduler/jacobi_iteration_lumina_mgpt_GS.py``) runs it: SJD's
window and test (:mod:`theory.jacobi`; fresh uniforms for the tests and the residual draw), but every
token a forward samples, t_k ~ P_k, is the Gumbel-max ``argmax_y (log P_k(y) + g_{n,y})`` with noise
``g_n`` fixed per absolute sequence position n (the code's random table shifts by the tokens it commits),
stored with q := P_k. The first window is fresh (uniform tokens, one-hot q).

Exact enumeration of a continuous noise: with E_y = exp(-g_y) i.i.d. Exp(1), argmax(log P + g) =
argmin_y E_y / P(y), which depends only on w = E / sum(E), uniform on the simplex. "argmax under P is a"
is the cone {P(y) w_a <= P(a) w_y for all y}, so everything a position's noise has decided so far is a
convex polytope of w: an interval (V = 2) or a polygon (V = 3), and a probability is its length or area
over the simplex's. A position's polytope is kept as the set of (row, token) facts it must satisfy.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np

from relaxspec.theory.budget import budget_stage, check_budget
from relaxspec.theory.coupled import budget_of
from relaxspec.theory.jacobi import MAX_ENUM_TOKENS, MAX_ENUM_WINDOW, check_markov
from relaxspec.theory.verification import Verification

MAX_GUMBEL_VOCAB = 3
"""The noise polytopes are intervals or polygons: V <= 3."""
ONE_HOT = -1

Facts = frozenset[tuple[int, int]]
Slot = tuple[int, int, Facts]
"""(token, stored law: a row id or ONE_HOT, the noise facts of its absolute position)."""


def _clip(poly: list[tuple[float, float]], a: float, b: float, c: float) -> list[tuple[float, float]]:
    """Sutherland-Hodgman: the part of convex ``poly`` with a x + b y + c <= 0."""
    out: list[tuple[float, float]] = []
    for i, P in enumerate(poly):
        Q = poly[(i + 1) % len(poly)]
        fp, fq = a * P[0] + b * P[1] + c, a * Q[0] + b * Q[1] + c
        if fp <= 0.0:
            out.append(P)
        if (fp < 0.0 < fq) or (fq < 0.0 < fp):
            s = fp / (fp - fq)
            out.append((P[0] + s * (Q[0] - P[0]), P[1] + s * (Q[1] - P[1])))
    return out


class _Noise:
    """Probabilities of noise facts: the measure of their polytope on the simplex (cached)."""

    def __init__(self, rows: list[np.ndarray], V: int) -> None:
        self.rows, self.V = rows, V
        self._measure: dict[Facts, float] = {}

    def _halfspaces(self, facts: Facts) -> list[np.ndarray] | None:
        """Each fact as coefficient vectors c with c . w <= 0; None if a fact is impossible."""
        hs = []
        for rid, a in facts:
            P = self.rows[rid]
            if P[a] <= 0.0:
                return None
            for y in range(self.V):
                if y != a and P[y] > 0.0:
                    c = np.zeros(self.V)
                    c[a], c[y] = P[y], -P[a]
                    hs.append(c)
        return hs

    def measure(self, facts: Facts) -> float:
        if facts not in self._measure:
            hs = self._halfspaces(facts)
            if hs is None:
                m = 0.0
            elif self.V == 2:  # w = (x, 1 - x), x in [0, 1]
                lo, hi = 0.0, 1.0
                for c in hs:
                    k, r = c[0] - c[1], -c[1]  # k x <= r
                    if k > 0.0:
                        hi = min(hi, r / k)
                    elif k < 0.0:
                        lo = max(lo, r / k)
                    elif r < 0.0:
                        hi = lo
                m = max(hi - lo, 0.0)
            else:  # w = (x, y, 1 - x - y) on the triangle of area 1/2
                poly = [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0)]
                for c in hs:
                    poly = _clip(poly, c[0] - c[2], c[1] - c[2], c[2])
                    if len(poly) < 3:
                        break
                area = 0.0
                for i in range(len(poly)):
                    (x0, y0), (x1, y1) = poly[i], poly[(i + 1) % len(poly)]
                    area += x0 * y1 - x1 * y0
                m = abs(area) if len(poly) >= 3 else 0.0  # 2 * area / (1/2) ... normalised below
            self._measure[facts] = m
        return self._measure[facts]

    def split(self, facts: Facts, rid: int) -> list[tuple[float, int, Facts]]:
        """The Gumbel-max token under row ``rid`` given ``facts``: ``(prob, token, facts + this one)``."""
        base = self.measure(facts)
        out = []
        for a in np.flatnonzero(self.rows[rid] > 0):
            f2 = facts | {(rid, int(a))}
            m = self.measure(f2)
            if m > 0.0:
                out.append((m / base, int(a), f2))
        return out


def gumbel_sequence_law(start: np.ndarray, trans: np.ndarray, window: int, n_tokens: int, *,
                        verification: Verification | str | None = None,
                        neighbours: np.ndarray | None = None) -> np.ndarray:
    """The exact law (shape (V,) * n) of the first ``n_tokens`` tokens SCD's `gumbel` coupling emits on
    the Markov target (``start``, ``trans``), V <= 3, L <= 3, n <= 5 (module docstring); ``verification``:
    ``r2+budget:tv=..,k=..`` tests every draft with the budgeted relaxation (SPEC 9.5, over the table
    ``neighbours``; docs/theory.md 15.6), None the exact test."""
    s, t = check_markov(start, trans)
    V = s.size
    boost = None if verification is None else budget_of(verification)
    nb = None if boost is None else check_budget(boost, neighbours, V)
    if V > MAX_GUMBEL_VOCAB:
        raise ValueError(f"the exact Gumbel enumeration is limited to V <= {MAX_GUMBEL_VOCAB}, got V = {V}")
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_ENUM_WINDOW:
        raise ValueError(f"exact enumeration needs a window L in [1, {MAX_ENUM_WINDOW}], got {window!r}")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or not 1 <= n_tokens <= MAX_ENUM_TOKENS:
        raise ValueError(f"n_tokens must be an integer in [1, {MAX_ENUM_TOKENS}], got {n_tokens!r}")
    L, n = window, n_tokens
    rows: list[np.ndarray] = []

    def row_id(r: np.ndarray) -> int:
        for i, x in enumerate(rows):
            if np.array_equal(x, r):
                return i
        rows.append(r)
        return len(rows) - 1

    row_of = [row_id(t[x]) for x in range(V)]
    start_id = row_id(s)
    noise = _Noise(rows, V)
    empty: Facts = frozenset()

    def fresh(m: int) -> list[tuple[float, tuple[Slot, ...]]]:
        return [(V ** -m, tuple((x, ONE_HOT, empty) for x in xs))
                for xs in itertools.product(range(V), repeat=m)]

    law = np.zeros((V,) * n)
    frontier: dict[tuple[tuple[int, ...], tuple[Slot, ...]], float] = defaultdict(float)
    for pr, w in fresh(L):
        frontier[((), w)] += pr
    while frontier:
        nxt: dict[tuple[tuple[int, ...], tuple[Slot, ...]], float] = defaultdict(float)
        for (prefix, w), prob in frontier.items():
            ctx = row_of[prefix[-1]] if prefix else start_id
            P = [ctx] + [row_of[x] for x, _, _ in w]  # P[k - 1]: the row at window position k
            reach = 1.0
            outcomes: list[tuple[float, tuple[int, ...], int]] = []  # (prob, emitted, rejected column)
            for j in range(1, L + 1):
                x, qid, _ = w[j - 1]
                p = rows[P[j - 1]]
                q = np.eye(V)[x] if qid == ONE_HOT else rows[qid]
                if boost is None:
                    a = min(1.0, p[x] / q[x])
                else:  # one candidate per column: one stage with the node's whole budget
                    stage = budget_stage(p, q, nb, boost, boost.tv)
                    a = float(stage.accept[stage.of(x)])
                if a < 1.0:
                    res = np.maximum(p - q, 0.0)
                    res /= res.sum()
                    drafts = tuple(z for z, _, _ in w[:j - 1])
                    outcomes.extend((reach * (1 - a) * res[y], drafts + (int(y),), j)
                                    for y in np.flatnonzero(res > 0))
                reach *= a
                if reach == 0.0:
                    break
            if reach > 0.0:  # all accepted: the bonus is the Gumbel-max at the next position
                drafts = tuple(z for z, _, _ in w)
                outcomes.extend((reach * pg, drafts + (y,), L + 1) for pg, y, _ in noise.split(empty, P[L]))
            for pr, emitted, j in outcomes:
                seq = prefix + emitted
                if len(seq) >= n:
                    law[seq[:n]] += prob * pr
                    continue
                # the tokens sampled after the emitted one: Gumbel-max under this forward's rows
                parts = []
                for k in range(j + 1, L + 2):
                    facts = w[k - 1][2] if k <= L else empty
                    parts.append([(pg, (y, P[k - 1], f2)) for pg, y, f2 in noise.split(facts, P[k - 1])])
                for combo in itertools.product(*parts):
                    pk = float(np.prod([c[0] for c in combo]))
                    kept = tuple(c[1] for c in combo)
                    for pf, tail in fresh(L - len(kept)):
                        nxt[(seq, kept + tail)] += prob * pr * pk * pf
        frontier = nxt
    return law


__all__ = ["MAX_GUMBEL_VOCAB", "gumbel_sequence_law"]
