"""Exact verification of one tree node (SPEC section 3).

``node_outcome`` gives, for a node with target ``p`` and ordered children, the
unconditional probability that each child is accepted, the probability that
none is, the exact distribution of the token the node emits (the accepted
child, or a draw from the final residual) and its total variation from the
rule's target.

R2 takes a boost (``theory.boost.Boost``: GSD's group or Cool-SD's depth-scaled acceptance, SPEC
9.2-9.3): every stage is then ``theory.boost.boosted_stage`` (boosted acceptance, standard residual)
and ``NodeOutcome.stage_tv`` sums the stages' exact TVs (SPEC 9.4).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.boost_law import sampled_draft_stage, stage_tv
from relaxspec.theory.distributions import total_variation, validate_distribution
from relaxspec.theory.neighbours import validate_neighbour_rows
from relaxspec.theory.relax import Relax, check_token
from relaxspec.theory.rules import Rule, boost_embedding, neighbour_rows
from relaxspec.theory.stages import (
    draft_residual,
    greedy_acceptable,
    r1_reject,
    r1_stage,
)
from relaxspec.theory.verification import Verification, parse

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
    stage_tv : R2 only (NaN otherwise, and for a relaxed R2): sum over the stages of P(stage tested)
        times the exact TV of the stage's law from its residual target (SPEC 9.4, on the stage's whole
        draft residual q'). Averaged over draw orders (``children`` an int) it bounds ``tv``, with
        equality for one draw (m = 1); given a draw order it is the conditional expectation of that
        sum (what ``theory.step_expectation`` adds up). 0 without a boost.
    """

    accept_probs: np.ndarray
    reject_prob: float
    emitted: np.ndarray
    tv: float
    tried_probs: np.ndarray
    stage_tv: float = math.nan

    @property
    def expected_tried(self) -> float:
        """Expected number of children tested."""
        return float(self.tried_probs.sum())


def check_children(children: Sequence[int] | np.ndarray | int, vocab_size: int) -> np.ndarray:
    """Children as an int64 array of distinct in-range token ids (a bare number is refused)."""
    arr = np.asarray(children)
    if arr.ndim != 1:
        raise ValueError(f"children must be a 1-D sequence of token ids, got shape {arr.shape}")
    out = np.array([check_token(c, vocab_size, "child") for c in arr.tolist()], dtype=np.int64)
    if np.unique(out).size != out.size:
        raise ValueError(f"children are not distinct: {out.tolist()}")
    return out


@dataclass(frozen=True)
class NodeInputs:
    """Validated inputs of one node: target, int64 neighbour table, children, draft, and the
    boost's embedding table (None unless GSD)."""

    p: np.ndarray
    nb: np.ndarray
    kids: np.ndarray | None  # the ordered children; None when R2 draws ``m`` of them
    m: int
    q: np.ndarray | None
    emb: np.ndarray | None = None


def check_node_inputs(
    p: np.ndarray,
    children: Sequence[int] | np.ndarray | int,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q: np.ndarray | None = None,
    depth: int = 1,
    emb: np.ndarray | None = None,
) -> NodeInputs:
    """Validate everything :func:`node_outcome` reads under ``verification`` (a value or its spec, verified
    node by node: ``Verification.check_node_by_node``); raise ``ValueError`` naming the problem.

    The neighbour rows the rule can read (children's rows, or every row of
    q's support when R2 draws the children) are checked in full: ids in
    range, distinct, not the row's own token.
    """
    v = parse(verification)
    v.check_node_by_node()
    rule, relax, boost = v.rule, v.relax, v.boost
    if isinstance(depth, bool) or int(depth) != depth or depth < 1:
        raise ValueError(f"depth of the tested children must be an integer >= 1, got {depth!r}")
    p = validate_distribution(p, name="p")
    V = p.size
    emb = boost_embedding(boost, emb, V)
    nb = neighbour_rows(neighbours, V, relax)
    kids: np.ndarray | None
    if rule == Rule.R2:
        if q is None:
            raise ValueError("rule r2 needs the draft distribution q")
        q = validate_distribution(q, name="q", size=V)
        if isinstance(children, (int, np.integer)) and not isinstance(children, bool):
            m = int(children)
            if m < 0:
                raise ValueError(f"number of drafted children must be >= 0, got {m}")
            kids, rows = None, np.flatnonzero(q > 0)
        else:
            kids = check_children(children, V)
            m, rows = kids.size, kids
    else:
        q = None
        kids = check_children(children, V)
        m, rows = kids.size, kids
    validate_neighbour_rows(nb, rows, v.neighbour_columns)
    return NodeInputs(p, nb, kids, m, q, emb)


