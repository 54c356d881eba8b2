"""Exact per-token TV of a VVS skip step given its draft tree (SPEC 10.3; docs/theory.md, section 15.5).

A skip step makes no target forward: it picks one root-to-leaf path of the current draft tree uniformly
at random (each leaf equally likely), emits its first gamma = min(L_s, floor(Lbar)) tokens (L_s the
path's length, Lbar the running mean accepted length) and then a bonus token drawn from the last target
distribution held (``stale``). Given the tree, the law of the token at block position i given the
tokens h emitted before it is a mixture: over the leaves whose path starts with h, the point mass on
the path's i-th token where gamma >= i, and ``stale`` where gamma = i - 1 (the bonus). Its TV to the
target's law after h is exact, and so is the step's expected TV sum over its emitted tokens; the largest
of those TVs (:attr:`SkipStepTV.max_tv`) decides a bounded skip (ours, docs/theory.md 15.7).

The skip step's own rules live here too, one home for the simulator's oracle (``simulate.vvs_oracle``)
and the reference decoder (``reference.vvs``): the leaves in node order and the path a skip step emits
(:func:`skip_path`) with its expected length (:func:`skip_expected_tokens`: a replayed trace's skip
steps, ``simulate.replay``), the dynamic schedule's score (:func:`path_similarity`), and the TV of each
token a skip step emitted, computed after the fact from the target rows after its emitted prefixes
(:func:`skip_token_tvs`: what a decoder learns from the next target forward).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.distributions import validate_distribution

Target = Callable[[tuple[int, ...]], np.ndarray]
"""The target's law of the next token after the committed prefix followed by the given tokens."""


@dataclass(frozen=True)
class SkipStepTV:
    """A skip step's exact distortion given its tree.

    ``positions`` maps each prefix h the step can emit (tuple of tokens) to ``(weight, law, tv)``:
    the probability that the step emits a token after h, that token's law given h, and its TV to the
    target after h. ``expected_tokens`` = E[gamma + 1]; ``expected_tv`` = E[sum of the emitted tokens'
    TVs] = sum_h weight(h) tv(h)."""

    positions: dict[tuple[int, ...], tuple[float, np.ndarray, float]]
    expected_tokens: float
    expected_tv: float

    @property
    def tv_per_token(self) -> float:
        """Expected TV sum over expected tokens: the step's exact TV per emitted token."""
        return self.expected_tv / self.expected_tokens

    @property
    def max_tv(self) -> float:
        """The largest TV of a token the step can emit (over every prefix h it emits a token after): a
        bounded skip schedule (docs/theory.md 15.7) skips only when it is at most its bound."""
        return max(tv for _, _, tv in self.positions.values())


def _check_parents(parents: np.ndarray) -> None:
    n = parents.size
    if n < 1 or parents[0] != -1:
        raise ValueError("parents[0] must be -1 (node 0 is the root, the last committed token)")
    if np.any(parents[1:] < 0) or np.any(parents[1:] >= np.arange(1, n)):
        raise ValueError("every node but the root must have a parent with a smaller index")


def _leaf_paths(parents: np.ndarray, tokens: np.ndarray) -> list[tuple[int, ...]]:
    _check_parents(parents)
    n = parents.size
    has_child = np.zeros(n, dtype=bool)
    has_child[parents[1:]] = True
    paths = []
    for leaf in np.flatnonzero(~has_child):
        path, v = [], int(leaf)
        while v != 0:
            path.append(int(tokens[v]))
            v = int(parents[v])
        paths.append(tuple(reversed(path)))
    return paths


def leaves(parents: np.ndarray) -> np.ndarray:
    """The leaves of a tree (parent array, root 0, parents before children) in node order."""
    par = np.asarray(parents, dtype=np.int64)
    has_child = np.zeros(par.size, dtype=bool)
    has_child[par[1:]] = True
    return np.flatnonzero(~has_child)


