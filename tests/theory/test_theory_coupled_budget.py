"""The budgeted relaxation (SPEC 9.5) on coupled Jacobi windows and SJD-PAC's trees (docs/theory.md 15.6),
exactly by enumeration on tiny Markov targets: every token's conditional TV is at most the budget, the
sequence TV at most the expected charges, tv = 0 is the lossless law, and the bound needs drafts
distributed as their stored laws (SCD's ``official`` coupling breaks it)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxspec.testing.strategies import distributions
from relaxspec.theory.coupled import WindowRule, coupled_budget_law, coupled_sequence_law
from relaxspec.theory.coupled_gumbel import gumbel_sequence_law
from relaxspec.theory.jacobi import markov_sequence_law, token_tvs

TOL = 1e-12
START, TRANS = np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.2, 0.8]])  # docs/theory.md 15.2's target
RULES = {"scd": WindowRule.scd(), "pd": WindowRule.pac(ac=False, width=2, depth=2),
         "pd+ac": WindowRule.pac(width=2, depth=1), "pd+ac wide": WindowRule.pac(width=3, depth=1)}


def _table(V: int, k: int, shift: int) -> np.ndarray:
    """Every token's k nearest neighbours: the other tokens, rotated by ``shift`` (never the token)."""
    return np.array([[(x + 1 + (j + shift) % (V - 1)) % V for j in range(k)] for x in range(V)])


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


def _max_token_tv(law: np.ndarray, start: np.ndarray, trans: np.ndarray) -> float:
    return max(float(np.nanmax(t)) for t in token_tvs(law, start, trans))


@settings(max_examples=24, deadline=None, derandomize=True)
@given(V=st.integers(2, 3), L=st.integers(1, 2), n=st.integers(1, 3), name=st.sampled_from(sorted(RULES)),
       tv=st.sampled_from([0.01, 0.05, 0.2, 1.0]), shift=st.integers(0, 1), data=st.data())
def test_theory_coupled_budget_token_tv_within_the_budget(V, L, n, name, tv, shift, data):
    """Theorem 15.3: each token's law given the emitted prefix is within tv of the target's, and the
    sequence TV is at most the expected charge sum, itself at most n tv."""
    start = data.draw(distributions(V))
    trans = np.array([data.draw(distributions(V)) for _ in range(V)])
    k = data.draw(st.integers(1, V - 1))
    r = coupled_budget_law(start, trans, L, n, RULES[name], verification=f"r2+budget:tv={tv},k={k}",
                           neighbours=_table(V, k, shift))
    assert abs(r.law.sum() - 1.0) < 1e-12
    assert _max_token_tv(r.law, start, trans) <= tv + TOL
    assert _tv(r.law, markov_sequence_law(start, trans, n)) <= r.expected_tv_sum + TOL
    assert r.expected_tv_sum <= n * tv + TOL


@pytest.mark.parametrize("name", sorted(RULES))
def test_theory_coupled_budget_zero_is_the_lossless_rule(name):
    rng = np.random.default_rng(3)
    start, trans = rng.dirichlet(np.ones(3)), rng.dirichlet(np.full(3, 0.6), size=3)
    r = coupled_budget_law(start, trans, 2, 3, RULES[name], verification="r2+budget:tv=0,k=2",
                           neighbours=_table(3, 2, 0))
    np.testing.assert_allclose(r.law, coupled_sequence_law(start, trans, 2, 3, RULES[name]), rtol=0, atol=TOL)
    np.testing.assert_allclose(r.law, markov_sequence_law(start, trans, 3), rtol=0, atol=TOL)
    assert r.expected_tv_sum == 0.0


def test_theory_coupled_budget_hand_case():
    """On 15.2's target (V = 2, each token's neighbour the other one), L = 2, tv = 0.05: SCD's third token
    moves by 0.0335 of the budget's 0.05, and the bound is not vacuous (the law is not the target's)."""
    r = coupled_budget_law(START, TRANS, 2, 3, WindowRule.scd(), verification="r2+budget:tv=0.05,k=1",
                           neighbours=_table(2, 1, 0))
    per_token = [float(np.nanmax(t)) for t in token_tvs(r.law, START, TRANS)]
    np.testing.assert_allclose(per_token, [0.0, 0.0225, 0.033521], atol=1e-6)
    assert abs(_tv(r.law, markov_sequence_law(START, TRANS, 3)) - 0.0464375) < 1e-12
    assert abs(r.expected_tv_sum - 0.1309375) < 1e-12


@settings(max_examples=8, deadline=None, derandomize=True)
@given(V=st.integers(2, 3), L=st.integers(1, 2), tv=st.sampled_from([0.05, 0.2]), data=st.data())
def test_theory_gumbel_budget_token_tv_within_the_budget(V, L, tv, data):
    """The Gumbel coupling's drafts follow their stored laws too (Proposition 15.2): the same bound."""
    start = data.draw(distributions(V))
    trans = np.array([data.draw(distributions(V)) for _ in range(V)])
    law = gumbel_sequence_law(start, trans, L, 3, verification=f"r2+budget:tv={tv},k={V - 1}",
                              neighbours=_table(V, V - 1, 0))
    assert _max_token_tv(law, start, trans) <= tv + TOL
    zero = gumbel_sequence_law(start, trans, L, 3, verification="r2+budget:tv=0,k=1",
                               neighbours=_table(V, 1, 0))
    np.testing.assert_allclose(zero, markov_sequence_law(start, trans, 3), rtol=0, atol=1e-11)


def test_theory_official_coupling_breaks_the_budget_bound():
    """SCD's code stores a kept draft with its old q, which is not its law once kept: the budget's stage
    then overstates what it may move, and the third token's TV exceeds the budget (0.0609 > 0.05)."""
    r = coupled_budget_law(START, TRANS, 2, 3, WindowRule.scd("official"),
                           verification="r2+budget:tv=0.05,k=1",
                           neighbours=_table(2, 1, 0))
    third = float(np.nanmax(token_tvs(r.law, START, TRANS)[2]))
    assert abs(third - 0.060877) < 1e-6 and third > 0.05


def test_theory_coupled_budget_bad_input():
    nb = _table(2, 1, 0)
    with pytest.raises(ValueError, match="official siblings"):
        coupled_budget_law(START, TRANS, 2, 2, WindowRule.pac(width=2, depth=1, siblings="official"),
                           verification="r2+budget:tv=0.1,k=1", neighbours=nb)
    with pytest.raises(ValueError, match="expected rule r2 with the budget"):
        coupled_budget_law(START, TRANS, 2, 2, WindowRule.scd(), verification="r2+cool:delta=2",
                           neighbours=nb)
    with pytest.raises(ValueError, match="neighbour"):
        coupled_budget_law(START, TRANS, 2, 2, WindowRule.scd(), verification="r2+budget:tv=0.1,k=1",
                           neighbours=None)
    with pytest.raises(ValueError, match="law must have shape"):
        token_tvs(np.ones((2, 3)), START, TRANS)
