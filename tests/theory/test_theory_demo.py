"""The theory demo (theory.demo) on small vocabularies: its exact rows obey the proved
bounds and its Monte Carlo R2 rows are unbiased for the exact values."""


import numpy as np
import pytest
from scipy import stats

from relaxspec.theory import (
    Relax,
    node_outcome,
    optimal_multidraft_acceptance,
    r2_tv_bound,
    total_variation,
)
from relaxspec.theory.demo import exact_rows, make_example, r2_rows, relaxations, report
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.verification import Verification


def test_theory_demo_example_is_flat_with_top_children():
    ex = make_example(3, vocab_size=400, k_max=50)
    assert ex.p.max() == pytest.approx(0.1, abs=1e-9)
    np.testing.assert_array_equal(ex.children, np.argsort(-ex.q, kind="stable")[:4])
    assert ex.neighbours.shape == (400, 50)
    assert 0.0 < total_variation(ex.p, ex.q) < 1.0


@pytest.mark.parametrize("relax", relaxations(40)[1:])
def test_theory_demo_exact_rows_obey_the_bounds(relax):
    ex = make_example(0, vocab_size=300, k_max=41)
    for row in exact_rows(ex, relax, ["principled", "official"]):
        assert row.tv <= row.bound + 1e-12
        if row.rule == "r1" and row.variant == "principled":
            assert row.bound <= row.nominal + 1e-12


@pytest.mark.parametrize("relax", [Relax.none(), Relax.additive(3, 0.1),
                                   Relax.multiplicative(3, 2.0)])
def test_theory_demo_r2_monte_carlo_is_unbiased(relax):
    ex = make_example(1, vocab_size=9, k_max=8, m=3)
    rng = np.random.default_rng(5)
    orders = np.array([draw_without_replacement(ex.q, rng.random(3)) for _ in range(400)])
    z = stats.norm.isf(1e-6 / 2 / 6)  # six two-sided comparisons, 1e-6 in all
    for row in r2_rows(ex, relax, ["principled", "official"], orders):
        out = node_outcome(ex.p, 3, Verification("r2", relax, row.variant), neighbours=ex.neighbours, q=ex.q)
        S = ex.q > ex.p
        exact = {
            "accept": 1.0 - out.reject_prob,
            "tv_lower": float(out.emitted[S].sum() - ex.p[S].sum()),
            "bound": r2_tv_bound(ex.p, ex.q, 3, relax=relax, neighbours=ex.neighbours,
                                 variant=row.variant, coarse=True),
        }
        assert exact["tv_lower"] <= out.tv + 1e-12 and out.tv <= exact["bound"] + 1e-9
        for name, se in (("accept", row.se_accept), ("tv_lower", row.se_tv),
                         ("bound", row.se_bound)):
            estimate = row.tv_lower if name == "tv_lower" else getattr(row, name)
            assert abs(estimate - exact[name]) <= z * se + 1e-12, (name, estimate, exact[name])


def test_theory_demo_report_has_every_row():
    text = report(0, vocab_size=300, k=20, n_orders=20)
    table = [line for line in text.splitlines() if line[:3] in ("r1 ", "r2 ", "r3 ")]
    # per rule: none once, then 7 relaxations x 2 variants (R3 has no variant)
    assert len(table) == 15 + 15 + 8
    assert "MC 20 orders" in text and "additive:k=20,delta=0.4" in text


def test_theory_demo_findings_at_llamagen_size():
    """The numbers docs/theory.md quotes from `relaxspec theory demo` (seed 0, V = 16384)."""
    ex = make_example(0)
    assert ex.p.max() == pytest.approx(0.1, abs=1e-9)
    assert 1.0 - total_variation(ex.p, ex.q) == pytest.approx(0.539, abs=5e-4)
    assert optimal_multidraft_acceptance(ex.p, ex.q, 4) == pytest.approx(0.790, abs=5e-4)
    relax = Relax.additive(1000, 0.05)
    rows = {r.variant + r.rule: r for r in exact_rows(ex, relax, ["principled", "official"])}
    none = exact_rows(ex, Relax.none(), ["principled"])[0]
    assert none.accept == pytest.approx(0.1548, abs=5e-4) and none.tv < 1e-12
    p1, o1 = rows["principledr1"], rows["officialr1"]
    assert (p1.accept, p1.tv, p1.bound, p1.nominal) == pytest.approx(
        (0.2705, 0.1157, 0.1405, 0.1711), abs=5e-4)
    assert (o1.accept, o1.tv, o1.bound) == pytest.approx((0.2295, 0.8370, 0.8918), abs=5e-4)
    rng = np.random.default_rng([0, 1])
    orders = np.array([draw_without_replacement(ex.q, rng.random(4)) for _ in range(200)])
    for row in r2_rows(ex, relax, ["principled"], orders):
        assert row.accept > 0.99
        # TV(emitted, p) >= E(S) - p(S) exceeds 4 delta with a 5-sigma margin
        assert row.tv_lower - 5 * row.se_tv > 4 * relax.delta
