"""Draft-tree policies (SPEC section 5) and the interface every builder follows.

The interface
-------------
A policy builds one step's draft tree with a pure NumPy method::

    built = policy.build(q_root, draft, u=None)

- ``q_root``: float64 (V,), the draft distribution at the root (the last
  committed token). Producing it is one drafter forward, counted in
  ``BuiltTree.draft_calls``.
- ``draft(parents, tokens, nodes) -> np.ndarray``: the caller's drafter.
  ``parents`` / ``tokens`` describe the partial tree built so far (node 0 is
  the root, topological order, root token arbitrary); ``nodes`` lists the
  partial-tree nodes to expand. It returns float64 ``(len(nodes), V)``: the
  draft distribution q after each requested node. One call is one batched
  drafter forward ("draft call"). The reference decoder passes its PyTorch
  drafter here; the simulators pass a world's drafter.
- ``u``: ``None`` ranks children by q (the rank-i child is the i-th largest
  of q, ties by lowest token id: rules R1 and R3); an array ranks them by
  successive draws without replacement from q (rule R2, SpecInfer / EAGLE-1
  sampling), ``u[w]`` drawing template node ``w`` of a static tree
  (``theory.draw_without_replacement`` per parent, children in rank order).
  Dynamic trees (EAGLE-2, DDD) rank by top-k only and reject ``u``.

``BuiltTree`` holds the ``theory.Tree`` (children in rank order), the q row of
every node (rows of nodes never expanded are uniform 1/V: they are never
read, R2 reads q only at nodes with children), the number of draft calls
(q_root's forward included) and the uniforms used.

Sizes are bounded before anything is built (``check_budget``): at most
``MAX_TREE_NODES`` = 2048 draft nodes per tree (static trees, chains,
EAGLE-2's and DDD's ``total_tokens - 1``, Sequoia's N; also the latent
candidate pool), a depth budget of at most ``MAX_TREE_DEPTH`` = 64
(EAGLE-2's ``depth``, DDD's ``max_calls - 1``, Sequoia's DEPTH) and at most
``MAX_POOL_NODES`` = 65536 candidates created by a dynamic expansion
(K + D K^2); a larger request is a ``ValueError`` naming the limit.

Each policy also exposes ``kernel_spec()``: the plain arrays from which the
Numba builder in :mod:`simulate.policy_kernels` builds exactly the same tree
given the same q rows (tested exactly). Policies are plain data: new ones
(issue 7) subclass :class:`TreePolicy` and add a kernel kind.

Over 400 lines: the policy interface, static and dynamic (EAGLE-2, DDD, latent-aware) builders share
the NumPy build and the kernel spec; together they are the tree policies of SPEC section 5.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from relaxspec.core.trees.selection import DEFAULT_POOL, ChildSelector
from relaxspec.theory.relax import Relax
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.tree import Tree, choices_to_parents

DraftFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

# EAGLE's `mc_sim_7b_63` (25 nodes, depth 5: 4/8/8/3/2 per depth) and LANTERN's
# `naive_extend_57` (57 nodes, depth 5), as rank paths.
MC_SIM_7B_63: list[list[int]] = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]
NAIVE_EXTEND_57: list[list[int]] = [
    [0], [1], [2], [3], [4],
    [0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1], [1, 2], [2, 0], [2, 1], [2, 2], [3, 0], [3, 1], [4, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 0, 3], [0, 1, 0], [0, 1, 1], [0, 1, 2], [0, 2, 0], [0, 2, 1],
    [0, 2, 2], [0, 3, 0], [0, 3, 1], [1, 0, 0], [1, 0, 1], [1, 1, 0], [2, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 3], [0, 0, 1, 0], [0, 0, 1, 1], [0, 0, 1, 2],
    [0, 0, 2, 0], [0, 0, 2, 1], [0, 0, 3, 0], [0, 1, 0, 0], [0, 1, 0, 1], [0, 1, 1, 0], [0, 2, 0, 0],
    [0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 2], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1], [0, 0, 1, 0, 0],
    [0, 0, 1, 0, 1], [0, 0, 1, 1, 0], [0, 0, 2, 0, 0],
]
BUILTIN_CHOICES = {"mc_sim_7b_63": MC_SIM_7B_63, "naive_extend_57": NAIVE_EXTEND_57}

KIND_STATIC = 0
KIND_EAGLE = 1

# Size limits, checked before anything is allocated: the simulators keep a (nodes, V) float64 row of p per
# tree node and sequence (2049 x 16384 x 8 bytes = 268 MB at the limit), the dynamic expansion a buffer
# node per candidate, and Sequoia's dynamic program a (DEPTH, width, N) table. Published trees have at
# most a few hundred nodes and depth <= 12.
MAX_TREE_NODES = 2048  # draft nodes of a tree (root excluded); also the largest candidate pool or width
MAX_TREE_DEPTH = 64  # depth budget of dynamic trees (EAGLE-2's D, DDD's CALLS - 1) and Sequoia's DEPTH
MAX_POOL_NODES = 65536  # candidates a dynamic tree's expansion may create: K + D K^2


def check_budget(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]``, else a ``ValueError`` naming ``name`` and both bounds.

    Parameters
    ----------
    name : what the user wrote (e.g. ``"depth D"``), as the message should name it.
    value, lo, hi : the value and its inclusive bounds.
    """
    try:
        whole = not isinstance(value, bool) and int(value) == value  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole or not lo <= value <= hi:  # type: ignore[operator]
        limit = f" (at most {hi}: the size limit of relaxspec's trees)" if whole and value > hi else ""
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}{limit}")
    return int(value)  # type: ignore[call-overload]


