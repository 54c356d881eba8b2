"""Exact verification of one tree node (SPEC section 3).

``node_outcome`` gives, for a node with target ``p`` and ordered children, the
unconditional probability that each child is accepted, the probability that
none is, the exact distribution of the token the node emits (the accepted
child, or a draw from the final residual) and its total variation from the
rule's target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from theory.distributions import total_variation, validate_distribution
from theory.neighbours import validate_neighbours
from theory.relax import Relax, check_token
from theory.stages import (
    VARIANTS,
    draft_residual,
    greedy_acceptable,
    r1_reject,
    r1_stage,
    r2_stage,
)

RULES = ("r1", "r2", "r3")
R2_EXACT_MAX_V = 12
R2_EXACT_MAX_M = 4


@dataclass(frozen=True)
class NodeOutcome:
    """Exact outcome of verifying one node.

    Attributes
    ----------
    accept_probs : (m,) unconditional probability that child i is accepted.
    reject_prob : probability that no child is accepted.
    emitted : (V,) distribution of the token the node emits.
    tv : TV(emitted, target); the target is p for R1/R2 and the greedy point
        mass on argmax p for R3.
    tried_probs : (m,) probability that child i is tested at all.
    """

    accept_probs: np.ndarray
    reject_prob: float
    emitted: np.ndarray
    tv: float
    tried_probs: np.ndarray

    @property
    def expected_tried(self) -> float:
        """Expected number of children tested."""
        return float(self.tried_probs.sum())


def check_rule(rule: str, variant: str) -> None:
    """Raise ``ValueError`` for an unknown rule or variant."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {RULES}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")


def neighbour_rows(
    neighbours: np.ndarray | None, vocab_size: int, relax: Relax, variant: str
) -> np.ndarray:
    """Validate the table for ``relax`` and return it as int64 (an empty table when unused)."""
    if relax.is_exact:
        return np.zeros((vocab_size, 0), dtype=np.int64)
    if neighbours is None:
        raise ValueError(f"relaxation {relax} needs a neighbour table")
    validate_neighbours(neighbours, vocab_size, relax.k)
    return np.asarray(neighbours, dtype=np.int64)


def check_children(children: Sequence[int] | np.ndarray, vocab_size: int) -> np.ndarray:
    """Children as an int64 array of distinct in-range token ids."""
    arr = np.asarray(children)
    if arr.ndim != 1:
        raise ValueError(f"children must be a 1-D sequence of token ids, got shape {arr.shape}")
    out = np.array([check_token(c, vocab_size, "child") for c in arr.tolist()], dtype=np.int64)
    if np.unique(out).size != out.size:
        raise ValueError(f"children are not distinct: {out.tolist()}")
    return out


def node_outcome(
    p: np.ndarray,
    children: Sequence[int] | np.ndarray | int,
    *,
    rule: str,
    relax: Relax = Relax.none(),
    neighbours: np.ndarray | None = None,
    q: np.ndarray | None = None,
    variant: str = "principled",
) -> NodeOutcome:
    """Exact outcome of verifying a node with target ``p`` and ordered ``children``.

    For R2, ``children`` is either an int m (children drawn from ``q`` without
    replacement; the outcome is averaged over every draw order, exact for
    V <= 12 and m <= 4) or a sequence (the outcome conditional on that draw
    order). ``accept_probs[i]`` is then the probability that the i-th draw is
    accepted.
    """
    check_rule(rule, variant)
    p = validate_distribution(p, name="p")
    V = p.size
    nb = neighbour_rows(neighbours, V, relax, variant)
    if rule == "r2":
        if q is None:
            raise ValueError("rule r2 needs the draft distribution q")
        q = validate_distribution(q, name="q", size=V)
        if isinstance(children, (int, np.integer)) and not isinstance(children, bool):
            return _r2_enumerated(p, q, int(children), nb, relax, variant)
        return _r2_given(p, q, check_children(children, V), nb, relax, variant)
    kids = check_children(children, V)
    if rule == "r1":
        return _r1(p, kids, nb, relax, variant)
    return _r3(p, kids, nb, relax)


