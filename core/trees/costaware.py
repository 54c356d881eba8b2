"""Cost-aware static tree sizes (issue 7, item 4) on the cost model of SPEC section 8.

:func:`choose_static_size`: among Sequoia trees with at most ``max_nodes``
nodes and depth at most ``max_depth`` for a measured positional acceptance
vector, the one whose predicted speedup (Sequoia's DP value for E[tokens],
the tree's own node count and depth for the cost, :class:`core.cost.CostModel`)
is largest, not the one with most tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from relaxspec.core.cost import CostModel
from relaxspec.core.trees.sequoia import sequoia_table


@dataclass(frozen=True)
class SizeChoice:
    """The cost-aware size and the grid it was chosen from."""

    n_nodes: int  # the chosen tree's draft nodes
    depth: int
    choices: list  # its rank paths
    tokens: float  # predicted E[tokens per step]
    speedup: float  # predicted speedup
    grid: list  # (max_nodes, max_depth, nodes, depth, tokens, speedup) for every candidate


def choose_static_size(acceptance, cost: CostModel, max_nodes: int, max_depth: int) -> SizeChoice:
    """The Sequoia tree (at most ``max_nodes`` nodes, depth at most ``max_depth``) of largest predicted
    speedup; ties go to the smaller tree. A static tree makes one draft call per level with children."""
    table = sequoia_table(acceptance, max_nodes, max_depth)  # validates its arguments
    grid = []
    best = None
    for d in range(1, int(max_depth) + 1):
        for n in range(1, int(max_nodes) + 1):
            paths, value = table.choices(n, d)
            if not paths:
                continue
            size, depth = len(paths), max(len(p) for p in paths)
            s = cost.speedup(1.0 + value, size + 1, depth)
            grid.append((n, d, size, depth, 1.0 + value, s))
            if best is None or s > best.speedup or (s == best.speedup and size < best.n_nodes):
                best = SizeChoice(size, depth, paths, 1.0 + value, s, grid)
    if best is None:
        raise ValueError("the acceptance vector is all zero: no tree pays")
    return best