@dataclass(frozen=True)
class BuiltTree:
    """One step's draft tree with the draft rows it was built from."""

    tree: Tree
    q: np.ndarray  # (n_nodes, V) float64; uniform rows at nodes never expanded
    draft_calls: int  # drafter forwards, q_root's included
    u: np.ndarray  # uniforms consumed (R2 draws), indexed as the policy documents; empty otherwise
    expanded: np.ndarray = field(default=None)  # type: ignore[assignment]  # bool: q row is real


@dataclass(frozen=True)
class PolicySpec:
    """Plain arrays a Numba builder takes (see :mod:`simulate.policy_kernels`)."""

    kind: int
    parents: np.ndarray  # static template parents (int64), empty for dynamic trees
    ranks: np.ndarray  # static template ranks (int64)
    top_k: int
    max_calls: int
    total_tokens: int
    check_steps: np.ndarray  # int64 draft-call numbers before which DDD checks
    threshold: float
    max_nodes: int  # nodes of the largest tree, root included
    max_buffer: int  # nodes the builder may create (dynamic pool + root)
    selection: tuple = ()  # how children are picked: ChildSelector.kernel_args()


def safe_log(x: float) -> float:
    """``math.log`` with log(0) = -inf (what the Numba kernel computes)."""
    return math.log(x) if x > 0.0 else -math.inf


def _check_q(q: np.ndarray, name: str) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 1 or q.size < 2:
        raise ValueError(f"{name} must be a 1-D distribution over V >= 2 tokens, got shape {q.shape}")
    if not np.all(np.isfinite(q)) or np.any(q < 0):
        raise ValueError(f"{name} must hold finite non-negative probabilities")
    return q


def _call(draft: DraftFn, parents: list[int], tokens: list[int], nodes: list[int], V: int) -> np.ndarray:
    out = np.asarray(draft(np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64),
                           np.array(nodes, dtype=np.int64)), dtype=np.float64)
    if out.shape != (len(nodes), V):
        raise ValueError(f"draft callback returned shape {out.shape}, expected ({len(nodes)}, {V})")
    return out


