"""Boosted sampled-draft tests (SPEC 9.2-9.4): the exact law and TV of a boosted test, GSD's windows and
groups (against hand cases derived from the published code's formula), Cool-SD's schedule, the
per-stage bound for recursive multi-child verification, and the errors bad input raises."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxspec.testing.strategies import codebooks, distributions
from relaxspec.theory.boost import NO_BOOST, Boost, cool_schedule
from relaxspec.theory.boost_law import (
    acceptance_vector,
    base_acceptance,
    boost_excess,
    boosted_acceptance,
    boosted_law,
    boosted_tv,
    group_members,
    onehot_acceptance,
    rank_window,
    standard_residual,
)
from relaxspec.theory.stages import seqsum

TOL = 1e-12


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


def _onehot(V: int, x: int) -> np.ndarray:
    q = np.zeros(V)
    q[x] = 1.0
    return q


@st.composite
def boosted_nodes(draw: st.DrawFn, max_v: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, q, a) with a random acceptance a in [a0, 1] (a boost in SPEC 9.4's sense)."""
    V = draw(st.integers(2, max_v))
    p, q = draw(distributions(V)), draw(distributions(V))
    lift = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).uniform(size=V)
    lift[draw(st.lists(st.integers(0, V - 1), max_size=V))] = draw(st.sampled_from([0.0, 1.0]))
    a0 = base_acceptance(p, q)
    return p, q, a0 + lift * (1.0 - a0)


# ----------------------------------------------------------------------------- SPEC 9.4: the identity
@settings(max_examples=200, deadline=None)
@given(node=boosted_nodes())
def test_theory_boost_tv_is_the_excess_when_a_is_at_least_a0(node):
    p, q, a = node
    law = boosted_law(p, q, a)
    delta = boost_excess(p, q, a)
    assert abs(law.sum() - 1.0) < TOL and np.all(law >= 0)
    assert abs(_tv(law, p) - delta) < TOL
    assert abs(boosted_tv(p, q, a) - delta) < TOL
    # the excess sits where p < q, the deficit where p > q
    diff = law - p
    assert np.all(diff[p > q] <= TOL) and np.all(diff[p < q] >= -TOL)
    assert np.all(np.abs(diff[p == q]) <= TOL)


@settings(max_examples=200, deadline=None)
@given(V=st.integers(1, 12), data=st.data())
def test_theory_boost_general_formula_is_the_tv_for_any_acceptance(V, data):
    p, q = data.draw(distributions(V)), data.draw(distributions(V))
    a = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).uniform(size=V)
    a[data.draw(st.lists(st.integers(0, V - 1), max_size=V))] = data.draw(st.sampled_from([0.0, 1.0]))
    assert abs(boosted_tv(p, q, a) - _tv(boosted_law(p, q, a), p)) < TOL


@settings(max_examples=100, deadline=None)
@given(V=st.integers(1, 12), data=st.data())
def test_theory_boost_unboosted_test_is_lossless(V, data):
    p, q = data.draw(distributions(V)), data.draw(distributions(V))
    a0 = base_acceptance(p, q)
    assert _tv(boosted_law(p, q, a0), p) < TOL and boost_excess(p, q, a0) == 0.0


def test_theory_boost_identity_hand_case():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    a = np.array([1.0, 1.0, 0.7])  # a0 = (1, 1, 0.4): the boost adds 0.5 * 0.3 = 0.15 on token 2
    law = boosted_law(p, q, a)
    assert boost_excess(p, q, a) == pytest.approx(0.15, abs=TOL)
    # residual norm((p - q)^+) = token 0; rejection mass 1 - (0.2 + 0.3 + 0.35) = 0.15
    np.testing.assert_allclose(law, [0.2 + 0.15, 0.3, 0.35], atol=TOL)
    assert _tv(law, p) == pytest.approx(0.15, abs=TOL)


def test_theory_boost_below_a0_needs_the_general_formula():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    a = np.array([0.5, 1.0, 0.4])  # lowers token 0 below a0 = 1: Delta = -0.1 is not the TV
    law = boosted_law(p, q, a)
    assert boost_excess(p, q, a) == pytest.approx(-0.1, abs=TOL)
    assert boosted_tv(p, q, a) == pytest.approx(_tv(law, p), abs=TOL)
    assert _tv(law, p) > 0.0


