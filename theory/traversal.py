"""Traversal verification (R4, SPEC 9.6; Weng et al., arXiv 2505.12398) on sampled-draft trees, and
its relaxed versions (every edge's ratio boosted, SPEC 9.4-9.5).

Every live node u carries a target P_u (initially p_u), a draft Q_u (q_u without the tokens of u's
deleted children, renormalised: ``theory.stages.draft_residual``, as R2's q') and a path weight
alpha(u): alpha(root) = 1, alpha(c) = min(1, alpha(u) * b_u(c)) for a live child c of u, where the
edge ratio is b_u(c) = P_u(c) / Q_u(c) (lossless) or a boost of it (:func:`edge_ratio`). The loop
tests v = the first live node in post-order (from the root follow the first live child): the root
emits a bonus token from P_root and stops; otherwise v is accepted iff eta < alpha(v) (then the path
root..v is accepted and the bonus is drawn from P_v), else, with u = parent(v):

    S = sum [alpha(u) P_u - Q_u]^+,  P_u := [alpha(u) P_u - Q_u]^+ / S,
    Q_u := Q_u without v's token,    alpha(u) := S / (S + 1 - alpha(u)),

v and its subtree are deleted, and alpha is recomputed over u's live subtree. Conventions (the
arithmetic the Numba kernel must repeat): S is a sequential sum; alpha(u) := S / (S + (1 - alpha(u)))
in that order, so it stays exactly 1 at the root; alpha(c) = min(1, alpha(u) * b) with b computed
first; S <= 0 makes P_u uniform (R2's empty-residual rule) and alpha(u) 0, or 1 when alpha(u) was 1
(the root: R2 then goes on from the uniform residual). alpha(u) * P_u with alpha(u) = 1 is P_u bit for
bit, so on a one-level tree R4 is R2 bit for bit, decision for decision.

Uniforms (the suite's convention, ``theory.sampler``): node v's ``u_accept[v]`` is its eta (a node is
tested at most once) and ``u_draw[v]`` draws the bonus when the step ends at v.

Relaxed R4 (``boost``): the stage of node u that tests its i-th child (entered when the walk first
tests a node of that child's subtree) has the excess Delta_{u,i} = sum_x Q_u(x) |min(1, alpha(u)
b_u(x)) - min(1, alpha(u) P_u(x) / Q_u(x))| of SPEC 9.4; the step's TV is at most the expected sum of
the Deltas of the stages it enters (docs/theory.md, section 12). The budget boost (SPEC 9.5,
:mod:`theory.budget`) gives each node u its own budget tv for the Deltas of its stages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.theory.boost import NO_BOOST, Boost, check_embedding
from relaxspec.theory.boost_law import group_members, rank_order
from relaxspec.theory.budget import budget_stage, check_budget
from relaxspec.theory.sampled_trees import StepEnd, check_drawn_tree
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.stages import draft_residual, seqsum
from relaxspec.theory.tree import Tree


def check_traversal_boost(boost: Boost, vocab_size: int, neighbours: np.ndarray | None,
                          emb: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate a boost for R4: returns the int64 neighbour table the budget boost reads (empty
    otherwise) and GSD's float64 embedding table (None otherwise)."""
    if not isinstance(boost, Boost):
        raise ValueError(f"boost must be a relaxspec.theory.boost.Boost, got {type(boost).__name__}")
    nb = np.zeros((vocab_size, 0), dtype=np.int64)
    if boost.uses_budget:
        nb = check_budget(boost, neighbours, vocab_size)
    if boost.reads_embedding:
        if emb is None:
            raise ValueError(f"boost {boost} (group acceptance) needs an embedding table of the "
                             f"{vocab_size} tokens")
        return nb, check_embedding(emb, vocab_size)
    return nb, None


def edge_ratio(P: np.ndarray, Q: np.ndarray, x: int, boost: Boost, depth: int,
               emb: np.ndarray | None, order: np.ndarray | None = None) -> float:
    """b(x) for an edge to a child with token ``x`` at ``depth`` (group and depth boosts; the lossless
    ratio P(x)/Q(x) without one): GSD's P(C)/Q(C) over x's group, Cool-SD's omega_depth P(x)/Q(x). Its
    min(1, .) is ``theory.boost.boosted_acceptance``. The budget's ratio lives in
    ``theory.budget.budget_stage``. ``order``: ``theory.boost.rank_order(P)`` when known (GSD)."""
    if boost.reads_embedding:
        C = group_members(P, x, emb, boost, order)
        return seqsum(P[C]) / seqsum(Q[C])
    if boost.scales_by_depth:
        return boost.omega_at(depth) * P[x] / Q[x]
    return P[x] / Q[x]


