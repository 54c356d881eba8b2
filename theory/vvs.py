"""Exact per-token TV of a VVS skip step given its draft tree (SPEC 10.3; docs/theory.md, section 15.5).

A skip step makes no target forward: it picks one root-to-leaf path of the current draft tree uniformly
at random (each leaf equally likely), emits its first gamma = min(L_s, floor(Lbar)) tokens (L_s the
path's length, Lbar the running mean accepted length) and then a bonus token drawn from the last target
distribution held (``stale``). Given the tree, the law of the token at block position i given the
tokens h emitted before it is a mixture: over the leaves whose path starts with h, the point mass on
the path's i-th token where gamma >= i, and ``stale`` where gamma = i - 1 (the bonus). Its TV to the
target's law after h is exact, and so is the step's expected TV sum over its emitted tokens; the largest
of those TVs (:attr:`SkipStepTV.max_tv`) decides a bounded skip (ours, docs/theory.md 15.7).
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


def _leaf_paths(parents: np.ndarray, tokens: np.ndarray) -> list[tuple[int, ...]]:
    n = parents.size
    if n < 1 or parents[0] != -1:
        raise ValueError("parents[0] must be -1 (node 0 is the root, the last committed token)")
    if np.any(parents[1:] < 0) or np.any(parents[1:] >= np.arange(1, n)):
        raise ValueError("every node but the root must have a parent with a smaller index")
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
    tokens_sum = 0.0
    for path in paths:
        gamma = min(len(path), cap)
        tokens_sum += w_leaf * (gamma + 1)
        for i in range(gamma + 1):  # block position i + 1, after the prefix path[:i]
            h = path[:i]
            weight[h] += w_leaf
            if i < gamma:
                mix[h][path[i]] += w_leaf
            else:
                mix[h] += w_leaf * st
    positions = {}
    total = 0.0
    for h, w in weight.items():
        law = mix[h] / w
        p = validate_distribution(target(h), name=f"target{h}")
        if p.size != V:
            raise ValueError(f"target{h} has {p.size} tokens, stale has {V}")
        tv = 0.5 * float(np.abs(law - p).sum())
        positions[h] = (w, law, tv)
        total += w * tv
    return SkipStepTV(positions, tokens_sum, total)


__all__ = ["SkipStepTV", "Target", "skip_step_tv"]