# ----------------------------------------------------------------------------- GSD
def _hand_world(tau: float = 1.0):
    """V = 20, p(i) = (i + 1)/210 (token 19 most probable, no ties), 1-D embedding e_i = 0.3 i:
    ||e_y - e_x||^2 = 0.09 (y - x)^2 < 0.5 exactly when |y - x| <= 2."""
    V = 20
    p = np.arange(1, V + 1) / 210.0
    emb = 0.3 * np.arange(V, dtype=np.float64)[:, None]
    return V, p, emb


@pytest.mark.parametrize(("x", "expected"), [
    (10, range(3, 17)),   # code: ascending slice [10 - 7, 10 + 7): 7 less probable, x, 6 more probable
    (17, range(10, 20)),  # [10, 24) clipped to the vocabulary: only 2 more probable tokens exist
    (7, range(0, 14)),    # [0, 14)
    (6, [6]),             # [-1, 13): Python slice [19:13] is empty, the code falls back to the plain test
    (0, [0]),
    (19, range(12, 20)),
])
def test_theory_gsd_official_window_matches_the_published_code_hand_cases(x, expected):
    V, p, _ = _hand_world()
    got = rank_window(p, x, 1, "official")
    assert sorted(got.tolist()) == list(expected)
    assert np.all(np.diff(p[got]) <= 0), "the window is listed most probable first"


@pytest.mark.parametrize(("G", "x", "expected"), [
    (5, 10, range(8, 13)),    # floor(5/2) = 2 below (less probable), ceil(5/2) - 1 = 2 above
    (4, 10, range(8, 12)),    # 2 below, 1 above
    (1, 10, [10]),
    (2, 10, [9, 10]),         # 1 below, 0 above
    (14, 10, range(3, 17)),   # G = 14 is the official window
    (14, 6, range(0, 13)),    # ... except at the bottom, where the code falls back to x alone
    (3, 19, [18, 19]),
    (3, 0, [0, 1]),
])
def test_theory_gsd_principled_window_hand_cases(G, x, expected):
    _, p, _ = _hand_world()
    assert sorted(rank_window(p, x, G, "principled").tolist()) == list(expected)


def test_theory_gsd_group_and_one_hot_acceptance_hand_cases():
    V, p, emb = _hand_world()
    official = Boost.group(3, tau=1.0, dist=0.5, window="official")
    assert group_members(p, 10, emb, official).tolist() == [12, 11, 10, 9, 8]  # |y - x| <= 2 in the window
    a = onehot_acceptance(p, official, emb=emb)
    assert a[10] == pytest.approx((9 + 10 + 11 + 12 + 13) / 210, abs=TOL)
    assert a[6] == p[6]  # the code's fallback: the plain one-hot test
    assert a[19] == pytest.approx((18 + 19 + 20) / 210, abs=TOL)
    tight = Boost.group(14, tau=1.5 / 210, dist=0.5, window="official")  # probabilities within 1.5/210
    assert group_members(p, 10, emb, tight).tolist() == [11, 10, 9]
    # a sampled draft: min(1, p(C)/q(C))
    q = np.full(V, 0.1 / (V - 3))
    q[[9, 10, 11]] = 0.3
    assert boosted_acceptance(p, q, 10, tight, emb=emb) == pytest.approx((33 / 210) / 0.9, abs=TOL)


def _code_official_acceptance(p, q, x, emb, tau, dist):
    """GSD's published acceptance (junhyukso/GSD scheduler/jacobi_iteration_lumina_mgpt.py, lines
    305-338), transcribed to NumPy from its formula: ascending logit sort, the slice [c - 7, c + 7)
    around x's position c, the probability and squared-distance masks, and the plain test when the
    slice is empty (its ``.max()`` raises and the ``except`` branch runs)."""
    asc = np.argsort(np.log(p), kind="stable")
    c = int(np.flatnonzero(asc == x)[0])
    idx = asc[c - 7:c + 7]
    if idx.size == 0:
        return min(1.0, p[x] / q[x]), {x}
    d2 = ((emb[idx] - emb[x]) ** 2).sum(axis=1)
    mask = (np.abs(p[idx] - p[x]) < tau) & (d2 < dist)
    return min(1.0, float((p[idx] * mask).sum() / (q[idx] * mask).sum())), set(idx[mask].tolist())


@settings(max_examples=80, deadline=None)
@given(V=st.integers(14, 40), seed=st.integers(0, 2**32 - 1), one_hot=st.booleans(),
       tau=st.sampled_from([0.01, 0.05, 0.15, 1.0]), dist=st.sampled_from([0.1, 0.5, 2.0]))
