"""Numba kernels of the exact outcome at one node (SPEC section 4): the twins of ``theory.verify``'s
``node_outcome`` (R1's acceptance of each child and the TV of the token it emits; R2's acceptance given the
draw order, plain, boosted or budgeted). The exact TVs of the boosted stages a node tested
(``theory.verify.r2_stage_tvs``) come from R2's walk itself (``simulate.boost_kernels.node_r2_kernel``).

Built on the node kernels of :mod:`simulate.verify_kernels` (same array conventions); the step kernels
(:mod:`simulate.step_kernels`: a step's emitted TV and its exact expectation) call them node by node.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from relaxspec.simulate.boost_kernels import (
    boosted_stage_kernel,
    budget_r2_node_kernel,
    stage_tv_kernel,
)
from relaxspec.simulate.verify_kernels import (
    draft_residual_kernel,
    merge_count_kernel,
    r1_reject_kernel,
    r1_stage_accept_kernel,
    r1_value,
    r2_stage_kernel,
    zero_set_size_kernel,
)
from relaxspec.theory.relax import RELAX_NONE
from relaxspec.theory.rules import BOOST_BUDGET, BOOST_NONE


@njit(cache=True, error_model="numpy")
def _r1_tv_full(p, kids, accept, reach, mark, epoch, unif):
    """TV of R1's emitted token from p, in O(V). A residual without mass emits a uniform token
    (``draw_token_kernel`` on a zero vector)."""
    V = p.shape[0]
    m = kids.shape[0]
    R = 0.0
    for x in range(V):
        R += r1_value(p, mark, epoch, unif, x)
    tv = 0.0
    for x in range(V):
        em = 0.0
        if reach > 0.0:
            em = reach * r1_value(p, mark, epoch, unif, x) / R if R > 0.0 else reach / V
        for i in range(m):
            if kids[i] == x:
                em += accept[i]
        tv += abs(em - p[x])
    return 0.5 * tv


@njit(cache=True, error_model="numpy")
def node_outcome_r1_kernel(p, psum, kids, mark, seen, epoch, code, k, param, variant, nb, accept):
    """Exact R1 outcome at one node (``theory.verify._r1``): fills ``accept``; returns (TV, epoch).

    The TV is computed on the touched tokens only (children and zeroed
    tokens); untouched tokens share one factor. ``psum`` is the row's sum.
    """
    epoch += 1
    first = epoch
    unif = False
    Z, reach = 1.0, 1.0
    m = kids.shape[0]
    nz = np.zeros(m, dtype=np.int64)  # neighbours zeroed by rejecting child i
    for i in range(m):
        accept[i] = 0.0
    for i in range(m):
        x = kids[i]
        J, c = merge_count_kernel(p, mark, epoch, unif, Z, x, nb, code, k, param)
        a = r1_stage_accept_kernel(r1_value(p, mark, epoch, unif, x), c, Z)
        accept[i] = reach * a
        reach *= 1.0 - a
        if reach == 0.0:
            break
        nz[i] = zero_set_size_kernel(J, k, nb.shape[1], variant)
        Z, epoch, unif = r1_reject_kernel(p, mark, epoch, unif, Z, x, J, nb, k, variant)
    if code == RELAX_NONE or k == 0:
        return 0.0, epoch  # exact rule: the emitted token is distributed as p
    if unif:  # degenerate residual
        return _r1_tv_full(p, kids, accept, reach, mark, epoch, unif), epoch
    # touched tokens: the children and every token a rejection zeroed
    nt = m
    for i in range(m):
        nt += nz[i]
    touched = np.empty(nt, dtype=np.int64)
    nt = 0
    for i in range(m):
        x = kids[i]
        for j in range(-1, nz[i]):
            t = x if j < 0 else nb[x, j]
            if seen[t] != first:
                seen[t] = first
                touched[nt] = t
                nt += 1
    p_touched, r_touched = 0.0, 0.0
    for j in range(nt):
        p_touched += p[touched[j]]
        r_touched += r1_value(p, mark, epoch, unif, touched[j])
    rest = psum - p_touched
    R = rest + r_touched
    if reach > 0.0 and R < 1e-6:  # little residual mass: avoid cancellation in `rest`
        return _r1_tv_full(p, kids, accept, reach, mark, epoch, unif), epoch
    scale = reach / R if reach > 0.0 else 0.0
    tv = abs(scale - 1.0) * max(rest, 0.0)
    for j in range(nt):
        x = touched[j]
        em = scale * r1_value(p, mark, epoch, unif, x)
        for i in range(m):
            if kids[i] == x:
                em += accept[i]
        tv += abs(em - p[x])
    return 0.5 * tv, epoch


@njit(cache=True, error_model="numpy")
def node_outcome_r2_kernel(p, q, kids, code, k, param, variant, nb, accept, r, qp, res, depth, bs):
    """Exact R2 acceptance given the draw order (``theory.verify._r2_given``): fills ``accept``; returns
    ``NodeOutcome.stage_tv`` (the stages' exact TVs weighted by P(tested): 0 without a boost)."""
    m = kids.shape[0]
    if bs[0] == BOOST_BUDGET:  # the budget: the stages' charges instead of their exact TVs
        a_i, ch = np.empty(m), np.empty(m)
        n, _ = budget_r2_node_kernel(p, q, kids, a_i, False, bs[8], bs[9], r, qp, res, a_i, ch, m)
        reach, tv = 1.0, 0.0  # (u_kids = a_i: unread when not sampling)
        for i in range(m):
            accept[i] = 0.0
        for i in range(n):
            accept[i] = reach * a_i[i]
            tv += reach * ch[i]
            reach *= 1.0 - a_i[i]
        return tv
    for x in range(p.shape[0]):
        r[x] = p[x]
    reach = 1.0
    boosted = bs[0] != BOOST_NONE
    V = p.shape[0] if boosted else 0
    order = np.empty(V, dtype=np.int64)
    avec = np.empty(V)
    tv = 0.0
    for i in range(m):
        accept[i] = 0.0
    for i in range(m):
        if not draft_residual_kernel(q, kids, i, qp):
            break
        if boosted:
            tv += reach * stage_tv_kernel(r, qp, depth, bs, order, avec)
            a = boosted_stage_kernel(r, qp, kids[i], depth, bs, res)
        else:
            a = r2_stage_kernel(r, qp, kids[i], nb, code, k, param, variant, res)
        accept[i] = reach * a
        reach *= 1.0 - a
        if reach == 0.0:
            break
        for x in range(p.shape[0]):
            r[x] = res[x]
    return tv
