"""Numba kernels of verifying one node (SPEC section 3): R1, R2, R3.

Whole steps on a tree (the walk, exact expectations) are in :mod:`simulate.step_kernels`.

Operation-for-operation twins of ``theory.stages`` / ``theory.sampler`` /
``theory.tree`` (sequential loops, no fastmath, no reordering), so that given
the same distributions and uniforms they take bit-identical decisions.

Array conventions (validated by the Python layer, never here):

- ``p``, ``q``: float64 rows over V tokens;
- ``nb``: int32 neighbour table (V, W), W >= k (the official variant reads
  ``min(k + 1, W)`` columns);
- a relaxation is ``(code, k, param)``: code ``RELAX_NONE``, ``RELAX_ADDITIVE`` (param =
  delta), ``RELAX_MULTIPLICATIVE`` (param = lam); ``variant`` ``VARIANT_PRINCIPLED`` or ``VARIANT_OFFICIAL``;
- ``rule`` ``RULE_R1`` .. ``RULE_R4``;
- a boost (R2 and R4, SPEC 9.2-9.5) is ``bs = (kind, before, after, fallback, tau, dist, omega, emb,
  tv, table)`` (``theory.verification.KernelArgs``): kind ``BOOST_NONE``, ``BOOST_GROUP`` (GSD),
  ``BOOST_DEPTH`` (Cool-SD), ``BOOST_BUDGET`` (SPEC 9.5: ``tv`` per node, merging the first k columns of
  the int32 ``table``);
  a node's children are tested at ``depth`` (their depth in the tree).

R1 keeps its residual implicit: ``r(x) = 0`` if ``mark[x] == epoch`` else
``p(x)`` (or 1.0 once the residual degenerated to uniform), so a rejection
costs O(k) and no row is copied. ``epoch`` grows per verified node and per
degeneration, so ``mark`` never needs clearing.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from relaxspec.simulate.group_kernels import group_acceptance_kernel, rank_order_kernel
from relaxspec.theory.relax import RELAX_ADDITIVE, RELAX_NONE
from relaxspec.theory.rules import BOOST_BUDGET, BOOST_DEPTH, BOOST_GROUP, BOOST_NONE, VARIANT_OFFICIAL
from relaxspec.theory.stages import EXHAUSTION_CHECK


# ---------------------------------------------------------------- R1 residual
@njit(cache=True, error_model="numpy")
def r1_value(p, mark, epoch, unif, x):
    """r(x) of the implicit R1 residual."""
    if mark[x] == epoch:
        return 0.0
    if unif:
        return 1.0
    return p[x]


@njit(cache=True, error_model="numpy")
def merge_count_kernel(p, mark, epoch, unif, Z, x, nb, code, k, param):
    """``theory.relax.merge_count`` on the implicit residual: returns (J, C_J)."""
    if code == RELAX_NONE or k == 0:
        return 0, 0.0
    if code == RELAX_ADDITIVE:
        bound = param * Z
    else:
        bound = (param - 1.0) * r1_value(p, mark, epoch, unif, x)
    c = 0.0
    for j in range(k):
        nxt = c + r1_value(p, mark, epoch, unif, nb[x, j])
        if nxt > bound:
            return j, c
        c = nxt
    return k, c


@njit(cache=True, error_model="numpy")
def r1_stage_accept_kernel(rx, c, Z):
    """``min(1, (r(x) + C_J) / Z)`` (1 when Z <= 0), as in ``theory.stages.r1_stage``."""
    if Z > 0.0:
        return min(1.0, (rx + c) / Z)
    return 1.0


@njit(cache=True, error_model="numpy")
def zero_set_size_kernel(J, k, width, variant):
    """How many neighbours a rejection zeroes besides x (``theory.stages.zero_set``)."""
    if variant == VARIANT_OFFICIAL and J >= 1:
        return min(k + 1, width)
    return J


@njit(cache=True, error_model="numpy")
def r1_reject_kernel(p, mark, epoch, unif, Z, x, J, nb, k, variant):
    """``theory.stages.r1_reject`` on the zero set of x: returns (Z, epoch, unif)."""
    removed = r1_value(p, mark, epoch, unif, x)
    mark[x] = epoch
    n = zero_set_size_kernel(J, k, nb.shape[1], variant)
    for j in range(n):
        t = nb[x, j]
        removed += r1_value(p, mark, epoch, unif, t)
        mark[t] = epoch
    Z = Z - removed
    if Z <= EXHAUSTION_CHECK:  # decide exhaustion on the residual itself, as theory does
        Z = 0.0
        for t in range(p.shape[0]):
            Z += r1_value(p, mark, epoch, unif, t)
    if Z <= 0.0:
        return float(p.shape[0]), epoch + 1, True
    return Z, epoch, unif


@njit(cache=True, error_model="numpy")
def sample_node_r1_kernel(p, kids, u_kids, mark, epoch, code, k, param, variant, nb):
    """Verify one node under R1 with the children's uniforms.

    Returns ``(i, epoch, unif)``: the accepted child's index (-1 if none) and
    the residual's state for :func:`draw_token_residual_kernel` (``epoch`` is the node's own)."""
    epoch += 1
    unif = False
    Z = 1.0
    for i in range(kids.shape[0]):
        x = kids[i]
        J, c = merge_count_kernel(p, mark, epoch, unif, Z, x, nb, code, k, param)
        a = r1_stage_accept_kernel(r1_value(p, mark, epoch, unif, x), c, Z)
        if u_kids[i] < a:
            return i, epoch, unif
        Z, epoch, unif = r1_reject_kernel(p, mark, epoch, unif, Z, x, J, nb, k, variant)
    return -1, epoch, unif


@njit(cache=True, error_model="numpy")
def first_above(cum, t):
    """Smallest x with ``cum[x] > t`` for a non-decreasing ``cum`` (its length if none): binary search."""
    lo, hi = 0, cum.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if cum[mid] > t:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True, error_model="numpy")
def draw_token_residual_kernel(p, mark, epoch, unif, u, cum):
    """``theory.sampler.draw_token`` on the implicit R1 residual (``cum``: float64[V] scratch)."""
    V = p.shape[0]
    total = 0.0
    for x in range(V):
        total += r1_value(p, mark, epoch, unif, x)
        cum[x] = total
    if total <= 0.0:
        return min(int(u * V), V - 1)
    x = first_above(cum, u * total)
    if x < V:
        return x
    for x in range(V - 1, -1, -1):  # u * total rounded up to total: the last token with mass
        if r1_value(p, mark, epoch, unif, x) > 0.0:
            return x
    return -1


# ---------------------------------------------------------------- plain rows
@njit(cache=True, error_model="numpy")
def draw_token_kernel(r, u, cum):
    """``theory.sampler.draw_token``: inverse CDF on a sequential cumulative sum (``cum``: float64[V])."""
    V = r.shape[0]
    total = 0.0
    for x in range(V):
        total += r[x]
        cum[x] = total
    if total <= 0.0:
        return min(int(u * V), V - 1)
    x = first_above(cum, u * total)
    if x < V:
        return x
    for x in range(V - 1, -1, -1):  # u * total rounded up to total: the last token with mass
        if r[x] > 0.0:
            return x
    return -1


@njit(cache=True, error_model="numpy")
def seqsum_kernel(a):
    """Sequential left-to-right sum (``theory.stages.seqsum``)."""
    s = 0.0
    for x in range(a.shape[0]):
        s += a[x]
    return s


@njit(cache=True, error_model="numpy")
def argmax_row(p):
    """Index of the largest entry, lowest id among ties (``np.argmax``)."""
    best = 0
    for x in range(1, p.shape[0]):
        if p[x] > p[best]:
            best = x
    return best


@njit(cache=True, error_model="numpy")
def merge_count_row_kernel(r, total, x, nb, code, k, param):
    """``theory.relax.merge_count`` on an explicit row: (J, C_J)."""
    if code == RELAX_NONE or k == 0:
        return 0, 0.0
    if code == RELAX_ADDITIVE:
        bound = param * total
    else:
        bound = (param - 1.0) * r[x]
    c = 0.0
    for j in range(k):
        nxt = c + r[nb[x, j]]
        if nxt > bound:
            return j, c
        c = nxt
    return k, c


# ---------------------------------------------------------------- R2
@njit(cache=True, error_model="numpy")
def draft_residual_kernel(q, kids, i, qp):
    """``theory.stages.draft_residual`` of q without kids[:i], into ``qp``; False if no mass."""
    for x in range(q.shape[0]):
        qp[x] = q[x]
    for j in range(i):
        qp[kids[j]] = 0.0
    s = seqsum_kernel(qp)
    if s <= 0.0:
        return False
    for x in range(q.shape[0]):
        qp[x] = qp[x] / s
    return True


@njit(cache=True, error_model="numpy")
def normalise_residual_kernel(res):
    """Normalise an unnormalised residual in place (sequential sum); uniform over V when it has no mass."""
    V = res.shape[0]
    s = seqsum_kernel(res)
    if s <= 0.0:
        for y in range(V):
            res[y] = 1.0 / V
    else:
        for y in range(V):
            res[y] = res[y] / s


@njit(cache=True, error_model="numpy")
def r2_stage_kernel(r, qp, x, nb, code, k, param, variant, res):
    """``theory.stages.r2_stage``: acceptance of x; ``res`` gets the residual after a rejection."""
    V = r.shape[0]
    J, c = merge_count_row_kernel(r, 1.0, x, nb, code, k, param)
    a = min(1.0, (r[x] + c) / qp[x])
    if variant == VARIANT_OFFICIAL:
        for y in range(V):
            res[y] = max(r[y] - qp[y], 0.0)
        if J >= 1:
            for j in range(min(k + 1, nb.shape[1])):
                y = nb[x, j]
                res[y] = max(r[y] - 0.0, 0.0)
    else:
        for y in range(V):
            res[y] = max(r[y] - qp[y], 0.0)
        for j in range(J):
            y = nb[x, j]
            res[y] = max(0.0 - qp[y], 0.0)
        res[x] = max((r[x] + c) - qp[x], 0.0)
    normalise_residual_kernel(res)
    return a


# ---------------------------------------------------------------- boosted R2 (SPEC 9.2-9.4)
@njit(cache=True, error_model="numpy")
def standard_residual_kernel(r, qp, res):
    """``theory.boost.standard_residual`` into ``res``: norm((r - q')^+), uniform when empty."""
    for y in range(r.shape[0]):
        res[y] = max(r[y] - qp[y], 0.0)
    normalise_residual_kernel(res)


@njit(cache=True, error_model="numpy")
def boosted_acceptance_kernel(r, qp, x, depth, bs, order, rank):
    """``theory.boost.boosted_acceptance`` of draft x at ``depth`` (group: ``order`` / ``rank`` of r)."""
    kind, before, after, fallback, tau, dist, omega, emb, delta, table = bs
    if kind == BOOST_GROUP:
        return group_acceptance_kernel(r, qp, x, before, after, fallback, tau, dist, emb, order, rank)
    if kind == BOOST_DEPTH:
        w = omega[min(max(depth, 1), omega.shape[0]) - 1]
        return min(1.0, w * r[x] / qp[x])
    return min(1.0, r[x] / qp[x])


@njit(cache=True, error_model="numpy")
def boosted_stage_kernel(r, qp, x, depth, bs, res, order, rank):
    """``theory.boost.boosted_stage``: the acceptance of x; ``res`` gets the standard residual
    (``order`` / ``rank``: int64[V] scratch)."""
    if bs[0] == BOOST_GROUP:
        rank_order_kernel(r, order, rank)
    a = boosted_acceptance_kernel(r, qp, x, depth, bs, order, rank)
    standard_residual_kernel(r, qp, res)
    return a


@njit(cache=True, error_model="numpy")
def stage_tv_kernel(r, qp, depth, bs, order, rank, a):
    """``theory.boost.stage_tv``: exact TV(law of one stage, r) by SPEC 9.4 (``theory.boost.boosted_tv``
    of the acceptance vector, into the scratch ``a``); 0 without a boost."""
    if bs[0] == BOOST_NONE:
        return 0.0
    V = r.shape[0]
    if bs[0] == BOOST_GROUP:
        rank_order_kernel(r, order, rank)
    for x in range(V):
        a[x] = boosted_acceptance_kernel(r, qp, x, depth, bs, order, rank) if qp[x] > 0.0 else 1.0
    delta, s, acc = 0.0, 0.0, 0.0
    for y in range(V):
        a0 = min(1.0, r[y] / qp[y]) if qp[y] > 0.0 else 1.0
        delta += qp[y] * (a[y] - a0)
        s += max(r[y] - qp[y], 0.0)
        acc += qp[y] * a[y]
    tv = 0.0
    if s <= 0.0:  # r == q': the unboosted test never rejects; the residual is uniform
        rest = max(0.0, 1.0 - acc)
        for y in range(V):
            tv += abs(qp[y] * a[y] + rest / V - r[y])
        return 0.5 * tv
    for y in range(V):
        a0 = min(1.0, r[y] / qp[y]) if qp[y] > 0.0 else 1.0
        tv += abs(qp[y] * (a[y] - a0) - delta * max(r[y] - qp[y], 0.0) / s)
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
    order = np.argsort(t[:n], kind="mergesort")
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
def budget_stage_kernel(r, qp, alpha, remaining, table, eps, g, c, t):
    """``theory.budget.budget_stage`` on residual target ``r``, draft residual ``qp``, path weight
    ``alpha`` and ``remaining`` budget: fills ``eps[x]`` (x's proximity mass: the uncapped sequential sum
    over its ``table.shape[1]`` nearest neighbours, ``theory.budget.proximity_masses``) for every x with
    ``qp[x] > 0`` and returns (scale s, the stage's charge Delta(s), summed in token order). ``g``, ``c``,
    ``t``: float64[V] scratch. A token's boosted ratio is then :func:`budget_ratio_kernel`."""
    V = r.shape[0]
    n = 0
    for x in range(V):
        if qp[x] > 0.0:
            e = 0.0
            for j in range(table.shape[1]):  # all k, no cap: rounding may lift the sum past 1
                e += r[table[x, j]]
            eps[x] = e
            gap = max(qp[x] - alpha * r[x], 0.0)
            slope = alpha * e
            if gap > 0.0 and slope > 0.0:
                g[n] = gap
                c[n] = slope
                n += 1
    s = budget_scale_kernel(g[:n], c[:n], remaining, t)
    charge = 0.0
    for x in range(V):
        if qp[x] > 0.0:
            boosted = min(1.0, alpha * budget_ratio_kernel(r, qp, x, s, eps))
            exact = min(1.0, alpha * (r[x] / qp[x]))
            charge += qp[x] * (boosted - exact)
    return s, charge


@njit(cache=True, error_model="numpy")
def budget_ratio_kernel(r, qp, x, s, eps):
    """The budget's boosted ratio (r(x) + s eps(x)) / q'(x) (``theory.budget.BudgetStage.ratio``)."""
    return (r[x] + s * eps[x]) / qp[x]


@njit(cache=True, error_model="numpy")
def budget_r2_node_kernel(p, q, kids, u_kids, sampling, delta, table, r, qp, res, accept, charge):
    """Budgeted R2 at one node along the draw order ``kids`` (``theory.budget.sample_budget_node`` and
    ``budget_r2_given_states``): stage i gets ``accept[i]`` and ``charge[i]``; the node's budget
    ``delta`` shrinks by each rejected stage's charge. ``sampling``: stop at the first i with
    ``u_kids[i] < accept[i]`` (else at a stage accepted surely). Returns (stages tested, accepted
    index or -1); ``r`` ends as the residual a rejection leaves."""
    V = p.shape[0]
    eps, g, c, t = np.empty(V), np.empty(V), np.empty(V), np.empty(V)
    for x in range(V):
        r[x] = p[x]
    left = delta
    for i in range(kids.shape[0]):
        if not draft_residual_kernel(q, kids, i, qp):
            return i, -1
        s, ch = budget_stage_kernel(r, qp, 1.0, left, table, eps, g, c, t)
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
    return kids.shape[0], -1


@njit(cache=True, error_model="numpy")
def sample_node_r2_kernel(p, q, kids, u_kids, code, k, param, variant, nb, r, qp, res, depth, bs):
    """Verify one node under R2 (boosted by ``bs`` for children at ``depth``; the budget by
    :func:`budget_r2_node_kernel`); returns the accepted child's index or -1 (``r`` = residual)."""
    if bs[0] == BOOST_BUDGET:
        m = kids.shape[0]
        _, i = budget_r2_node_kernel(p, q, kids, u_kids, True, bs[8], bs[9], r, qp, res, np.empty(m),
                                     np.empty(m))
        return i
    for x in range(p.shape[0]):
        r[x] = p[x]
    boosted = bs[0] != BOOST_NONE
    order = np.empty(p.shape[0] if bs[0] == BOOST_GROUP else 0, dtype=np.int64)
    rank = np.empty_like(order)
    for i in range(kids.shape[0]):
        if not draft_residual_kernel(q, kids, i, qp):
            break
        if boosted:
            a = boosted_stage_kernel(r, qp, kids[i], depth, bs, res, order, rank)
        else:
            a = r2_stage_kernel(r, qp, kids[i], nb, code, k, param, variant, res)
        if u_kids[i] < a:
            return i
        for x in range(p.shape[0]):
            r[x] = res[x]
    return -1


# ---------------------------------------------------------------- R3
@njit(cache=True, error_model="numpy")
def greedy_acceptable_kernel(p, top, x, nb, code, k, param):
    """``theory.stages.greedy_acceptable`` given ``top = argmax p``."""
    if x == top:
        return True
    _, c = merge_count_row_kernel(p, 1.0, x, nb, code, k, param)
    mx = p[x] + c
    return mx > p[top] or (mx == p[top] and x < top)
