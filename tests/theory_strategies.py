"""Hypothesis strategies and exact helpers shared by the tests/test_theory_*.py files."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from scipy import stats

from theory.neighbours import neighbour_table
from theory.relax import Relax

VARIANTS = ("principled", "official")


def weights_to_dist(w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.sum() == 0:
        w = w.copy()
        w[-1] = 1.0
    return w / w.sum()


@st.composite
def distributions(draw, V: int) -> np.ndarray:
    """A float64 distribution over V tokens: integer weights (exact ties and zeros) or Dirichlet."""
    if draw(st.booleans()):
        w = draw(st.lists(st.integers(0, 4), min_size=V, max_size=V))
        return weights_to_dist(np.array(w))
    seed = draw(st.integers(0, 2**32 - 1))
    alpha = draw(st.sampled_from([0.2, 1.0, 5.0]))
    return weights_to_dist(np.random.default_rng(seed).dirichlet(np.full(V, alpha)))


@st.composite
def neighbour_tables(draw, V: int) -> np.ndarray:
    """A valid table: random orders of the other tokens, or the exact table of a grid codebook
    (many distance ties, broken by id). Width between 1 and V - 1."""
    K = draw(st.integers(1, V - 1))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):
        rows = [rng.permutation(np.delete(np.arange(V), x))[:K] for x in range(V)]
        dtype = draw(st.sampled_from([np.int64, np.int32, np.uint16]))
        return np.array(rows, dtype=dtype)
    E = rng.integers(-1, 2, size=(V, 2)).astype(np.float64)
    return neighbour_table(E, K)


@st.composite
def relaxations(draw, K: int, kinds=("none", "additive", "multiplicative")) -> Relax:
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return Relax.none()
    k = draw(st.integers(1, K))
    if kind == "additive":
        delta = draw(st.one_of(st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.5, 1.0]),
                               st.floats(0.0, 1.0)))
        return Relax.additive(k, delta)
    lam = draw(st.one_of(st.sampled_from([1.0, 1.5, 2.0, 5.0, 10.0]), st.floats(1.0, 20.0)))
    return Relax.multiplicative(k, lam)


@dataclass(frozen=True)
class Node:
    """A random node: target, draft, neighbour table, ordered children, relaxation, variant."""

    p: np.ndarray
    q: np.ndarray
    nb: np.ndarray
    kids: np.ndarray
    relax: Relax
    variant: str

    @property
    def V(self) -> int:
        return self.p.size


@st.composite
def nodes(draw, min_v: int = 2, max_v: int = 64, max_m: int = 6, kinds=None) -> Node:
    """A node with V in [min_v, max_v] and 1..max_m distinct children in random order."""
    V = draw(st.integers(min_v, max_v))
    p = draw(distributions(V))
    q = draw(distributions(V))
    nb = draw(neighbour_tables(V))
    m = draw(st.integers(1, min(V, max_m)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):  # children near each other: one token and its table neighbours
        c0 = int(rng.integers(V))
        kids = np.array(list(dict.fromkeys([c0, *nb[c0].tolist()]))[:m], dtype=np.int64)
        if kids.size < m:
            rest = rng.permutation(np.setdiff1d(np.arange(V), kids))[: m - kids.size]
            kids = np.concatenate((kids, rest))
    else:
        kids = rng.permutation(V)[:m].astype(np.int64)
    relax = draw(relaxations(nb.shape[1], kinds or ("none", "additive", "multiplicative")))
    variant = draw(st.sampled_from(VARIANTS))
    return Node(p, q, nb, kids, relax, variant)


def assert_counts_match(counts: np.ndarray, probs: np.ndarray, alpha: float = 1e-6) -> None:
    """Chi-square goodness of fit of multinomial ``counts`` to exact ``probs``.

    Fails with probability about ``alpha`` when the sampler is right. Bins of
    (numerically) zero probability must be empty; bins expecting fewer than 5
    samples are pooled so that the chi-square approximation holds. The
    threshold is the chi-square quantile ``isf(alpha, df)``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.clip(np.asarray(probs, dtype=np.float64), 0.0, None)
    n = counts.sum()
    assert abs(probs.sum() - 1.0) < 1e-9, probs.sum()
    impossible = probs <= 1e-12
    hit = np.flatnonzero(impossible & (counts > 0))
    assert hit.size == 0, f"samples in impossible bins {hit}"
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
        return
    stat = float(((obs_a - exp_a) ** 2 / exp_a).sum())
    threshold = float(stats.chi2.isf(alpha, df))
    assert stat <= threshold, f"chi-square {stat:.2f} > {threshold:.2f} (df {df})"


def binomial_bounds(n: int, prob: float, alpha: float = 1e-6) -> tuple[int, int]:
    """Two-sided acceptance interval of a Binomial(n, prob) count at level ``alpha``."""
    lo = int(stats.binom.ppf(alpha / 2, n, prob))
    hi = int(stats.binom.isf(alpha / 2, n, prob))
    return lo, hi
