"""The simulator's exact shortcuts (issue 30, docs/theory.md section 16), each against theory bit for bit:
GSD's window without sorting V, the radix rank order on float edge cases, every draft's ratio along the
order, the budget's stage summing a proximity mass only where it can change a number, and draws without
replacement that sum again only from the token the last draw zeroed."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.simulate.boost_kernels import (
    FEW_DRAFTS,
    boosted_ratios_kernel,
    budget_stage_kernel,
    stage_tv_kernel,
)
from relaxspec.simulate.group_kernels import (
    group_ratio_kernel,
    group_ratios_sorted,
    radix_argsort,
    rank_order_kernel,
    rank_window,
)
from relaxspec.simulate.policy_kernels import draw_without_replacement_kernel
from relaxspec.theory.boost import Boost
from relaxspec.theory.boost_law import acceptance_vector, rank_order, stage_tv, window_extent
from relaxspec.theory.boost_law import rank_window as theory_rank_window
from relaxspec.theory.budget import budget_stage, check_budget
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.verification import Verification


def _rows(rng: np.random.Generator, V: int, kind: int) -> np.ndarray:
    """A row full of ties (small integers), a Dirichlet row, or a residual-like row (half exact zeros,
    some -0.0)."""
    if kind == 0:
        return rng.integers(0, 4, V).astype(np.float64)
    if kind == 1:
        return rng.dirichlet(np.full(V, 0.3))
    r = np.where(rng.random(V) < 0.5, 0.0, rng.random(V))
    r[rng.random(V) < 0.1] = -0.0
    return r


def test_rank_order_is_theory_order_on_float_edge_cases():
    """The radix sort of the float bits: ties by lower id, -0.0 equal to 0.0, denormals, one token."""
    rng = np.random.default_rng(3)
    tiny = np.array([5e-324, 0.0, -0.0, 1e-310, 5e-324, 1.0, 0.5, 1e-300, -0.0, 0.5])
    cases = [tiny, np.array([0.25]), *[_rows(rng, int(rng.integers(2, 700)), i % 3) for i in range(60)]]
    for r in cases:
        order, rank = np.empty(r.size, np.int64), np.empty(r.size, np.int64)
        rank_order_kernel(r, order, rank)
        np.testing.assert_array_equal(order, rank_order(r))
        np.testing.assert_array_equal(rank[order], np.arange(r.size))


def test_radix_argsort_is_numpy_stable_argsort():
    """Both directions, with ties, zeros, infinities (the budget's breakpoints) and empty input."""
    rng = np.random.default_rng(5)
    for i in range(40):
        n = int(rng.integers(0, 500))
        v = rng.choice([0.0, 0.5, 2.0, np.inf, 1e-320], n) if i % 2 else rng.random(n) * 10.0 ** rng.integers(
            -30, 30, n)
        order = np.empty(n, np.int64)
        radix_argsort(v, False, order)
        np.testing.assert_array_equal(order, np.argsort(v, kind="stable"))
        radix_argsort(v, True, order)
        np.testing.assert_array_equal(order, np.argsort(-v, kind="stable"))


@pytest.mark.parametrize("G", [1, 2, 3, 10, 14])
def test_window_without_sorting_is_theory_window(G):
    """One pass gives x's rank and the G ranks around it (clipped at both ends), as theory's sort does."""
    rng = np.random.default_rng(G)
    before, after = window_extent(G, "principled")
    above, below = np.empty(max(before, 1), np.int64), np.empty(max(after, 1), np.int64)
    for i in range(40):
        r = _rows(rng, int(rng.integers(1, 300)), i % 3)
        order = rank_order(r)
        for x in [int(order[0]), int(order[-1]), *rng.integers(0, r.size, 4)]:
            rank, na, nb = rank_window(r, x, before, after, above, below)
            assert rank == int(np.flatnonzero(order == x)[0])
            got = [*above[:na], x, *below[:nb]]
            np.testing.assert_array_equal(got, theory_rank_window(r, x, G, "principled"))


def test_one_ratio_by_a_pass_equals_every_ratio_along_the_order():
    """A test's ratio (one pass) and a stage TV's ratios (sorted once) are the same bits, and theory's
    acceptance; the official window's fallback included."""
    rng = np.random.default_rng(11)
    for i in range(30):
        V = int(rng.integers(2, 120))
        r, emb = _rows(rng, V, i % 3), rng.standard_normal((V, 3))
        r = np.abs(r) / np.abs(r).sum() if np.abs(r).sum() > 0 else np.full(V, 1.0 / V)
        qp = rng.dirichlet(np.ones(V))
        qp[rng.random(V) < 0.3] = 0.0
        qp[int(rng.integers(V))] = 0.5
        qp /= qp.sum()
        boost = Boost.group(int(rng.integers(1, 12)), 0.2, 2.0, window="official" if i % 2 else "principled")
        bs = Verification("r2", boost=boost).encode(V, emb=emb).bs
        out = np.full(V, -1.0)
        group_ratios_sorted(r, qp, rank_order(r), *bs[1:6], emb, out)
        want = acceptance_vector(r, qp, boost, emb=emb)
        for x in np.flatnonzero(qp > 0):
            one = group_ratio_kernel(r, qp, x, *bs[1:6], emb)
            assert one == out[x]
            assert min(1.0, one) == want[x]


@pytest.mark.parametrize("n", [1, FEW_DRAFTS, FEW_DRAFTS + 1, 60])
def test_stage_tv_with_few_or_many_drafts_is_theory(n):
    """The stage's exact TV whether GSD ranks each draftable token by a pass (few) or sorts once (many),
    Cool-SD's ratios reading omega once: theory's stage_tv (to rounding: theory sums with NumPy's pairwise
    sums, the kernel sequentially), every ratio theory's bit for bit."""
    rng = np.random.default_rng(n)
    V = 80
    r, emb = rng.dirichlet(np.full(V, 0.5)), rng.standard_normal((V, 2))
    qp = np.zeros(V)
    qp[rng.choice(V, n, replace=False)] = rng.dirichlet(np.ones(n))
    order, a = np.empty(V, np.int64), np.empty(V)
    for boost in (Boost.group(10, 0.15, 1.0), Boost.cool(2.0)):
        bs = Verification("r2", boost=boost).encode(V, emb=emb).bs
        for depth in (1, 3):
            np.testing.assert_allclose(stage_tv_kernel(r, qp, depth, bs, order, a),
                                       stage_tv(r, qp, boost, depth, emb), rtol=1e-13, atol=1e-16)
            ratios = np.full(V, -1.0)
            boosted_ratios_kernel(r, qp, depth, bs, order, ratios)
            assert np.all(ratios[qp == 0] == -1.0)  # tokens q' cannot draw are not read
            on = qp > 0
            np.testing.assert_array_equal(np.minimum(1.0, ratios[on]),
                                          acceptance_vector(r, qp, boost, depth=depth, emb=emb)[on])


@pytest.mark.parametrize("alpha", [1.0, 0.6, 0.0])
def test_budget_stage_skips_only_masses_that_change_nothing(alpha):
    """Scale, charge and the draft's ratio as theory's budget_stage (which sums every proximity mass), at
    budgets that bind, do not bind and are spent, with draft residuals of full and partial support."""
    rng = np.random.default_rng(int(alpha * 10))
    V, k = 60, 7
    others = np.argsort(rng.random((V, V - 1)), axis=1)[:, :k]  # k distinct tokens other than the row's
    nb = ((np.arange(V)[:, None] + 1 + others) % V).astype(np.int32)
    boost = Boost.budget(0.05, k)
    table = check_budget(boost, nb, V)
    eps, g, c, t = (np.empty(V) for _ in range(4))
    for i in range(12):
        r, qp = rng.dirichlet(np.full(V, 0.4)), rng.dirichlet(np.full(V, 0.4))
        if i % 2:
            qp[rng.random(V) < 0.5] = 0.0
            qp[0] = 0.1
            qp /= qp.sum()
        x = int(rng.choice(np.flatnonzero(qp > 0)))
        for remaining in (0.0, 1e-4, 0.02, 5.0):
            want = budget_stage(r, qp, table, boost, remaining, alpha)
            s, charge = budget_stage_kernel(r, qp, x, alpha, remaining, np.ascontiguousarray(table[:, :k]),
                                            eps, g, c, t)
            assert (s, charge) == (want.scale, want.charge)
            assert (r[x] + s * eps[x]) / qp[x] == want.ratio[want.of(x)]


def test_draws_without_replacement_resume_the_cumulative_sum():
    """Every draw of a node's children as theory draws them, down to a row's last tokens with mass (the
    sums restart at the zeroed token; tokens without mass, a row of one token and sums that round)."""
    rng = np.random.default_rng(9)
    for _ in range(60):
        V = int(rng.integers(1, 200))
        q = rng.dirichlet(np.full(V, 0.3))
        q[rng.random(V) < 0.3] = 0.0
        if q.sum() == 0.0:
            q[0] = 1.0
        q /= q.sum()
        m = int(rng.integers(1, V + 2))
        u = rng.random(m)
        u[rng.random(m) < 0.1] = np.nextafter(1.0, 0.0)  # u * total rounds up to total
        out, qr, cum = np.empty(m, np.int64), np.empty(V), np.empty(V)
        got = draw_without_replacement_kernel(q, u, m, qr, cum, out)
        np.testing.assert_array_equal(out[:got], draw_without_replacement(q, u))
