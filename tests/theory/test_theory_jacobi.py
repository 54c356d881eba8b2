"""Exact analysis of speculative Jacobi decoding (SPEC 9.1, theory.jacobi): SJD without a boost is lossless
by exact enumeration, boosted SJD's sequence TV is at most its expected per-token TV sum, the kept-count
chain agrees with a brute-force enumeration of whole windows, and bad input raises clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxspec.testing.strategies import codebooks, distributions
from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.boost_law import boosted_law, onehot_acceptance
from relaxspec.theory.jacobi import (
    jacobi_expected_tokens,
    jacobi_kept_chain,
    jacobi_markov_tokens_per_forward,
    jacobi_sequence_law,
    markov_sequence_law,
)

TOL = 1e-12


@st.composite
def markov_targets(draw: st.DrawFn, V: int) -> tuple[np.ndarray, np.ndarray]:
    """A start row and a (V, V) transition matrix (rows with zeros and ties included)."""
    return draw(distributions(V)), np.array([draw(distributions(V)) for _ in range(V)])


def _boosts(V: int) -> st.SearchStrategy:
    return st.sampled_from([
        Boost.cool(2.5), Boost.depth([4.0, 2.0, 1.5]), Boost.cool(1.5, nu=0.0),
        Boost.group(3, 0.3, 1.0), Boost.group(2, 1.0, 3.0), Boost.group(14, 0.5, 2.0, window="official"),
    ])


# ----------------------------------------------------------------------------- (b) exact enumeration
@settings(max_examples=40, deadline=None)
@given(V=st.integers(2, 3), L=st.integers(1, 3), n=st.integers(1, 4),
       fresh=st.sampled_from(["uniform", "copy"]), data=st.data())
def test_theory_jacobi_without_boost_is_lossless(V, L, n, fresh, data):
    if V == 3 and L == 3:
        n = min(n, 3)
    start, trans = data.draw(markov_targets(V))
    got = jacobi_sequence_law(start, trans, L, n, fresh=fresh)
    np.testing.assert_allclose(got.law, markov_sequence_law(start, trans, n), rtol=0, atol=TOL)
    assert got.expected_tv_sum == 0.0


def test_theory_jacobi_lossless_at_the_enumeration_limits():
    rng = np.random.default_rng(3)
    start, trans = rng.dirichlet(np.ones(4)), rng.dirichlet(np.full(4, 0.5), size=4)
    trans[1] = [0.0, 0.5, 0.5, 0.0]
    for fresh in ("uniform", "copy"):
        got = jacobi_sequence_law(start, trans, 2, 4, fresh=fresh)
        np.testing.assert_allclose(got.law, markov_sequence_law(start, trans, 4), rtol=0, atol=TOL)
    got = jacobi_sequence_law(start, trans, 3, 3, fresh="copy")
    np.testing.assert_allclose(got.law, markov_sequence_law(start, trans, 3), rtol=0, atol=TOL)


def test_theory_markov_sequence_law_hand_case():
    start, trans = np.array([0.25, 0.75]), np.array([[0.5, 0.5], [0.1, 0.9]])
    law = markov_sequence_law(start, trans, 3)
    assert law[1, 0, 1] == pytest.approx(0.75 * 0.1 * 0.5, abs=TOL)
    assert law.sum() == pytest.approx(1.0, abs=TOL)


@settings(max_examples=30, deadline=None)
@given(V=st.integers(2, 3), L=st.integers(1, 2), n=st.integers(1, 4),
       fresh=st.sampled_from(["uniform", "copy"]), data=st.data())
def test_theory_boosted_jacobi_sequence_tv_is_at_most_the_token_tv_sum(V, L, n, fresh, data):
    start, trans = data.draw(markov_targets(V))
    boost, emb = data.draw(_boosts(V)), data.draw(codebooks(V))
    got = jacobi_sequence_law(start, trans, L, n, fresh=fresh, boost=boost, emb=emb)
    assert abs(got.law.sum() - 1.0) < TOL and np.all(got.law >= 0)
    tv = 0.5 * float(np.abs(got.law - markov_sequence_law(start, trans, n)).sum())
    assert tv <= got.expected_tv_sum + TOL  # docs/theory.md Theorem 12 with the tests' exact TVs


@pytest.mark.parametrize("boost", [Boost.cool(3.0), Boost.group(3, 0.5, 2.0)])
def test_theory_boosted_jacobi_first_token_is_the_boosted_one_hot_law(boost):
    """The first token is decided by the first window's first test: a uniform fresh draft x, one-hot,
    so its law is the average over x of theory.boost's law for (p = start, q = point mass on x), and the
    expected TV of that test is the average of those laws' TVs (at least the mixture's TV)."""
    rng = np.random.default_rng(11)
    V = 3
    start, trans = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V), size=V)
    emb = rng.normal(size=(V, 2))
    a = onehot_acceptance(start, boost, depth=1, emb=emb)
    laws = [boosted_law(start, np.eye(V)[x], np.where(np.arange(V) == x, a[x], 1.0)) for x in range(V)]
    got = jacobi_sequence_law(start, trans, 2, 1, boost=boost, emb=emb)
    np.testing.assert_allclose(got.law, np.mean(laws, axis=0), rtol=0, atol=TOL)
    tvs = [0.5 * np.abs(law - start).sum() for law in laws]
    np.testing.assert_allclose(tvs, a - start, atol=TOL)  # one-hot x: TV = a(x) - p(x) (SPEC 9.4)
    assert got.expected_tv_sum == pytest.approx(np.mean(tvs), abs=TOL)


# ----------------------------------------------------------------------------- (a) the kept-count chain
@settings(max_examples=40, deadline=None)
@given(V=st.integers(1, 3), L=st.integers(1, 3), fresh=st.sampled_from(["uniform", "copy"]),
       boosted=st.booleans(), data=st.data())
def test_theory_jacobi_chain_equals_brute_force_window_enumeration(V, L, fresh, boosted, data):
    p = data.draw(distributions(V))
    boost, emb = (data.draw(_boosts(V)), data.draw(codebooks(V))) if boosted else (NO_BOOST, None)
    chain = jacobi_expected_tokens(p, L, fresh=fresh, boost=boost, emb=emb)
    brute = jacobi_markov_tokens_per_forward(p, np.tile(p, (V, 1)), L, fresh=fresh, boost=boost, emb=emb)
    assert abs(chain - brute) < 1e-10
    assert 1.0 <= chain <= L + 1


def test_theory_jacobi_chain_hand_case_window_one():
    """L = 1, uniform fresh tokens, exact rule: a fresh token passes with alpha = 1/V. From k = 0: emits
    1 + alpha, moves to k = 1 w.p. 1 - alpha; from k = 1 (the kept token passes): emits 2, back to 0.
    Stationary average (3 - alpha) / (2 - alpha)."""
    for V in (2, 3, 10):
        alpha = 1.0 / V
        p = np.random.default_rng(V).dirichlet(np.ones(V))
        chain = jacobi_kept_chain(p, 1)
        np.testing.assert_allclose(chain.transition, [[alpha, 1 - alpha], [1.0, 0.0]], atol=TOL)
        assert chain.expected_tokens == pytest.approx((3 - alpha) / (2 - alpha), abs=TOL)


def test_theory_jacobi_chain_is_a_markov_chain_and_boosts_help_at_llamagen_size():
    V, L = 16384, 15
    rng = np.random.default_rng(5)
    p = np.exp(2.0 * rng.standard_normal(V))
    p /= p.sum()
    emb = rng.standard_normal((V, 8)) * 0.3
    for fresh in ("uniform", "copy"):
        chain = jacobi_kept_chain(p, L, fresh=fresh)
        np.testing.assert_allclose(chain.transition.sum(axis=1), 1.0, atol=TOL)
        assert np.all(chain.transition >= 0) and chain.stationary.sum() == pytest.approx(1.0, abs=TOL)
        np.testing.assert_allclose(chain.stationary @ chain.transition, chain.stationary, atol=TOL)
        base = chain.expected_tokens
        gsd = [jacobi_expected_tokens(p, L, fresh=fresh, boost=Boost.group(G), emb=emb)
               for G in (3, 10, 25, 50)]
        cool = jacobi_expected_tokens(p, L, fresh=fresh, boost=Boost.cool(3.0))
        assert base < gsd[0] and np.all(np.diff(gsd) >= 0) and cool > base
        assert base <= (L + 2) / 2 + 0.5  # fresh tokens rarely pass: kept tokens carry the window


# ----------------------------------------------------------------------------- bad input
def test_theory_jacobi_bad_inputs_raise():
    p = np.full(4, 0.25)
    emb = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"window L must be an integer in \[1, 64\]"):
        jacobi_expected_tokens(p, 0)
    with pytest.raises(ValueError, match="window L must be"):
        jacobi_expected_tokens(p, 2.5)
    with pytest.raises(ValueError, match="fresh must be one of"):
        jacobi_expected_tokens(p, 2, fresh="random")
    with pytest.raises(ValueError, match="does not sum to 1"):
        jacobi_expected_tokens(2 * p, 2)
    with pytest.raises(ValueError, match="another vocabulary size"):
        jacobi_expected_tokens(p, 2, boost=Boost.group(3), emb=np.zeros((5, 2)))
    with pytest.raises(ValueError, match="needs an embedding table"):
        jacobi_expected_tokens(p, 2, boost=Boost.group(3))
    with pytest.raises(ValueError, match="not verified on draft trees"):
        jacobi_expected_tokens(p, 2, boost=Boost.budget(0.05, 4))
    trans = np.tile(p, (4, 1))
    with pytest.raises(ValueError, match="V <= 4"):
        jacobi_sequence_law(np.full(5, 0.2), np.full((5, 5), 0.2), 1, 2)
    with pytest.raises(ValueError, match="L <= 3"):
        jacobi_sequence_law(p, trans, 4, 2)
    with pytest.raises(ValueError, match=r"n_tokens must be an integer in \[1, 5\]"):
        jacobi_sequence_law(p, trans, 2, 6)
    with pytest.raises(ValueError, match="trans must have shape"):
        jacobi_sequence_law(p, trans[:3], 2, 2)
    with pytest.raises(ValueError, match=r"trans\[2\] does not sum to 1"):
        jacobi_markov_tokens_per_forward(p, trans * np.array([[1], [1], [2], [1]]), 2)
    with pytest.raises(ValueError, match="another vocabulary size"):
        jacobi_sequence_law(p, trans, 2, 2, boost=Boost.group(3), emb=emb[:3])
