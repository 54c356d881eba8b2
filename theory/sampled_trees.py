"""Sampled-draft static trees: a target/draft model of token prefixes, drawing and enumerating the
trees, and the exact law of the tokens one verification step emits (SPEC sections 5 and 9.6).

A static tree shape is a parent array (``theory.tree`` conventions: node 0 is the root, the last
committed token; parents come before children). In a *sampled-draft* tree the children of node u,
in increasing node index, are successive draws without replacement from the draft q_u at u's
prefix (the tokens on the path from the root, root excluded). The rows of a node are those of its
prefix, so they depend on the drawn tokens: a :class:`PrefixModel` gives them for every prefix.
(Rows fixed per node *index* whatever its token would not define a target at all beyond depth 1:
the target after a token would depend on the rank it was drawn at.)

One step of a rule on a drawn tree ends at a node v (the accepted path root..v) and emits a bonus
token drawn from a law at v; :class:`StepEnd` records (v, probability, law). :func:`step_law`
averages a rule's ends over every draw of the tree's children (small V) into the law of the
emitted token sequences; :func:`completed_law` extends each emitted sequence with target draws to
a common length, which for a lossless rule is :func:`target_law` (docs/theory.md, section 12).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.relax import NO_RELAX
from relaxspec.theory.rules import Rule, boost_embedding
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.stages import draft_residual
from relaxspec.theory.tree import Tree, parent_depths
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import BoostAt, r2_given_states

MAX_TREES = 200_000
"""The largest number of draw orders :func:`sampled_trees` enumerates (an upper bound is checked first)."""
MAX_SEQUENCES = 200_000
"""The largest number of sequences :func:`target_law` and :func:`completed_law` hold."""

Prefix = tuple[int, ...]


@dataclass(frozen=True)
class PrefixModel:
    """Target and draft distributions after each token prefix (the root's prefix is ``()``).

    ``target(prefix)`` and ``draft(prefix)`` return distributions over ``vocab_size`` tokens; they
    are validated and cached on first use. :meth:`stationary` is the model with the same p and q
    after every prefix.
    """

    target_fn: Callable[[Prefix], np.ndarray]
    draft_fn: Callable[[Prefix], np.ndarray]
    vocab_size: int
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        V = self.vocab_size
        if isinstance(V, bool) or int(V) != V or V < 1:
            raise ValueError(f"vocab_size must be an integer >= 1, got {V!r}")
        object.__setattr__(self, "vocab_size", int(V))

    @classmethod
    def stationary(cls, p: np.ndarray, q: np.ndarray) -> PrefixModel:
        """The same target ``p`` and draft ``q`` after every prefix."""
        p = validate_distribution(p, name="p")
        q = validate_distribution(q, name="q", size=p.size)
        return cls(lambda _: p, lambda _: q, p.size)

    def rows(self, prefix: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(p, q)`` after ``prefix`` (validated float64, read-only)."""
        key = tuple(int(t) for t in prefix)
        if key not in self._cache:
            p = validate_distribution(self.target_fn(key), name=f"target after {list(key)}",
                                      size=self.vocab_size).copy()
            q = validate_distribution(self.draft_fn(key), name=f"draft after {list(key)}",
                                      size=self.vocab_size).copy()
            p.setflags(write=False)
            q.setflags(write=False)
            self._cache[key] = (p, q)
        return self._cache[key]

    def target(self, prefix: Sequence[int]) -> np.ndarray:
        """The target distribution after ``prefix``."""
        return self.rows(prefix)[0]

    def draft(self, prefix: Sequence[int]) -> np.ndarray:
        """The draft distribution after ``prefix``."""
        return self.rows(prefix)[1]


def check_parents(parents: Sequence[int] | np.ndarray) -> np.ndarray:
    """A parent array in topological order (validated as :class:`theory.tree.Tree` does), int64."""
    arr = np.asarray(parents)
    placeholder = np.arange(arr.size, dtype=np.int64).reshape(arr.shape)  # distinct, so only parents matter
    return Tree(arr, placeholder).parents


def children_lists(parents: np.ndarray) -> list[np.ndarray]:
    """The children of every node in increasing node index (= draw order)."""
    return [np.flatnonzero(parents == u) for u in range(parents.size)]


def node_prefix(parents: np.ndarray, tokens: np.ndarray, v: int) -> Prefix:
    """Tokens on the path root..v, root excluded."""
    out: list[int] = []
    while v > 0:
        out.append(int(tokens[v]))
        v = int(parents[v])
    return tuple(out[::-1])


def tree_rows(parents: np.ndarray, tokens: np.ndarray, model: PrefixModel) -> tuple[np.ndarray, np.ndarray]:
    """``(p_rows, q_rows)``: the model's rows at every node's prefix, shape (n_nodes, V)."""
    rows = [model.rows(node_prefix(parents, tokens, v)) for v in range(parents.size)]
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def draw_sampled_tree(
    parents: Sequence[int] | np.ndarray, model: PrefixModel, u_rank: np.ndarray
) -> tuple[Tree, np.ndarray, np.ndarray]:
    """Draw a sampled-draft tree: the children of each node are ``draw_without_replacement`` from q at
    its prefix, child v spending the uniform ``u_rank[v]`` (root's entry unused). Returns the tree and
    its ``(p_rows, q_rows)``. ``ValueError`` when some q has fewer tokens with mass than the node has
    children."""
    par = check_parents(parents)
    u = np.asarray(u_rank, dtype=np.float64)
    if u.shape != par.shape:
        raise ValueError(f"u_rank has shape {u.shape}, expected one uniform per node {par.shape}")
    tokens = np.zeros(par.size, dtype=np.int64)
    for node, kids in enumerate(children_lists(par)):
        if kids.size == 0:
            continue
        q = model.draft(node_prefix(par, tokens, node))
        drawn = draw_without_replacement(q, u[kids])
        if drawn.size < kids.size:
            raise ValueError(f"node {node} has {kids.size} children but its draft has only "
                             f"{drawn.size} tokens with mass")
        tokens[kids] = drawn
    tree = Tree(par, tokens)
    return (tree, *tree_rows(par, tokens, model))


def _ordered_draws(q: np.ndarray, m: int) -> Iterator[tuple[tuple[int, ...], float]]:
    """Every ordered m-tuple of draws without replacement from q with its probability (q' as R2)."""

    def walk(drawn: list[int], w: float) -> Iterator[tuple[tuple[int, ...], float]]:
        if len(drawn) == m:
            yield tuple(drawn), w
            return
        qp = draft_residual(q, np.array(drawn, dtype=np.int64))
        if qp is None:
            return
        for x in np.flatnonzero(qp > 0):
            yield from walk(drawn + [int(x)], w * float(qp[x]))

    yield from walk([], 1.0)


def sampled_trees(
    parents: Sequence[int] | np.ndarray, model: PrefixModel
) -> Iterator[tuple[float, Tree, np.ndarray, np.ndarray]]:
    """Every draw of a sampled-draft tree with positive probability: ``(weight, tree, p_rows, q_rows)``.

    Refuses (``ValueError``) shapes whose count of draw orders may exceed :data:`MAX_TREES`
    (bounded by the product over internal nodes of V! / (V - m_u)!) and models whose draft at some
    prefix has fewer tokens with mass than the node has children.
    """
    par = check_parents(parents)
    kids = children_lists(par)
    V = model.vocab_size
    internal = [u for u in range(par.size) if kids[u].size]
    bound = 1.0
    for u in internal:
        m = int(kids[u].size)
        if m > V:
            raise ValueError(f"node {u} has {m} children, more than the {V} tokens")
        bound *= math.perm(V, m)
    if bound > MAX_TREES:
        raise ValueError(f"the tree shape has up to {bound:.3g} draw orders at V = {V}; exact enumeration "
                         f"is limited to {MAX_TREES} (use a smaller tree or vocabulary)")
    tokens = np.zeros(par.size, dtype=np.int64)

    def walk(j: int, w: float) -> Iterator[tuple[float, Tree, np.ndarray, np.ndarray]]:
        if j == len(internal):
            tree = Tree(par, tokens.copy())
            yield (w, tree, *tree_rows(par, tree.tokens, model))
            return
        u = internal[j]
        q = model.draft(node_prefix(par, tokens, u))
        if int(np.count_nonzero(q > 0)) < kids[u].size:
            raise ValueError(f"node {u} has {kids[u].size} children but the draft after "
                             f"{list(node_prefix(par, tokens, u))} has fewer tokens with mass")
        for order, wo in _ordered_draws(q, int(kids[u].size)):
            tokens[kids[u]] = order
            yield from walk(j + 1, w * wo)

    yield from walk(0, 1.0)


@dataclass(frozen=True)
class StepEnd:
    """A way one verification step ends on a drawn tree: the accepted path is root..``node``, which
    happens with probability ``prob``, and the bonus token is drawn from ``law``."""

    node: int
    prob: float
    law: np.ndarray


def expected_tokens(tree: Tree, ends: Sequence[StepEnd]) -> float:
    """E[tokens per step] = sum over ends of prob * (depth of the end + 1)."""
    return float(sum(e.prob * (tree.depths[e.node] + 1) for e in ends))


def end_probs(tree: Tree, ends: Sequence[StepEnd]) -> np.ndarray:
    """P(the step ends at v) for every node v."""
    out = np.zeros(tree.size)
    for e in ends:
        out[e.node] += e.prob
    return out


def r2_step_ends(
    tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray, *, boost: Boost = NO_BOOST,
    emb: np.ndarray | None = None,
) -> list[StepEnd]:
    """R2 (SPEC 3, no LANTERN relaxation) on a drawn tree, exactly: at node u the children are tested in
    draw order with ``theory.verify.r2_given_states`` (boosted by ``boost`` at the children's depth, as
    ``theory.tree`` does); an accepted child becomes the next node; a leaf emits from its p."""
    Verification(Rule.R2, boost=boost).check_node_by_node()
    p_rows = np.asarray(p_rows, dtype=np.float64)
    emb = boost_embedding(boost, emb, p_rows.shape[1])
    nb = np.zeros((p_rows.shape[1], 0), dtype=np.int64)
    ends: list[StepEnd] = []

    def walk(u: int, reach: float) -> None:
        kids = tree.children(u)
        if kids.size == 0:
            ends.append(StepEnd(u, reach, p_rows[u]))
            return
        at = BoostAt(boost, int(tree.depths[u]) + 1, emb)
        for s in r2_given_states(p_rows[u], q_rows[u], tree.tokens[kids], nb, NO_RELAX, "principled", at):
            if s.qp is None:
                ends.append(StepEnd(u, reach * s.weight, s.r))
            elif s.weight * s.accept[0] > 0.0:
                walk(int(kids[s.stage]), reach * s.weight * s.accept[0])

    walk(0, 1.0)
    return ends


def sequence_law(tree: Tree, ends: Sequence[StepEnd], weight: float = 1.0,
                 into: dict[Prefix, float] | None = None) -> dict[Prefix, float]:
    """The law of the emitted token sequences (accepted path tokens, then the bonus), scaled by
    ``weight`` and added into ``into``."""
    out: dict[Prefix, float] = {} if into is None else into
    for e in ends:
        path = node_prefix(tree.parents, tree.tokens, e.node)
        for y in np.flatnonzero(e.law > 0):
            key = path + (int(y),)
            out[key] = out.get(key, 0.0) + weight * e.prob * float(e.law[y])
    return out


@dataclass(frozen=True)
class StepLaw:
    """A rule's step averaged over the draws of a sampled-draft tree.

    ``sequences``: law of the emitted sequences; ``tokens``: E[tokens per step];
    ``tv_bound``: the weighted sum of the per-tree bounds the rule reported (0 when it reports none).
    """

    sequences: dict[Prefix, float]
    tokens: float
    tv_bound: float


EndsFn = Callable[[Tree, np.ndarray, np.ndarray], "list[StepEnd] | tuple[list[StepEnd], float]"]


def step_law(parents: Sequence[int] | np.ndarray, model: PrefixModel, ends_fn: EndsFn) -> StepLaw:
    """Average ``ends_fn(tree, p_rows, q_rows)`` (a rule's exact ends on a drawn tree, optionally with
    a TV bound as ``(ends, bound)``) over :func:`sampled_trees`."""
    law: dict[Prefix, float] = {}
    tokens = bound = 0.0
    for w, tree, p_rows, q_rows in sampled_trees(parents, model):
        out = ends_fn(tree, p_rows, q_rows)
        ends, b = out if isinstance(out, tuple) else (out, 0.0)
        sequence_law(tree, ends, w, law)
        tokens += w * expected_tokens(tree, ends)
        bound += w * b
    return StepLaw(law, tokens, bound)


def _extend(law: dict[Prefix, float], model: PrefixModel, length: int) -> dict[Prefix, float]:
    out: dict[Prefix, float] = {}
    stack = list(law.items())
    while stack:
        seq, w = stack.pop()
        if len(seq) >= length:
            out[seq] = out.get(seq, 0.0) + w
            if len(out) > MAX_SEQUENCES:
                raise ValueError(f"more than {MAX_SEQUENCES} sequences: use a shorter length or smaller V")
            continue
        p = model.target(seq)
        for y in np.flatnonzero(p > 0):
            stack.append((seq + (int(y),), w * float(p[y])))
    return out


def completed_law(law: dict[Prefix, float], model: PrefixModel, length: int) -> dict[Prefix, float]:
    """Extend every emitted sequence shorter than ``length`` with target draws (the tokens the decoder's
    next steps would emit if they were exact): the law of the first ``length`` tokens."""
    if any(len(s) > length for s in law):
        raise ValueError(f"some emitted sequence is longer than length {length}")
    return _extend(law, model, length)


def target_law(model: PrefixModel, length: int) -> dict[Prefix, float]:
    """The target's law of its first ``length`` tokens after the root."""
    return _extend({(): 1.0}, model, length)


def law_tv(a: dict[Prefix, float], b: dict[Prefix, float]) -> float:
    """Total variation between two laws over sequences (dicts; missing keys have probability 0)."""
    keys = sorted(set(a) | set(b))
    x = np.array([a.get(k, 0.0) for k in keys])
    y = np.array([b.get(k, 0.0) for k in keys])
    return 0.5 * float(np.abs(x - y).sum())


def step_tv(law: StepLaw, model: PrefixModel, depth: int) -> float:
    """Exact TV between the completed law of one step on a tree of ``depth`` and the target's
    (sequences of length depth + 1)."""
    n = int(depth) + 1
    return law_tv(completed_law(law.sequences, model, n), target_law(model, n))


def tree_depth(parents: Sequence[int] | np.ndarray) -> int:
    """The largest node depth of a parent array."""
    return int(parent_depths(check_parents(parents)).max())


__all__ = [
    "MAX_SEQUENCES",
    "MAX_TREES",
    "PrefixModel",
    "StepEnd",
    "StepLaw",
    "completed_law",
    "draw_sampled_tree",
    "end_probs",
    "expected_tokens",
    "law_tv",
    "node_prefix",
    "r2_step_ends",
    "sampled_trees",
    "sequence_law",
    "step_law",
    "step_tv",
    "target_law",
    "tree_depth",
    "tree_rows",
]


def check_drawn_tree(tree: Tree, p_rows: np.ndarray, q_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate a drawn tree and its per-node rows (every child's token drawable at its parent); float64
    rows, or ``ValueError`` naming the problem."""
    if not isinstance(tree, Tree):
        raise ValueError(f"tree must be a relaxspec.theory.tree.Tree, got {type(tree).__name__}")
    p = np.asarray(p_rows, dtype=np.float64)
    q = np.asarray(q_rows, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != tree.size or q.shape != p.shape:
        raise ValueError(f"p_rows and q_rows must both have shape (n_nodes={tree.size}, V), "
                         f"got {p.shape} and {q.shape}")
    tree.check_vocab(p.shape[1])
    for v in range(tree.size):
        validate_distribution(p[v], name=f"p_rows[{v}]")
        kids = tree.children(v)
        if kids.size:
            validate_distribution(q[v], name=f"q_rows[{v}]")
            bad = kids[q[v][tree.tokens[kids]] <= 0]
            if bad.size:
                raise ValueError(f"node {int(bad[0])}'s token {int(tree.tokens[bad[0]])} has zero draft "
                                 f"probability at its parent {v}: it cannot have been drawn")
    return p, q