def test_theory_gsd_official_matches_a_transcription_of_the_code(V, seed, one_hot, tau, dist):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.5)) + 1e-9 * rng.permutation(V)  # distinct: the code's sort is unstable
    p /= p.sum()
    emb = rng.normal(size=(V, 3)) * 0.4
    boost = Boost.group(3, tau=tau, dist=dist, window="official")
    for x in range(V):
        q = _onehot(V, x) if one_hot else rng.dirichlet(np.ones(V))
        want, group = _code_official_acceptance(p, q, x, emb, tau, dist)
        assert set(group_members(p, x, emb, boost).tolist()) == group
        assert boosted_acceptance(p, q, x, boost, emb=emb) == pytest.approx(want, rel=1e-12, abs=1e-15)


@settings(max_examples=100, deadline=None)
@given(V=st.integers(1, 30), G=st.integers(1, 20), window=st.sampled_from(["principled", "official"]),
       kind=st.sampled_from(["group", "depth", "none"]), depth=st.integers(1, 5), data=st.data())
def test_theory_onehot_acceptance_is_boosted_acceptance_bit_for_bit(V, G, window, kind, depth, data):
    p = data.draw(distributions(V))
    emb = data.draw(codebooks(V))
    boost = {"group": Boost.group(G, data.draw(st.sampled_from([0.05, 0.15, 1.0])),
                                  data.draw(st.sampled_from([0.5, 1.0, 3.0])), window=window),
             "depth": Boost.depth([3.0, 1.5, 1.2]), "none": NO_BOOST}[kind]
    a = onehot_acceptance(p, boost, depth=depth, emb=emb)
    for x in range(V):
        assert a[x] == boosted_acceptance(p, _onehot(V, x), x, boost, depth=depth, emb=emb)
    # one-hot drafts: a = p(C) >= p(x) = a0, and the node's TV is exactly p(C) - p(x) (SPEC 9.4)
    assert np.all(a >= p)
    for x in np.flatnonzero(p < 1.0):
        q = _onehot(V, int(x))
        acc = acceptance_vector(p, q, boost, depth=depth, emb=emb)
        assert abs(_tv(boosted_law(p, q, acc), p) - (a[x] - p[x])) < TOL


def test_theory_gsd_sampled_draft_can_fall_below_a0():
    # x = 0 with p/q = 0.9; its group partner 1 has p/q = 0.2: p(C)/q(C) = 0.5 < a0(0) = 0.9
    p = np.array([0.45, 0.1, 0.45])
    q = np.array([0.5, 0.5, 0.0])
    emb = np.array([[0.0], [0.1], [5.0]])
    boost = Boost.group(5, tau=0.5, dist=0.5)  # window: ranks 0..2 = tokens 0, 2, 1; token 2 is too far
    assert group_members(p, 0, emb, boost).tolist() == [0, 1]
    a = acceptance_vector(p, q, boost, emb=emb)
    assert a[0] == pytest.approx(0.55 / 1.0) and a[0] < base_acceptance(p, q)[0]
    assert boosted_tv(p, q, a) == pytest.approx(_tv(boosted_law(p, q, a), p), abs=TOL)


def test_theory_gsd_at_llamagen_size():
    """V = 16384, d = 8: the one-hot acceptance vector equals per-token calls, grows with G, and a
    sampled-draft node's exact TV is the general formula."""
    V = 16384
    rng = np.random.default_rng(7)
    p = np.exp(1.5 * rng.standard_normal(V))
    p /= p.sum()
    emb = rng.standard_normal((V, 8)) * 0.3
    prev = p.copy()
    for G in (3, 10, 25, 50):
        boost = Boost.group(G)
        a = onehot_acceptance(p, boost, emb=emb)
        for x in rng.choice(V, 5, replace=False):
            assert a[x] == boosted_acceptance(p, _onehot(V, int(x)), int(x), boost, emb=emb)
        assert np.all(a >= prev)
        prev = a
    official = onehot_acceptance(p, Boost.group(1, window="official"), emb=emb)
    assert np.array_equal(official[np.argsort(-p, kind="stable")[:-7]],
                          onehot_acceptance(p, Boost.group(14), emb=emb)[np.argsort(-p, kind="stable")[:-7]])
    q = np.zeros(V)
    top = np.argsort(-p)[:300]
    q[top] = rng.dirichlet(np.ones(300))
    acc = acceptance_vector(p, q, Boost.group(10), emb=emb)
    assert boosted_tv(p, q, acc) == pytest.approx(_tv(boosted_law(p, q, acc), p), abs=TOL)


