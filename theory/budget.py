"""The budgeted relaxation of sampled drafts (SPEC 9.5, ours): a proximity boost whose distortion is
proved, for recursive rejection R2 and (through :mod:`theory.traversal`) for traversal verification.

A stage tests a draft x drawn from the draft residual q' against the residual target r, with path
weight ``alpha`` (1 for R2; alpha(u) for an R4 stage at node u). For every token x that q' can draw,
its proximity mass eps(x) is the residual mass of its k nearest latent neighbours, r(n_1) + ... + r(n_k)
summed sequentially with no mass cap (:func:`proximity_masses`; not ``theory.relax.merge_count``, whose
running sum stops once it exceeds its bound, and rounding can lift a sum of masses past 1): the budget,
not a per-candidate cap, bounds the distortion; k only keeps the moved mass latent-local. With a
scale s in [0, 1] the stage accepts x with

    a_s(x) = min(1, alpha (r(x) + s eps(x)) / q'(x))

and keeps the standard residual norm((alpha r - q')^+) on rejection. Its excess over the exact test,
the stage's Delta of SPEC 9.4,

    Delta(s) = sum_x q'(x) (a_s(x) - a_0(x)) = sum_x min((q'(x) - alpha r(x))^+, alpha s eps(x)),

is continuous, concave, piecewise linear and non-decreasing in s; the scale is the largest s with
Delta(s) <= the node's remaining budget (:func:`budget_scale`, exact by a sort and a scan), which
is known when the stage starts: tv minus the Deltas of the node's earlier stages. So along every
run the Deltas of a node sum to at most tv, and the node's TV is at most tv (docs/theory.md,
section 14). With no budget left (tv = 0 in particular) the scale is 0.0, so s eps(x) = 0.0 and a_s
is the exact acceptance bit for bit: with tv = 0 the rule is R2 (or R4) bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.boost import Boost
from relaxspec.theory.boost_law import standard_residual
from relaxspec.theory.distributions import total_variation, validate_distribution
from relaxspec.theory.neighbours import validate_neighbour_rows
from relaxspec.theory.relax import Relax
from relaxspec.theory.rules import neighbour_rows
from relaxspec.theory.sampled_trees import StepEnd, check_drawn_tree
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.stages import draft_residual, seqsum
from relaxspec.theory.tree import Tree
from relaxspec.theory.verify import R2_EXACT_MAX_M, R2_EXACT_MAX_V, NodeOutcome, check_children


def check_budget(boost: Boost, neighbours: np.ndarray | None, vocab_size: int,
                 rows: np.ndarray | None = None) -> np.ndarray:
    """Validate a budget boost and its neighbour table (at least k columns); return the table as int64
    (empty when k = 0).

    ``rows``: the tokens whose rows the rule reads (default: all)."""
    if not isinstance(boost, Boost) or not boost.uses_budget:
        raise ValueError(f"expected a budget boost (Boost.budget(tv, k)), got {boost!r}")
    # Relax.additive(k, 1) only names the k columns the table must have (neighbour_rows' check and
    # message); its cap plays no part in eps (proximity_masses).
    nb = neighbour_rows(neighbours, vocab_size, Relax.additive(boost.k, 1.0))
    validate_neighbour_rows(nb, np.arange(vocab_size) if rows is None else rows, boost.k)
    return nb


def proximity_masses(r: np.ndarray, tokens: np.ndarray, nb: np.ndarray, boost: Boost) -> np.ndarray:
    """eps(x) = r(n_1) + ... + r(n_k) for each x of ``tokens`` (n_j: row x of ``nb``): all k neighbours,
    summed left to right (what a plain loop computes, so the kernels' sums are these bit for bit) with
    no cap, even where rounding lifts the sum past 1 (docs/theory.md, section 14.1)."""
    if boost.k == 0 or tokens.size == 0:
        return np.zeros(tokens.size)
    return np.add.accumulate(r[nb[tokens, :boost.k]], axis=1, dtype=np.float64)[:, -1]


def budget_scale(gap: np.ndarray, slope: np.ndarray, remaining: float) -> float:
    """The largest s in [0, 1] with Delta(s) = sum_x min(gap_x, s slope_x) <= ``remaining``.

    Exact in exact arithmetic: the breakpoints gap_x / slope_x of the tokens with both positive are
    sorted (stable, ties by position), and on the segment where Delta crosses ``remaining``,
    Delta(s) = G + s C with G the saturated gaps (sequential sum from the left) and C the open slopes
    (sequential sum from the right), so s = (remaining - G) / C. 0 when ``remaining`` <= 0 (so that an
    exhausted or zero budget is the exact test bit for bit), else 1 when Delta(1) <= remaining.
    """
    if remaining <= 0.0:
        return 0.0
    on = np.flatnonzero((gap > 0.0) & (slope > 0.0))
    g, c = gap[on], slope[on]
    if on.size == 0 or seqsum(np.minimum(g, c)) <= remaining:
        return 1.0
    with np.errstate(over="ignore"):
        t = g / c  # breakpoints (inf for a denormal slope: never reached)
    order = np.argsort(t, kind="stable")
    g, c, t = g[order], c[order], t[order]
    open_slope = np.add.accumulate(c[::-1])[::-1]  # C_j = c_j + ... + c_n, summed from the right
    saturated = 0.0
    for j in range(t.size):
        if t[j] >= 1.0 or saturated + t[j] * open_slope[j] > remaining:
            return float(min(1.0, max(0.0, (remaining - saturated) / open_slope[j])))
        saturated += g[j]
    return 1.0


@dataclass(frozen=True)
class BudgetStage:
    """One budgeted stage: for each of ``tokens`` (the draft residual's support, in token order) the
    boosted ratio (r(x) + s eps(x)) / q'(x) and acceptance min(1, alpha ratio); the ``scale`` s and the
    stage's ``charge`` Delta(s) (sequential over ``tokens``)."""

    tokens: np.ndarray
    ratio: np.ndarray
    accept: np.ndarray
    scale: float
    charge: float

    def of(self, x: int) -> int:
        """Index of token ``x`` in :attr:`tokens`."""
        i = int(np.searchsorted(self.tokens, x))
        if i >= self.tokens.size or self.tokens[i] != x:
            raise ValueError(f"token {x} has zero draft probability at this stage")
        return i


def budget_stage(r: np.ndarray, qp: np.ndarray, nb: np.ndarray, boost: Boost, remaining: float,
                 alpha: float = 1.0) -> BudgetStage:
    """The budgeted stage on residual target ``r`` and draft residual ``qp`` with path weight ``alpha``
    and ``remaining`` budget (module docstring)."""
    tokens = np.flatnonzero(qp > 0)
    rt, qt = r[tokens], qp[tokens]
    eps = proximity_masses(r, tokens, nb, boost)
    s = budget_scale(np.maximum(qt - alpha * rt, 0.0), alpha * eps, remaining)
    ratio = (rt + s * eps) / qt
    accept = np.minimum(1.0, alpha * ratio)
    exact = np.minimum(1.0, alpha * (rt / qt))
    return BudgetStage(tokens, ratio, accept, float(s), seqsum(qt * (accept - exact)))


# ------------------------------------------------------------------ R2 with the budget at one node
@dataclass(frozen=True)
class BudgetR2State:
    """A state of the budgeted R2 walk at one node, about to make draw ``index`` (``qp`` None: no draw
    left, the node emits from ``r``): reached with probability ``weight`` with ``remaining`` budget."""

    index: int
    weight: float
    r: np.ndarray
    qp: np.ndarray | None
    stage: BudgetStage | None
    remaining: float


def budget_r2_states(p: np.ndarray, q: np.ndarray, m: int, nb: np.ndarray, boost: Boost
                     ) -> Iterator[BudgetR2State]:
    """Every state of the budgeted R2 walk with m children drawn from q, reached with positive
    probability (depth first, as ``theory.verify.r2_states``); V <= 12 and m <= 4."""
    if p.size > R2_EXACT_MAX_V or m > R2_EXACT_MAX_M:
        raise ValueError(f"exact budgeted R2 enumerates draw orders only for V <= {R2_EXACT_MAX_V} and "
                         f"m <= {R2_EXACT_MAX_M} (got V = {p.size}, m = {m})")

    def walk(i: int, r: np.ndarray, drawn: list[int], w: float, left: float) -> Iterator[BudgetR2State]:
        qp = draft_residual(q, np.array(drawn, dtype=np.int64)) if i < m else None
        if qp is None:
            yield BudgetR2State(i, w, r, None, None, left)
            return
        st = budget_stage(r, qp, nb, boost, left)
        yield BudgetR2State(i, w, r, qp, st, left)
        r_next = standard_residual(r, qp)
        for c, a in zip(st.tokens, st.accept, strict=True):
            if a < 1.0:
                yield from walk(i + 1, r_next, drawn + [int(c)], w * qp[c] * (1.0 - a), left - st.charge)

    yield from walk(0, p.copy(), [], 1.0, boost.tv)


def budget_r2_given_states(p: np.ndarray, q: np.ndarray, kids: np.ndarray, nb: np.ndarray, boost: Boost
                           ) -> Iterator[BudgetR2State]:
    """The budgeted R2 walk given the draw order ``kids``: one state per reached draw, then the residual
    draw (absent when some draw is accepted surely); ``weight`` is P(reached | order)."""
    r, reach, left = p.copy(), 1.0, boost.tv
    for i, c in enumerate(kids):
        qp = draft_residual(q, kids[:i])
        if qp is None or qp[c] <= 0:
            raise ValueError(f"child {int(c)} (draw {i}) has zero draft probability q'")
        st = budget_stage(r, qp, nb, boost, left)
        yield BudgetR2State(i, reach, r, qp, st, left)
        reach *= 1.0 - st.accept[st.of(int(c))]
        if reach == 0.0:
            return
        r, left = standard_residual(r, qp), left - st.charge
    yield BudgetR2State(kids.size, reach, r, None, None, left)


def _check_node(p: np.ndarray, q: np.ndarray, boost: Boost, neighbours: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    return p, q, check_budget(boost, neighbours, p.size, np.flatnonzero(q > 0))


def budget_node_outcome(p: np.ndarray, q: np.ndarray, children: Sequence[int] | np.ndarray | int, *,
                        boost: Boost, neighbours: np.ndarray | None) -> NodeOutcome:
    """Exact outcome of budgeted R2 at one node (``theory.verify.NodeOutcome``): ``children`` an int m
    (drawn from q, averaged over every draw order; V <= 12, m <= 4) or the draw order. ``stage_tv`` is
    the expected sum of the stages' charges (<= tv; it bounds ``tv``, with equality for one draw)."""
    p, q, nb = _check_node(p, q, boost, neighbours)
    if isinstance(children, (int, np.integer)) and not isinstance(children, bool):
        m = int(children)
        if m < 0:
            raise ValueError(f"number of drafted children must be >= 0, got {m}")
        states, kids = budget_r2_states(p, q, m, nb, boost), None
    else:
        kids = check_children(children, p.size)
        m = kids.size
        states = budget_r2_given_states(p, q, kids, nb, boost)
    accept, tried = np.zeros(m), np.zeros(m)
    emitted = np.zeros(p.size)
    charged = 0.0
    for s in states:
        if s.stage is None:
            emitted += s.weight * s.r
            continue
        tried[s.index] += s.weight
        charged += s.weight * s.stage.charge
        pairs = (zip(s.stage.tokens, s.stage.accept, strict=True) if kids is None
                 else [(kids[s.index], s.stage.accept[s.stage.of(int(kids[s.index]))])])
        for c, a in pairs:
            wc = s.weight * (s.qp[c] if kids is None else 1.0) * a
            accept[s.index] += wc
            emitted[c] += wc
    reject = float(max(0.0, 1.0 - accept.sum()))
    return NodeOutcome(accept, reject, emitted, total_variation(emitted, p), tried, charged)


def sample_budget_node(p: np.ndarray, q: np.ndarray, children: np.ndarray, u_accept: np.ndarray,
                       u_draw: float, *, boost: Boost, nb: np.ndarray) -> tuple[int, int]:
    """Budgeted R2 at one node with explicit uniforms (NumPy oracle, no input checks; ``nb`` from
    :func:`check_budget`): child i spends ``u_accept[i]`` (accept iff u < a), the residual draw
    ``u_draw``. Returns (index of the accepted child or -1, emitted token)."""
    r, left = p.astype(np.float64, copy=True), boost.tv
    for i, c in enumerate(children):
        qp = draft_residual(q, children[:i])
        if qp is None:
            break
        st = budget_stage(r, qp, nb, boost, left)
        if u_accept[i] < st.accept[st.of(int(c))]:
            return i, int(c)
        r, left = standard_residual(r, qp), left - st.charge
    return -1, draw_token(r, u_draw)


# ------------------------------------------------------------------ budgeted R2 on a drawn tree
def budget_r2_step_ends(tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, *, boost: Boost,
                        neighbours: np.ndarray | None) -> tuple[list[StepEnd], float]:
    """Budgeted R2 on a drawn tree, exactly: every node has its own budget tv. Returns the step's
    ends (``theory.sampled_trees.StepEnd``) and the expected sum of the charges of the nodes it
    verified (a bound on the step's TV: docs/theory.md, section 14)."""
    p, q = check_drawn_tree(tree, p_rows, q_rows)
    nb = check_budget(boost, neighbours, p.shape[1])
    ends: list[StepEnd] = []
    bound = 0.0

    def walk(u: int, reach: float) -> None:
        nonlocal bound
        kids = tree.children(u)
        if kids.size == 0:
            ends.append(StepEnd(u, reach, p[u]))
            return
        for s in budget_r2_given_states(p[u], q[u], tree.tokens[kids], nb, boost):
            if s.stage is None:
                ends.append(StepEnd(u, reach * s.weight, s.r))
                continue
            bound += reach * s.weight * s.stage.charge
            a = s.stage.accept[s.stage.of(int(tree.tokens[kids[s.index]]))]
            if s.weight * a > 0.0:
                walk(int(kids[s.index]), reach * s.weight * a)

    walk(0, 1.0)
    return ends, bound


def sample_budget_r2_step(tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, u_accept: np.ndarray,
                          u_draw: np.ndarray, *, boost: Boost, neighbours: np.ndarray | None
                          ) -> tuple[list[int], int]:
    """One budgeted-R2 step on a drawn tree with the suite's per-node uniforms (``theory.sampler``):
    returns the accepted path (from the root) and the bonus token."""
    p, q = check_drawn_tree(tree, p_rows, q_rows)
    nb = check_budget(boost, neighbours, p.shape[1])
    path = [0]
    while True:
        u = path[-1]
        kids = tree.children(u)
        if kids.size == 0:
            return path, draw_token(p[u], float(u_draw[u]))
        i, tok = sample_budget_node(p[u], q[u], tree.tokens[kids], u_accept[kids], float(u_draw[u]),
                                    boost=boost, nb=nb)
        if i < 0:
            return path, tok
        path.append(int(kids[i]))
