"""Draft trees: policies (SPEC section 5), child selection, Sequoia's optimal trees, spec strings."""

from relaxspec.core.trees.policies import (
    BuiltTree,
    DDDTree,
    Eagle2Tree,
    LatentAwareTree,
    StaticTree,
    TreePolicy,
)
from relaxspec.core.trees.selection import ChildSelector
from relaxspec.core.trees.sequoia import SequoiaTree, sequoia_choices

__all__ = [
    "BuiltTree",
    "ChildSelector",
    "DDDTree",
    "Eagle2Tree",
    "LatentAwareTree",
    "SequoiaTree",
    "StaticTree",
    "TreePolicy",
    "sequoia_choices",
]