class TreePolicy:
    """Base class: a named way to build a draft tree each step."""

    name: str = "policy"
    selector: ChildSelector = ChildSelector()  # how a node's children are picked (core.trees.selection)

    def check_vocab(self, vocab_size: int) -> None:
        """Raise ``ValueError`` if the policy cannot build trees over ``vocab_size`` tokens."""
        V = self.selector.vocab_size
        if V is not None and V != vocab_size:
            raise ValueError(f"tree policy {self} uses a neighbour table over V = {V} tokens, "
                             f"the world has V = {vocab_size}")

    def build(self, q_root: np.ndarray, draft: DraftFn, u: np.ndarray | None = None) -> BuiltTree:
        """Build one step's tree (see the module docstring)."""
        raise NotImplementedError

    def kernel_spec(self) -> PolicySpec:
        """Arrays for the Numba builder."""
        raise NotImplementedError

    @property
    def supports_draws(self) -> bool:
        """Whether the policy can rank children by draws without replacement (rule R2)."""
        return False

    def __str__(self) -> str:
        return self.name


class StaticTree(TreePolicy):
    """A fixed tree of rank paths (EAGLE ``choices``): node [i1..id] is the rank-id child of [i1..i(d-1)].

    Every node's child ranks must be 0..m-1 (so that R2's draws are a prefix).
    Template nodes are ordered by (depth, path) as EAGLE sorts them; one
    draft call per depth level that has children (q_root's included).
    ``selector`` ranks the children (default: by q; a latent-aware one ranks
    by proximity mass, see :mod:`core.trees.selection`; the diverse one may leave
    high ranks, and their subtrees, out).
    """

    def __init__(self, choices: Sequence[Sequence[int]], name: str | None = None,
                 selector: ChildSelector | None = None) -> None:
        check_budget("the number of static tree nodes", len(choices), 0, MAX_TREE_NODES)
        parents, ranks = choices_to_parents(choices)
        paths = json.dumps([[int(i) for i in c] for c in choices], separators=(",", ":"))
        self._setup(parents, ranks, name or f"static:{paths}", selector)
        self._choices: list[list[int]] | None = [list(c) for c in choices]

    @classmethod
    def _from_template(cls, parents: np.ndarray, ranks: np.ndarray, name: str) -> StaticTree:
        """A tree from its template arrays (topological order, root rank -1): O(n), no rank paths."""
        tree = cls.__new__(cls)
        StaticTree._setup(tree, parents, ranks, name, None)
        tree._choices = None
        return tree

    def _setup(self, parents: np.ndarray, ranks: np.ndarray, name: str,
               selector: ChildSelector | None) -> None:
        if selector is not None and not isinstance(selector, ChildSelector):
            raise ValueError("selector must be a relaxspec.core.trees.selection.ChildSelector, "
                             f"got {type(selector).__name__}")
        kid_parents, kid_ranks = parents[1:], ranks[1:]
        order = np.lexsort((kid_ranks, kid_parents))  # children grouped by parent, in rank order
        p, r = kid_parents[order], kid_ranks[order]
        bad = r != np.arange(p.size) - np.searchsorted(p, p)  # rank = position among its siblings
        if np.any(bad):
            v = int(p[bad].min())
            raise ValueError(f"static tree node {v} has child ranks {sorted(ranks[parents == v].tolist())}; "
                             "expected 0..m-1")
        self.parents = parents
        self.ranks = ranks
        self.template = Tree(parents, np.maximum(ranks, 0))
        self.selector = selector or ChildSelector()
        self.name = name

    @property
    def choices(self) -> list[list[int]]:
        """The rank paths (EAGLE ``choices``) as given, or in template order for a tree built without."""
        if self._choices is None:
            paths: list[list[int]] = [[]]
            for v in range(1, self.n_nodes):
                paths.append(paths[self.parents[v]] + [int(self.ranks[v])])
            self._choices = paths[1:]
        return self._choices

    @classmethod
    def builtin(cls, name: str) -> StaticTree:
        """``mc_sim_7b_63`` or ``naive_extend_57``."""
        if name not in BUILTIN_CHOICES:
            raise ValueError(f"unknown static tree {name!r}; built in: {sorted(BUILTIN_CHOICES)}")
        return cls(BUILTIN_CHOICES[name], name=f"static:{name}")

    @classmethod
    def mc_sim_7b_63(cls) -> StaticTree:
        """EAGLE's default static tree (25 nodes)."""
        return cls.builtin("mc_sim_7b_63")

    @classmethod
    def naive_extend_57(cls) -> StaticTree:
        """LANTERN's static tree (57 nodes)."""
        return cls.builtin("naive_extend_57")

    @classmethod
    def chain(cls, n: int) -> StaticTree:
        """A chain of n drafts (each the top-ranked child), 1 <= n <= ``MAX_TREE_NODES``; built in O(n)."""
        n = check_budget("chain length N", n, 1, MAX_TREE_NODES)
        ranks = np.zeros(n + 1, dtype=np.int64)
        ranks[0] = -1
        return cls._from_template(np.arange(-1, n, dtype=np.int64), ranks, name=f"chain:{n}")

    @property
    def supports_draws(self) -> bool:
        return self.selector.mode == "q"

    @property
    def n_nodes(self) -> int:
        """Template nodes, root included."""
        return int(self.parents.size)

    def build(self, q_root: np.ndarray, draft: DraftFn, u: np.ndarray | None = None) -> BuiltTree:
        q_root = _check_q(q_root, "q_root")
        V = q_root.size
        n_t = self.n_nodes
        self.check_vocab(V)
        if u is not None:
            if not self.supports_draws:
                raise ValueError(f"{self.name} ranks children by {self.selector.mode}, not by draws: "
                                 "rule r2 needs a static tree ranked by q")
            u = np.asarray(u, dtype=np.float64)
            if u.shape != (n_t,):
                raise ValueError(f"u must have one uniform per template node, shape ({n_t},), got {u.shape}")
        depths = self.template.depths
        exists = np.zeros(n_t, dtype=bool)
        exists[0] = True
        token = np.zeros(n_t, dtype=np.int64)
        qrow: dict[int, np.ndarray] = {0: q_root}
        index = {0: 0}  # template node -> node of the built tree
        parents, tokens = [-1], [0]
        calls = 1
        for d in range(int(depths.max()) if n_t > 1 else 0):
            level = [v for v in range(n_t) if depths[v] == d and exists[v] and np.any(self.parents == v)]
            if not level:
                break
            if d > 0:
                rows = _call(draft, parents, tokens, [index[v] for v in level], V)
                calls += 1
                for v, row in zip(level, rows, strict=True):
                    qrow[v] = row
            for v in level:
                kids = np.flatnonzero(self.parents == v)
                kids = kids[np.argsort(self.ranks[kids], kind="stable")]
                if u is None:
                    chosen, _ = self.selector.select(qrow[v], kids.size)
                else:
                    chosen = draw_without_replacement(qrow[v], u[kids])
                for w, t in zip(kids, chosen, strict=False):
                    exists[w] = True
                    token[w] = t
            # built nodes of this level's children, in template order
            for w in range(n_t):
                if depths[w] == d + 1 and exists[w]:
                    index[w] = len(parents)
                    parents.append(index[int(self.parents[w])])
                    tokens.append(int(token[w]))
        order = [w for w in range(n_t) if exists[w]]
        q = np.full((len(order), V), 1.0 / V)
        expanded = np.zeros(len(order), dtype=bool)
        for w in order:
            if w in qrow:
                q[index[w]] = qrow[w]
                expanded[index[w]] = True
        tree = Tree(np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64))
        used = np.empty(0) if u is None else u.copy()
        return BuiltTree(tree, q, calls, used, expanded)

    def kernel_spec(self) -> PolicySpec:
        return PolicySpec(KIND_STATIC, self.parents.copy(), self.ranks.copy(), 0, 0, 0,
                          np.zeros(0, dtype=np.int64), 0.0, self.n_nodes, self.n_nodes,
                          self.selector.kernel_args())


