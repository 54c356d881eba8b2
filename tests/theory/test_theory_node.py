"""Exact node verification (theory.verify): lossless facts, zero relaxations, monotonicity,
the official variants' departures, and input validation."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_strategies import VARIANTS, distributions, neighbour_tables, nodes, relaxations

from relaxspec.theory import Relax, node_outcome, proximity_set
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import R2_EXACT_MAX_V

RULES = ("r1", "r2", "r3")


def order_probability(q, order):
    """P(successive draws without replacement from q give ``order``)."""
    w, left = 1.0, q.copy()
    for c in order:
        w *= left[c] / left.sum()
        left[c] = 0.0
    return w


def outcome(node, rule, children=None, relax=None, variant=None):
    return node_outcome(node.p, node.kids if children is None else children,
                        Verification(rule, node.relax if relax is None else relax,
                                     node.variant if variant is None else variant),
                        neighbours=node.nb, q=node.q)


def assert_is_outcome(out, m):
    assert out.accept_probs.shape == (m,)
    assert np.all(out.emitted >= -1e-15)
    assert abs(out.emitted.sum() - 1.0) <= 1e-12
    assert abs(out.accept_probs.sum() + out.reject_prob - 1.0) <= 1e-12
    assert np.all(out.accept_probs <= out.tried_probs + 1e-15)
    assert np.all(np.diff(out.tried_probs) <= 1e-15)
    assert 0.0 <= out.tv <= 1.0 + 1e-12


# --- lossless facts ------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(node=nodes(kinds=("none",)))
def test_theory_r1_none_accepts_p_of_each_child_and_emits_p(node):
    out = outcome(node, "r1")
    np.testing.assert_allclose(out.accept_probs, node.p[node.kids], rtol=0, atol=1e-12)
    assert abs((1.0 - out.reject_prob) - node.p[node.kids].sum()) <= 1e-12
    np.testing.assert_allclose(out.emitted, node.p, rtol=0, atol=1e-12)
    assert out.tv <= 1e-12


@settings(max_examples=60, deadline=None)
@given(node=nodes(kinds=("none",)), data=st.data())
def test_theory_r1_none_acceptance_does_not_depend_on_order(node, data):
    perm = data.draw(st.permutations(node.kids.tolist()))
    a = outcome(node, "r1").accept_probs
    b = outcome(node, "r1", children=perm).accept_probs
    order = {c: i for i, c in enumerate(node.kids.tolist())}
    np.testing.assert_allclose(b, a[[order[c] for c in perm]], rtol=0, atol=1e-12)


@settings(max_examples=80, deadline=None)
@given(node=nodes(max_v=7, max_m=3, kinds=("none",)))
def test_theory_r2_none_emits_p(node):
    m = int(node.kids.size)
    out = outcome(node, "r2", children=m)
    assert_is_outcome(out, m)
    np.testing.assert_allclose(out.emitted, node.p, rtol=0, atol=1e-12)
    # one draft: acceptance is sum_x min(p, q) = 1 - TV(p, q)
    one = outcome(node, "r2", children=1)
    assert abs(one.accept_probs[0] - np.minimum(node.p, node.q).sum()) <= 1e-12


@settings(max_examples=60, deadline=None)
@given(node=nodes(max_v=6, max_m=3))
def test_theory_r2_enumeration_is_the_average_over_draw_orders(node):
    """node_outcome(m) = sum over orders of P(order) * node_outcome(order)."""
    m = int(node.kids.size)
    if np.count_nonzero(node.q) < m:
        return
    avg = outcome(node, "r2", children=m)
    emitted = np.zeros(node.V)
    accept = np.zeros(m)
    support = np.flatnonzero(node.q > 0)
    for order in itertools.permutations(support.tolist(), m):
        w = order_probability(node.q, order)
        cond = outcome(node, "r2", children=np.array(order))
        emitted += w * cond.emitted
        accept += w * cond.accept_probs
    np.testing.assert_allclose(avg.emitted, emitted, rtol=0, atol=1e-12)
    np.testing.assert_allclose(avg.accept_probs, accept, rtol=0, atol=1e-12)


# --- every outcome is a distribution -------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(node=nodes(), rule=st.sampled_from(("r1", "r3")))
def test_theory_outcome_is_a_distribution_r1_r3(node, rule):
    assert_is_outcome(outcome(node, rule), node.kids.size)


@settings(max_examples=80, deadline=None)
@given(node=nodes(max_v=7, max_m=3))
def test_theory_outcome_is_a_distribution_r2(node):
    assert_is_outcome(outcome(node, "r2", children=int(node.kids.size)), node.kids.size)
    if np.all(node.q[node.kids] > 0):
        assert_is_outcome(outcome(node, "r2"), node.kids.size)


# --- delta = 0 and lam = 1 ------------------------------------------------------------------


def zero_relaxations(k):
    return [Relax.additive(k, 0.0), Relax.multiplicative(k, 1.0)]


def assert_same(a, b):
    np.testing.assert_array_equal(a.accept_probs, b.accept_probs)
    np.testing.assert_array_equal(a.emitted, b.emitted)
    np.testing.assert_array_equal(a.tried_probs, b.tried_probs)
    assert a.reject_prob == b.reject_prob and a.tv == b.tv


@settings(max_examples=150, deadline=None)
@given(node=nodes(max_v=7, max_m=3), k_frac=st.floats(0, 1))
def test_theory_zero_relaxation_is_bitwise_none_principled(node, k_frac):
    k = max(1, int(k_frac * node.nb.shape[1]))
    for relax in zero_relaxations(k):
        for rule in ("r1", "r3"):
            assert_same(outcome(node, rule, relax=relax, variant="principled"),
                        outcome(node, rule, relax=Relax.none(), variant="principled"))
        m = int(node.kids.size)
        assert_same(outcome(node, "r2", children=m, relax=relax, variant="principled"),
                    outcome(node, "r2", children=m, relax=Relax.none(), variant="principled"))


@settings(max_examples=150, deadline=None)
@given(node=nodes(max_v=7, max_m=3), k_frac=st.floats(0, 1))
def test_theory_zero_relaxation_official_is_none_unless_a_neighbour_is_massless(node, k_frac):
    """Official variants differ from none at delta = 0 / lam = 1 only through J >= 1, which
    needs a first neighbour of zero residual mass (a zero of p, or an earlier rejected child)."""
    k = max(1, int(k_frac * node.nb.shape[1]))
    for relax in zero_relaxations(k):
        ref = outcome(node, "r1", relax=Relax.none())
        out = outcome(node, "r1", relax=relax, variant="official")
        first = node.nb[node.kids, 0]
        if np.all(node.p[first] > 0) and not np.isin(first, node.kids).any():
            assert_same(out, ref)
        assert out.accept_probs[0] == ref.accept_probs[0]


def test_theory_official_r1_delta_zero_is_lossy_with_a_massless_neighbour():
    """Finding: the official R1 zeroes k + 1 neighbours whenever J >= 1, and J >= 1 at
    delta = 0 when the first neighbour has zero mass."""
    p = np.array([0.5, 0.0, 0.3, 0.2])
    nb = np.array([[1, 2, 3], [0, 2, 3], [3, 1, 0], [2, 1, 0]])
    for relax in zero_relaxations(1):
        out = node_outcome(p, [0], Verification("r1", relax, "official"), neighbours=nb)
        np.testing.assert_array_equal(out.emitted, [0.5, 0.0, 0.0, 0.5])
        assert out.tv == pytest.approx(0.3, abs=1e-15)
        ok = node_outcome(p, [0], Verification("r1", relax), neighbours=nb)
        np.testing.assert_array_equal(ok.emitted, p)


def test_theory_official_r1_delta_zero_is_lossy_on_a_uniform_target():
    """Finding: with full support, a rejected sibling has zero residual mass; if it is the
    next child's nearest neighbour, J >= 1 at delta = 0 and the official rule zeroes k + 1
    neighbours. Uniform p over 4 tokens, children [0, 1], row 1 = [0, 2, 3], k = 1."""
    p = np.full(4, 0.25)
    nb = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])
    out = node_outcome(p, [0, 1], Verification("r1", Relax.additive(1, 0.0), "official"), neighbours=nb)
    np.testing.assert_allclose(out.accept_probs, [0.25, 0.25], atol=1e-15)
    np.testing.assert_allclose(out.emitted, [0.25, 0.25, 0.0, 0.5], atol=1e-15)
    assert out.tv == pytest.approx(0.25, abs=1e-15)


def test_theory_official_r2_delta_zero_is_lossy_with_a_massless_neighbour():
    """The same for official R2: q' is zeroed on k + 1 neighbours, so the residual keeps
    target mass the draft already covers."""
    p = np.array([0.2, 0.0, 0.4, 0.4])
    q = np.array([0.5, 0.0, 0.5, 0.0])
    nb = np.array([[1, 2, 3], [0, 2, 3], [3, 1, 0], [2, 1, 0]])
    ref = node_outcome(p, 1, "r2", q=q)
    np.testing.assert_allclose(ref.emitted, p, atol=1e-15)
    out = node_outcome(p, 1, Verification("r2", Relax.additive(1, 0.0), "official"), neighbours=nb, q=q)
    # draw 0 (prob 1/2): a = 0.4, J = 1 (p(1) = 0) zeroes q' on {1, 2}: residual (0, 0, .4, .4)/.8
    # draw 2 (prob 1/2): a = 0.8, J = 0: residual (p - q)^+ = (0, 0, 0, .4) -> token 3
    expected = 0.5 * np.array([0.4, 0, 0.3, 0.3]) + 0.5 * np.array([0, 0, 0.8, 0.2])
    np.testing.assert_allclose(out.emitted, expected, atol=1e-15)
    assert out.tv == pytest.approx(0.15, abs=1e-15)


# --- monotonicity and the single child -----------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(node=nodes(max_v=12, max_m=1), d1=st.floats(0, 1), d2=st.floats(0, 1),
       l1=st.floats(1, 20), l2=st.floats(1, 20), data=st.data())
def test_theory_single_child_acceptance_monotone_in_delta_lam_k(node, d1, d2, l1, l2, data):
    K = node.nb.shape[1]
    k1 = data.draw(st.integers(1, K))
    k2 = data.draw(st.integers(k1, K))
    (d1, d2), (l1, l2) = sorted((d1, d2)), sorted((l1, l2))
    pairs = [
        (Relax.additive(k1, d1), Relax.additive(k1, d2)),
        (Relax.additive(k1, d1), Relax.additive(k2, d1)),
        (Relax.multiplicative(k1, l1), Relax.multiplicative(k1, l2)),
        (Relax.multiplicative(k1, l1), Relax.multiplicative(k2, l1)),
        (Relax.none(), Relax.additive(k1, d1)),
        (Relax.none(), Relax.multiplicative(k1, l1)),
    ]
    small_v = node.V <= R2_EXACT_MAX_V
    for lo, hi in pairs:
        for rule in ("r1", "r3"):
            a = outcome(node, rule, relax=lo).accept_probs[0]
            b = outcome(node, rule, relax=hi).accept_probs[0]
            assert a <= b + 1e-15, (rule, lo, hi)
        if small_v:
            a = outcome(node, "r2", children=1, relax=lo).accept_probs[0]
            b = outcome(node, "r2", children=1, relax=hi).accept_probs[0]
            assert a <= b + 1e-12, ("r2", lo, hi)


@settings(max_examples=200, deadline=None)
@given(node=nodes(max_m=1, kinds=("additive", "multiplicative")))
def test_theory_single_child_r1_tv_is_merged_mass_within_budget(node):
    c = int(node.kids[0])
    out = outcome(node, "r1", variant="principled")
    members, mass = proximity_set(node.p, c, node.nb, node.relax)
    merged = mass - node.p[c]
    assert abs(out.tv - merged) <= 1e-12
    assert abs(out.accept_probs[0] - mass) <= 1e-12
    if node.relax.kind == "additive":
        assert out.tv <= node.relax.delta + 1e-12
    else:
        assert out.tv <= (node.relax.lam - 1.0) * node.p[c] + 1e-12


# --- proximity sets ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(data=st.data(), V=st.integers(2, 30))
def test_theory_proximity_set_is_the_largest_prefix_within_the_bound(data, V):
    p = data.draw(distributions(V))
    nb = data.draw(neighbour_tables(V))
    relax = data.draw(relaxations(nb.shape[1]))
    x = data.draw(st.integers(0, V - 1))
    members, mass = proximity_set(p, x, nb, relax)
    J = members.size - 1
    assert members[0] == x
    np.testing.assert_array_equal(members[1:], nb[x, :J])
    bound = {"none": -1.0, "additive": relax.delta,
             "multiplicative": (relax.lam - 1.0) * p[x]}[relax.kind]
    C = np.concatenate(([0.0], np.add.accumulate(p[nb[x, : relax.k]]))) if relax.k else [0.0]
    best = max([j for j in range(len(C)) if j == 0 or C[j] <= bound])
    assert J == best
    assert mass == p[x] + C[J]


def test_theory_proximity_set_examples():
    p = np.array([0.1, 0.05, 0.6, 0.25])
    nb = np.array([[1, 2, 3], [0, 2, 3], [1, 0, 3], [2, 0, 1]])
    m, a = proximity_set(p, 0, nb, Relax.additive(3, 0.1))
    assert m.tolist() == [0, 1] and a == pytest.approx(0.15)
    m, a = proximity_set(p, 0, nb, Relax.additive(3, 0.7))
    assert m.tolist() == [0, 1, 2] and a == pytest.approx(0.75)
    m, a = proximity_set(p, 0, nb, Relax.multiplicative(3, 1.5))
    assert m.tolist() == [0, 1] and a == pytest.approx(0.15)
    m, a = proximity_set(p, 0, nb, Relax.multiplicative(3, 1.4))
    assert m.tolist() == [0] and a == pytest.approx(0.1)
    m, a = proximity_set(p, 0, None, Relax.none())
    assert m.tolist() == [0] and a == 0.1


# --- bad input ------------------------------------------------------------------------------

P4 = np.array([0.1, 0.2, 0.3, 0.4])
NB4 = np.array([[1, 2, 3], [0, 2, 3], [1, 0, 3], [2, 0, 1]])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"p": np.array([0.1, np.nan, 0.5, 0.4])}, "NaN"),
        ({"p": np.array([0.6, -0.1, 0.1, 0.4])}, "negative"),
        ({"p": np.array([0.1, 0.2, 0.3, 0.3])}, "sum to 1"),
        ({"p": np.ones((2, 2)) / 4}, "1-D"),
        ({"children": [1, 1]}, "not distinct"),
        ({"children": [4]}, "out of range"),
        ({"children": [-1]}, "out of range"),
        ({"children": [0.5]}, "integer"),
        ({"children": [True]}, "integer"),
        ({"children": 2}, "1-D"),
        ({"neighbours": NB4[:3]}, "shape"),
        ({"neighbours": NB4.astype(float)}, "integer dtype"),
        ({"neighbours": NB4.tolist()}, "numpy array"),
        ({"neighbours": None}, "needs a neighbour table"),
        ({"relax": Relax.additive(4, 0.1)}, "only 3 columns"),
        ({"neighbours": np.array([[1, 2, 3], [0, 0, 3], [1, 0, 3], [2, 0, 1]]),
          "children": [1]}, "repeats"),
        ({"neighbours": np.array([[1, 2, 3], [1, 2, 3], [1, 0, 3], [2, 0, 1]]),
          "children": [1]}, "itself"),
        ({"neighbours": np.array([[1, 2, 3], [7, 2, 3], [1, 0, 3], [2, 0, 1]]),
          "children": [1]}, "outside"),
        ({"rule": "r9"}, "unknown rule"),
        ({"variant": "lantern"}, "unknown variant"),
    ],
)
def test_theory_node_outcome_bad_input(kwargs, match):
    args = {"p": P4, "children": [0, 1], "rule": "r1", "relax": Relax.additive(2, 0.1),
            "neighbours": NB4, "variant": "principled"}
    args.update(kwargs)
    p, children = args.pop("p"), args.pop("children")
    with pytest.raises(ValueError, match=match):  # a bad rule or variant: when the verification is built
        verification = Verification(args.pop("rule"), args.pop("relax"), args.pop("variant"))
        node_outcome(p, children, verification, **args)


@pytest.mark.parametrize(
    "p, children, q, match",
    [
        (P4, 2, None, "needs the draft"),
        (P4, 2, np.array([0.5, 0.5, 0.0]), "expected the vocabulary size"),
        (P4, -1, np.full(4, 0.25), ">= 0"),
        (np.full(13, 1 / 13), 1, np.full(13, 1 / 13), "V <= 12"),
        (P4, 5, np.full(4, 0.25), "m <= 4"),
        (P4, [0, 1], np.array([0.0, 0.5, 0.5, 0.0]), "zero draft probability"),
    ],
)
def test_theory_node_outcome_bad_r2_input(p, children, q, match):
    with pytest.raises(ValueError, match=match):
        node_outcome(p, children, "r2", q=q)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Relax.additive(10, 1.5), "delta must be in"),
        (lambda: Relax.additive(10, -0.1), "delta must be in"),
        (lambda: Relax.additive(10, float("nan")), "delta must be in"),
        (lambda: Relax.multiplicative(10, 0.5), "lam must be >= 1"),
        (lambda: Relax.multiplicative(-1, 2.0), "non-negative integer"),
        (lambda: Relax.additive(2.5, 0.1), "non-negative integer"),
        (lambda: Relax("none", k=3), "takes no"),
        (lambda: Relax("additive", k=3, lam=2.0), "takes delta"),
        (lambda: Relax("multiplicative", k=3, delta=0.1, lam=2.0), "takes lam"),
        (lambda: Relax("bogus"), "unknown relaxation"),
        (lambda: Relax.parse("additive:delta=0.1"), "needs k"),
        (lambda: Relax.parse("additive:k=10"), "needs delta"),
        (lambda: Relax.parse("multiplicative:k=10"), "needs lam"),
        (lambda: Relax.parse("additive:k=1.5,delta=0.1"), "integer"),
        (lambda: Relax.parse("additive:k=x,delta=0.1"), "not a number"),
        (lambda: Relax.parse("lantern"), "cannot parse"),
        (lambda: proximity_set(P4, 4, NB4, Relax.none()), "out of range"),
        (lambda: proximity_set(P4, 0, None, Relax.additive(1, 0.1)), "needs a neighbour"),
        (lambda: proximity_set(P4 * 2, 0, NB4, Relax.additive(1, 0.1)), "sum to 1"),
    ],
)
def test_theory_relax_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    "text", ["none", "additive:k=1000,delta=0.1", "multiplicative:k=1000,lam=2"]
)
def test_theory_relax_parse_roundtrip(text):
    relax = Relax.parse(text)
    assert str(relax) == text
    assert Relax.parse(str(relax)) == relax


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("rule", RULES)
def test_theory_no_children(rule, variant):
    out = node_outcome(P4, 0 if rule == "r2" else [], Verification(rule, Relax.additive(2, 0.1), variant),
                       neighbours=NB4, q=np.full(4, 0.25))
    assert out.reject_prob == 1.0
    target = P4 if rule != "r3" else np.eye(4)[3]
    np.testing.assert_allclose(out.emitted, target, atol=1e-15)
