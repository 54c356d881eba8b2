"""The strategies and statistical helpers the tests/test_theory_*.py files share.

They live in the installed :mod:`relaxspec.testing` (issue 20: users property-test their own
rules with them); this module keeps the names the tests import.
"""

from __future__ import annotations

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

__all__ = [
    "VARIANTS",
    "Node",
    "assert_counts_match",
    "binomial_bounds",
    "distributions",
    "neighbour_tables",
    "nodes",
    "relaxations",
    "weights_to_dist",
]
