"""Stand-in tree builders (static, EAGLE-2, DDD) with ``simulate.policies``' documented interface.

``build(q_root, draft, u) -> BuiltTree``: ``draft(parents, tokens, nodes)``
returns the draft distributions at ``nodes`` of the partial tree (one call = one
batched drafter forward; node ids are append-only), ``u`` holds the uniforms
for R2's draws without replacement. ``simulate.policies`` (branch
``simulate``) is the reference implementation of these policies; the decoder
uses it when it is installed (:func:`policy_from_spec`) and these builders
only otherwise. Children are ranked by q (top-K, ties by token id) for R1/R3,
and are successive draws without replacement from q for R2 (SPEC section 5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from reference.model import tree_depths
from theory.sampler import draw_without_replacement
from theory.tree import Tree, choices_to_parents

DraftFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

# EAGLE's mc_sim_7b_63 (25 nodes below the root, depth 5: 4/8/8/3/2 per depth)
MC_SIM_7B_63 = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
                [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [1, 0, 0], [2, 0, 0],
                [0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
NAMED_CHOICES = {"mc_sim_7b_63": MC_SIM_7B_63}


@dataclass(frozen=True)
class BuiltTree:
    """A built draft tree and the number of drafter calls it took (root call included)."""

    tree: Tree
    draft_calls: int


def propose(q: np.ndarray, k: int, u: np.ndarray | None) -> np.ndarray:
    """k children of a node: the top-k of q (ties by id), or k draws without replacement (u given)."""
    if u is not None:
        return draw_without_replacement(q, u[:k])
    return np.lexsort((np.arange(q.size), -q))[: min(k, int(np.count_nonzero(q > 0)))]


class StaticTree:
    """A static tree of rank paths (EAGLE ``choices``); one draft call per depth."""

    def __init__(self, choices: Sequence[Sequence[int]], sampled: bool = False) -> None:
        self.parents, self.ranks = choices_to_parents(choices)
        self.depths = Tree(self.parents, np.arange(self.parents.size)).depths
        self.sampled = sampled
        self.uniforms = int(self.parents.size * (self.ranks.max() + 1)) if sampled else 0

    def build(self, q_root: np.ndarray, draft: DraftFn, u: np.ndarray) -> BuiltTree:
        n = self.parents.size
        tokens = np.zeros(n, dtype=np.int64)
        q, picks, calls = {0: q_root}, {}, 1
        width = int(self.ranks.max()) + 1
        keep = np.ones(n, dtype=bool)
        for d in range(1, int(self.depths.max()) + 1):
            level = np.flatnonzero(self.depths == d)
            for v in level:
                par = int(self.parents[v])
                if not keep[par]:
                    keep[v] = False
                    continue
                if par not in picks:
                    m = int(self.ranks[self.parents == par].max()) + 1
                    picks[par] = propose(q[par], m, u[par * width :] if self.sampled else None)
                if self.ranks[v] >= picks[par].size:  # q has fewer tokens with mass than ranks
                    keep[v] = False
                    continue
                tokens[v] = picks[par][self.ranks[v]]
            inner = np.array([v for v in level if keep[v] and np.any(self.parents == v)], dtype=np.int64)
            if inner.size:
                end = int(level.max()) + 1
                rows = draft(self.parents[:end], tokens[:end], inner)
                calls += 1
                q.update({int(v): rows[i] for i, v in enumerate(inner)})
        return BuiltTree(_subtree(self.parents, tokens, keep), calls)


class EagleTree:
    """EAGLE-2's dynamic tree (SPEC section 5): beam of ``top_k`` by path log q, ``depth``
    expansions, the ``total`` - 1 best pool nodes kept. ``checks``/``threshold``/``max_calls``
    make it DDD: before a draft call whose number is in ``checks``, stop when
    log(sum over the beam of exp(score)) < threshold."""

    def __init__(self, top_k: int = 10, depth: int = 4, total: int = 59, sampled: bool = False,
                 checks: Sequence[int] = (), threshold: float = -np.inf) -> None:
        if top_k < 1 or depth < 0 or total < 2:
            raise ValueError("EAGLE-2 tree needs top_k >= 1, depth >= 0 and total >= 2")
        self.top_k, self.depth, self.total = top_k, depth, total
        self.sampled, self.checks, self.threshold = sampled, set(checks), threshold
        self.uniforms = (1 + depth * top_k) * top_k if sampled else 0

    def build(self, q_root: np.ndarray, draft: DraftFn, u: np.ndarray) -> BuiltTree:
        K = self.top_k
        parents, tokens, scores = [-1], [0], [0.0]
        slot = 0

        def expand(v: int, q: np.ndarray) -> list[int]:
            nonlocal slot
            kids = propose(q, K, u[slot * K :] if self.sampled else None)
            slot += 1
            new = []
            for t in kids:
                parents.append(v)
                tokens.append(int(t))
                scores.append(scores[v] + float(np.log(q[t])))
                new.append(len(parents) - 1)
            return new

        layer = expand(0, q_root)
        calls = 1
        for _ in range(self.depth):
            beam = sorted(layer, key=lambda v: (-scores[v], v))[:K]
            if calls + 1 in self.checks and np.logaddexp.reduce([scores[v] for v in beam]) < self.threshold:
                break
            rows = draft(np.array(parents), np.array(tokens), np.array(beam, dtype=np.int64))
            calls += 1
            layer = [c for i, v in enumerate(beam) for c in expand(v, rows[i])]
        pool = np.arange(1, len(parents))
        depth_of = tree_depths(np.array(parents))
        best = sorted(pool, key=lambda v: (-scores[v], depth_of[v], v))[: self.total - 1]
        keep = np.zeros(len(parents), dtype=bool)
        keep[0] = True
        keep[best] = True
        for v in best:  # close under ancestors (scores never increase along a path, so a no-op)
            while v > 0 and not keep[parents[v]]:
                keep[parents[v]] = True
                v = parents[v]
        return BuiltTree(_subtree(np.array(parents), np.array(tokens), keep), calls)


def _subtree(parents: np.ndarray, tokens: np.ndarray, keep: np.ndarray) -> Tree:
    """Kept nodes (ancestor-closed, node order preserved) as a Tree."""
    ids = np.flatnonzero(keep)
    new = -np.ones(parents.size, dtype=np.int64)
    new[ids] = np.arange(ids.size)
    return Tree(np.array([-1] + [new[parents[v]] for v in ids[1:]], dtype=np.int64), tokens[ids])


def policy_from_spec(tree: str, rule: str, **kw: object) -> tuple[object, int]:
    """A tree policy by name (``simulate.policies`` when installed) and its uniforms per step.

    ``static``: ``choices`` (a name such as ``mc_sim_7b_63`` or a JSON list of rank
    paths); ``eagle2``: ``top_k``, ``depth``, ``total`` (LANTERN's LlamaGen defaults
    10, 4, 59); ``ddd``: EAGLE-2 with ``checks`` (5, 7, 9), ``threshold`` (-0.3) and
    ``max_calls`` (11) in place of ``depth``.
    """
    try:
        from simulate import policies  # type: ignore[attr-defined]
    except ImportError:
        policies = None
    if policies is not None and hasattr(policies, "from_spec"):
        return policies.from_spec(tree, rule=rule, **kw)
    sampled = rule == "r2"
    try:
        if tree == "static":
            choices = kw.pop("choices", "mc_sim_7b_63")
            if isinstance(choices, str):
                if choices not in NAMED_CHOICES:
                    raise ValueError(f"unknown static tree {choices!r}; known: {sorted(NAMED_CHOICES)}")
                choices = NAMED_CHOICES[choices]
            policy: StaticTree | EagleTree = StaticTree(choices, sampled=sampled, **kw)  # type: ignore[arg-type]
        elif tree == "eagle2":
            policy = EagleTree(sampled=sampled, **kw)  # type: ignore[arg-type]
        elif tree == "ddd":
            calls = int(kw.pop("max_calls", 11))
            policy = EagleTree(depth=calls - 1, sampled=sampled, checks=tuple(kw.pop("checks", (5, 7, 9))),
                               threshold=float(kw.pop("threshold", -0.3)), **kw)  # type: ignore[arg-type]
        else:
            raise ValueError(f"unknown tree policy {tree!r}; expected static, eagle2 or ddd")
    except TypeError as err:
        raise ValueError(f"bad arguments for tree policy {tree!r}: {err}") from err
    return policy, policy.uniforms