class Eagle2Tree(TreePolicy):
    """EAGLE-2's dynamic tree: beam expansion by path score, then global rerank.

    Score of a node = sum of log q along its path. Layer 1 = the top-k of
    q_root. Then ``depth`` times: expand the beam (the k best nodes of the
    last layer; layer 1 entirely), each proposing its top-k children; all k^2
    join the pool and the next beam is their top-k by score (ties: earlier
    candidate). Finally keep the ``total_tokens - 1`` best pool nodes (ties:
    shallower, then earlier; the pool is in layer order so this is earlier)
    in pool order. Draft calls: 1 + depth. LANTERN's LlamaGen default is
    (10, 4, 59), the EAGLE-2 paper's (10, 5, 60).
    """

    def __init__(self, top_k: int = 10, depth: int = 4, total_tokens: int = 59) -> None:
        self.depth = check_budget("depth D", depth, 0, MAX_TREE_DEPTH)
        self._init(top_k, 1 + self.depth, total_tokens, (), 0.0)
        self.name = f"eagle2:{self.top_k},{self.depth},{self.total_tokens}"

    def _init(self, top_k: int, max_calls: int, total_tokens: int, check_steps: Sequence[int],
              threshold: float, selector: ChildSelector | None = None) -> None:
        """Validate and store the budgets (limits: ``MAX_TREE_DEPTH`` + 1 draft calls, ``MAX_TREE_NODES``
        draft nodes, ``MAX_POOL_NODES`` candidates)."""
        self.top_k = check_budget("top_k K", top_k, 1, MAX_POOL_NODES)
        self.max_calls = check_budget("max_calls CALLS", max_calls, 1, MAX_TREE_DEPTH + 1)
        self.total_tokens = check_budget("total_tokens M", total_tokens, 2, MAX_TREE_NODES + 1)
        if self.pool_size > MAX_POOL_NODES:
            raise ValueError(f"top_k K = {self.top_k} with {self.max_calls - 1} expansions creates "
                             f"K + D K^2 = {self.pool_size} candidate nodes, at most {MAX_POOL_NODES} "
                             "allowed: lower K or the depth")
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold!r}")
        steps = sorted({int(s) for s in check_steps})
        if any(s < 2 or s > self.max_calls for s in steps):
            raise ValueError(f"check steps must be draft-call numbers in [2, {self.max_calls}], got {steps}")
        self.check_steps = np.array(steps, dtype=np.int64)
        self.threshold = float(threshold)
        self.selector = selector or ChildSelector()

    @property
    def pool_size(self) -> int:
        """Nodes the expansion can create: k + (max_calls - 1) k^2."""
        return self.top_k + (self.max_calls - 1) * self.top_k**2

    def build(self, q_root: np.ndarray, draft: DraftFn, u: np.ndarray | None = None) -> BuiltTree:
        if u is not None:
            raise ValueError(f"{self.name} ranks children by top-k, not draws: rule r2 needs a static tree")
        q_root = _check_q(q_root, "q_root")
        V = q_root.size
        self.check_vocab(V)
        K = min(self.top_k, V)
        # pool node i is partial-tree node i + 1
        par, tok, score, depth = [], [], [], []
        for x, val in zip(*self.selector.select(q_root, K), strict=True):
            par.append(-1)
            tok.append(int(x))
            score.append(safe_log(val))
            depth.append(1)
        beam = list(range(len(par)))
        qrow: dict[int, np.ndarray] = {}
        calls = 1
        for call in range(2, self.max_calls + 1):
            if call in self.check_steps:
                s = 0.0
                for i in beam:
                    s += math.exp(score[i])
                if safe_log(s) < self.threshold:
                    break
            rows = _call(draft, [-1] + [p + 1 for p in par], [0] + tok, [i + 1 for i in beam], V)
            calls += 1
            cands = []
            for i, row in zip(beam, rows, strict=True):
                qrow[i] = row
                for x, val in zip(*self.selector.select(row, K), strict=True):
                    cands.append(len(par))
                    par.append(i)
                    tok.append(int(x))
                    score.append(score[i] + safe_log(val))
                    depth.append(depth[i] + 1)
            cs = np.array([score[c] for c in cands])
            beam = [cands[j] for j in np.argsort(-cs, kind="stable")[:K]]
        keep = np.sort(np.argsort(-np.array(score), kind="stable")[: self.total_tokens - 1])
        index = {-1: 0}
        parents, tokens = [-1], [0]
        for i in keep:
            index[int(i)] = len(parents)
            parents.append(index[par[i]])
            tokens.append(tok[i])
        q = np.full((len(parents), V), 1.0 / V)
        expanded = np.zeros(len(parents), dtype=bool)
        q[0] = q_root
        expanded[0] = True
        for i, row in qrow.items():
            if i in index:
                q[index[i]] = row
                expanded[index[i]] = True
        tree = Tree(np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64))
        return BuiltTree(tree, q, calls, np.empty(0), expanded)

    def kernel_spec(self) -> PolicySpec:
        return PolicySpec(KIND_EAGLE, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                          self.top_k, self.max_calls, self.total_tokens, self.check_steps.copy(),
                          self.threshold, min(self.total_tokens, self.pool_size + 1), self.pool_size + 1,
                          self.selector.kernel_args())