def root_path(parents: np.ndarray, v: int) -> list[int]:
    """The nodes from the root to ``v``."""
    out = [int(v)]
    while out[-1] != 0:
        out.append(int(parents[out[-1]]))
    return out[::-1]


def skip_path(parents: np.ndarray, u_leaf: float, cap: int) -> list[int]:
    """The nodes a skip step emits, root first: leaf ``floor(u_leaf * n_leaves)`` of :func:`leaves` (each
    leaf equally likely), its root path cut after ``cap`` = floor(Lbar) drafts (gamma = min(L_s, cap))."""
    if not 0.0 <= u_leaf < 1.0:
        raise ValueError(f"u_leaf must be a uniform in [0, 1), got {u_leaf!r}")
    if isinstance(cap, bool) or int(cap) != cap or cap < 0:
        raise ValueError(f"cap must be an integer >= 0, got {cap!r}")
    chosen = leaves(parents)
    leaf = chosen[min(int(u_leaf * chosen.size), chosen.size - 1)]
    return root_path(parents, int(leaf))[: int(cap) + 1]


def unit_rows(table: np.ndarray) -> np.ndarray:
    """A code table (V, d) as float64 rows scaled to unit length (a zero row stays zero)."""
    emb = np.asarray(table, dtype=np.float64)
    norm = np.linalg.norm(emb, axis=1, keepdims=True)
    return np.ascontiguousarray(np.divide(emb, norm, out=np.zeros_like(emb), where=norm > 0))


def path_similarity(parents: np.ndarray, tokens: np.ndarray, emb: np.ndarray, alpha: float) -> float:
    """VVS's dynamic score of a tree: at each depth l >= 1 where at least two root-to-leaf paths have a
    node, the mean cosine of the code vectors (``emb``: unit rows, :func:`unit_rows`) of those nodes'
    tokens over pairs of paths; averaged over those depths with weights alpha^(l-1); NaN when no depth
    has two paths."""
    paths = [root_path(parents, int(leaf)) for leaf in leaves(parents)]
    num = den = 0.0
    weight = 1.0
    for lev in range(1, max(len(p) for p in paths)):
        x = np.array([tokens[p[lev]] for p in paths if len(p) > lev], dtype=np.int64)
        if x.size >= 2:
            gram = emb[x] @ emb[x].T
            num += weight * float(gram[np.triu_indices(x.size, 1)].mean())
            den += weight
        weight *= alpha
    return num / den if den > 0.0 else float("nan")


def skip_laws(parents: np.ndarray, tokens: np.ndarray, stale: np.ndarray, mean_accepted: float
              ) -> tuple[dict[tuple[int, ...], tuple[float, np.ndarray]], float]:
    """A skip step's token laws given its tree (module docstring), without the target: ``({h: (weight,
    law)}, E[gamma + 1])`` over every prefix h the step can emit (arguments: :func:`skip_step_tv`)."""
    par = np.asarray(parents, dtype=np.int64)
    tok = np.asarray(tokens, dtype=np.int64)
    if tok.shape != par.shape:
        raise ValueError(f"tokens must have the shape of parents {par.shape}, got {tok.shape}")
    st = validate_distribution(stale, name="stale")
    V = st.size
    if np.any((tok[1:] < 0) | (tok[1:] >= V)):
        raise ValueError(f"tokens must lie in [0, {V})")
    lbar = float(mean_accepted)
    if not math.isfinite(lbar) or lbar < 0.0:
        raise ValueError(f"mean_accepted must be a finite number >= 0, got {mean_accepted!r}")
    cap = math.floor(lbar)
    paths = _leaf_paths(par, tok)
    w_leaf = 1.0 / len(paths)
    weight: dict[tuple[int, ...], float] = defaultdict(float)
    mix: dict[tuple[int, ...], np.ndarray] = defaultdict(lambda: np.zeros(V))
    for path in paths:
        gamma = min(len(path), cap)
        for i in range(gamma + 1):  # block position i + 1, after the prefix path[:i]
            h = path[:i]
            weight[h] += w_leaf
            if i < gamma:
                mix[h][path[i]] += w_leaf
            else:
                mix[h] += w_leaf * st
    return {h: (w, mix[h] / w) for h, w in weight.items()}, skip_expected_tokens(par, lbar)