def _finish(accept: np.ndarray, tried: np.ndarray, emitted: np.ndarray, target: np.ndarray) -> NodeOutcome:
    reject = float(max(0.0, 1.0 - accept.sum()))
    return NodeOutcome(accept, reject, emitted, total_variation(emitted, target), tried)


def _r1(p: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax, variant: str) -> NodeOutcome:
    r, Z, reach = p.copy(), 1.0, 1.0
    m = kids.size
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros_like(p)
    for i, c in enumerate(kids):
        tried[i] = reach
        a, zeroed, _, _ = r1_stage(r, Z, int(c), nb[c], relax, variant)
        accept[i] = reach * a
        emitted[c] += reach * a
        reach *= 1.0 - a
        if reach == 0.0:
            break
        Z = r1_reject(r, Z, zeroed)
    if reach > 0.0:
        # a residual whose tracked mass Z stayed positive by rounding may hold no mass: the
        # sampler then draws uniformly (draw_token on a zero vector), so the exact law does too
        total = r.sum()
        emitted += reach * (r / total if total > 0.0 else np.full_like(r, 1.0 / r.size))
    return _finish(accept, tried, emitted, p)


def _r3(p: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax) -> NodeOutcome:
    m = kids.size
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros_like(p)
    for i, c in enumerate(kids):
        tried[i] = 1.0
        if greedy_acceptable(p, int(c), nb[c], relax):
            accept[i] = 1.0
            emitted[c] = 1.0
            break
    else:
        emitted[int(np.argmax(p))] = 1.0
    target = np.zeros_like(p)
    target[int(np.argmax(p))] = 1.0
    return _finish(accept, tried, emitted, target)


def _r2_given(
    p: np.ndarray, q: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax, variant: str
) -> NodeOutcome:
    r, reach = p.copy(), 1.0
    m = kids.size
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros_like(p)
    for i, c in enumerate(kids):
        qp = draft_residual(q, kids[:i])
        if qp is None or qp[c] <= 0:
            raise ValueError(f"child {int(c)} (draw {i}) has zero draft probability q'")
        tried[i] = reach
        a, r = r2_stage(r, qp, int(c), nb[c], relax, variant)
        accept[i] = reach * a
        emitted[c] += reach * a
        reach *= 1.0 - a
        if reach == 0.0:
            break
    if reach > 0.0:
        emitted += reach * r
    return _finish(accept, tried, emitted, p)


def _r2_enumerated(
    p: np.ndarray, q: np.ndarray, m: int, nb: np.ndarray, relax: Relax, variant: str
) -> NodeOutcome:
    V = p.size
    if m < 0:
        raise ValueError(f"number of drafted children must be >= 0, got {m}")
    if V > R2_EXACT_MAX_V or m > R2_EXACT_MAX_M:
        raise ValueError(
            f"exact R2 enumerates draw orders only for V <= {R2_EXACT_MAX_V} and "
            f"m <= {R2_EXACT_MAX_M} (got V = {V}, m = {m}); use simulate's Monte Carlo instead"
        )
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros(V)

    def walk(i: int, r: np.ndarray, drawn: list[int], w: float) -> None:
        qp = draft_residual(q, np.array(drawn, dtype=np.int64)) if i < m else None
        if qp is None:
            emitted[:] += w * r
            return
        tried[i] += w
        for c in np.flatnonzero(qp > 0):
            wc = w * qp[c]
            a, r_next = r2_stage(r, qp, int(c), nb[c], relax, variant)
            accept[i] += wc * a
            emitted[c] += wc * a
            if a < 1.0:
                walk(i + 1, r_next, drawn + [int(c)], wc * (1.0 - a))

    walk(0, p.copy(), [], 1.0)
    return _finish(accept, tried, emitted, p)
