"""Distributions (theory.distributions): validation, logits -> probabilities, CFG, TV."""

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from relaxspec.theory import cfg_logits, logits_to_probs, total_variation, validate_distribution
from relaxspec.theory.distributions import TOP_P_TOL

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
@example(z=np.array([1.0, 3.0, 3.0, 2.0]), data=None)
def test_theory_logits_to_probs_top_k_keeps_ties_at_the_kth(z, data):
    k = data.draw(st.integers(1, z.size)) if data is not None else 1
    p = logits_to_probs(z, top_k=k)
    kth = np.sort(z)[::-1][k - 1]
    keep = z >= kth  # LlamaGen: every logit not below the k-th largest
    np.testing.assert_array_equal(p > 0, keep & (np.exp(z - z.max()) > 0))
    np.testing.assert_allclose(p[keep], logits_to_probs(z[keep]), rtol=1e-12, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(z=finite_logits, top_p=st.floats(0.01, 1.0))
@example(z=np.zeros(24), top_p=0.5)  # issue 12: float cumsum rounding kept 13 where the rule keeps 13 exactly
@example(z=np.zeros(4), top_p=0.5)
def test_theory_logits_to_probs_top_p_keeps_mass_before_at_most_top_p(z, top_p):
    """LlamaGen's top-p: a token is kept when the mass of the more probable tokens is <= top_p
    (equality within TOP_P_TOL), decided here with exactly rounded sums."""
    full = logits_to_probs(z)
    p = logits_to_probs(z, top_p=top_p)
    order = np.argsort(-full, kind="stable")
    kept = p[order] > 0
    n = int(kept.sum())
    assert kept[:n].all() and not kept[n:].any()
    margin = 1e-14  # exact sums this close to the cut could round either way in the function
    assert math.fsum(full[order[: n - 1]]) <= top_p + TOP_P_TOL + margin
    if n < z.size and full[order[n]] > 0:
        assert math.fsum(full[order[:n]]) > top_p + TOP_P_TOL - margin


def test_theory_logits_to_probs_boundary_cases_by_hand():
    # four equal tokens, top_p = 0.5: the first two reach 0.5 exactly, LlamaGen keeps a third
    np.testing.assert_array_equal(logits_to_probs(np.zeros(4), top_p=0.5) > 0, [1, 1, 1, 0])
    # 24 equal tokens: 12 reach 0.5, 13 are kept, whatever the rounding of the running sum
    assert int((logits_to_probs(np.zeros(24), top_p=0.5) > 0).sum()) == 13
    # top-k 1 with a tie at the top keeps both
    np.testing.assert_array_equal(logits_to_probs(np.array([1.0, 3.0, 3.0, 2.0]), top_k=1),
                                  [0, 0.5, 0.5, 0])


def _llamagen_filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """LlamaGen's ``top_k_top_p_filtering`` formula (generate.py), written out for this peer test."""
    logits = logits.clone()
    if top_k > 0:
        logits[logits < torch.topk(logits, top_k).values[..., -1:]] = -float("inf")
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(logits, descending=True, stable=True)
        over = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1) > top_p
        drop = torch.zeros_like(over)
        drop[..., 1:] = over[..., :-1]
        logits[drop.scatter(-1, idx, drop)] = -float("inf")
    return logits


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_theory_sampling_filters_match_llamagen_on_low_precision_ties(dtype):
    """Upstream's sample_c2i defaults (top-k 2000) on bf16/fp16 logits of V = 16384: many ties at the
    k-th logit; the kept sets must be upstream's (issue 19's peer test)."""
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.normal(0, 3, size=(4, 16384))).to(dtype).to(torch.float64)
    for top_k, top_p in [(2000, 1.0), (0, 0.9), (2000, 0.95), (100, 0.5)]:
        ours = logits_to_probs(z.numpy(), top_k=top_k, top_p=top_p) > 0
        theirs = torch.isfinite(_llamagen_filter(z, top_k, top_p)).numpy()
        np.testing.assert_array_equal(ours, theirs)
    kth = torch.topk(z, 2000).values[..., -1:]
    assert int((z >= kth).sum(-1).max()) > 2000  # the case really has ties at the cut


def test_theory_logits_to_probs_greedy_and_ties():
    z = np.array([1.0, 3.0, 3.0, 2.0])
    np.testing.assert_array_equal(logits_to_probs(z, temperature=0), [0, 1, 0, 0])
    np.testing.assert_array_equal(logits_to_probs(z, top_k=2) > 0, [0, 1, 1, 0])  # the tie fills k = 2
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
    with pytest.raises(ValueError, match="negative"):
        total_variation(np.array([1.5, -0.5]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="q does not sum to 1"):
        total_variation(np.array([0.5, 0.5]), np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="NaN"):
        total_variation(np.array([np.nan, 1.0]), np.array([0.5, 0.5]))


@pytest.mark.parametrize("z, t", [([1.0, 2.0], 1e-310), ([-1.0, -2.0], 1e-310), ([0.0, 3.0], 1e-308),
                                  ([1e300, 0.0], 1e-10)])
def test_theory_logits_to_probs_refuses_a_temperature_whose_logits_overflow(z, t):
    """Issue 26 item 9: logits / temperature overflowing float64 gave all-NaN rows."""
    with pytest.raises(ValueError, match=f"temperature {t!r} is too small for these logits"):
        logits_to_probs(np.array(z), temperature=t)
    # -inf (masked) logits do not count as overflow; a tiny temperature that does not overflow is fine
    np.testing.assert_array_equal(logits_to_probs(np.array([-np.inf, 1.0, 0.0]), temperature=1e-300),
                                  [0.0, 1.0, 0.0])
