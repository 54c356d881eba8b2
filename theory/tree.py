"""Draft trees and exact expected tokens per step (SPEC sections 4 and 5).

A tree is a parent array in topological order (node 0 is the root: the last
committed token, ``parents[0] = -1``, every other parent index smaller than
the node's), a token per node and a depth per node. The children of a node,
in increasing node index, are its drafts in rank order.

Every step function takes the rule, its relaxation or boost and its variant as one ``verification``
(a :class:`~theory.verification.Verification` or its spec, ``"r1+lantern:k=1000,delta=0.1"``), verified
node by node (R1-R3; R4 and the budget walk a step their own way: ``theory.rule_step``). R2 takes a
boost (``theory.boost.Boost``, SPEC 9.2-9.3) everywhere here: the children of node u are tested at depth
``depths[u] + 1`` (Cool-SD's omega index) and GSD reads the embedding table ``emb``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.relax import Relax
from relaxspec.theory.rules import Rule, boost_embedding, neighbour_rows
from relaxspec.theory.sampler import draw_token, sample_node
from relaxspec.theory.stages import greedy_acceptable
from relaxspec.theory.verification import Verification, parse
from relaxspec.theory.verify import BoostAt, node_outcome, r2_stage_tvs


def parent_depths(parents: np.ndarray) -> np.ndarray:
    """Depth of every node of a parent array in topological order (root 0, depth 0): the one place
    depths are derived from parents."""
    parents = np.asarray(parents, dtype=np.int64)
    depths = np.zeros(parents.size, dtype=np.int64)
    for v in range(1, parents.size):
        depths[v] = depths[parents[v]] + 1
    return depths


@dataclass(frozen=True)
class Tree:
    """A validated draft tree. Build with ``Tree(parents, tokens)``; depths are derived."""

    parents: np.ndarray
    tokens: np.ndarray
    depths: np.ndarray = field(default=None)  # type: ignore[arg-type]  # derived in __post_init__

    def __post_init__(self) -> None:
        parents = np.asarray(self.parents)
        tokens = np.asarray(self.tokens)
        if parents.ndim != 1 or parents.size == 0:
            raise ValueError(f"parents must be a non-empty 1-D array, got shape {parents.shape}")
        if tokens.shape != parents.shape:
            raise ValueError(
                f"tokens shape {tokens.shape} differs from parents shape {parents.shape}"
            )
        if parents.dtype.kind not in "iu" or tokens.dtype.kind not in "iu":
            raise ValueError("parents and tokens must be integer arrays")
        parents = parents.astype(np.int64)
        tokens = tokens.astype(np.int64)
        if parents[0] != -1:
            raise ValueError(f"node 0 is the root and must have parent -1, got {parents[0]}")
        for v in range(1, parents.size):
            if not 0 <= parents[v] < v:
                raise ValueError(
                    f"node {v} has parent {parents[v]}: a parent must come before its child "
                    "(topological order, root = node 0)"
                )
        if np.any(tokens < 0):
            raise ValueError("tokens must be non-negative token ids")
        depths = parent_depths(parents)
        if self.depths is not None and not np.array_equal(np.asarray(self.depths), depths):
            raise ValueError("depths do not match the parent array")
        seen: set[tuple[int, int]] = set()
        for v in range(1, parents.size):
            key = (int(parents[v]), int(tokens[v]))
            if key in seen:
                raise ValueError(f"node {v} repeats token {tokens[v]} among its siblings")
            seen.add(key)
        for name, arr in (("parents", parents), ("tokens", tokens), ("depths", depths)):
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def size(self) -> int:
        """Number of nodes, root included."""
        return int(self.parents.size)

    @property
    def depth(self) -> int:
        """Largest node depth (root = 0)."""
        return int(self.depths.max())

    def children(self, v: int) -> np.ndarray:
        """Child node indices of ``v`` in draft-rank order."""
        return np.flatnonzero(self.parents == v)

    def check_vocab(self, vocab_size: int) -> None:
        """Raise ``ValueError`` if a non-root token is outside [0, V)."""
        if self.size > 1 and self.tokens[1:].max() >= vocab_size:
            raise ValueError(
                f"tree token {self.tokens[1:].max()} is out of range for V = {vocab_size}"
            )


def choices_to_parents(choices: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE-style rank paths -> (parents, ranks) in topological order.

    Nodes are ordered by (depth, path) as EAGLE sorts them; the root is node 0
    with rank -1. Every path's prefix must be in ``choices`` too.
    """
    paths = [tuple(int(i) for i in c) for c in choices]
    if any(len(pth) == 0 or min(pth) < 0 for pth in paths):
        raise ValueError("every choice must be a non-empty path of non-negative ranks")
    if len(set(paths)) != len(paths):
        raise ValueError("choices repeat a path")
    paths.sort(key=lambda pth: (len(pth), pth))
    index: dict[tuple[int, ...], int] = {(): 0}
    parents, ranks = [-1], [-1]
    for pth in paths:
        if pth[:-1] not in index:
            raise ValueError(f"choice {list(pth)} has no parent path {list(pth[:-1])} in the tree")
        index[pth] = len(parents)
        parents.append(index[pth[:-1]])
        ranks.append(pth[-1])
    return np.array(parents, dtype=np.int64), np.array(ranks, dtype=np.int64)


