"""theory.rules: the one encoder of (rule, relaxation, variant, table) that theory and the kernels share."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.core.trees.selection import ChildSelector
from relaxspec.simulate.verify import RuleSpec
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import Relax
from relaxspec.theory.rules import encode, neighbour_rows, relax_args, rows_read, rule_table

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
    np.testing.assert_array_equal(table, neighbour_rows(NB, 12, relax, variant)[:, :table.shape[1]])


def test_one_encoding_for_the_kernels_and_the_selection() -> None:
    relax = Relax.multiplicative(4, 3.0)
    e = encode("r2", relax, "official")
    assert (e.rule, e.code, e.k, e.param, e.variant) == (2, 2, 4, 3.0, 1)
    spec = RuleSpec.make("r2", relax, NB, 12, "official")
    assert spec.args[:5] == (e.rule, e.code, e.k, e.param, e.variant)
    assert ChildSelector("latent", relax, NB).kernel_args()[2:5] == relax_args(relax)


@pytest.mark.parametrize("args, match", [
    (("r5", Relax.none(), "principled"), "unknown rule"),
    (("r1", Relax.none(), "offical"), "unknown variant"),
    (("r1", "additive:k=1,delta=0.1", "principled"), "relaxspec.theory.Relax"),
])
def test_bad_rules_are_named(args, match) -> None:
    with pytest.raises(ValueError, match=match):
        encode(*args)
    with pytest.raises(ValueError, match="needs a neighbour table"):
        rule_table(None, 12, Relax.additive(2, 0.1), "principled")
