"""Shared helpers of the tests of SPEC 10's methods (coupled and SJD-PAC windows, VVS)."""

from __future__ import annotations

import numpy as np

from relaxspec.theory.window_walk import column_tree


def random_window(rng: np.random.Generator, V: int, repeats: bool):
    """Columns (L, W) padded with -1, their laws (every candidate with mass), target rows at every node
    of the column tree (some zeros) and per-node uniforms."""
    L, W = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    cols = np.full((L, W), -1, dtype=np.int64)
    for c in range(L):
        w = int(rng.integers(1, W + 1))
        cols[c, :w] = rng.integers(0, V, size=w) if repeats else rng.choice(V, size=w, replace=False)
    tree = column_tree(int(rng.integers(V)), cols)
    p = rng.dirichlet(np.full(V, 0.5), size=tree.size)
    p[rng.random(p.shape) < 0.2] = 0.0
    p[np.arange(tree.size), rng.integers(V, size=tree.size)] += 0.1
    p /= p.sum(axis=1, keepdims=True)
    q = rng.dirichlet(np.ones(V), size=L)
    for c in range(L):
        q[c, cols[c][cols[c] >= 0]] += 0.2
    q /= q.sum(axis=1, keepdims=True)
    return cols, tree, p, q, rng.random(tree.size), rng.random(tree.size)
