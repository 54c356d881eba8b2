"""Optimal lossless multi-draft acceptance (theory.multidraft)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_strategies import distributions

from relaxspec.theory import (
    Boost,
    node_acceptance,
    node_outcome,
    optimal_deterministic_acceptance,
    optimal_multidraft_acceptance,
    optimal_wor_acceptance,
    total_variation,
    wor_all_in_prefixes,
    wor_all_in_table,
)
from relaxspec.theory.verification import Verification


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
    out = node_outcome(p, 1, "r2", q=q)
    assert 1.0 - out.reject_prob == pytest.approx(optimal_multidraft_acceptance(p, q, 1),
                                                  abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), V=st.integers(2, 40))
def test_theory_multidraft_deterministic_drafts_r1_is_optimal(data, V):
    """Lossless R1 with the fixed draft set S accepts with probability p(S), the optimum."""
    p = data.draw(distributions(V))
    S = data.draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=V, unique=True))
    out = node_outcome(p, S, "r1")
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


# ------------------------------------------------------------------ drafts without replacement (SPEC 9.7)
@settings(max_examples=200, deadline=None)
@given(data=st.data(), V=st.integers(1, 9), k=st.integers(1, 5))
def test_theory_wor_level_sets_equal_subset_enumeration(data, V, k):
    """The maximum of P(all k draws in A) - p(A) over all 2^V sets is attained on a level set of p/q."""
    p = data.draw(distributions(V))
    q = data.draw(distributions(V))
    fast = optimal_wor_acceptance(p, q, k)
    brute = optimal_wor_acceptance(p, q, k, method="enumerate")
    assert fast == pytest.approx(brute, abs=1e-12)
    assert optimal_multidraft_acceptance(p, q, k) <= fast + 1e-12  # WOR covers at least i.i.d.


@settings(max_examples=150, deadline=None)
@given(data=st.data(), V=st.integers(2, 8), k=st.integers(1, 5))
def test_theory_wor_marginal_density_is_non_decreasing(data, V, k):
    """The lemma behind the level sets (docs/theory.md, section 13): for x, y outside B,
    [F(B+x+y) - F(B+x)] / q(y) >= [F(B+x) - F(B)] / q(x), F(A) = P(all k draws in A)."""
    q = data.draw(distributions(V)) * 0.9 + 0.1 / V  # full support: the densities are defined
    F = wor_all_in_table(q, k)
    B = data.draw(st.integers(0, 2**V - 1))
    free = [t for t in range(V) if not B >> t & 1]
    if len(free) < 2:
        return
    x, y = data.draw(st.permutations(free))[:2]
    Bx, Bxy = B | 1 << x, B | 1 << x | 1 << y
    assert (F[Bxy] - F[Bx]) / q[y] >= (F[Bx] - F[B]) / q[x] - 1e-9


@settings(max_examples=150, deadline=None)
@given(data=st.data(), V=st.integers(1, 10), k=st.integers(1, 6), tiny=st.booleans())
def test_theory_wor_quadrature_matches_the_exact_table(data, V, k, tiny):
    q = data.draw(distributions(V))
    if tiny:  # draft mass spread over many orders of magnitude
        q = np.where(q > 0, q, 0.0) + np.where(np.arange(V) % 2, 1e-9, 0.0)
        q /= q.sum()
    order = np.array(data.draw(st.permutations(range(V))))
    table = wor_all_in_table(q, k)
    masks = np.concatenate(([0], np.cumsum(1 << order)))
    np.testing.assert_allclose(wor_all_in_prefixes(q, order, k), table[masks], rtol=0, atol=1e-12)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), V=st.integers(2, 8), k=st.integers(1, 4))
def test_theory_wor_optimum_bounds_every_lossless_rule(data, V, k):
    """R2 and R4 with k drafts drawn without replacement never beat the optimum; R1 on the top k of q
    attains the deterministic optimum p(S)."""
    p = data.draw(distributions(V))
    q = data.draw(distributions(V)) * 0.5 + 0.5 / V
    k = min(k, V)
    rep = node_acceptance(p, q, k)
    assert rep.r2 <= rep.optimal_wor + 1e-12
    assert rep.r4 == pytest.approx(rep.r2, abs=1e-12)
    assert rep.r1 == pytest.approx(rep.optimal_deterministic, abs=1e-12)
    assert rep.optimal_iid <= rep.optimal_wor + 1e-12
    assert min(rep.gaps().values()) >= -1e-12


def test_theory_wor_examples():
    # p = (1/2, 1/2, 0), q uniform, two distinct drafts always include token 0 or 1: acceptance 1;
    # i.i.d. drafts miss both with probability (1/3)^2
    p, q = np.array([0.5, 0.5, 0.0]), np.full(3, 1 / 3)
    assert optimal_wor_acceptance(p, q, 2) == pytest.approx(1.0)
    assert optimal_multidraft_acceptance(p, q, 2) == pytest.approx(8 / 9)
    # one draft: 1 - TV; as many drafts as q has tokens: p(supp q)
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(6)), np.array([0.3, 0.3, 0.4, 0.0, 0.0, 0.0])
    assert optimal_wor_acceptance(p, q, 1) == pytest.approx(1 - total_variation(p, q), abs=1e-12)
    assert optimal_wor_acceptance(p, q, 3) == pytest.approx(p[:3].sum(), abs=1e-12)
    assert optimal_wor_acceptance(p, q, 5) == pytest.approx(p[:3].sum(), abs=1e-12)
    # two draws from q = (1/2, 1/4, 1/4) both in A = {1, 2}: 1/4 * 1/3 * 2 = 1/6
    table = wor_all_in_table(np.array([0.5, 0.25, 0.25]), 2)
    assert table[0b110] == pytest.approx(1 / 6) and table[0b111] == pytest.approx(1.0)


def test_theory_wor_at_llamagen_size():
    """V = 16384: the quadrature matches the closed form for two draws at every level set,
    P(both in A) = sum_{a in A} q(a) (q(A) - q(a)) / (1 - q(a)), and the optimum orders the draft
    models (WOR >= i.i.d.)."""
    rng = np.random.default_rng(0)
    V = 16384
    p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
    order = np.argsort(p / q, kind="stable")
    qo = q[order]
    qA = np.concatenate(([0.0], np.cumsum(qo)))
    s1 = np.concatenate(([0.0], np.cumsum(qo / (1 - qo))))
    s2 = np.concatenate(([0.0], np.cumsum(qo**2 / (1 - qo))))
    np.testing.assert_allclose(wor_all_in_prefixes(q, order, 2), qA * s1 - s2, rtol=0, atol=1e-11)
    wor, iid = optimal_wor_acceptance(p, q, 4), optimal_multidraft_acceptance(p, q, 4)
    assert iid <= wor <= 1.0
    assert optimal_wor_acceptance(p, q, 1) == pytest.approx(1 - total_variation(p, q), abs=1e-12)


def test_theory_node_acceptance_given_an_order_and_gsd():
    rng = np.random.default_rng(1)
    V = 10
    p, q, emb = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V)), rng.standard_normal((V, 2))
    rep = node_acceptance(p, q, 3, children=[4, 1, 7], gsd=Boost.group(4, tau=0.5, dist=4.0), emb=emb)
    assert rep.r2 == pytest.approx(1 - node_outcome(p, [4, 1, 7], "r2", q=q).reject_prob)
    assert rep.r4 == pytest.approx(rep.r2, abs=1e-15)
    assert rep.gsd is not None and 0.0 <= rep.gsd_tv <= 1.0
    avg = node_acceptance(p, q, 2, gsd=Boost.group(4, tau=0.5, dist=4.0), emb=emb)
    assert avg.gsd_tv == pytest.approx(
        node_outcome(p, 2, Verification("r2", boost=Boost.group(4, tau=0.5, dist=4.0)), q=q, emb=emb).tv)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: optimal_wor_acceptance(np.full(2, 0.5), np.full(2, 0.5), 0), ">= 1"),
        (lambda: optimal_wor_acceptance(np.full(2, 0.5), np.full(2, 0.5), 1, method="x"), "unknown method"),
        (lambda: optimal_wor_acceptance(np.full(17, 1 / 17), np.full(17, 1 / 17), 1, method="enumerate"),
         "V <= 16"),
        (lambda: wor_all_in_prefixes(np.full(3, 1 / 3), np.array([0, 0, 1]), 1), "permutation"),
        (lambda: wor_all_in_prefixes(np.full(3, 1 / 3), np.array([0, 1]), 1), "permutation"),
        (lambda: node_acceptance(np.full(3, 1 / 3), np.array([1.0, 0, 0]), 2), "at least 2 tokens"),
        (lambda: node_acceptance(np.full(3, 1 / 3), np.full(3, 1 / 3), 2, children=[0]), "expected k"),
        (lambda: node_acceptance(np.full(3, 1 / 3), np.full(3, 1 / 3), 1, gsd=Boost.depth(2.0)),
         "group boost"),
        (lambda: node_acceptance(np.full(3, 1 / 3), np.full(3, 1 / 3), 1, gsd=Boost.group(2)),
         "embedding table"),
    ],
)
def test_theory_wor_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
