"""The one encoder and validator of a verification rule: (rule, relaxation, variant, neighbour table).

Every layer names a rule the same way (SPEC section 3): ``rule`` r1, r2 or r3,
a :class:`~theory.relax.Relax`, a ``variant`` (``principled`` = SPEC,
``official`` = the published codes' rejection update) and the neighbour
table the relaxation reads. The official variant zeroes x and its first
k + 1 neighbours on a rejection, so it reads k + 1 columns of the table
(:func:`rows_read`). The Numba kernels take the same rule as plain integers
(:func:`encode`, :func:`relax_args`) and the columns it reads as a contiguous
int32 table (:func:`rule_table`); theory reads the int64 table of
:func:`neighbour_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from theory.neighbours import validate_neighbours
from theory.relax import Relax

RULES = ("r1", "r2", "r3")
VARIANTS = ("principled", "official")
RULE_CODES = {"r1": 1, "r2": 2, "r3": 3}
VARIANT_CODES = {"principled": 0, "official": 1}


def check_rule(rule: str, variant: str) -> None:
    """Raise ``ValueError`` for an unknown rule or variant."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {RULES}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")


def rows_read(relax: Relax, variant: str) -> int:
    """How many leading columns of a neighbour row a rule reads: 0 (exact), k, or k + 1 (official)."""
    if relax.is_exact:
        return 0
    return relax.k + 1 if variant == "official" else relax.k


def _checked_table(neighbours: np.ndarray | None, vocab_size: int, relax: Relax) -> np.ndarray:
    if neighbours is None:
        raise ValueError(f"relaxation {relax} needs a neighbour table")
    validate_neighbours(neighbours, vocab_size, relax.k)
    return neighbours


def neighbour_rows(neighbours: np.ndarray | None, vocab_size: int, relax: Relax, variant: str) -> np.ndarray:
    """Validate the table for ``relax`` and return it whole as int64 (theory's form; empty when unused)."""
    if relax.is_exact:
        return np.zeros((vocab_size, 0), dtype=np.int64)
    return np.asarray(_checked_table(neighbours, vocab_size, relax), dtype=np.int64)


def rule_table(neighbours: np.ndarray | None, vocab_size: int, relax: Relax, variant: str) -> np.ndarray:
    """Validate the table and keep only the columns the rule reads, C-contiguous int32 (the kernels' form;
    converting just those columns, not a V x 1024 table)."""
    if relax.is_exact:
        return np.zeros((vocab_size, 0), dtype=np.int32)
    table = _checked_table(neighbours, vocab_size, relax)
    width = min(table.shape[1], rows_read(relax, variant))
    return np.ascontiguousarray(table[:, :width], dtype=np.int32)


def relax_args(relax: Relax) -> tuple[int, int, float]:
    """A relaxation as the kernels take it: ``(code, k, param)`` (code 0 none, 1 additive,
    2 multiplicative; param delta or lam)."""
    if not isinstance(relax, Relax):
        raise ValueError(f"relax must be a theory.Relax, got {type(relax).__name__}")
    return relax.code, relax.k, float(relax.param)


@dataclass(frozen=True)
class EncodedRule:
    """A verification rule as plain integers and a float (what the Numba kernels take)."""

    rule: int
    code: int
    k: int
    param: float
    variant: int


def encode(rule: str, relax: Relax, variant: str = "principled") -> EncodedRule:
    """Validate and encode a rule (see the module docstring)."""
    check_rule(rule, variant)
    return EncodedRule(RULE_CODES[rule], *relax_args(relax), VARIANT_CODES[variant])