def node_outcome(
    p: np.ndarray,
    children: Sequence[int] | np.ndarray | int,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q: np.ndarray | None = None,
    depth: int = 1,
    emb: np.ndarray | None = None,
) -> NodeOutcome:
    """Exact outcome of verifying a node with target ``p`` and ordered ``children`` under ``verification``
    (a :class:`~theory.verification.Verification` or its spec: ``"r1+lantern:k=2,delta=0.1"``).

    For R2, ``children`` is either an int m (children drawn from ``q`` without
    replacement; the outcome is averaged over every draw order, exact for
    V <= 12 and m <= 4) or a sequence (the outcome conditional on that draw
    order). ``accept_probs[i]`` is then the probability that the i-th draw is
    accepted.

    A boost (R2 only, GSD or Cool-SD; rule r4 and the budget verify a whole step: ``ValueError``) boosts
    every stage (``theory.boost.boosted_stage``): ``depth`` is the children's depth in the tree (Cool-SD's
    omega_depth), ``emb`` the (V, d) embedding table GSD's groups read. The exact TV of a boosted
    node is ``tv`` (averaged over draw orders: the enumerated law; for one draw it equals SPEC 9.4's
    ``theory.boost.boosted_tv``); ``stage_tv`` is the per-stage 9.4 sum, a bound on it.
    """
    v = parse(verification)
    x = check_node_inputs(p, children, v, neighbours=neighbours, q=q, depth=depth, emb=emb)
    relax, variant = v.relax, v.variant
    if v.rule == Rule.R2:
        assert x.q is not None  # check_node_inputs requires R2's q
        at = BoostAt(v.boost, int(depth), x.emb)
        if x.kids is None:
            return _r2_enumerated(x.p, x.q, x.m, x.nb, relax, variant, at)
        return _r2_given(x.p, x.q, x.kids, x.nb, relax, variant, at)
    assert x.kids is not None  # only R2 may draw its children
    if v.rule == Rule.R1:
        return _r1(x.p, x.kids, x.nb, relax, variant)
    return _r3(x.p, x.kids, x.nb, relax)


def _finish(
    accept: np.ndarray, tried: np.ndarray, emitted: np.ndarray, target: np.ndarray,
    stage_sum: float = math.nan,
) -> NodeOutcome:
    reject = float(max(0.0, 1.0 - accept.sum()))
    return NodeOutcome(accept, reject, emitted, total_variation(emitted, target), tried, stage_sum)


@dataclass(frozen=True)
class R1Stage:
    """One reached stage of the R1 walk (``index == m``: the final residual draw).

    ``reach`` is the probability of testing child ``index``, ``accept`` its
    acceptance probability given that, ``zeroed`` the tokens a rejection
    removes (the child first, then its neighbours in table order),
    ``merge_count`` J and ``merged`` C_J. ``residual`` is the walk's
    unnormalised residual before the stage, of mass ``mass``; it is updated
    in place when the walk resumes.
    """

    index: int
    reach: float
    accept: float
    zeroed: np.ndarray
    merge_count: int
    merged: float
    mass: float
    residual: np.ndarray