# ----------------------------------------------------------------------------- Cool-SD
def test_theory_cool_schedule_formula():
    nu = 0.7
    assert cool_schedule(3.0, 4) == (3.0, pytest.approx(3.0 * np.exp(-nu)), 1.0, 1.0)
    assert cool_schedule(3.0, 2, nu=0.0) == (3.0, 3.0)
    assert cool_schedule(3.0, 2, mu=0.0) == (pytest.approx(3 * np.exp(-nu)), 1.0)
    b = Boost.cool(3.0)
    assert b.omega == cool_schedule(3.0, len(b.omega)) and b.omega[-1] == 1.0
    assert [b.omega_at(i) for i in range(1, 8)] == list(cool_schedule(3.0, 7))
    assert Boost.cool(1.5, nu=0.0).omega == (1.5,)


@pytest.mark.parametrize("spec", ["cool:delta=2", "cool:delta=3,nu=0.5", "cool:delta=1.1,nu=0",
                                  "cool:delta=2,nu=0.7,mu=-1", "cool:omega=1.2345678912345/1.1",
                                  "gsd:G=10,tau=0.123456789,dist=0.5,window=official",
                                  "budget:tv=0.123456789,k=8"])
def test_theory_boost_spec_round_trips_exactly(spec):
    b = Boost.parse(spec)
    assert Boost.parse(str(b)) == b


def test_theory_budget_names_its_tv():
    """The budget's TV per node is ``tv`` (field, constructor, grammar); ``delta`` is LANTERN's and
    Cool-SD's."""
    b = Boost.budget(tv=0.05, k=8)
    assert (b.tv, b.k) == (0.05, 8) and str(b) == "budget:tv=0.05,k=8" and Boost.parse(str(b)) == b
    with pytest.raises(ValueError, match=r"budget takes \('tv', 'k'\)"):
        Boost.parse("budget:delta=0.05,k=8")


@settings(max_examples=100, deadline=None)
@given(V=st.integers(1, 12), depth=st.integers(1, 6), delta=st.floats(1.0, 5.0), data=st.data())
def test_theory_cool_is_a_boost_with_exact_tv_excess(V, depth, delta, data):
    p, q = data.draw(distributions(V)), data.draw(distributions(V))
    boost = Boost.cool(delta)
    a = acceptance_vector(p, q, boost, depth=depth)
    a0 = base_acceptance(p, q)
    assert np.all(a >= a0)
    w = boost.omega_at(depth)
    np.testing.assert_array_equal(a[q > 0], np.minimum(1.0, w * p[q > 0] / q[q > 0]))
    assert abs(boosted_tv(p, q, a) - boost_excess(p, q, a)) < TOL


# ----------------------------------------------------------------------------- multi-child verification
def _r2_node(p, q, m, accept):
    """Exact law of a recursive sampled-draft node (m children drawn from q without replacement, each
    tested with ``accept(r, q', x, stage)``, the standard residual on rejection) and
    sum_i E[TV_i], TV_i the exact TV of stage i's own test (boosted_tv)."""
    V = p.size
    law = np.zeros(V)
    bound = [0.0]

    def walk(r, q_left, stage, prob):
        if stage > m or seqsum(q_left) <= 0.0:
            law[:] += prob * r
            return
        qp = q_left / seqsum(q_left)
        a = np.ones(V)
        for x in np.flatnonzero(qp > 0):
            a[x] = accept(r, qp, int(x), stage)
        bound[0] += prob * boosted_tv(r, qp, a)
        r_next = standard_residual(r, qp)
        for x in np.flatnonzero(qp > 0):
            law[x] += prob * qp[x] * a[x]
            if a[x] < 1.0:
                rest = q_left.copy()
                rest[x] = 0.0
                walk(r_next, rest, stage + 1, prob * qp[x] * (1.0 - a[x]))

    walk(p, q.copy(), 1, 1.0)
    return law, bound[0]


