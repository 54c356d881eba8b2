"""One verification step under any rule: the one place that sends a decoded or recorded step to its
theory oracle.

R1-R3 and R2 with GSD / Cool-SD go to ``theory.tree`` (``sample_step``, ``step_expectation``); R4,
traversal verification (SPEC 9.6), to ``theory.traversal`` (``sample_traversal_step``,
``traversal_ends``; boosted by GSD, Cool-SD or the budget: relaxed R4); R2 with the budgeted relaxation
(SPEC 9.5) to ``theory.budget`` (``sample_budget_r2_step``, ``budget_r2_step_ends``). A Jacobi window
(SPEC 9.1) is verified as its chain (``theory.jacobi_sampler.window_tree``): R2 without the budget by
``theory.jacobi_sampler`` itself, the rest by the same dispatch on the chain.

The functions keep ``theory.tree``'s signatures (the rule, its relaxation or boost and its variant as one
``verification``: a :class:`~theory.verification.Verification` or its spec; ``Verification.oracle`` says
where a step goes), so the reference decoder, its replay and the mini model's scorer call one function
whatever the rule. Uniforms are the suite's (``theory.sampler``): ``u_accept[v]``
tests node v (R4: v's eta; R4 tests a node at most once) and ``u_draw[v]`` draws the token emitted at v
(R2: the residual draw when every child of v was rejected, or the bonus at a leaf; R4: the bonus from
P_v when the step ends at v). For a window, ``u_accept[j - 1]`` tests d_j and ``u_draw[j]`` draws at
chain node j (``theory.jacobi_sampler.node_uniforms``).

The neighbour table: a LANTERN relaxation reads ``theory.rules.neighbour_rows``; the budget boost reads
the table it merges (``theory.budget.check_budget``, at least k columns); :func:`step_neighbours` gives the
one a rule reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from relaxspec.theory.boost import NO_BOOST
from relaxspec.theory.budget import budget_r2_step_ends, check_budget, sample_budget_r2_step
from relaxspec.theory.jacobi_sampler import (
    check_window,
    node_uniforms,
    verify_window,
    window_expectation,
)
from relaxspec.theory.rules import neighbour_rows
from relaxspec.theory.sampled_trees import StepEnd, expected_tokens
from relaxspec.theory.traversal import sample_traversal_step, traversal_ends
from relaxspec.theory.tree import StepExpectation, Tree, sample_step, step_expectation
from relaxspec.theory.verification import DraftSource, Verification, parse


def step_neighbours(neighbours: np.ndarray | None, vocab_size: int, verification: Verification | str
                    ) -> np.ndarray:
    """The int64 neighbour table a step under ``verification`` (a value or its spec) reads: the budget's
    (validated, at least k columns), else ``theory.rules.neighbour_rows`` (empty when the rule merges
    nothing)."""
    v = parse(verification)
    if v.uses_budget:
        if neighbours is None and v.boost.k > 0:  # k = 0 merges nothing: R2, with no table to read
            raise ValueError(f"boost {v.boost} merges the mass of latent neighbours: it needs a neighbour "
                             "table")
        return check_budget(v.boost, neighbours, vocab_size)
    return neighbour_rows(neighbours, vocab_size, v.relax)


def _sampled_rows(v: Verification, tree: Tree, node_dists: np.ndarray, q_dists: np.ndarray | None
                  ) -> np.ndarray:
    """The draft rows (a lone root reads none: zeros)."""
    if q_dists is None and tree.size == 1:
        return np.zeros((1, np.shape(node_dists)[-1]))
    if q_dists is None:
        raise ValueError(f"rule {v.rule} verifies sampled drafts: it needs q_dists (the draft row of every "
                         "node with children)")
    return q_dists


def sample_rule_step(tree: Tree, node_dists: np.ndarray, u_accept: np.ndarray, u_draw: np.ndarray,
                     verification: Verification | str, *, neighbours: np.ndarray | None = None,
                     q_dists: np.ndarray | None = None, emb: np.ndarray | None = None
                     ) -> tuple[list[int], int]:
    """One step on a drawn tree with explicit uniforms (``theory.tree.sample_step``'s signature and
    return: the accepted path from the root and the emitted token), for any ``verification`` (module
    docstring)."""
    v = parse(verification)
    if not v.walks_own_step:
        return sample_step(tree, node_dists, u_accept, u_draw, v, neighbours=neighbours, q_dists=q_dists,
                           emb=emb)
    q = _sampled_rows(v, tree, node_dists, q_dists)
    table = neighbours if v.uses_budget else None
    if v.is_traversal:
        return sample_traversal_step(tree, node_dists, q, u_accept, u_draw, boost=v.boost, neighbours=table,
                                     emb=emb)
    return sample_budget_r2_step(tree, node_dists, q, u_accept, u_draw, boost=v.boost, neighbours=table)


def expectation_from_ends(tree: Tree, ends: Sequence[StepEnd], tokens: float, tv: float) -> StepExpectation:
    """A ``theory.tree.StepExpectation`` from a step's ends: ``reach_probs[v]`` = P(v on the accepted
    path), ``edge_probs[v]`` = reach(v) / reach(parent) (0 where the parent is never reached)."""
    reach = np.zeros(tree.size)
    for e in ends:
        v = e.node
        while v >= 0:
            reach[v] += e.prob
            v = int(tree.parents[v])
    edge = np.ones(tree.size)
    for v in range(1, tree.size):
        u = int(tree.parents[v])
        edge[v] = reach[v] / reach[u] if reach[u] > 0.0 else 0.0
    return StepExpectation(float(tokens), float(tv), edge, reach)


def rule_step_expectation(tree: Tree, node_dists: np.ndarray, verification: Verification | str, *,
                          neighbours: np.ndarray, q_dists: np.ndarray | None = None,
                          emb: np.ndarray | None = None) -> StepExpectation:
    """Exact E[tokens per step] and the step's TV (or its proved bound) on a drawn tree, for any
    ``verification``: ``theory.tree.step_expectation``; for R4 ``theory.traversal.traversal_ends``
    (``tv``: its ``tv_bound``, the expected sum of the entered stages' Deltas, 0 lossless: docs/theory.md,
    Theorem 12.3); for budgeted R2 ``theory.budget.budget_r2_step_ends`` (``tv``: the expected sum of the
    charges of the nodes verified, Theorem 14.2)."""
    v = parse(verification)
    if not v.walks_own_step:
        return step_expectation(tree, node_dists, v, neighbours=neighbours, q_dists=q_dists, emb=emb)
    q = _sampled_rows(v, tree, node_dists, q_dists)
    table = neighbours if v.uses_budget else None
    if v.is_traversal:
        out = traversal_ends(tree, node_dists, q, boost=v.boost, neighbours=table, emb=emb)
        return expectation_from_ends(tree, out.ends, out.tokens, out.tv_bound)
    ends, bound = budget_r2_step_ends(tree, node_dists, q, boost=v.boost, neighbours=table)
    return expectation_from_ends(tree, ends, expected_tokens(tree, ends), bound)


def _window_chain(p_rows: np.ndarray, drafts: np.ndarray, q_rows: np.ndarray,
                  u_accept: np.ndarray | None = None, u_draw: np.ndarray | None = None
                  ) -> tuple[Tree, np.ndarray, np.ndarray]:
    """The window's chain and rows (``theory.jacobi_sampler.check_window``'s checks, the boost left to the
    oracle) and a check of the uniforms' shapes."""
    w = check_window(p_rows, drafts, q_rows, NO_BOOST, None)
    L = w.tree.size - 1
    for name, u, n in (("u_accept", u_accept, L), ("u_draw", u_draw, L + 1)):
        if u is not None and np.shape(u) != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {np.shape(u)}")
    return w.tree, w.p, w.q