def r1_walk(
    p: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax, variant: str
) -> Iterator[R1Stage]:
    """The deterministic R1 walk: every stage reached with positive probability, in order.

    R1 has a single path (reject child 1, reject child 2, ...); stage i is
    reached with probability prod_{j<i} (1 - a_j). The last record
    (``index == m``) is the residual draw, absent when some a_i = 1.
    """
    r, Z, reach = p.copy(), 1.0, 1.0
    for i, c in enumerate(kids):
        a, zeroed, J, merged = r1_stage(r, Z, int(c), nb[c], relax, variant)
        yield R1Stage(i, reach, a, zeroed, J, merged, Z, r)
        reach *= 1.0 - a
        if reach == 0.0:
            return
        Z = r1_reject(r, Z, zeroed)
    yield R1Stage(kids.size, reach, 0.0, np.zeros(0, dtype=np.int64), 0, 0.0, Z, r)


def _r1(p: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax, variant: str) -> NodeOutcome:
    m = kids.size
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros_like(p)
    for st in r1_walk(p, kids, nb, relax, variant):
        if st.index == m:
            # Z is tracked by subtraction, so rounding can leave Z > 0 on an all-zero
            # residual; the sampler's draw_token then draws uniformly, and so do we.
            total = st.residual.sum()
            emitted += st.reach * (st.residual / total if total > 0.0 else 1.0 / p.size)
            break
        tried[st.index] = st.reach
        accept[st.index] = st.reach * st.accept
        emitted[kids[st.index]] += st.reach * st.accept
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


@dataclass(frozen=True)
class BoostAt:
    """A boost where R2 applies it: the :class:`~theory.boost.Boost`, the tested children's ``depth``
    (Cool-SD's omega index) and GSD's embedding table ``emb`` (validated by the caller)."""

    boost: Boost = NO_BOOST
    depth: int = 1
    emb: np.ndarray | None = None

    def stage(self, r: np.ndarray, qp: np.ndarray, x: int, row: np.ndarray, relax: Relax,
              variant: str) -> tuple[float, np.ndarray]:
        """``theory.boost.sampled_draft_stage``: (acceptance of x, residual after its rejection)."""
        return sampled_draft_stage(r, qp, x, row, relax, variant, self.boost, self.depth, self.emb)

    def tv(self, r: np.ndarray, qp: np.ndarray, relax: Relax) -> float:
        """Exact TV of the stage's law from ``r`` (``theory.boost.stage_tv``; NaN for a relaxed R2)."""
        return stage_tv(r, qp, self.boost, self.depth, self.emb) if relax.is_exact else math.nan


NO_BOOST_AT = BoostAt()


@dataclass(frozen=True)
class R2State:
    """A state of the R2 walk with children drawn from q: about to make draw ``stage``.

    ``weight`` is the probability of reaching it (draws so far and their
    rejections), ``r`` the normalised residual target, ``qp`` the draft
    residual q' (None when no draw is left: the node then emits from ``r``),
    ``tokens`` the tokens q' can draw and ``accept`` their acceptance
    probabilities; ``tv`` the exact TV of the stage's law from ``r`` (SPEC 9.4;
    0 unboosted, NaN relaxed, 0 when no draw is left).
    """

    stage: int
    weight: float
    r: np.ndarray
    qp: np.ndarray | None
    tokens: np.ndarray
    accept: np.ndarray
    tv: float = 0.0


