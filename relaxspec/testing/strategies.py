"""Hypothesis strategies for verification rules: distributions, codebooks and neighbour tables,
relaxations, nodes, draft trees and uniforms.

Every strategy generates the hard cases on purpose: distributions with exact ties and zeros
(integer weights) as well as smooth ones (Dirichlet), codebooks on an integer grid (many
distance ties, broken by token id as SPEC section 1 says), children that are each other's
latent neighbours, relaxation parameters at their exact values (``delta = 0``, ``lam = 1``)
and boundary uniforms (0 and the largest float below 1). Values shrink towards small
vocabularies, integer weights and the first listed parameters, so a failing example
shrinks to something a person can check by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

from relaxspec.core.trees.policies import DDDTree, Eagle2Tree, StaticTree, TreePolicy
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import KINDS, Relax, RelaxKind
from relaxspec.theory.rules import VARIANTS
from relaxspec.theory.tree import Tree

__all__ = [
    "KINDS",
    "VARIANTS",
    "Node",
    "TreeCase",
    "codebooks",
    "distributions",
    "neighbour_tables",
    "nodes",
    "relaxations",
    "static_trees",
    "tree_cases",
    "tree_policies",
    "trees",
    "uniforms",
    "weights_to_dist",
]

_SEEDS = st.integers(0, 2**32 - 1)
_LAST_BELOW_ONE = float(np.nextafter(1.0, 0.0))


def weights_to_dist(w: np.ndarray) -> np.ndarray:
    """Normalise non-negative weights to a float64 distribution (all-zero weights: mass on the last token)."""
    w = np.asarray(w, dtype=np.float64)
    if w.sum() == 0:
        w = w.copy()
        w[-1] = 1.0
    return w / w.sum()


def _distribution(draw: st.DrawFn, V: int, size: int) -> np.ndarray:
    # ``size`` >= V weights are drawn and the first V kept, so that lowering V while
    # shrinking leaves every later draw where it was (the same for _codebook, _table).
    w = draw(st.lists(st.integers(0, 4), min_size=size, max_size=size))
    if draw(st.booleans()):  # Dirichlet(alpha): normalised Gamma(alpha) variates
        seed = draw(_SEEDS)
        alpha = draw(st.sampled_from([0.2, 1.0, 5.0]))
        return weights_to_dist(np.random.default_rng(seed).standard_gamma(alpha, size)[:V])
    return weights_to_dist(np.array(w[:V]))


@st.composite
def distributions(draw: st.DrawFn, V: int) -> np.ndarray:
    """A float64 distribution over ``V`` tokens.

    Integer weights in 0..4 (exact ties and zeros; the shrink target) or a
    Dirichlet draw with concentration 0.2, 1 or 5. The weights are drawn
    either way, so a failure found on a Dirichlet draw can shrink onto them.
    """
    return _distribution(draw, V, V)


def _codebook(draw: st.DrawFn, V: int, size: int, d: int | None) -> np.ndarray:
    dim = draw(st.integers(1, 2)) if d is None else d
    coords = draw(st.lists(st.integers(-1, 1), min_size=size * dim, max_size=size * dim))
    if draw(st.booleans()):
        return np.random.default_rng(draw(_SEEDS)).standard_normal((V, dim))
    return np.array(coords, dtype=np.float64).reshape(size, dim)[:V]


@st.composite
def codebooks(draw: st.DrawFn, V: int, d: int | None = None) -> np.ndarray:
    """A (V, d) float64 codebook: points of the grid {-1, 0, 1}^d drawn coordinate by coordinate
    (distance ties and repeated rows; shrinks to all zeros, where every distance ties) or
    Gaussian points (no ties). ``d`` is drawn in 1..2 unless given."""
    return _codebook(draw, V, V, d)


def _table(draw: st.DrawFn, V: int, size: int, max_width: int | None) -> np.ndarray:
    top = size - 1 if max_width is None else max(1, min(size - 1, max_width))
    K = min(draw(st.integers(1, top)), V - 1)
    codebook = _codebook(draw, V, size, None)
    if draw(st.booleans()):  # row x: a random order of the size tokens, cut to the other V - 1
        rng = np.random.default_rng(draw(_SEEDS))
        orders = (rng.permutation(size) for _ in range(V))
        rows = [order[(order != x) & (order < V)][:K] for x, order in enumerate(orders)]
        dtype = draw(st.sampled_from([np.int64, np.int32, np.uint16]))
        return np.array(rows, dtype=dtype)
    return neighbour_table(codebook, K)


@st.composite
def neighbour_tables(draw: st.DrawFn, V: int, *, max_width: int | None = None) -> np.ndarray:
    """A valid neighbour table of width 1..V-1 (at most ``max_width``).

    Either the exact table of a :func:`codebooks` codebook (``theory.neighbour_table``:
    rows by distance, ties by id; int64; shrinks to the all-tie table whose row x is the
    other tokens in id order) or random orders of the other tokens in int64, int32 or
    uint16 (rules must accept any integer dtype).
    """
    return _table(draw, V, V, max_width)


@st.composite
def relaxations(draw: st.DrawFn, K: int, kinds: Sequence[str] = KINDS) -> Relax:
    """A relaxation of one of ``kinds`` with k in 1..K: delta in [0, 1] or lam in [1, 20],
    favouring the exact values 0 and 1 and round ones."""
    kind = draw(st.sampled_from(tuple(kinds)))
    if kind == RelaxKind.NONE:
        return Relax.none()
    k = draw(st.integers(1, K))
    if kind == RelaxKind.ADDITIVE:
        delta = draw(st.one_of(st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.5, 1.0]),
                               st.floats(0.0, 1.0)))
        return Relax.additive(k, delta)
    lam = draw(st.one_of(st.sampled_from([1.0, 1.5, 2.0, 5.0, 10.0]), st.floats(1.0, 20.0)))
    return Relax.multiplicative(k, lam)


def _array(a: np.ndarray) -> str:
    return repr(a.tolist())


@dataclass(frozen=True)
class Node:
    """One tree node to verify: target ``p``, draft ``q``, neighbour table ``nb``, ordered
    distinct children ``kids`` (int64), relaxation and variant.

    A rule whose children are drawn from q (``drafts = "sampled"``) reads only
    ``len(kids)``: the checks draw the children themselves.
    """

    p: np.ndarray
    q: np.ndarray
    nb: np.ndarray
    kids: np.ndarray
    relax: Relax
    variant: str

    @property
    def V(self) -> int:
        """Vocabulary size."""
        return self.p.size

    @property
    def m(self) -> int:
        """Number of children."""
        return self.kids.size

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:  # Hypothesis prints examples with it
        printer.text(repr(self))  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return (f"Node(p={_array(self.p)}, q={_array(self.q)}, nb={_array(self.nb)}, "
                f"kids={_array(self.kids)}, relax={self.relax!r}, variant={self.variant!r})")


def _children(draw: st.DrawFn, V: int, m: int, nb: np.ndarray, size: int) -> np.ndarray:
    order = [t for t in draw(st.permutations(range(size))) if t < V]  # shrinks to 0, 1, 2, ...
    if draw(st.booleans()):  # children near each other: one token and its table neighbours
        kids = list(dict.fromkeys([order[0], *nb[order[0]].tolist()]))[:m]
        kids += [t for t in order if t not in kids][: m - len(kids)]
        return np.array(kids, dtype=np.int64)
    return np.array(order[:m], dtype=np.int64)


@st.composite
def nodes(
    draw: st.DrawFn,
    min_v: int = 2,
    max_v: int = 64,
    max_m: int = 6,
    kinds: Sequence[str] | None = None,
    *,
    min_m: int = 1,
    variants: Sequence[str] = VARIANTS,
) -> Node:
    """A :class:`Node` with V in [min_v, max_v] and min_m..max_m distinct children in random
    order (half the time a token followed by its table neighbours), p and q from
    :func:`distributions`, a table from :func:`neighbour_tables`, a relaxation of ``kinds``
    (default all) with k at most the table's width, and a variant of ``variants``.

    Everything is drawn at size ``max_v`` and cut to V, so that a failing node can shrink
    to a smaller vocabulary with the rest of its draws unchanged (towards integer weights,
    the all-tie table and children 0, 1, ...).
    """
    V = draw(st.integers(min_v, max_v))
    p = _distribution(draw, V, max_v)
    q = _distribution(draw, V, max_v)
    nb = _table(draw, V, max_v, None)
    m = min(draw(st.integers(min_m, max(min_m, max_m))), V)
    kids = _children(draw, V, m, nb, max_v)
    relax = draw(relaxations(max(1, max_v - 1), kinds or KINDS))
    if relax.k > nb.shape[1]:
        relax = replace(relax, k=nb.shape[1])
    variant = draw(st.sampled_from(tuple(variants)))
    return Node(p, q, nb, kids, relax, variant)


def uniforms(n: int) -> st.SearchStrategy[np.ndarray]:
    """``n`` uniforms in [0, 1) as a float64 array, boundary values (0, 0.5, the largest
    float below 1) included."""
    one = st.one_of(st.sampled_from([0.0, 0.5, _LAST_BELOW_ONE]),
                    st.floats(0.0, 1.0, exclude_max=True))
    return st.lists(one, min_size=n, max_size=n).map(lambda u: np.array(u, dtype=np.float64))


# ---------------------------------------------------------------- trees
@st.composite
def _rank_paths(draw: st.DrawFn, max_nodes: int, max_children: int, max_depth: int) -> list[list[int]]:
    paths: list[list[int]] = []
    frontier: list[list[int]] = [[]]
    while frontier and len(paths) < max_nodes:
        parent = frontier.pop(0)
        if len(parent) >= max_depth:
            continue
        room = min(max_children, max_nodes - len(paths))
        n = draw(st.integers(1 if not paths else 0, room))
        for r in range(n):
            paths.append(parent + [r])
            frontier.append(parent + [r])
    return paths


@st.composite
def static_trees(draw: st.DrawFn, max_nodes: int = 6, max_children: int = 3,
                 max_depth: int = 3) -> StaticTree:
    """A :class:`core.trees.policies.StaticTree`: a chain or random rank paths (EAGLE ``choices``)
    with at most ``max_nodes`` drafts, ``max_children`` per node and depth ``max_depth``."""
    if draw(st.booleans()):
        return StaticTree(draw(_rank_paths(max_nodes, max_children, max_depth)))
    return StaticTree.chain(draw(st.integers(1, min(max_nodes, max_depth))))


@st.composite
def tree_policies(draw: st.DrawFn, max_nodes: int = 6, max_children: int = 3, max_depth: int = 3,
                  dynamic: bool = True) -> TreePolicy:
    """A tree policy: a static tree (:func:`static_trees`) or, with ``dynamic``, a small EAGLE-2
    or DDD tree (top_k <= ``max_children``, depth <= ``max_depth``, <= ``max_nodes`` drafts)."""
    kind = draw(st.sampled_from(("static", "eagle2", "ddd") if dynamic else ("static",)))
    if kind == "static":
        return draw(static_trees(max_nodes, max_children, max_depth))
    top_k = draw(st.integers(1, max_children))
    total = draw(st.integers(2, max_nodes + 1))
    if kind == "eagle2":
        return Eagle2Tree(top_k, draw(st.integers(0, max_depth - 1)), total)
    calls = draw(st.integers(2, max_depth))
    steps = draw(st.lists(st.integers(2, calls), max_size=2, unique=True))
    threshold = draw(st.sampled_from([-0.3, -1.0, -5.0]))
    return DDDTree(top_k, calls, steps, threshold, total)


@st.composite
def trees(draw: st.DrawFn, V: int, max_nodes: int = 6, max_children: int = 3) -> Tree:
    """A :class:`theory.Tree` of random shape (parents in topological order, at most
    ``max_children`` children per node, distinct sibling tokens in [0, V))."""
    n = draw(st.integers(1, max_nodes + 1))
    parents, tokens = [-1], [0]
    used: dict[int, list[int]] = {}
    rng = np.random.default_rng(draw(_SEEDS))
    for v in range(1, n):
        open_ = [u for u in range(v) if len(used.get(u, [])) < min(max_children, V)]
        u = open_[draw(st.integers(0, len(open_) - 1))]
        free = [t for t in range(V) if t not in used.get(u, [])]
        t = free[int(rng.integers(len(free)))]
        used.setdefault(u, []).append(t)
        parents.append(u)
        tokens.append(t)
    return Tree(np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64))


@dataclass(frozen=True)
class TreeCase:
    """One verification step to score: a tree, the target ``p[v]`` and draft ``q[v]`` after
    every node v, the neighbour table, the relaxation and variant, and the policy that built
    the tree (its spec string; ``"random"`` for :func:`trees`)."""

    tree: Tree
    p: np.ndarray
    q: np.ndarray
    nb: np.ndarray
    relax: Relax
    variant: str
    policy: str

    @property
    def V(self) -> int:
        """Vocabulary size."""
        return self.p.shape[1]

    def node(self, u: int) -> Node:
        """Node ``u`` as a :class:`Node` (its children's tokens in rank order)."""
        kids = self.tree.tokens[self.tree.children(u)]
        return Node(self.p[u], self.q[u], self.nb, kids, self.relax, self.variant)

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(repr(self))  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return (f"TreeCase(policy={self.policy!r}, parents={_array(self.tree.parents)}, "
                f"tokens={_array(self.tree.tokens)}, p={_array(self.p)}, q={_array(self.q)}, "
                f"nb={_array(self.nb)}, relax={self.relax!r}, variant={self.variant!r})")


@st.composite
def tree_cases(
    draw: st.DrawFn,
    min_v: int = 3,
    max_v: int = 8,
    *,
    policies: st.SearchStrategy[TreePolicy | Tree] | None = None,
    kinds: Sequence[str] = KINDS,
    variants: Sequence[str] = VARIANTS,
) -> TreeCase:
    """A :class:`TreeCase` over V in [min_v, max_v] tokens.

    ``policies`` draws a :class:`core.trees.policies.TreePolicy`, which builds the
    tree from drafted q rows (children ranked by q, as R1 and R3 rank), or a
    :class:`theory.Tree` of at most V tokens, used as it is with random q rows.
    The default mixes :func:`tree_policies` (static, EAGLE-2, DDD) and random
    shapes (:func:`trees`). Every node then gets a target row p[v].
    """
    V = draw(st.integers(min_v, max_v))
    rng = np.random.default_rng(draw(_SEEDS))
    alpha = draw(st.sampled_from([0.3, 1.0]))

    def row() -> np.ndarray:
        if draw(st.booleans()):
            return weights_to_dist(rng.integers(0, 4, V))
        return rng.dirichlet(np.full(V, alpha))

    shape = draw(policies if policies is not None else st.one_of(tree_policies(), trees(V)))
    if isinstance(shape, Tree):
        tree, name = shape, "random"
        q = np.array([row() for _ in range(tree.size)])
    else:
        def draft(parents: np.ndarray, tokens: np.ndarray, nodes_: np.ndarray) -> np.ndarray:
            return np.array([row() for _ in nodes_])

        built = shape.build(row(), draft)
        tree, q, name = built.tree, built.q, str(shape)
    tree.check_vocab(V)
    p = np.array([row() for _ in range(tree.size)])
    nb = draw(neighbour_tables(V))
    relax = draw(relaxations(nb.shape[1], kinds))
    variant = draw(st.sampled_from(tuple(variants)))
    return TreeCase(tree, p, q, nb, relax, variant, name)