def _window_verification(verification: Verification | str) -> Verification:
    """``verification`` parsed, refused unless it verifies a Jacobi window (SPEC 9.1: rule r2 or r4, no
    LANTERN relaxation: ``Verification.source_problem``)."""
    v = parse(verification)
    v.check_source(DraftSource.JACOBI)
    return v


def sample_window_step(p_rows: np.ndarray, drafts: np.ndarray, q_rows: np.ndarray, u_accept: np.ndarray,
                       u_draw: np.ndarray, verification: Verification | str = "r2", *,
                       neighbours: np.ndarray | None = None, emb: np.ndarray | None = None
                       ) -> tuple[int, int]:
    """Verify one Jacobi window under ``verification`` (rule r2 or r4, boosted or not; default plain
    r2): ``theory.jacobi_sampler.verify_window``'s arguments and return, the number of drafts accepted and
    the token emitted after them."""
    v = _window_verification(verification)
    if not v.walks_own_step:
        return verify_window(p_rows, drafts, q_rows, v.boost, emb, u_accept, u_draw)
    tree, p, q = _window_chain(p_rows, drafts, q_rows, u_accept, u_draw)
    path, token = sample_rule_step(tree, p, node_uniforms(np.asarray(u_accept, dtype=np.float64)),
                                   np.asarray(u_draw, dtype=np.float64), v, neighbours=neighbours, q_dists=q,
                                   emb=emb)
    return len(path) - 1, int(token)


def window_rule_expectation(p_rows: np.ndarray, drafts: np.ndarray, q_rows: np.ndarray,
                            verification: Verification | str = "r2", *, neighbours: np.ndarray | None = None,
                            emb: np.ndarray | None = None) -> tuple[float, float]:
    """Given the window: ``(E[tokens], E[TV] or its proved bound)`` under ``verification`` (rule r2 or
    r4; ``theory.jacobi_sampler.window_expectation`` for R2 without the budget; else
    :func:`rule_step_expectation` on the chain)."""
    v = _window_verification(verification)
    if not v.walks_own_step:
        return window_expectation(p_rows, drafts, q_rows, v.boost, emb)
    tree, p, q = _window_chain(p_rows, drafts, q_rows)
    e = rule_step_expectation(tree, p, v, neighbours=neighbours, q_dists=q, emb=emb)
    return e.tokens, e.tv


__all__ = [
    "expectation_from_ends",
    "rule_step_expectation",
    "sample_rule_step",
    "sample_window_step",
    "step_neighbours",
    "window_rule_expectation",
]
