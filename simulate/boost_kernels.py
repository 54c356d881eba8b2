"""Numba kernels of R2's boosted stages (SPEC 9.2-9.5): GSD, Cool-SD and the budget, and R2's walk at one
node (:func:`sample_node_r2_kernel`, plain or boosted).

Operation-for-operation twins of ``theory.boost`` / ``theory.boost_law`` / ``theory.budget`` (same array
conventions as :mod:`simulate.verify_kernels`; the boost tuple ``bs`` is described there). Exact
shortcuts, each giving the same numbers bit for bit (docs/theory.md, section 16):

- a test reads one draft's ratio: GSD's window comes from one pass over the row
  (``simulate.group_kernels.group_ratio_kernel``), never a sort of V;
- a stage's exact TV reads every draftable token's ratio (:func:`boosted_ratios_kernel`): the kind's
  parameters are read once, not per token; GSD sorts the row once (a radix sort) when the draft residual
  has more than :data:`FEW_DRAFTS` tokens, else ranks each of them by a pass;
- the budget's proximity mass eps(x) (a sum over x's k neighbours) is summed only where it can change a
  number: at the draft and where the exact acceptance is below 1 or the gap is positive (elsewhere the
  boosted acceptance is 1 whatever eps is), and at the draft alone once the node's budget is spent;
  four tokens' sums run side by side (each still in neighbour order), so the V x k pass is bound by
  memory, not by the latency of one add after another.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from relaxspec.simulate.group_kernels import (
    group_ratio_kernel,
    group_ratios_sorted,
    radix_argsort,
    rank_order_kernel,
)
from relaxspec.simulate.verify_kernels import (
    draft_residual_kernel,
    normalise_residual_kernel,
    r2_stage_kernel,
)
from relaxspec.theory.rules import BOOST_BUDGET, BOOST_DEPTH, BOOST_GROUP, BOOST_NONE

FEW_DRAFTS = 8  # up to this many draftable tokens, GSD ranks each by a pass over V instead of sorting V


# ---------------------------------------------------------------- GSD and Cool-SD (SPEC 9.2-9.4)
@njit(cache=True, error_model="numpy")
def standard_residual_kernel(r, qp, res):
    """``theory.boost.standard_residual`` into ``res``: norm((r - q')^+), uniform when empty."""
    for y in range(r.shape[0]):
        res[y] = max(r[y] - qp[y], 0.0)
    normalise_residual_kernel(res)


@njit(cache=True, error_model="numpy")
def depth_weight(omega, depth):
    """Cool-SD's omega at ``depth`` (the last value holds deeper)."""
    return omega[min(max(depth, 1), omega.shape[0]) - 1]


@njit(cache=True, error_model="numpy")
def boosted_ratio_kernel(r, qp, x, depth, bs):
    """The boosted ratio b(x) of draft x at ``depth`` (``theory.traversal.edge_ratio``): GSD's group ratio
    r(C) / q'(C), Cool-SD's omega r(x) / q'(x), else r(x) / q'(x)."""
    if bs[0] == BOOST_GROUP:
        return group_ratio_kernel(r, qp, x, bs[1], bs[2], bs[3], bs[4], bs[5], bs[7])
    if bs[0] == BOOST_DEPTH:
        return depth_weight(bs[6], depth) * r[x] / qp[x]
    return r[x] / qp[x]


@njit(cache=True, error_model="numpy")
def boosted_ratios_kernel(r, qp, depth, bs, order, out):
    """:func:`boosted_ratio_kernel` of every token x with ``qp[x] > 0`` into ``out[x]`` (others
    untouched); ``order``: int64[V] scratch (GSD's rank order when it sorts)."""
    V = r.shape[0]
    if bs[0] == BOOST_GROUP:
        before, after, fallback, tau, dist, emb = bs[1], bs[2], bs[3], bs[4], bs[5], bs[7]
        n = 0
        for x in range(V):
            if qp[x] > 0.0:
                n += 1
        if n > FEW_DRAFTS:
            rank_order_kernel(r, order, order[:0])
            group_ratios_sorted(r, qp, order, before, after, fallback, tau, dist, emb, out)
            return
        for x in range(V):
            if qp[x] > 0.0:
                out[x] = group_ratio_kernel(r, qp, x, before, after, fallback, tau, dist, emb)
        return
    w = depth_weight(bs[6], depth) if bs[0] == BOOST_DEPTH else 1.0
    if bs[0] == BOOST_DEPTH:
        for x in range(V):
            if qp[x] > 0.0:
                out[x] = w * r[x] / qp[x]
    else:
        for x in range(V):
            if qp[x] > 0.0:
                out[x] = r[x] / qp[x]


@njit(cache=True, error_model="numpy")
def boosted_acceptance_kernel(r, qp, x, depth, bs):
    """``theory.boost.boosted_acceptance`` of draft x at ``depth``: min(1, b(x))."""
    return min(1.0, boosted_ratio_kernel(r, qp, x, depth, bs))


@njit(cache=True, error_model="numpy")
def boosted_stage_kernel(r, qp, x, depth, bs, res):
    """``theory.boost.boosted_stage``: the acceptance of x; ``res`` gets the standard residual."""
    a = boosted_acceptance_kernel(r, qp, x, depth, bs)
    standard_residual_kernel(r, qp, res)
    return a


@njit(cache=True, error_model="numpy")
def stage_tv_kernel(r, qp, depth, bs, order, a):
    """``theory.boost.stage_tv``: exact TV(law of one stage, r) by SPEC 9.4 (``theory.boost.boosted_tv``
    of the acceptance vector, into the float64[V] scratch ``a``; ``order``: int64[V] scratch); 0 without
    a boost.

    Two passes over V, not four (the stage is memory-bound: r, q' and ``a`` do not stay in cache): the
    first computes each token's acceptance a(y), its excess term q'(y) (a(y) - a0(y)) (kept in ``a``)
    and the three sums; the second the TV from the kept terms. Every term is the same float as theory's
    and each sum runs in token order, so the result is theory's arithmetic bit for bit."""
    if bs[0] == BOOST_NONE:
        return 0.0
    V = r.shape[0]
    group = bs[0] == BOOST_GROUP
    if group:  # every draftable token's group ratio, left in a (others untouched)
        boosted_ratios_kernel(r, qp, depth, bs, order, a)
    w = depth_weight(bs[6], depth) if bs[0] == BOOST_DEPTH else 1.0
    delta, s, acc = 0.0, 0.0, 0.0
    for y in range(V):  # three sums, each sequential in token order
        if qp[y] > 0.0:
            ay = min(1.0, a[y] if group else w * r[y] / qp[y])  # boosted_ratios_kernel's ratio
            a0 = min(1.0, r[y] / qp[y])
        else:
            ay, a0 = 1.0, 1.0
        excess = qp[y] * (ay - a0)
        a[y] = excess
        delta += excess
        s += max(r[y] - qp[y], 0.0)
        acc += qp[y] * ay
    tv = 0.0
    if s <= 0.0:  # r == q': the unboosted test never rejects; the residual is uniform
        if group:
            boosted_ratios_kernel(r, qp, depth, bs, order, a)
        rest = max(0.0, 1.0 - acc)
        for y in range(V):
            ay = (min(1.0, a[y] if group else w * r[y] / qp[y])) if qp[y] > 0.0 else 1.0
            tv += abs(qp[y] * ay + rest / V - r[y])
        return 0.5 * tv
    for y in range(V):
        tv += abs(a[y] - delta * max(r[y] - qp[y], 0.0) / s)
    return 0.5 * tv


# ---------------------------------------------------------------- the budgeted relaxation (SPEC 9.5)
@njit(cache=True, error_model="numpy")
def budget_scale_kernel(g, c, remaining, t):
    """``theory.budget.budget_scale`` on the tokens whose gap ``g`` and slope ``c`` are both positive (in
    token order): the largest s in [0, 1] with sum min(g, s c) <= ``remaining``; ``t``: float64 scratch of
    at least ``g.shape[0]`` entries (the breakpoints, sorted stably)."""
    if remaining <= 0.0:
        return 0.0
    n = g.shape[0]
    total = 0.0
    for j in range(n):
        total += min(g[j], c[j])
    if n == 0 or total <= remaining:
        return 1.0
    for j in range(n):
        t[j] = g[j] / c[j]  # inf for a denormal slope: never reached
    order = np.empty(n, dtype=np.int64)
    radix_argsort(t[:n], False, order)  # np.argsort(t, kind="stable"): t > 0
    open_slope = np.empty(n)  # c_j + ... + c_n in breakpoint order, summed from the right
    acc = 0.0
    for j in range(n - 1, -1, -1):
        acc += c[order[j]]
        open_slope[j] = acc
    saturated = 0.0
    for j in range(n):
        tj = t[order[j]]
        if tj >= 1.0 or saturated + tj * open_slope[j] > remaining:
            return min(1.0, max(0.0, (remaining - saturated) / open_slope[j]))
        saturated += g[order[j]]
    return 1.0


@njit(cache=True, error_model="numpy")
def proximity_masses_kernel(r, table, xs, n, eps):
    """``eps[x]`` = r(n_1) + ... + r(n_k) for x of ``xs[:n]`` (n_j: row x of ``table``, all its k columns,
    summed left to right: ``theory.budget.proximity_masses``). Four tokens at a time: four independent
    sums, each in neighbour order."""
    K = table.shape[1]
    i = 0
    while i + 4 <= n:
        x0, x1, x2, x3 = xs[i], xs[i + 1], xs[i + 2], xs[i + 3]
        t0, t1, t2, t3 = table[x0], table[x1], table[x2], table[x3]
        e0, e1, e2, e3 = 0.0, 0.0, 0.0, 0.0
        for j in range(K):
            e0 += r[t0[j]]
            e1 += r[t1[j]]
            e2 += r[t2[j]]
            e3 += r[t3[j]]
        eps[x0], eps[x1], eps[x2], eps[x3] = e0, e1, e2, e3
        i += 4
    for m in range(i, n):
        x = xs[m]
        e = 0.0
        for j in range(K):
            e += r[table[x, j]]
        eps[x] = e


@njit(cache=True, error_model="numpy")
def budget_stage_kernel(r, qp, x, alpha, remaining, table, eps, g, c, t):
    """``theory.budget.budget_stage`` on residual target ``r``, draft residual ``qp``, path weight
    ``alpha`` and ``remaining`` budget, for draft ``x``: returns (scale s, the stage's charge Delta(s),
    summed in token order); ``eps[y]`` gets y's proximity mass (:func:`proximity_masses_kernel`) at x
    and wherever it can change a number. ``g``, ``c``, ``t``: float64[V] scratch. A token's boosted ratio
    is then :func:`budget_ratio_kernel`.

    eps(y) is left out where ``alpha > 0``, the gap q'(y) - alpha r(y) is not positive and the exact
    acceptance min(1, alpha r(y) / q'(y)) is 1: y then enters no breakpoint, and its boosted acceptance
    is 1 too (rounding is monotone and s eps(y) >= 0), so its charge is 0 whatever eps(y) is. With the
    budget spent (``remaining <= 0``) s is 0, every boosted acceptance is the exact one (s eps = 0) and
    the charge is 0: only the draft's eps is summed."""
    V = r.shape[0]
    xs = np.empty(V, dtype=np.int64)
    if remaining <= 0.0:  # theory: s = 0, a charge of zeros
        xs[0] = x
        proximity_masses_kernel(r, table, xs, 1, eps)
        return 0.0, 0.0
    n = 0
    for y in range(V):
        if qp[y] > 0.0:
            gap = max(qp[y] - alpha * r[y], 0.0)
            if y == x or not (alpha > 0.0 and gap <= 0.0 and min(1.0, alpha * (r[y] / qp[y])) == 1.0):
                xs[n] = y
                n += 1
    proximity_masses_kernel(r, table, xs, n, eps)
    m = 0
    for i in range(n):  # the breakpoints' tokens, in token order
        y = xs[i]
        if qp[y] > 0.0:
            gap = max(qp[y] - alpha * r[y], 0.0)
            slope = alpha * eps[y]
            if gap > 0.0 and slope > 0.0:
                g[m] = gap
                c[m] = slope
                m += 1
    s = budget_scale_kernel(g[:m], c[:m], remaining, t)
    charge = 0.0
    for i in range(n):
        y = xs[i]
        if qp[y] > 0.0:
            boosted = min(1.0, alpha * budget_ratio_kernel(r, qp, y, s, eps))
            exact = min(1.0, alpha * (r[y] / qp[y]))
            charge += qp[y] * (boosted - exact)
    return s, charge


@njit(cache=True, error_model="numpy")
def budget_ratio_kernel(r, qp, x, s, eps):
    """The budget's boosted ratio (r(x) + s eps(x)) / q'(x) (``theory.budget.BudgetStage.ratio``)."""
    return (r[x] + s * eps[x]) / qp[x]


@njit(cache=True, error_model="numpy")
def budget_r2_node_kernel(p, q, kids, u_kids, sampling, delta, table, r, qp, res, accept, charge, limit):
    """Budgeted R2 at one node along the draw order ``kids`` (``theory.budget.sample_budget_node`` and
    ``budget_r2_given_states``): stage i gets ``accept[i]`` and ``charge[i]``; the node's budget
    ``delta`` shrinks by each rejected stage's charge. ``sampling``: stop at the first i with
    ``u_kids[i] < accept[i]`` (else at a stage accepted surely); at most ``limit`` stages. Returns
    (stages tested, accepted index or -1); ``r`` ends as the residual a rejection leaves."""
    V = p.shape[0]
    eps, g, c, t = np.empty(V), np.empty(V), np.empty(V), np.empty(V)
    for x in range(V):
        r[x] = p[x]
    left = delta
    for i in range(min(kids.shape[0], limit)):
        if not draft_residual_kernel(q, kids, i, qp):
            return i, -1
        s, ch = budget_stage_kernel(r, qp, kids[i], 1.0, left, table, eps, g, c, t)
        a = min(1.0, 1.0 * budget_ratio_kernel(r, qp, kids[i], s, eps))
        accept[i] = a
        charge[i] = ch
        if sampling and u_kids[i] < a:
            return i + 1, i
        if not sampling and a >= 1.0:
            return i + 1, -1
        standard_residual_kernel(r, qp, res)
        for x in range(V):
            r[x] = res[x]
        left = left - ch
    return min(kids.shape[0], limit), -1


# ---------------------------------------------------------------- R2 at one node
@njit(cache=True, error_model="numpy")
def node_r2_kernel(p, q, kids, u_kids, code, k, param, variant, nb, r, qp, res, depth, bs, with_tv):
    """Verify one node under R2 (boosted by ``bs`` for children at ``depth``; the budget by
    :func:`budget_r2_node_kernel`): returns (the accepted child's index or -1, the sum of the exact TVs of
    the stages it tested when ``with_tv`` and boosted, else 0: ``theory.verify.r2_stage_tvs``, the budget's
    charges), ``r`` = the residual a rejection leaves. The TV comes from the very stages the test ran."""
    m = kids.shape[0]
    if bs[0] == BOOST_BUDGET:
        ch = np.empty(m)
        n, i = budget_r2_node_kernel(p, q, kids, u_kids, True, bs[8], bs[9], r, qp, res, np.empty(m), ch, m)
        tv = 0.0
        if with_tv:
            for j in range(n):
                tv += ch[j]
        return i, tv
    for x in range(p.shape[0]):
        r[x] = p[x]
    boosted = bs[0] != BOOST_NONE
    with_tv = with_tv and boosted
    V = p.shape[0] if with_tv else 0
    order, avec = np.empty(V, dtype=np.int64), np.empty(V)
    tv = 0.0
    for i in range(m):
        if not draft_residual_kernel(q, kids, i, qp):
            break
        if with_tv:
            tv += stage_tv_kernel(r, qp, depth, bs, order, avec)
        if boosted:
            a = boosted_stage_kernel(r, qp, kids[i], depth, bs, res)
        else:
            a = r2_stage_kernel(r, qp, kids[i], nb, code, k, param, variant, res)
        if u_kids[i] < a:
            return i, tv
        for x in range(p.shape[0]):
            r[x] = res[x]
    return -1, tv


@njit(cache=True, error_model="numpy")
def sample_node_r2_kernel(p, q, kids, u_kids, code, k, param, variant, nb, r, qp, res, depth, bs):
    """Verify one node under R2 (:func:`node_r2_kernel` without the TV); returns the accepted child's index
    or -1 (``r`` = residual)."""
    i, _ = node_r2_kernel(p, q, kids, u_kids, code, k, param, variant, nb, r, qp, res, depth, bs, False)
    return i