@dataclass(frozen=True)
class R4Test:
    """One step of the R4 loop: ``node`` is tested (0: the root, which ends the step with a bonus from
    ``law``), ``accept`` is alpha(node), ``law`` the node's P at that time (the bonus law if accepted),
    ``charge`` the sum of the Deltas of the stages this test enters (0 when lossless)."""

    node: int
    accept: float
    law: np.ndarray
    charge: float


class TraversalWalk:
    """The R4 state machine on one drawn tree (no input checks: :func:`check_traversal_inputs`).

    :meth:`next_test` gives the next tested node (and the stages it enters); :meth:`reject` deletes it
    and updates its parent. Used by the exact walk (:func:`traversal_ends`) and the sampler
    (:func:`sample_traversal_step`), so both run the same arithmetic.
    """

    def __init__(self, tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, boost: Boost,
                 nb: np.ndarray, emb: np.ndarray | None) -> None:
        self.tree, self.q_rows, self.boost, self.nb, self.emb = tree, q_rows, boost, nb, emb
        n = tree.size
        self.kids = [tree.children(u) for u in range(n)]
        self.P = [p_rows[u] for u in range(n)]
        self.Q = [draft_residual(q_rows[u], np.zeros(0, dtype=np.int64)) if self.kids[u].size else None
                  for u in range(n)]
        self.alpha = np.ones(n)
        self.deleted = np.zeros(n, dtype=np.int64)  # deleted children of u: the first ones in draw order
        self.left = np.full(n, boost.tv if boost.uses_budget else 0.0)  # budget per node
        self.stage_excess = np.zeros(n)  # Delta of u's current stage
        self.entered = np.full(n, -1, dtype=np.int64)  # the last stage of u that a test entered
        self._recompute(0)

    def live_children(self, u: int) -> np.ndarray:
        """u's children not deleted, in draw order."""
        return self.kids[u][self.deleted[u]:]

    def _stage(self, u: int, live: np.ndarray) -> tuple[np.ndarray, float]:
        """Edge ratios of u's live children at u's current stage and the stage's Delta."""
        P, Q, a = self.P[u], self.Q[u], self.alpha[u]
        toks = self.tree.tokens[live]
        if self.boost.uses_budget:
            st = budget_stage(P, Q, self.nb, self.boost, float(self.left[u]), a)
            return st.ratio[np.searchsorted(st.tokens, toks)], st.charge
        depth = int(self.tree.depths[u]) + 1
        order = rank_order(P) if self.boost.reads_embedding else None
        ratios = np.array([edge_ratio(P, Q, int(x), self.boost, depth, self.emb, order) for x in toks])
        if self.boost.is_none:
            return ratios, 0.0
        support = np.flatnonzero(Q > 0)
        b = np.array([edge_ratio(P, Q, int(x), self.boost, depth, self.emb, order) for x in support])
        boosted = np.minimum(1.0, a * b)
        exact = np.minimum(1.0, a * (P[support] / Q[support]))
        return ratios, seqsum(Q[support] * np.abs(boosted - exact))

    def _recompute(self, u: int) -> None:
        """alpha over u's live subtree, top-down (u's own alpha is kept)."""
        live = self.live_children(u)
        if live.size == 0:
            return
        ratios, self.stage_excess[u] = self._stage(u, live)
        for c, b in zip(live, ratios, strict=True):
            self.alpha[c] = min(1.0, self.alpha[u] * b)
            self._recompute(int(c))

    def next_test(self) -> tuple[int, float]:
        """The first live node in post-order and the Deltas of the stages its test enters."""
        v, charge = 0, 0.0
        while True:
            live = self.live_children(v)
            if live.size == 0:
                return v, charge
            if self.entered[v] != self.deleted[v]:
                self.entered[v] = self.deleted[v]
                charge += self.stage_excess[v]
            v = int(live[0])

    def reject(self, v: int) -> None:
        """Delete the tested node ``v`` (not the root) and update its parent (module docstring)."""
        u = int(self.tree.parents[v])
        a = self.alpha[u]
        res = np.maximum(a * self.P[u] - self.Q[u], 0.0)
        S = seqsum(res)
        self.P[u] = res / S if S > 0.0 else np.full_like(res, 1.0 / res.size)
        self.left[u] -= self.stage_excess[u] if self.boost.uses_budget else 0.0
        self.deleted[u] += 1
        self.Q[u] = draft_residual(self.q_rows[u], self.tree.tokens[self.kids[u][: self.deleted[u]]])
        denom = S + (1.0 - a)  # exactly S when a = 1 (the root), so that alpha(root) stays 1.0
        self.alpha[u] = S / denom if S > 0.0 else (1.0 if denom <= 0.0 else 0.0)
        self._recompute(u)

    def path(self, v: int) -> list[int]:
        """Nodes root..v."""
        out = [v]
        while out[-1] != 0:
            out.append(int(self.tree.parents[out[-1]]))
        return out[::-1]

    def tests(self) -> list[R4Test]:
        """Run the loop to the end, rejecting every tested node (the exact walk's sequence of tests);
        stops after a test with alpha = 1 (later tests are never reached)."""
        out = []
        while True:
            v, charge = self.next_test()
            if v == 0:
                out.append(R4Test(0, 1.0, self.P[0], charge))
                return out
            out.append(R4Test(v, float(self.alpha[v]), self.P[v], charge))
            if self.alpha[v] >= 1.0:
                return out
            self.reject(v)


