"""Optimal lossless multi-draft acceptance (theory.multidraft)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_strategies import distributions

from theory import (
    node_outcome,
    optimal_deterministic_acceptance,
    optimal_multidraft_acceptance,
    total_variation,
)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), V=st.integers(1, 10), k=st.integers(1, 8))
def test_theory_multidraft_sorted_prefixes_equal_subset_enumeration(data, V, k):
    """The minimum over all 2^V cuts is attained on a prefix of the p/q order."""
    p = data.draw(distributions(V))
    q = data.draw(distributions(V))
    fast = optimal_multidraft_acceptance(p, q, k)
    brute = optimal_multidraft_acceptance(p, q, k, method="enumerate")
    assert fast == pytest.approx(brute, abs=1e-12)
    assert 0.0 <= fast <= 1.0 + 1e-12


@settings(max_examples=100, deadline=None)
@given(data=st.data(), V=st.integers(1, 40))
def test_theory_multidraft_one_draft_is_one_minus_tv(data, V):
    p = data.draw(distributions(V))
    q = data.draw(distributions(V))
    assert optimal_multidraft_acceptance(p, q, 1) == pytest.approx(
        1.0 - total_variation(p, q), abs=1e-12)
    accs = [optimal_multidraft_acceptance(p, q, k) for k in range(1, 6)]
    assert all(a <= b + 1e-12 for a, b in zip(accs, accs[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), V=st.integers(2, 12))
def test_theory_multidraft_lossless_r2_single_draft_is_optimal(data, V):
    """SpecInfer with one draft attains the optimum 1 - TV(p, q)."""
    p = data.draw(distributions(V))
    q = data.draw(distributions(V))
    out = node_outcome(p, 1, rule="r2", q=q)
    assert 1.0 - out.reject_prob == pytest.approx(optimal_multidraft_acceptance(p, q, 1),
                                                  abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), V=st.integers(2, 40))
def test_theory_multidraft_deterministic_drafts_r1_is_optimal(data, V):
    """Lossless R1 with the fixed draft set S accepts with probability p(S), the optimum."""
    p = data.draw(distributions(V))
    S = data.draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=V, unique=True))
    out = node_outcome(p, S, rule="r1")
    assert 1.0 - out.reject_prob == pytest.approx(optimal_deterministic_acceptance(p, S),
                                                  abs=1e-12)


def test_theory_multidraft_example():
    # p uniform on 2 tokens, q a point mass on token 0: k drafts are all token 0, so only
    # p(0) = 1/2 can be matched whatever k is
    p, q = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    for k in (1, 2, 5):
        assert optimal_multidraft_acceptance(p, q, k) == pytest.approx(0.5)
    # three tokens, p = (1/2, 1/2, 0), q uniform: cut H = {0, 1} gives 1 - 1 + 1 - (1/3)^k
    p3, q3 = np.array([0.5, 0.5, 0.0]), np.full(3, 1 / 3)
    for k in (1, 2, 3):
        assert optimal_multidraft_acceptance(p3, q3, k) == pytest.approx(1 - (1 / 3) ** k)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: optimal_multidraft_acceptance(np.full(2, 0.5), np.full(2, 0.5), 0), ">= 1"),
        (lambda: optimal_multidraft_acceptance(np.full(2, 0.5), np.full(2, 0.5), True), ">= 1"),
        (lambda: optimal_multidraft_acceptance(np.full(2, 0.5), np.full(3, 1 / 3), 1),
         "vocabulary size"),
        (lambda: optimal_multidraft_acceptance(np.full(17, 1 / 17), np.full(17, 1 / 17), 1,
                                               method="enumerate"), "V <= 16"),
        (lambda: optimal_multidraft_acceptance(np.full(2, 0.5), np.full(2, 0.5), 1,
                                               method="greedy"), "unknown method"),
        (lambda: optimal_deterministic_acceptance(np.full(2, 0.5), [0, 0]), "not distinct"),
        (lambda: optimal_deterministic_acceptance(np.array([0.5, np.nan]), [0]), "NaN"),
    ],
)
def test_theory_multidraft_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