class DDDTree(Eagle2Tree):
    """Dynamic Depth Decoding: EAGLE-2 with a data-dependent number of expansions.

    Draft calls are numbered from 1 (q_root's forward); before call n in
    ``check_steps`` the expansion stops if log(sum over the beam of
    exp(score)) < ``threshold``; at most ``max_calls`` calls. Paper
    settings: beam width 10, check steps {5, 7, 9}, at most 11 calls,
    threshold -0.3. The final rerank keeps ``total_tokens - 1`` nodes as
    EAGLE-2 does (60 in the EAGLE-2 paper).
    """

    def __init__(self, top_k: int = 10, max_calls: int = 11, check_steps: Sequence[int] = (5, 7, 9),
                 threshold: float = -0.3, total_tokens: int = 60) -> None:
        self._init(top_k, max_calls, total_tokens, check_steps, threshold)
        self.depth = self.max_calls - 1
        steps = "/".join(str(s) for s in self.check_steps)
        self.name = f"ddd:{self.top_k},{self.max_calls},{steps},{self.threshold!r},{self.total_tokens}"


class LatentAwareTree(Eagle2Tree):
    """EAGLE-2's expansion and rerank with children picked and scored by proximity mass (issue 7).

    Same budgets as :class:`Eagle2Tree` (``top_k``, ``depth``,
    ``total_tokens``) and the same code path; only the selector differs: a
    node's children are the ``top_k`` tokens of largest q~(x) = q(A(x)) among
    the ``pool`` most probable tokens of q, A(x) formed on q with the
    verifier's relaxation ``relax`` and table ``neighbours``, and a node's
    score is the sum of log q~ along its path. ``mode="diverse"`` picks
    siblings greedily by q~ while skipping any whose proximity set overlaps a
    chosen sibling's; ``mode="walk"`` scores each sibling by its acceptance
    probability under R1 run on q (:mod:`core.trees.selection`). With
    ``Relax.none()`` (or k = 0) the tree is EAGLE-2's, node for node.
    """

    def __init__(self, top_k: int = 10, depth: int = 4, total_tokens: int = 59, *, relax: Relax,
                 neighbours: np.ndarray | None, pool: int = DEFAULT_POOL, mode: str = "latent") -> None:
        if mode == "q":
            raise ValueError("a latent-aware tree selects by 'latent', 'diverse' or 'walk' (q: Eagle2Tree)")
        self.depth = check_budget("depth D", depth, 0, MAX_TREE_DEPTH)
        selector = ChildSelector(mode, relax, neighbours, check_budget("pool POOL", pool, 1, MAX_TREE_NODES))
        self._init(top_k, 1 + self.depth, total_tokens, (), 0.0, selector)
        kind = "latent" if mode == "latent" else f"latent-{mode}"
        extra = "" if int(pool) == DEFAULT_POOL else f",{int(pool)}"
        self.name = f"{kind}:{self.top_k},{self.depth},{self.total_tokens}{extra}"
