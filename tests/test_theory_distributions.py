"""Distributions (theory.distributions): validation, logits -> probabilities, CFG, TV."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from theory import cfg_logits, logits_to_probs, total_variation, validate_distribution

finite_logits = arrays(np.float64, st.integers(1, 30),
                       elements=st.floats(-20, 20, allow_nan=False))


@settings(max_examples=100, deadline=None)
@given(z=finite_logits, t=st.floats(0.1, 5.0))
def test_theory_logits_to_probs_is_tempered_softmax(z, t):
    p = logits_to_probs(z, temperature=t)
    e = np.exp((z - z.max()) / t)
    np.testing.assert_allclose(p, e / e.sum(), rtol=1e-12, atol=1e-15)
    validate_distribution(p)


@settings(max_examples=100, deadline=None)
@given(z=finite_logits, data=st.data())
def test_theory_logits_to_probs_top_k_keeps_k_largest(z, data):
    k = data.draw(st.integers(1, z.size))
    p = logits_to_probs(z, top_k=k)
    kept = np.flatnonzero(p > 0)
    order = np.argsort(-z, kind="stable")[:k]
    assert set(kept.tolist()) <= set(order.tolist())
    assert kept.size == k or np.any(np.exp(z[order] - z.max()) == 0)
    np.testing.assert_allclose(p[order], logits_to_probs(z[order]), rtol=1e-12, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(z=finite_logits, top_p=st.floats(0.01, 1.0))
def test_theory_logits_to_probs_top_p_is_the_smallest_prefix(z, top_p):
    full = logits_to_probs(z)
    p = logits_to_probs(z, top_p=top_p)
    order = np.argsort(-full, kind="stable")
    kept = p[order] > 0
    n = int(kept.sum())
    assert kept[:n].all() and not kept[n:].any()
    assert full[order[: n - 1]].sum() < top_p  # without the last kept token we fall short


def test_theory_logits_to_probs_greedy_and_ties():
    z = np.array([1.0, 3.0, 3.0, 2.0])
    np.testing.assert_array_equal(logits_to_probs(z, temperature=0), [0, 1, 0, 0])
    np.testing.assert_array_equal(logits_to_probs(z, top_k=1), [0, 1, 0, 0])
    batch = logits_to_probs(np.stack([z, z[::-1]]), temperature=0)
    np.testing.assert_array_equal(batch, [[0, 1, 0, 0], [0, 1, 0, 0]])


def test_theory_cfg_logits():
    cond, uncond = np.array([1.0, 2.0]), np.array([0.5, 0.0])
    np.testing.assert_allclose(cfg_logits(cond, uncond, 4.0), [2.5, 8.0])
    with pytest.raises(ValueError, match="differ in shape"):
        cfg_logits(cond, np.zeros(3), 2.0)
    with pytest.raises(ValueError, match="finite"):
        cfg_logits(cond, uncond, float("inf"))


@pytest.mark.parametrize(
    "p, kwargs, match",
    [
        ([0.5, float("nan"), 0.5], {}, "NaN"),
        ([0.5, float("inf"), 0.5], {}, "infinite"),
        ([1.2, -0.2], {}, "negative"),
        ([0.5, 0.4], {}, "sum to 1"),
        ([[0.5, 0.5]], {}, "1-D"),
        ([], {}, "non-empty"),
        ([0.5, 0.5], {"size": 3}, "vocabulary size 3"),
    ],
)
def test_theory_validate_distribution_errors(p, kwargs, match):
    with pytest.raises(ValueError, match=match):
        validate_distribution(np.array(p), **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_k": 5}, "top_k"),
        ({"top_k": 1.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_theory_logits_to_probs_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        logits_to_probs(np.zeros(4), **kwargs)


@pytest.mark.parametrize(
    "z, match",
    [
        ([0.0, float("nan")], "NaN"),
        ([0.0, float("inf")], r"\+inf"),
        ([-float("inf"), -float("inf")], "no token has mass"),
        ([], "non-empty"),
    ],
)
def test_theory_logits_to_probs_bad_logits(z, match):
    with pytest.raises(ValueError, match=match):
        logits_to_probs(np.array(z))


def test_theory_total_variation():
    assert total_variation(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 1.0
    assert total_variation(np.array([0.5, 0.5]), np.array([0.75, 0.25])) == 0.25
    with pytest.raises(ValueError, match="differ in shape"):
        total_variation(np.ones(2) / 2, np.ones(3) / 3)