def check_traversal_inputs(tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, boost: Boost,
                           neighbours: np.ndarray | None, emb: np.ndarray | None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate a drawn tree and its rows (every child's token drawable at its parent) and the boost;
    ``ValueError`` names the problem. Returns float64 rows, the int64 table and the embedding."""
    p, q = check_drawn_tree(tree, p_rows, q_rows)
    nb, e = check_traversal_boost(boost, p.shape[1], neighbours, emb)
    return p, q, nb, e


@dataclass(frozen=True)
class TraversalOutcome:
    """Exact R4 step on a drawn tree: ``ends`` (``theory.sampled_trees.StepEnd``), ``tested`` the
    probability each node is tested, ``tokens`` E[tokens per step] and ``tv_bound`` the expected sum of
    the entered stages' Deltas (0 lossless; a bound on the step's TV averaged over draws)."""

    ends: list[StepEnd]
    tested: np.ndarray
    tokens: float
    tv_bound: float


def traversal_ends(tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, *, boost: Boost = NO_BOOST,
                   neighbours: np.ndarray | None = None, emb: np.ndarray | None = None) -> TraversalOutcome:
    """R4 on a drawn tree, exactly: the loop is one sequence of tests (what a rejection changes does not
    depend on chance), so test j happens with probability prod_{i<j} (1 - alpha_i). Exact at any V."""
    p, q, nb, e = check_traversal_inputs(tree, p_rows, q_rows, boost, neighbours, emb)
    walk = TraversalWalk(tree, p, q, boost, nb, e)
    ends: list[StepEnd] = []
    tested = np.zeros(tree.size)
    reach, bound, tokens = 1.0, 0.0, 0.0
    for t in walk.tests():
        bound += reach * t.charge
        tested[t.node] += reach
        prob = reach * t.accept
        if prob > 0.0:
            ends.append(StepEnd(t.node, prob, t.law))
        tokens += prob * (tree.depths[t.node] + 1)
        reach *= 1.0 - t.accept
    return TraversalOutcome(ends, tested, float(tokens), float(bound))


def sample_traversal_step(tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, u_accept: np.ndarray,
                          u_draw: np.ndarray, *, boost: Boost = NO_BOOST,
                          neighbours: np.ndarray | None = None, emb: np.ndarray | None = None
                          ) -> tuple[list[int], int]:
    """One R4 step with explicit uniforms (the NumPy oracle of the kernel): the tested node v accepts iff
    ``u_accept[v] < alpha(v)``; the bonus is ``draw_token(P_v, u_draw[v])`` at the node v where the step
    ends (the root when every path was rejected). Returns (accepted path from the root, bonus)."""
    p, q, nb, e = check_traversal_inputs(tree, p_rows, q_rows, boost, neighbours, emb)
    ua = np.asarray(u_accept, dtype=np.float64)
    ud = np.asarray(u_draw, dtype=np.float64)
    if ua.shape != (tree.size,) or ud.shape != (tree.size,):
        raise ValueError(f"u_accept and u_draw need one uniform per node ({tree.size}), "
                         f"got shapes {ua.shape} and {ud.shape}")
    walk = TraversalWalk(tree, p, q, boost, nb, e)
    while True:
        v, _ = walk.next_test()
        if v == 0 or ua[v] < walk.alpha[v]:
            return walk.path(v), draw_token(walk.P[v], float(ud[v]))
        walk.reject(v)
