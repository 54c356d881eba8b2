"""theory.rules: the one encoder of (rule, relaxation, variant, table) that theory and the kernels share."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.core.trees.selection import ChildSelector
from relaxspec.theory.boost import Boost
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import RELAX_MULTIPLICATIVE, VARIANT_OFFICIAL, Relax
from relaxspec.theory.rules import (
    BOOST_BUDGET,
    BOOST_NONE,
    RULE_R2,
    budget_index_dtype,
    budget_table,
    neighbour_rows,
    relax_args,
    rows_read,
    rule_table,
)
from relaxspec.theory.verification import Verification

NB = neighbour_table(np.random.default_rng(0).normal(size=(12, 2)), k_max=11)


@pytest.mark.parametrize("relax, variant, width", [
    (Relax.none(), "principled", 0), (Relax.none(), "official", 0), (Relax.additive(4, 0.1), "principled", 4),
    (Relax.additive(4, 0.1), "official", 5), (Relax.multiplicative(11, 2.0), "official", 11),
])
def test_rules_read_k_or_k_plus_one_columns(relax, variant, width) -> None:
    assert rule_table(NB, 12, relax, variant).shape == (12, min(width, 11))
    assert rows_read(relax, variant) == (0 if relax.is_exact else relax.k + (variant == "official"))
    table = rule_table(NB, 12, relax, variant)
    assert table.dtype == np.int32 and table.flags.c_contiguous
    np.testing.assert_array_equal(table, neighbour_rows(NB, 12, relax)[:, :table.shape[1]])


def test_one_encoding_for_the_kernels_and_the_selection() -> None:
    relax = Relax.multiplicative(4, 3.0)
    enc = Verification("r2", relax, "official").encode(12, neighbours=NB)
    assert enc.rs[:5] == (RULE_R2, RELAX_MULTIPLICATIVE, 4, 3.0, VARIANT_OFFICIAL) == (2, 2, 4, 3.0, 1)
    np.testing.assert_array_equal(enc.rs[5], rule_table(NB, 12, relax, "official"))
    assert enc.bs[0] == BOOST_NONE and enc.verification == Verification("r2", relax, "official")
    assert ChildSelector("latent", relax, NB).kernel_args()[2:5] == relax_args(relax)
    budget = Verification.parse("r4+budget:tv=0.25,k=3").encode(12, neighbours=NB)
    assert (budget.bs[0], budget.bs[8]) == (BOOST_BUDGET, 0.25)
    np.testing.assert_array_equal(budget.budget_table, NB[:, :3])


def test_the_budget_table_is_as_narrow_as_its_ids() -> None:
    """uint16 while every id fits (V <= 65536: the V x k gather reads half the bytes of int32), int32 above;
    the same ids either way, the unused tables of the other boosts alike, and an id past V refused before
    it is narrowed (not wrapped into range)."""
    budget = Boost.budget(0.25, 3)
    assert budget_index_dtype(12) == budget_index_dtype(1 << 16) == np.uint16
    assert budget_index_dtype((1 << 16) + 1) == np.int32
    table = budget_table(budget, NB, 12)
    assert table.dtype == np.uint16 and table.flags.c_contiguous
    np.testing.assert_array_equal(table, NB[:, :3])
    for spec in ("r2+gsd:G=3", "r2+cool:delta=2", "r2"):
        assert Verification.parse(spec).encode(12, neighbours=NB, emb=np.eye(12)).bs[9].dtype == np.uint16
    wide = NB.astype(np.int64)
    wide[5, 1] = 3 + (1 << 16)  # narrowed to uint16 it would be token 3, in range
    with pytest.raises(ValueError, match="outside"):
        budget_table(budget, wide, 12)


@pytest.mark.parametrize("args, match", [
    (("r5", Relax.none(), "principled"), "unknown rule"),
    (("r1", Relax.none(), "offical"), "unknown variant"),
    (("r1", "additive:k=1,delta=0.1", "principled"), "relaxspec.theory.Relax"),
])
def test_bad_rules_are_named(args, match) -> None:
    with pytest.raises(ValueError, match=match):
        Verification(*args).encode(12)
    with pytest.raises(ValueError, match="needs a neighbour table"):
        rule_table(None, 12, Relax.additive(2, 0.1), "principled")