def _check_node_dists(tree: Tree, node_dists: np.ndarray, name: str) -> np.ndarray:
    d = np.asarray(node_dists, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != tree.size:
        raise ValueError(f"{name} must have shape (n_nodes={tree.size}, V), got {d.shape}")
    for v in range(tree.size):
        validate_distribution(d[v], name=f"{name}[{v}]")
    tree.check_vocab(d.shape[1])
    return d


def node_accept_probs(
    tree: Tree,
    node_dists: np.ndarray,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q_dists: np.ndarray | None = None,
    emb: np.ndarray | None = None,
) -> np.ndarray:
    """P(node v accepted | its parent reached) for every node (root: 1).

    For R2 the children of a node are drawn from ``q_dists`` without
    replacement (ranks = successive draws): the tree's tokens are ignored and
    the probability is that of the rank, averaged over draws (exact, small V),
    under the verification's boost (children of u at depth ``depths[u] + 1``).
    """
    v = parse(verification)
    v.check_node_by_node()
    p = _check_node_dists(tree, node_dists, "node_dists")
    if v.rule == Rule.R2:
        if q_dists is None:
            raise ValueError("rule r2 needs q_dists")
        q = _check_node_dists(tree, q_dists, "q_dists")
    out = np.ones(tree.size)
    for u in range(tree.size):
        kids = tree.children(u)
        if kids.size == 0:
            continue
        if v.rule == Rule.R2:
            res = node_outcome(p[u], kids.size, v, neighbours=neighbours, q=q[u],
                               depth=int(tree.depths[u]) + 1, emb=emb)
        else:
            res = node_outcome(p[u], tree.tokens[kids], v, neighbours=neighbours)
        out[kids] = res.accept_probs
    return out


def path_probs(tree: Tree, edge_probs: np.ndarray) -> np.ndarray:
    """Product of ``edge_probs`` along the root-to-v path, for every v."""
    out = np.ones(tree.size)
    for v in range(1, tree.size):
        out[v] = out[tree.parents[v]] * edge_probs[v]
    return out


def expected_tokens_per_step(
    tree: Tree,
    node_dists: np.ndarray,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q_dists: np.ndarray | None = None,
    emb: np.ndarray | None = None,
) -> float:
    """Exact E[tokens per step] = 1 + sum over non-root v of P(v accepted).

    ``node_dists[v]`` is the target distribution of the token after node v
    (``q_dists[v]`` the draft's). For R3 the step is deterministic: 1 + the
    depth of the accepted greedy chain. R2 takes a boost (GSD: ``emb``).
    """
    v = parse(verification)
    if v.rule == Rule.R3:
        p = _check_node_dists(tree, node_dists, "node_dists")
        nb = neighbour_rows(neighbours, p.shape[1], v.relax)
        return 1.0 + float(tree.depths[greedy_path(tree, p, nb, v.relax)[-1]])
    acc = node_accept_probs(tree, node_dists, v, neighbours=neighbours, q_dists=q_dists, emb=emb)
    return 1.0 + float(path_probs(tree, acc)[1:].sum())


@dataclass(frozen=True)
class StepExpectation:
    """Exact expectations of one verification step, given the tree and distributions."""

    tokens: float  # E[tokens emitted]
    tv: float  # sum over internal nodes of P(reached) * TV(emitted there, target); NaN: R2 relaxed;
    # boosted R2: the per-stage SPEC 9.4 sum (a bound; exact for one-child nodes)
    edge_probs: np.ndarray  # P(v accepted | parent reached)
    reach_probs: np.ndarray  # P(v on the accepted path)


def step_expectation(
    tree: Tree,
    node_dists: Sequence[np.ndarray] | np.ndarray,
    verification: Verification | str,
    *,
    neighbours: np.ndarray,
    q_dists: np.ndarray | None = None,
    emb: np.ndarray | None = None,
) -> StepExpectation:
    """Exact E[tokens per step] and the step's TV bound on the drawn tree (the one home of this sum).

    Unlike :func:`expected_tokens_per_step`, R2 is conditional on the tree's
    draw order (``node_outcome`` with the tree's children as drawn), which is
    what a simulated or recorded step holds. The TV bound is the sum over
    internal nodes u of P(u reached) * TV(token u emits, p_u) (R3: one per
    accepted child that is not its parent's argmax; relaxed R2: NaN, exact
    only averaged over draw orders). ``node_dists`` only needs ``[u]``
    (rows may be computed lazily: only internal nodes are read, and for R3
    the greedy chain); ``neighbours`` is an int64 table
    (``theory.rules.neighbour_rows``). ``simulate.verify.step_expectation``
    is its Numba twin.

    Boosted R2 (GSD reads ``emb``): node u's term is its
    ``NodeOutcome.stage_tv`` given the draw order, the expected sum of the
    exact TVs of the stages u tests (SPEC 9.4): averaged over draw orders it
    bounds u's TV, with equality at one-child nodes.
    """
    v = parse(verification)
    v.check_node_by_node()
    rule, relax = v.rule, v.relax
    if rule == Rule.R3:
        path = greedy_path(tree, node_dists, neighbours, relax)
        on_path = np.zeros(tree.size)
        on_path[path] = 1.0
        return StepExpectation(1.0 + float(tree.depths[path[-1]]), greedy_path_tv(tree, node_dists, path),
                               on_path.copy(), on_path)
    edge = np.ones(tree.size)
    reach = np.ones(tree.size)
    tvs = np.zeros(tree.size)
    table = neighbours if neighbours.shape[1] else None
    for u in range(tree.size):
        kids = tree.children(u)
        if kids.size == 0:
            continue
        o = node_outcome(node_dists[u], tree.tokens[kids], v, neighbours=table,
                         q=q_dists[u] if rule == Rule.R2 and q_dists is not None else None,
                         depth=int(tree.depths[u]) + 1, emb=emb)
        edge[kids] = o.accept_probs
        reach[kids] = reach[u] * o.accept_probs
        tvs[u] = o.tv if rule == Rule.R1 else o.stage_tv
    if not v.tv_computable:
        tv = np.nan
    elif rule == Rule.R2 and v.boost.is_none:
        tv = 0.0
    elif rule == Rule.R2:
        internal = np.array([tree.children(u).size > 0 for u in range(tree.size)])
        tv = float(np.sum(reach[internal] * tvs[internal]))
    elif relax.is_exact:
        tv = 0.0
    else:
        internal = np.array([tree.children(u).size > 0 for u in range(tree.size)])
        tv = float(np.sum(reach[internal] * tvs[internal]))
    return StepExpectation(1.0 + float(reach[1:].sum()), tv, edge, reach)


def greedy_path_tv(tree: Tree, p: Sequence[np.ndarray] | np.ndarray, path: list[int]) -> float:
    """R3's TV along an accepted path: 1 per accepted child that is not the argmax of its parent's p."""
    return sum(1.0 for a, b in zip(path[:-1], path[1:], strict=True)
               if tree.tokens[b] != int(np.argmax(p[a])))


def path_tv(
    tree: Tree,
    node_dists: Sequence[np.ndarray] | np.ndarray,
    path: list[int],
    verification: Verification | str,
    *,
    neighbours: np.ndarray,
    q_dists: np.ndarray | None = None,
    emb: np.ndarray | None = None,
) -> float:
    """TV of the tokens one step emitted along its accepted ``path``, from the nodes that decided them.

    Each node on the path with children decided one token (the next path node, or its residual
    draw). R1: the sum of their ``node_outcome(...).tv``; R3: :func:`greedy_path_tv`; R2: 0 unboosted,
    NaN relaxed, and boosted the exact TVs (SPEC 9.4) of the stages each deciding node tested
    (``theory.verify.r2_stage_tvs``: draws 0..i when draw i was accepted, all when none was), whose
    expectation given the tree is :func:`step_expectation`'s ``tv``. ``neighbours``: an int64 table;
    rows of ``node_dists`` are read only on the path. ``simulate.step_kernels.path_tv`` is its twin.
    """
    v = parse(verification)
    v.check_node_by_node()  # R4 and the budget are recorded by their own walks
    rule, relax, variant, boost = v.rule, v.relax, v.variant, v.boost
    if rule == Rule.R3:
        return greedy_path_tv(tree, node_dists, path)
    if rule == Rule.R2 and boost.is_none:
        return 0.0 if relax.is_exact else np.nan
    if rule == Rule.R1 and relax.is_exact:
        return 0.0
    table = neighbours if neighbours.shape[1] else None
    total = 0.0
    for j, u in enumerate(path):
        kids = tree.children(u)
        if kids.size == 0:
            continue
        if rule == Rule.R1:
            total += node_outcome(node_dists[u], tree.tokens[kids], v, neighbours=table).tv
            continue
        if q_dists is None:
            raise ValueError("boosted rule r2 reads q: give q_dists")
        tvs = r2_stage_tvs(node_dists[u], q_dists[u], tree.tokens[kids], neighbours, relax, variant,
                           BoostAt(boost, int(tree.depths[u]) + 1, emb))
        tested = int(np.flatnonzero(kids == path[j + 1])[0]) + 1 if j + 1 < len(path) else tvs.size
        for t in tvs[:tested]:  # sequential, as the kernel sums
            total += float(t)
    return total


def greedy_path(tree: Tree, p: Sequence[np.ndarray] | np.ndarray, nb: np.ndarray, relax: Relax) -> list[int]:
    """R3: the longest root-to-node chain of acceptable nodes (ties: first in node order)."""
    ok = np.zeros(tree.size, dtype=bool)
    ok[0] = True
    for v in range(1, tree.size):
        u = tree.parents[v]
        ok[v] = ok[u] and greedy_acceptable(p[u], int(tree.tokens[v]), nb[tree.tokens[v]], relax)
    best = 0
    for v in range(1, tree.size):
        if ok[v] and tree.depths[v] > tree.depths[best]:
            best = v
    path = [best]
    while path[-1] != 0:
        path.append(int(tree.parents[path[-1]]))
    return path[::-1]


def sample_step(
    tree: Tree,
    node_dists: np.ndarray,
    u_accept: np.ndarray,
    u_draw: np.ndarray,
    verification: Verification | str,
    *,
    neighbours: np.ndarray | None = None,
    q_dists: np.ndarray | None = None,
    emb: np.ndarray | None = None,
) -> tuple[list[int], int]:
    """One verification step on a tree with explicit per-node uniforms (NumPy oracle).

    Walks from the root: at node u the children are verified in rank order;
    an accepted child becomes the next u. Returns the accepted node path
    (starting with the root) and the bonus token: the residual draw at the
    node where every child was rejected, a draw from p_v at a leaf v, or
    argmax p at the end of the greedy chain for R3. ``neighbours`` must be an
    int64 table (``theory.rules.neighbour_rows``); ``None`` is allowed when the
    rule merges nothing. R2 takes a boost (children of u at depth
    ``depths[u] + 1``; GSD reads the (V, d) embedding table ``emb``).
    """
    v = parse(verification)
    v.check_node_by_node()
    emb = boost_embedding(v.boost, emb, len(node_dists[0]))
    if neighbours is None:
        neighbours = neighbour_rows(None, len(node_dists[0]), v.relax)  # names a missing table
    if v.rule == Rule.R3:
        path = greedy_path(tree, node_dists, neighbours, v.relax)
        return path, int(np.argmax(node_dists[path[-1]]))
    path = [0]
    while True:
        u = path[-1]
        kids = tree.children(u)
        if kids.size == 0:
            return path, draw_token(node_dists[u], float(u_draw[u]))
        i, tok = sample_node(
            node_dists[u], tree.tokens[kids], u_accept[kids], float(u_draw[u]), v, neighbours=neighbours,
            q=None if q_dists is None else q_dists[u], depth=int(tree.depths[u]) + 1, emb=emb,
        )
        if i < 0:
            return path, tok
        path.append(int(kids[i]))


def chain_expected_tokens(a: float, gamma: int) -> float:
    """Chain of ``gamma`` drafts with i.i.d. acceptance ``a``: (1 - a^(gamma+1)) / (1 - a).

    Evaluated as 1 + a (1 + a (1 + ...)) (Horner), which is exact at a = 1 and
    avoids the cancellation of the quotient when a is close to 1.
    """
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"acceptance probability must be in [0, 1], got {a!r}")
    if int(gamma) != gamma or gamma < 0:
        raise ValueError(f"gamma must be a non-negative integer, got {gamma!r}")
    total = 1.0
    for _ in range(int(gamma)):
        total = 1.0 + a * total
    return total
