"""The strategies and statistical helpers the tests/theory/test_theory_*.py files share.

They live in the installed :mod:`relaxspec.testing` (issue 20: users property-test their own
rules with them); this module keeps the names the tests import.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from relaxspec.testing.stats import assert_counts_match, binomial_bounds
from relaxspec.testing.strategies import (
    VARIANTS,
    Node,
    distributions,
    neighbour_tables,
    nodes,
    relaxations,
    weights_to_dist,
)

# The smallest case where a running sum of a distribution's masses passes 1 by rounding (issue 26 item 19):
# 0.34 + 0.56 + 0.10 = 1.0000000000000002, so a sum capped at 1 drops token 0's last neighbour.
ROUNDING_P = np.array([0.0, 0.34, 0.56, 0.10])
ROUNDING_Q = np.array([0.94, 0.02, 0.02, 0.02])
ROUNDING_NB = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])


@st.composite
def full_neighbourhoods(draw: st.DrawFn, max_v: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(p, q, nb, x)``: p has no mass on x, so x's V - 1 neighbours (every other token, in a drawn
    order: ``nb`` has width V - 1) carry all of p and their sequential sum is 1 up to rounding, often
    just above it; q puts 0.9 or more on x, so the budget needs nearly all of that mass."""
    V = draw(st.integers(3, max_v))
    x = draw(st.integers(0, V - 1))
    mass = st.one_of(st.sampled_from([0.1, 0.34, 0.56, 0.7, 1 / 3]), st.floats(0.01, 1.0))
    w = np.array(draw(st.lists(mass, min_size=V - 1, max_size=V - 1)))
    p = np.insert(weights_to_dist(w), x, 0.0)
    nb = np.array([draw(st.permutations([t for t in range(V) if t != y])) for y in range(V)], dtype=np.int64)
    qx = draw(st.floats(0.9, 0.999))
    q = np.full(V, (1.0 - qx) / (V - 1))
    q[x] = qx
    return p, q / q.sum(), nb, x


__all__ = [
    "ROUNDING_NB",
    "ROUNDING_P",
    "ROUNDING_Q",
    "VARIANTS",
    "Node",
    "assert_counts_match",
    "binomial_bounds",
    "distributions",
    "full_neighbourhoods",
    "neighbour_tables",
    "nodes",
    "relaxations",
    "weights_to_dist",
]
