"""Distortion bounds: how far a relaxed rule's emitted token is from the target.

Every bound here is proved in docs/theory.md ("Distortion"); ``node_outcome``
gives the exact TV they bound.

- R1 (both variants): TV <= p(D), where D is the set of tokens the walk
  removes from the residual other than a tested child that was still
  present when tested. Principled: p(D) is the merged mass
  sum_i P(reach i) C_i <= delta E[#tested] (additive) and
  <= (lam - 1) sum of p(tested children) (multiplicative). Official: p(D)
  adds the extra zeroed neighbours and can exceed those budgets.
- R2 (children drawn from q): TV <= sum over reached stages of
  P(reach) * B(r, q'), with B the per-stage bound of :func:`r2_stage_bound`.
  Not bounded by delta, even with one child.
- R3: the emitted token e has p(e) >= max p - delta (additive) or
  >= max p / lam (multiplicative); TV is 0 or 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.neighbours import validate_neighbour_rows
from relaxspec.theory.relax import NO_RELAX, Relax, Variant, merge_count
from relaxspec.theory.rules import Rule, neighbour_rows, rows_read
from relaxspec.theory.verification import Verification, parse
from relaxspec.theory.verify import check_node_inputs, r1_walk, r2_states


@dataclass(frozen=True)
class R1Distortion:
    """The R1 distortion bound of one node, in target (``p``) mass.

    Attributes
    ----------
    merged : p-mass of the proximity sets moved onto tested children
        (tokens first removed as a neighbour inside some A(c_i)).
    extra : p-mass the official variant removes beyond the proximity sets
        (0 for principled).
    nominal : the relaxation's budget: ``delta * E[#tested]`` (additive),
        ``(lam - 1) * sum p(c_i)`` over tested children still present when
        tested (multiplicative), 0 (none).
    tight : True when TV equals ``bound`` exactly: no tested child had been
        removed before its test and the residual never ran out of target mass.
    """

    merged: float
    extra: float
    nominal: float
    tight: bool

    @property
    def bound(self) -> float:
        """TV(emitted, p) <= merged + extra."""
        return self.merged + self.extra


def r1_distortion(
    p: np.ndarray,
    children: Sequence[int] | np.ndarray,
    *,
    relax: Relax = NO_RELAX,
    neighbours: np.ndarray | None = None,
    variant: str = "principled",
) -> R1Distortion:
    """R1 distortion bound p(D) = merged + extra, and the relaxation's nominal budget.

    D = tokens whose first removal from the residual happens at a tested
    stage i without being that stage's child c_i. Walks the same stages as
    ``node_outcome`` (``theory.verify.r1_walk``).
    """
    x = check_node_inputs(p, children, Verification(Rule.R1, relax, variant), neighbours=neighbours)
    p, kids, m = x.p, x.kids, x.m
    removed = np.zeros(p.size, dtype=bool)
    merged = extra = nominal = 0.0
    tight = True
    reset = False
    for st in r1_walk(p, kids, x.nb, relax, variant):
        if st.index == m:
            break
        c = int(kids[st.index])
        present = not removed[c]
        tight &= present or p[c] == 0.0
        if relax.is_additive:
            nominal += relax.delta * st.reach
        elif relax.is_multiplicative and present and not reset:
            nominal += (relax.lam - 1.0) * p[c]
        for j, y in enumerate(st.zeroed.tolist()):
            if removed[y]:
                continue
            removed[y] = True
            if y == c:
                continue
            if j <= st.merge_count:  # zeroed = [c, n_1..n_J, then official extras]
                merged += p[y]
            else:
                extra += p[y]
        if st.accept < 1.0 and not np.any(p[~removed] > 0):
            # the residual is out of target mass and restarts uniform (official; principled only when rounding
            # leaves a < 1 on a child whose proximity set holds all the mass left)
            reset = True
            tight = False
    return R1Distortion(float(merged), float(extra), float(nominal), bool(tight))


def r2_stage_bound(
    r: np.ndarray,
    qp: np.ndarray,
    *,
    relax: Relax,
    neighbours: np.ndarray | None,
    variant: str = "principled",
    coarse: bool = False,
) -> float:
    """Bound on TV(law emitted from an R2 stage onwards, r) when the rest is lossless.

    ``r`` is the (normalised) residual target, ``qp`` the draft residual q'
    the stage draws from. With u = (r - q')^+, beta = u's mass, eps_c the
    merged mass of candidate c and w_c = (q'(c) - r(c) - eps_c)^+:

        B = sum_c min(eps_c, (q'(c) - r(c))^+) + sum_c w_c t_c,

    t_c = u(N_c) / beta (principled; N_c the merged neighbours) or
    g_c / (beta + g_c) with g_c = min(r, q')(first k + 1 neighbours) when
    J_c >= 1 (official). ``coarse`` replaces eps_c by its cap (delta, or
    (lam - 1) r(c)) and needs no neighbour sums: O(V), any vocabulary size.
    Returns min(1, B).
    """
    r = validate_distribution(r, name="r")
    qp = validate_distribution(qp, name="q'", size=r.size)
    nb = neighbour_rows(neighbours, r.size, relax)
    if relax.is_exact:
        return 0.0
    validate_neighbour_rows(nb, np.flatnonzero(qp > 0), 1 if coarse else rows_read(relax, variant))
    return _r2_stage_bound(r, qp, nb, relax, variant, coarse)


def _r2_stage_bound(
    r: np.ndarray, qp: np.ndarray, nb: np.ndarray, relax: Relax, variant: str, coarse: bool
) -> float:
    if relax.is_exact:
        return 0.0
    u = np.maximum(r - qp, 0.0)
    beta = float(u.sum())
    over = np.maximum(qp - r, 0.0)  # (q'(c) - r(c))^+
    if coarse:
        cap = np.full_like(r, relax.delta) if relax.is_additive else (relax.lam - 1.0) * r
        total = float(np.minimum(cap, over).sum())
        if beta > 0.0:
            if variant == Variant.PRINCIPLED:
                total += float((over * np.minimum(cap, beta)).sum()) / beta
            else:  # t_c <= 1 wherever J_c >= 1 is possible, i.e. r(n_1(c)) <= cap_c
                total += float(over[r[nb[:, 0]] <= cap].sum())
        return min(1.0, total)
    total = 0.0
    for c in np.flatnonzero(over > 0.0):
        J, eps = merge_count(r, 1.0, int(c), nb[c], relax)
        total += min(eps, over[c])
        w = over[c] - eps
        if w <= 0.0 or beta == 0.0:
            continue
        if variant == Variant.PRINCIPLED:
            total += w * float(u[nb[c, :J]].sum()) / beta
        elif J >= 1:
            g = float(np.minimum(r, qp)[nb[c, : relax.k + 1]].sum())
            total += w * g / (beta + g)
    return min(1.0, total)


def r2_tv_bound(
    p: np.ndarray,
    q: np.ndarray,
    m: int,
    *,
    relax: Relax = NO_RELAX,
    neighbours: np.ndarray | None = None,
    variant: str = "principled",
    coarse: bool = False,
) -> float:
    """Bound on TV(emitted, p) for R2 with ``m`` children drawn from ``q`` without replacement.

    Sum over the reached stages of P(reach) * :func:`r2_stage_bound`, exact by
    enumerating draw orders (V <= 12, m <= 4, as ``node_outcome``).
    """
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)):
        raise ValueError(
            "the R2 bound is for children drawn from q: pass their number m, not a draw order "
            "(conditional on one order even the exact rule does not emit p)"
        )
    x = check_node_inputs(p, int(m), Verification(Rule.R2, relax, variant), neighbours=neighbours, q=q)
    total = 0.0
    for s in r2_states(x.p, x.q, x.m, x.nb, relax, variant):
        if s.qp is not None:
            total += s.weight * _r2_stage_bound(s.r, s.qp, x.nb, relax, variant, coarse)
    return float(total)


def r3_tv_bound(
    p: np.ndarray,
    children: Sequence[int] | np.ndarray,
    *,
    relax: Relax = NO_RELAX,
    neighbours: np.ndarray | None = None,
) -> float:
    """1 if a child tested before the greedy token could pass the relaxed test, else 0.

    A child c != x* = argmax p passes only if p(c) + eps_c >= p(x*), and
    eps_c <= delta (additive) or (lam - 1) p(c) (multiplicative); with
    ``none`` no child but x* passes. Children after x* are never tested.
    """
    x = check_node_inputs(p, children, Verification(Rule.R3, relax), neighbours=neighbours)
    p = x.p
    best = int(np.argmax(p))
    if relax.is_exact:
        return 0.0
    cap = relax.delta if relax.is_additive else None
    for c in x.kids.tolist():
        if c == best:
            return 0.0
        eps = cap if cap is not None else (relax.lam - 1.0) * p[c]
        if eps > 0.0 and p[c] + eps >= p[best]:
            return 1.0
    return 0.0


def tv_bound(
    p: np.ndarray,
    children: Sequence[int] | np.ndarray | int,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q: np.ndarray | None = None,
) -> float:
    """The proved bound on ``node_outcome(p, children, verification, ...).tv`` (same arguments) for a
    LANTERN relaxation of R1, R2 or R3 (or none). A boost's bounds are its own: ``node_outcome(...)
    .stage_tv`` for GSD and Cool-SD (SPEC 9.4), ``tv`` per node for the budget (Theorem 14.1); rule r4
    verifies a whole step (``theory.traversal.traversal_ends``' ``tv_bound``): ``ValueError``."""
    v = parse(verification)
    v.check_node_by_node()
    if not v.boost.is_none:
        raise ValueError(f"tv_bound bounds LANTERN's relaxations; boost {v.boost} has its own bound "
                         "(node_outcome(...).stage_tv, SPEC 9.4)")
    relax, variant = v.relax, v.variant
    if v.rule == Rule.R1:
        return r1_distortion(p, children, relax=relax, neighbours=neighbours, variant=variant).bound
    if v.rule == Rule.R2:
        if q is None:
            raise ValueError("rule r2 needs the draft distribution q")
        return r2_tv_bound(p, q, children, relax=relax, neighbours=neighbours,  # type: ignore[arg-type]
                           variant=variant)
    return r3_tv_bound(p, children, relax=relax, neighbours=neighbours)
