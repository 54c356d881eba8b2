"""Sequoia's optimal static tree (SPEC section 5) and its positional acceptance vector.

Given a positional acceptance vector a (a[i] = probability that the rank-i
child is the accepted one, given its parent was reached), the tree of at most
``n_nodes`` draft nodes and depth at most ``max_depth`` maximising
E[accepted drafts] = sum over nodes v of prod of a along v's path is found by
dynamic programming over (nodes, ranks, depth): with f[d][n] the best value
below a node with n nodes and depth budget d,

    g[d][i][n] = max(0, max_{1 <= s <= n} a[i] (1 + f[d-1][s-1]) + g[d][i+1][n-s]),
    f[d][n]    = g[d][0][n],

children ranks forming a prefix 0..m-1 (the rank-i child is only drafted with
ranks 0..i-1). Ties go to the smaller subtree for the earlier rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relaxspec.core.trees.policies import StaticTree
from relaxspec.core.trees.selection import ChildSelector


@dataclass(frozen=True)
class SequoiaTable:
    """The dynamic program's tables for every node budget <= n and depth <= D (see the module docstring)."""

    acceptance: np.ndarray
    f: np.ndarray  # f[d][m]: best E[accepted drafts] with at most m nodes, depth at most d
    choice: np.ndarray  # choice[d][i][m]: subtree size given to rank i (0 = stop)

    def choices(self, n_nodes: int, max_depth: int) -> tuple[list[list[int]], float]:
        """Rank paths of the optimal tree with at most ``n_nodes`` nodes and depth at most ``max_depth``,
        and its value."""
        D, n = self.f.shape[0] - 1, self.f.shape[1] - 1
        if not (1 <= n_nodes <= n and 1 <= max_depth <= D):
            raise ValueError(f"the table covers n_nodes <= {n} and max_depth <= {D}")
        L = self.acceptance.size
        paths: list[list[int]] = []

        def emit(prefix: list[int], d: int, m: int) -> None:
            i = 0
            while m > 0 and i < L:
                s = int(self.choice[d][i][m])
                if s == 0:
                    break
                paths.append(prefix + [i])
                emit(prefix + [i], d - 1, s - 1)
                m -= s
                i += 1

        emit([], max_depth, n_nodes)
        return paths, float(self.f[max_depth][n_nodes])


def sequoia_table(acceptance: Sequence[float], n_nodes: int, max_depth: int) -> SequoiaTable:
    """Run the dynamic program for budgets up to ``n_nodes`` nodes and depth ``max_depth``."""
    a = np.asarray(acceptance, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise ValueError("acceptance_vector must be a non-empty 1-D array of probabilities in [0, 1]")
    if int(n_nodes) != n_nodes or n_nodes < 1:
        raise ValueError(f"n_nodes must be a positive integer, got {n_nodes!r}")
    if int(max_depth) != max_depth or max_depth < 1:
        raise ValueError(f"max_depth must be a positive integer, got {max_depth!r}")
    n, D, L = int(n_nodes), int(max_depth), a.size
    f = np.zeros((D + 1, n + 1))
    choice = np.zeros((D + 1, L + 1, n + 1), dtype=np.int64)
    for d in range(1, D + 1):
        g = np.zeros((L + 1, n + 1))
        for i in range(L - 1, -1, -1):
            for m in range(1, n + 1):
                s = np.arange(1, m + 1)
                vals = a[i] * (1.0 + f[d - 1][s - 1]) + g[i + 1][m - s]
                best = int(np.argmax(vals))
                if vals[best] > 0.0:
                    g[i][m] = vals[best]
                    choice[d][i][m] = best + 1
        f[d] = g[0]
    return SequoiaTable(a, f, choice)


def sequoia_choices(acceptance: Sequence[float], n_nodes: int,
                    max_depth: int) -> tuple[list[list[int]], float]:
    """Rank paths of the optimal tree and its value E[accepted drafts]."""
    return sequoia_table(acceptance, n_nodes, max_depth).choices(int(n_nodes), int(max_depth))


class SequoiaTree(StaticTree):
    """Sequoia's optimal static tree for a positional acceptance vector.

    ``selector`` ranks each node's children (default: by q, as Sequoia
    does); the acceptance vector should be measured with the same ranking
    (:func:`measure_positional_acceptance`)."""

    def __init__(self, acceptance_vector: Sequence[float], n_nodes: int, max_depth: int,
                 selector: ChildSelector | None = None) -> None:
        choices, value = sequoia_choices(acceptance_vector, n_nodes, max_depth)
        if not choices:
            raise ValueError("the acceptance vector is all zero: the optimal tree is empty")
        mode = "q" if selector is None else selector.mode
        kind = "sequoia" if mode == "q" else f"sequoia-{mode}"
        super().__init__(choices, name=f"{kind}:{int(n_nodes)},{int(max_depth)}", selector=selector)
        self.acceptance_vector = np.asarray(acceptance_vector, dtype=np.float64)
        self.value = value