def r2_states(
    p: np.ndarray, q: np.ndarray, m: int, nb: np.ndarray, relax: Relax, variant: str,
    at: BoostAt = NO_BOOST_AT,
) -> Iterator[R2State]:
    """Every state of the R2 walk reached with positive probability (depth first).

    Enumerates the draw orders; refuses V > 12 or m > 4 (the count of orders
    grows as V^m). ``at``: the boost of every stage (:class:`BoostAt`).
    """
    V = p.size
    if V > R2_EXACT_MAX_V or m > R2_EXACT_MAX_M:
        raise ValueError(
            f"exact R2 enumerates draw orders only for V <= {R2_EXACT_MAX_V} and "
            f"m <= {R2_EXACT_MAX_M} (got V = {V}, m = {m}); use simulate's Monte Carlo instead"
        )
    empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)

    def walk(i: int, r: np.ndarray, drawn: list[int], w: float) -> Iterator[R2State]:
        qp = draft_residual(q, np.array(drawn, dtype=np.int64)) if i < m else None
        if qp is None:
            yield R2State(i, w, r, None, empty_i, empty_f)
            return
        tokens = np.flatnonzero(qp > 0)
        stages = [at.stage(r, qp, int(c), nb[c], relax, variant) for c in tokens]
        yield R2State(i, w, r, qp, tokens, np.array([a for a, _ in stages]), at.tv(r, qp, relax))
        for c, (a, r_next) in zip(tokens, stages, strict=True):
            if a < 1.0:
                yield from walk(i + 1, r_next, drawn + [int(c)], w * qp[c] * (1.0 - a))

    yield from walk(0, p.copy(), [], 1.0)


def r2_given_states(
    p: np.ndarray, q: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax, variant: str,
    at: BoostAt = NO_BOOST_AT,
) -> Iterator[R2State]:
    """The R2 walk conditional on the draw order ``kids``: one state per reached draw.

    ``weight`` is the probability that draw i is tested given the order (the
    earlier draws were rejected); the last state (``qp`` None) is the
    residual draw, absent when some draw is accepted with probability 1.
    ``at``: the boost of every stage (:class:`BoostAt`).
    """
    r, reach = p.copy(), 1.0
    for i, c in enumerate(kids):
        qp = draft_residual(q, kids[:i])
        if qp is None or qp[c] <= 0:
            raise ValueError(f"child {int(c)} (draw {i}) has zero draft probability q'")
        a, r_next = at.stage(r, qp, int(c), nb[c], relax, variant)
        yield R2State(i, reach, r, qp, kids[i : i + 1], np.array([a]), at.tv(r, qp, relax))
        reach *= 1.0 - a
        if reach == 0.0:
            return
        r = r_next
    yield R2State(kids.size, reach, r, None, np.zeros(0, dtype=np.int64), np.zeros(0))


def r2_stage_tvs(
    p: np.ndarray, q: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax, variant: str,
    at: BoostAt = NO_BOOST_AT,
) -> np.ndarray:
    """Exact TV of each reached stage's law (:attr:`R2State.tv`) along the draw order ``kids``: what a
    walk that tested draws 0..i adds to its path TV (``theory.tree.path_tv``)."""
    return np.array([s.tv for s in r2_given_states(p, q, kids, nb, relax, variant, at) if s.qp is not None])


def _r2_given(
    p: np.ndarray, q: np.ndarray, kids: np.ndarray, nb: np.ndarray, relax: Relax, variant: str,
    at: BoostAt,
) -> NodeOutcome:
    m = kids.size
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros_like(p)
    stage_sum = 0.0
    for s in r2_given_states(p, q, kids, nb, relax, variant, at):
        if s.qp is None:
            emitted += s.weight * s.r
            break
        tried[s.stage] = s.weight
        accept[s.stage] = s.weight * s.accept[0]
        emitted[kids[s.stage]] += s.weight * s.accept[0]
        stage_sum += s.weight * s.tv
    return _finish(accept, tried, emitted, p, stage_sum)


def _r2_enumerated(
    p: np.ndarray, q: np.ndarray, m: int, nb: np.ndarray, relax: Relax, variant: str, at: BoostAt,
) -> NodeOutcome:
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros(p.size)
    stage_sum = 0.0
    for s in r2_states(p, q, m, nb, relax, variant, at):
        if s.qp is None:
            emitted += s.weight * s.r
            continue
        tried[s.stage] += s.weight
        stage_sum += s.weight * s.tv
        for c, a in zip(s.tokens, s.accept, strict=True):
            wc = s.weight * s.qp[c]
            accept[s.stage] += wc * a
            emitted[c] += wc * a
    return _finish(accept, tried, emitted, p, stage_sum)