def skip_expected_tokens(parents: np.ndarray, mean_accepted: float) -> float:
    """E[gamma + 1] of a skip step given its tree: the leaf uniform over the leaves (node order, as
    :func:`skip_path` draws it), gamma = min(its depth, floor(Lbar)), plus the stale bonus. It reads no
    law: how many tokens a skip emits depends on the tree's shape and Lbar alone."""
    par = np.asarray(parents, dtype=np.int64)
    _check_parents(par)
    lbar = float(mean_accepted)
    if not math.isfinite(lbar) or lbar < 0.0:
        raise ValueError(f"mean_accepted must be a finite number >= 0, got {mean_accepted!r}")
    cap = math.floor(lbar)
    ends = leaves(par)
    w_leaf = 1.0 / ends.size
    total = 0.0
    for leaf in ends:  # leaves in node order, summed as skip_laws always did (its E[gamma + 1] is this)
        total += w_leaf * (min(len(root_path(par, int(leaf))) - 1, cap) + 1)
    return total


def skip_step_tv(parents: np.ndarray, tokens: np.ndarray, target: Target, stale: np.ndarray,
                 mean_accepted: float) -> SkipStepTV:
    """The exact per-token TV of one VVS skip step (module docstring).

    Parameters
    ----------
    parents : (N,) int, ``parents[0] = -1`` (the root), every other parent of smaller index.
    tokens : (N,) the nodes' tokens (the root's is not read).
    target : the target's law after the committed prefix and a tuple of tokens.
    stale : (V,) the last target distribution held, the bonus token's law.
    mean_accepted : Lbar >= 0, the running mean accepted length (gamma = min(L_s, floor(Lbar))).
    """
    laws, tokens_sum = skip_laws(parents, tokens, stale, mean_accepted)
    V = np.asarray(stale).size
    positions = {}
    total = 0.0
    for h, (w, law) in laws.items():
        p = validate_distribution(target(h), name=f"target{h}")
        if p.size != V:
            raise ValueError(f"target{h} has {p.size} tokens, stale has {V}")
        tv = 0.5 * float(np.abs(law - p).sum())
        positions[h] = (w, law, tv)
        total += w * tv
    return SkipStepTV(positions, tokens_sum, total)


def skip_token_tvs(parents: np.ndarray, tokens: np.ndarray, stale: np.ndarray, mean_accepted: float,
                   emitted: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The TV of each token a skip step emitted, after the fact: token i (``emitted[i]``, the drafts
    then the bonus) has the law :func:`skip_laws` gives after ``emitted[:i]``, and ``rows[i]`` is the
    target's law after the committed prefix and ``emitted[:i]`` (what the next target forward computes
    at the skipped tokens). Returns (len(emitted),) TVs, each ``skip_step_tv``'s value at that prefix."""
    laws, _ = skip_laws(parents, tokens, stale, mean_accepted)
    em = [int(x) for x in np.asarray(emitted).ravel()]
    rows = np.asarray(rows, dtype=np.float64)
    if rows.shape != (len(em), np.asarray(stale).size):
        raise ValueError(f"rows must have shape ({len(em)}, V), one target row per emitted token, got "
                         f"{rows.shape}")
    out = np.empty(len(em))
    for i in range(len(em)):
        h = tuple(em[:i])
        if h not in laws:
            raise ValueError(f"the step cannot emit a token after {list(h)}: not a prefix of its tree's "
                             "paths within gamma")
        p = validate_distribution(rows[i], name=f"rows[{i}]")
        out[i] = 0.5 * float(np.abs(laws[h][1] - p).sum())
    return out


__all__ = ["SkipStepTV", "Target", "leaves", "path_similarity", "root_path", "skip_expected_tokens",
           "skip_laws", "skip_path", "skip_step_tv", "skip_token_tvs", "unit_rows"]