@settings(max_examples=60, deadline=None)
@given(V=st.integers(2, 5), m=st.integers(1, 3), delta=st.floats(1.0, 4.0), data=st.data())
def test_theory_multi_child_tv_is_at_most_the_stage_sum(V, m, delta, data):
    p, q = data.draw(distributions(V)), data.draw(distributions(V))
    boost = Boost.depth([delta])

    def accept(r, qp, x, stage):
        return boosted_acceptance(r, qp, x, boost, depth=1)

    exact, zero = _r2_node(p, q, m, lambda r, qp, x, stage: min(1.0, r[x] / qp[x]))
    assert _tv(exact, p) < TOL and zero < TOL  # the enumeration of the unboosted node is lossless
    law, bound = _r2_node(p, q, m, accept)
    assert abs(law.sum() - 1.0) < TOL
    tv = _tv(law, p)
    assert tv <= bound + TOL
    if m == 1:
        assert abs(tv - bound) < TOL

    def first_only(r, qp, x, stage):  # boost the first stage only: the sum is exact again
        return accept(r, qp, x, stage) if stage == 1 else min(1.0, r[x] / qp[x])

    law1, bound1 = _r2_node(p, q, m, first_only)
    assert abs(_tv(law1, p) - bound1) < TOL


def test_theory_multi_child_stage_sum_can_be_strict():
    # two children, omega = 3: later stages' excess partly lands where earlier stages left a deficit
    p, q = np.array([0.4, 0.1, 0.5]), np.array([0.1, 0.6, 0.3])
    boost = Boost.depth([3.0])
    law, bound = _r2_node(p, q, 2, lambda r, qp, x, s: boosted_acceptance(r, qp, x, boost, depth=1))
    assert _tv(law, p) == pytest.approx(0.225, abs=TOL)
    assert bound == pytest.approx(0.305, abs=TOL)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("make", "match"), [
    (lambda: Boost.group(0), "G must be an integer >= 1"),
    (lambda: Boost.parse("gsd:G=0"), "G must be an integer >= 1"),
    (lambda: Boost.group(2.5), "G must be an integer >= 1"),
    (lambda: Boost.group(3, tau=0.0), "tau must be > 0"),
    (lambda: Boost.group(3, dist=-1.0), "dist must be > 0"),
    (lambda: Boost.parse("gsd:G=3,dist=0"), "dist must be > 0"),
    (lambda: Boost.group(3, window="wide"), "unknown group window"),
    (lambda: Boost.depth([1.5, 0.9]), "omega must be >= 1"),
    (lambda: Boost.parse("cool:omega=0.5"), "omega must be >= 1"),
    (lambda: Boost.cool(0.9), "omega_1"),
    (lambda: Boost.cool(2.0, nu=-0.1), "nu must be >= 0"),
    (lambda: Boost.cool(float("nan")), "must be finite"),
    (lambda: Boost.cool(2.0, nu=1e-9), "stays above 1"),
    (lambda: cool_schedule(2.0, 0), "number of depths"),
    (lambda: Boost.parse("cool:omega=2,delta=2"), "either omega"),
    (lambda: Boost.parse("cool:"), "either omega"),
    (lambda: Boost.parse("cool:omega=2,nu=0.7"), "nu and mu go with delta"),
    (lambda: Boost.parse("cool:delta=x"), "bad number"),
])
def test_theory_boost_bad_parameters_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_theory_boost_bad_inputs_raise():
    V = 6
    p = np.full(V, 1.0 / V)
    gsd = Boost.group(3)
    with pytest.raises(ValueError, match="another vocabulary size"):
        onehot_acceptance(p, gsd, emb=np.zeros((V + 1, 2)))
    with pytest.raises(ValueError, match="another vocabulary size"):
        acceptance_vector(p, p, gsd, emb=np.zeros((V - 1, 2)))
    with pytest.raises(ValueError, match="needs an embedding table"):
        onehot_acceptance(p, gsd)
    with pytest.raises(ValueError, match="another vocabulary size"):
        boosted_acceptance(p, p, 0, gsd, emb=np.zeros((V + 2, 2)))
    with pytest.raises(ValueError, match="zero draft probability"):
        boosted_acceptance(p, _onehot(V, 1), 0, gsd, emb=np.zeros((V, 2)))
    with pytest.raises(ValueError, match="zero draft probability"):
        boosted_acceptance(p, _onehot(V, 1), 0, Boost.cool(2.0))
    with pytest.raises(ValueError, match="does not sum to 1"):
        onehot_acceptance(2 * p, NO_BOOST)
    with pytest.raises(ValueError, match="does not sum to 1"):
        boosted_law(2 * p, p, np.ones(V))
    with pytest.raises(ValueError, match="does not sum to 1"):
        acceptance_vector(p, 0.5 * p, Boost.cool(2.0))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        boosted_tv(p, p, np.full(V, 1.5))
    with pytest.raises(ValueError, match="budget boost"):
        onehot_acceptance(p, Boost.budget(0.05, 4))
