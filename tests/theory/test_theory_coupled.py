"""Exact laws of coupled Jacobi windows (SCD, SPEC 10.1), SJD-PAC's AC and PD (10.2) and a VVS skip
step's TV (10.3) by enumeration on tiny worlds (theory.coupled, theory.coupled_gumbel, theory.vvs;
docs/theory.md, section 15)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxspec.testing.strategies import distributions
from relaxspec.theory.coupled import WindowRule, coupled_sequence_law, coupled_tokens_per_forward
from relaxspec.theory.coupled_gumbel import _Noise, gumbel_sequence_law
from relaxspec.theory.jacobi import jacobi_markov_tokens_per_forward, jacobi_sequence_law, markov_sequence_law
from relaxspec.theory.vvs import skip_step_tv

TOL = 1e-12
# docs/theory.md 15.2: the counterexample target
START = np.array([0.5, 0.5])
TRANS = np.array([[0.9, 0.1], [0.2, 0.8]])


@st.composite
def markov_targets(draw: st.DrawFn, V: int) -> tuple[np.ndarray, np.ndarray]:
    return draw(distributions(V)), np.array([draw(distributions(V)) for _ in range(V)])


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


def _size(V: int, L: int, n: int) -> tuple[int, int]:
    """Keep each example fast: V = 3 windows of 3 only up to n = 3."""
    return L, (min(n, 3) if V == 3 and L == 3 else n)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(V=st.integers(2, 3), L=st.integers(1, 3), n=st.integers(1, 4), data=st.data())
def test_theory_coupled_sjd_rule_is_theory_jacobi(V, L, n, data):
    L, n = _size(V, L, n)
    start, trans = data.draw(markov_targets(V))
    got = coupled_sequence_law(start, trans, L, n, WindowRule.sjd())
    np.testing.assert_allclose(got, jacobi_sequence_law(start, trans, L, n).law, rtol=0, atol=TOL)


RULES = {
    "scd": WindowRule.scd(),
    "pd": WindowRule.pac(ac=False, width=2, depth=2),
    "pd+ac": WindowRule.pac(width=2, depth=2),
    "pd+ac wide": WindowRule.pac(width=3, depth=1),
}


@settings(max_examples=30, deadline=None, derandomize=True)
@given(V=st.integers(2, 3), L=st.integers(1, 3), n=st.integers(1, 4), name=st.sampled_from(sorted(RULES)),
       data=st.data())
def test_theory_coupled_principled_rules_are_lossless(V, L, n, name, data):
    L, n = _size(V, L, n)
    if V == 3 and name != "scd":
        L = min(L, 2)
    start, trans = data.draw(markov_targets(V))
    got = coupled_sequence_law(start, trans, L, n, RULES[name])
    np.testing.assert_allclose(got, markov_sequence_law(start, trans, n), rtol=0, atol=TOL)


def test_theory_coupled_lossless_at_v4():
    rng = np.random.default_rng(7)
    start, trans = rng.dirichlet(np.ones(4)), rng.dirichlet(np.full(4, 0.5), size=4)
    trans[2] = [0.0, 0.5, 0.5, 0.0]
    for rule in (WindowRule.scd(), WindowRule.pac(width=2, depth=1)):
        got = coupled_sequence_law(start, trans, 2, 3, rule)
        np.testing.assert_allclose(got, markov_sequence_law(start, trans, 3), rtol=0, atol=TOL)


def test_theory_scd_official_is_not_lossless():
    target3 = markov_sequence_law(START, TRANS, 3)
    rule = WindowRule.scd("official")
    # the first two tokens are exact; a kept token stored with its old q first decides the third
    for n in (1, 2):
        assert _tv(coupled_sequence_law(START, TRANS, 2, n, rule), markov_sequence_law(START, TRANS, n)) < TOL
    tv = _tv(coupled_sequence_law(START, TRANS, 2, 3, rule), target3)
    assert abs(tv - 0.021267) < 1e-6
    # with L = 1 nothing is coupled (the only kept token is the one sampled at L + 1): SJD, lossless
    assert _tv(coupled_sequence_law(START, TRANS, 1, 3, rule), target3) < TOL


def test_theory_pac_official_siblings_are_not_lossless():
    rule = WindowRule.pac(width=2, depth=1, siblings="official")
    tv = _tv(coupled_sequence_law(START, TRANS, 2, 3, rule), markov_sequence_law(START, TRANS, 3))
    assert abs(tv - 0.010634) < 1e-6
    principled = WindowRule.pac(width=2, depth=1)
    exact = coupled_sequence_law(START, TRANS, 2, 3, principled)
    assert _tv(exact, markov_sequence_law(START, TRANS, 3)) < TOL


@settings(max_examples=12, deadline=None, derandomize=True)
@given(V=st.integers(2, 3), L=st.integers(1, 3), n=st.integers(1, 4), data=st.data())
def test_theory_coupled_tokens_per_forward_sjd_is_theory_jacobi(V, L, n, data):
    if V == 3:
        L = min(L, 2)
    start, trans = data.draw(markov_targets(V))
    got = coupled_tokens_per_forward(start, trans, L, WindowRule.sjd())
    assert abs(got - jacobi_markov_tokens_per_forward(start, trans, L)) < 1e-9
    # a window of one keeps only the token sampled at L + 1: nothing to couple
    if L == 1:
        assert abs(coupled_tokens_per_forward(start, trans, 1, WindowRule.scd()) - got) < 1e-9


def test_theory_coupled_tokens_per_forward_on_the_counterexample_target():
    sjd = [coupled_tokens_per_forward(START, TRANS, L, WindowRule.sjd()) for L in (1, 2, 3)]
    scd = [coupled_tokens_per_forward(START, TRANS, L, WindowRule.scd()) for L in (1, 2, 3)]
    pd = [coupled_tokens_per_forward(START, TRANS, L, WindowRule.pac(width=2, depth=2)) for L in (1, 2, 3)]
    np.testing.assert_allclose(sjd, [1.375, 1.5438, 1.6529], atol=1e-4)
    np.testing.assert_allclose(scd, [1.375, 1.5861, 1.7579], atol=1e-4)
    np.testing.assert_allclose(pd, [1.6667, 2.25, 2.7769], atol=1e-4)


# ----------------------------------------------------------------------------------- gumbel coupling
@settings(max_examples=15, deadline=None, derandomize=True)
@given(V=st.integers(2, 3), L=st.integers(1, 3), n=st.integers(1, 4), data=st.data())
def test_theory_gumbel_coupling_is_lossless(V, L, n, data):
    L, n = _size(V, L, n)
    if V == 3:
        L = min(L, 2)
    start, trans = data.draw(markov_targets(V))
    got = gumbel_sequence_law(start, trans, L, n)
    np.testing.assert_allclose(got, markov_sequence_law(start, trans, n), rtol=0, atol=1e-11)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(V=st.integers(2, 3), data=st.data())
def test_theory_gumbel_noise_measures_are_exact(V, data):
    P1, P2 = data.draw(distributions(V)), data.draw(distributions(V))
    nz = _Noise([P1, P2], V)
    # one fact: the Gumbel-max law is P itself
    got = [pr for pr, _, _ in nz.split(frozenset(), 0)]
    np.testing.assert_allclose(got, P1[P1 > 0], atol=1e-12)
    if V == 2:  # the same noise under two rows: an inverse-CDF coupling, P(both 0) = min(P1(0), P2(0))
        both = nz.measure(frozenset({(0, 0), (1, 0)}))
        assert abs(both - min(P1[0], P2[0])) < 1e-12


# ----------------------------------------------------------------------------------- VVS skip step
def test_theory_vvs_skip_step_hand_case():
    root = np.array([0.6, 0.4])  # the target after the committed prefix, also the stale row held
    r = skip_step_tv([-1, 0, 0, 1], [0, 0, 1, 1], lambda h: TRANS[h[-1]] if h else root, root, 2.5)
    # leaves (0, 1) and (1,): gamma 2 and 1, then a stale bonus
    assert r.expected_tokens == 2.5
    tv = {h: v[2] for h, v in r.positions.items()}
    assert set(tv) == {(), (0,), (1,), (0, 1)}
    assert abs(tv[()] - 0.1) < 1e-15       # (0.5, 0.5) against (0.6, 0.4)
    assert abs(tv[(0,)] - 0.9) < 1e-15     # the point mass on 1 against (0.9, 0.1)
    assert abs(tv[(1,)] - 0.4) < 1e-15     # stale (0.6, 0.4) against (0.2, 0.8)
    assert abs(tv[(0, 1)] - 0.4) < 1e-15   # stale again, after (0, 1)
    assert abs(r.expected_tv - 0.95) < 1e-15 and abs(r.tv_per_token - 0.38) < 1e-15
    assert r.max_tv == tv[(0,)]  # the worst token the step can emit: a bounded skip needs tv >= 0.9


@settings(max_examples=40, deadline=None, derandomize=True)
@given(V=st.integers(2, 4), lbar=st.floats(0.0, 4.0), data=st.data())
def test_theory_vvs_skip_step_accounting(V, lbar, data):
    n = data.draw(st.integers(2, 7))
    parents = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = [0] + [data.draw(st.integers(0, V - 1)) for _ in range(1, n)]
    trans = np.array([data.draw(distributions(V)) for _ in range(V)])
    stale = data.draw(distributions(V))
    r = skip_step_tv(parents, tokens, lambda h: trans[h[-1]] if h else stale, stale, lbar)
    assert abs(sum(w for w, _, _ in r.positions.values()) - r.expected_tokens) < 1e-12
    assert 1.0 <= r.expected_tokens <= 1.0 + min(np.floor(lbar), n)
    for w, law, tv in r.positions.values():
        assert 0.0 < w <= 1.0 + 1e-12 and -1e-15 <= tv <= 1.0 + 1e-12
        assert abs(law.sum() - 1.0) < 1e-12
    assert r.positions[()][2] >= 0.0
    if lbar < 1.0:  # nothing skipped: the bonus alone, drawn from stale = the target after nothing
        assert r.expected_tokens == 1.0 and r.expected_tv < 1e-15


def test_theory_vvs_skip_step_is_exact_when_the_paths_are_the_target():
    # every token once under the root, a uniform target and a uniform stale row: no distortion
    V = 3
    u = np.full(V, 1 / V)
    r = skip_step_tv([-1, 0, 0, 0], [0, 0, 1, 2], lambda h: u, u, 3.0)
    assert r.expected_tv < 1e-15 and r.expected_tokens == 2.0


# ----------------------------------------------------------------------------------- bad input
def test_theory_coupled_bad_input():
    with pytest.raises(ValueError, match="coupling must be one of"):
        WindowRule.scd("paper")
    with pytest.raises(ValueError, match="siblings must be one of"):
        WindowRule.pac(siblings="residual")
    with pytest.raises(ValueError, match="theory.coupled_gumbel"):
        WindowRule.scd("gumbel")
    with pytest.raises(ValueError, match="width <= 3"):
        WindowRule.pac(width=4)
    with pytest.raises(ValueError, match="depth must be an integer"):
        WindowRule.pac(depth=-1)
    with pytest.raises(ValueError, match="window L in"):
        coupled_sequence_law(START, TRANS, 4, 2, WindowRule.scd())
    with pytest.raises(ValueError, match="n_tokens must be"):
        coupled_sequence_law(START, TRANS, 2, 6, WindowRule.scd())
    with pytest.raises(ValueError, match="rule must be a WindowRule"):
        coupled_sequence_law(START, TRANS, 2, 2, "scd")
    with pytest.raises(ValueError, match="V <= 3"):
        gumbel_sequence_law(np.full(4, 0.25), np.full((4, 4), 0.25), 2, 2)
    with pytest.raises(ValueError, match="parents\\[0\\] must be -1"):
        skip_step_tv([0, 0], [0, 1], lambda h: START, START, 1.0)
    with pytest.raises(ValueError, match="smaller index"):
        skip_step_tv([-1, 2, 1], [0, 1, 1], lambda h: START, START, 1.0)
    with pytest.raises(ValueError, match="mean_accepted"):
        skip_step_tv([-1, 0], [0, 1], lambda h: START, START, -1.0)
