"""``verify_step``: the Numba-backed twin of ``theory.sample_step`` (and exact step statistics).

Same signature and return as :func:`theory.sample_step`; given the same
distributions and uniforms it takes the same decisions (tested exactly).
The reference decoder's ``relaxspec replay`` calls it to re-verify traces.
Rule ``r4`` (traversal verification, SPEC 9.6) and the budget boost (SPEC 9.5)
are the twins of ``theory.traversal`` and ``theory.budget`` (``theory.rule_step``
sends a step to them): same path and bonus given the same rows and uniforms.
"""

from __future__ import annotations

import numpy as np

from relaxspec.simulate.step_kernels import (
    expected_tokens_per_step_kernel,
    sample_step_kernel,
)
from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.tree import StepExpectation, Tree
from relaxspec.theory.verification import KernelArgs, Verification


def _rows(tree: Tree, dists: np.ndarray, name: str, vocab_size: int | None = None) -> np.ndarray:
    d = np.asarray(dists, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != tree.size:
        raise ValueError(f"{name} must have shape (n_nodes={tree.size}, V), got {d.shape}")
    if vocab_size is not None and d.shape[1] != vocab_size:
        raise ValueError(f"{name} has V = {d.shape[1]}, node_dists has V = {vocab_size}")
    for v in range(tree.size):
        validate_distribution(d[v], name=f"{name}[{v}]")
    tree.check_vocab(d.shape[1])
    return np.ascontiguousarray(d)


def _uniforms(u: np.ndarray, n: int, name: str) -> np.ndarray:
    a = np.asarray(u, dtype=np.float64)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    if not np.all((a >= 0.0) & (a < 1.0)):
        raise ValueError(f"{name} must hold uniforms in [0, 1)")
    return np.ascontiguousarray(a)


def tree_arrays(tree: Tree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``tree``'s parents, tokens and depths as writable arrays, the type the simulator compiles its step
    kernels for: a Tree's own arrays are read-only, another type to Numba, and passing them would compile
    every step kernel a second time (minutes on a cold cache) for the same arithmetic."""
    return tree.parents.copy(), tree.tokens.copy(), tree.depths.copy()


def _prepare(tree: Tree, node_dists, q_dists, verification: Verification, neighbours, emb
             ) -> tuple[np.ndarray, np.ndarray, KernelArgs]:
    if not isinstance(tree, Tree):
        raise ValueError(f"tree must be a relaxspec.theory.Tree, got {type(tree).__name__}")
    p = _rows(tree, node_dists, "node_dists")
    spec = verification.encode(p.shape[1], neighbours=neighbours, emb=emb)
    if verification.samples_drafts:
        if q_dists is None:
            raise ValueError(f"rule {verification.rule} needs q_dists")
        q = _rows(tree, q_dists, "q_dists", p.shape[1])
        for v in range(1, tree.size):
            if q[tree.parents[v], tree.tokens[v]] <= 0.0:
                raise ValueError(
                    f"node {v} (token {tree.tokens[v]}) has zero draft probability at its parent")
    else:
        q = np.zeros((1, p.shape[1]))
    return p, q, spec


def verify_step(
    tree: Tree,
    node_dists: np.ndarray,
    u_accept: np.ndarray,
    u_draw: np.ndarray,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q_dists: np.ndarray | None = None,
    with_tv: bool = False,
    emb: np.ndarray | None = None,
) -> tuple[list[int], int] | tuple[list[int], int, float]:
    """One verification step on a tree with explicit per-node uniforms (Numba), under ``verification`` (a
    :class:`~theory.verification.Verification` or its spec string).

    Parameters and return as :func:`theory.sample_step`: ``node_dists[v]``
    is p after node v, ``u_accept[v]`` / ``u_draw[v]`` node v's uniforms.
    Returns the accepted node path (starting at the root, node 0) and the
    bonus token; ``with_tv=True`` adds the exact TV of the tokens emitted
    (``SimResult.token_tv``: over the path's nodes that decided a token,
    TV(law the node emits, its target); ``simulate.step_kernels.path_tv``, as
    ``theory.tree.path_tv``). R2 and R4 take a boost (GSD: the embedding ``emb``; the budget:
    the first k columns of ``neighbours``). For R4 ``u_accept[v]`` is node v's eta and the TV is the
    sum of the Deltas of the stages the step entered (0 exact: docs/theory.md, Theorem 12.3); for the
    budget on R2 it is the sum of the charges of the stages the path's nodes tested (at most delta per
    node, Theorem 14.1).
    """
    p, q, spec = _prepare(tree, node_dists, q_dists, Verification.parse(verification), neighbours, emb)
    ua = _uniforms(u_accept, tree.size, "u_accept")
    ud = _uniforms(u_draw, tree.size, "u_draw")
    path, bonus, tv = sample_step_kernel(*tree_arrays(tree), p, q, ua, ud, spec.rs, spec.bs)
    if with_tv:
        return [int(v) for v in path], int(bonus), float(tv)
    return [int(v) for v in path], int(bonus)


def step_expectation(
    tree: Tree,
    node_dists: np.ndarray,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q_dists: np.ndarray | None = None,
    emb: np.ndarray | None = None,
) -> StepExpectation:
    """Exact E[tokens per step] and the step's TV bound (Numba twin of theory's expectations) under
    ``verification`` (a value or its spec string).

    For R2 the acceptance probabilities are conditional on the tree's draw
    order (``theory.node_outcome`` with a sequence of children); R2 takes a
    boost (GSD: the embedding ``emb``), as ``theory.step_expectation``.
    R4 is the twin of ``theory.traversal.traversal_ends`` (``tv``: its ``tv_bound``; ``reach_probs`` /
    ``edge_probs`` as ``theory.rule_step.expectation_from_ends``) and the budget on R2 of
    ``theory.budget.budget_r2_step_ends`` (``tv``: the expected sum of the tested stages' charges).
    """
    p, q, spec = _prepare(tree, node_dists, q_dists, Verification.parse(verification), neighbours, emb)
    t, tv, edge, reach = expected_tokens_per_step_kernel(*tree_arrays(tree), p, q, spec.rs, spec.bs)
    return StepExpectation(float(t), float(tv), edge, reach)
