"""Statistical tests with a stated false-failure rate, for rules that only sample.

Each test fails a correct sampler with probability at most ``alpha`` (per call; the checks
pass ``alpha = 1e-6`` and draw their samples from a fixed seed, so a given input always gets
the same verdict). Each returns ``None`` when the sample is consistent and otherwise a
sentence saying why not, so that callers can name the rule and the input in their message.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = [
    "ALPHA",
    "assert_counts_match",
    "binomial_bounds",
    "counts_mismatch",
    "mean_below",
    "mean_outside",
    "tv_exceeds",
]

ALPHA = 1e-6
"""The checks' false-failure rate per generated input."""


def counts_mismatch(counts: np.ndarray, probs: np.ndarray, alpha: float = ALPHA) -> str | None:
    """Chi-square goodness of fit of multinomial ``counts`` to exact ``probs``.

    Bins of (numerically) zero probability must be empty; bins expecting
    fewer than 5 samples are pooled so that the chi-square approximation
    holds; the threshold is the chi-square quantile ``isf(alpha, df)``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.clip(np.asarray(probs, dtype=np.float64), 0.0, None)
    n = counts.sum()
    if abs(probs.sum() - 1.0) >= 1e-9:
        return f"the expected probabilities sum to {float(probs.sum())!r}, not 1"
    impossible = probs <= 1e-12
    hit = np.flatnonzero(impossible & (counts > 0))
    if hit.size:
        return f"samples in impossible bins {hit.tolist()}"
    expected = n * probs
    big = expected >= 5.0
    obs = list(counts[big])
    exp = list(expected[big])
    small_exp = expected[~big & ~impossible].sum()
    if small_exp > 0:
        obs.append(counts[~big & ~impossible].sum())
        exp.append(small_exp)
    obs_a, exp_a = np.array(obs), np.array(exp)
    df = obs_a.size - 1
    if df == 0:
        return None
    stat = float(((obs_a - exp_a) ** 2 / exp_a).sum())
    threshold = float(stats.chi2.isf(alpha, df))
    if stat > threshold:
        return f"chi-square {stat:.2f} > {threshold:.2f} (df {df}, false-failure rate {alpha:g})"
    return None


def assert_counts_match(counts: np.ndarray, probs: np.ndarray, alpha: float = ALPHA) -> None:
    """:func:`counts_mismatch` as an assertion (fails a right sampler with probability about ``alpha``)."""
    reason = counts_mismatch(counts, probs, alpha)
    assert reason is None, reason


def binomial_bounds(n: int, prob: float, alpha: float = ALPHA) -> tuple[int, int]:
    """Two-sided acceptance interval of a Binomial(n, prob) count at level ``alpha``."""
    lo = int(stats.binom.ppf(alpha / 2, n, prob))
    hi = int(stats.binom.isf(alpha / 2, n, prob))
    return lo, hi


def tv_exceeds(counts: np.ndarray, target: np.ndarray, bound: float, alpha: float = ALPHA) -> str | None:
    """Is TV(law, target) > ``bound``, judged from ``counts`` of n draws from the law?

    The empirical TV exceeds its mean by t with probability <= exp(-2 n t^2)
    (McDiarmid: one draw moves it by <= 1/n) and its mean exceeds the true TV
    by <= sqrt((V - 1) / n) / 2, so a law within the bound fails with
    probability <= ``alpha``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum()
    tv_hat = 0.5 * float(np.abs(counts / n - target).sum())
    slack = 0.5 * math.sqrt((target.size - 1) / n) + math.sqrt(math.log(1.0 / alpha) / (2.0 * n))
    if tv_hat > bound + slack:
        return (f"empirical TV {tv_hat:.4f} of {int(n)} draws exceeds the bound {bound:.4f} by more than "
                f"{slack:.4f} (false-failure rate {alpha:g})")
    return None


def mean_outside(samples: np.ndarray, expected: float, span: float, alpha: float = ALPHA) -> str | None:
    """Two-sided Hoeffding test that samples in an interval of width ``span`` have mean ``expected``."""
    n = samples.size
    t = span * math.sqrt(math.log(2.0 / alpha) / (2.0 * n))
    mean = float(samples.mean())
    if abs(mean - expected) > t:
        return (f"mean {mean:.4f} of {n} samples differs from {expected:.6f} by more than {t:.4f} "
                f"(false-failure rate {alpha:g})")
    return None


def mean_below(samples: np.ndarray, span: float, alpha: float = ALPHA) -> str | None:
    """One-sided Hoeffding test of mean >= 0 for samples in an interval of width ``span``."""
    n = samples.size
    t = span * math.sqrt(math.log(1.0 / alpha) / (2.0 * n))
    mean = float(samples.mean())
    if mean < -t:
        return f"mean {mean:.4f} of {n} paired differences is below {-t:.4f} (false-failure rate {alpha:g})"
    return None
