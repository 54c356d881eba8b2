"""Numba kernels of verifying one node (SPEC section 3): R1, R2, R3.

Whole steps on a tree (the walk, exact expectations) are in :mod:`simulate.step_kernels`; R2's boosted
stages (SPEC 9.2-9.5) and its walk at one node (``sample_node_r2_kernel``) in :mod:`simulate.boost_kernels`.

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

from numba import njit

from relaxspec.theory.relax import RELAX_ADDITIVE, RELAX_NONE
from relaxspec.theory.rules import VARIANT_OFFICIAL
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
    cumulate_from(r, cum, 0)
    return draw_cumulated(r, u, cum)


@njit(cache=True, error_model="numpy")
def cumulate_from(r, cum, start):
    """The sequential cumulative sum of r into ``cum`` from token ``start`` on, continuing ``cum[start - 1]``:
    where ``cum[:start]`` already holds r's (a draw without replacement zeroed a token at ``start`` or
    later), the same floats as summing from 0."""
    total = cum[start - 1] if start > 0 else 0.0
    for x in range(start, r.shape[0]):
        total += r[x]
        cum[x] = total


@njit(cache=True, error_model="numpy")
def draw_cumulated(r, u, cum):
    """:func:`draw_token_kernel` given r's cumulative sum ``cum``."""
    V = r.shape[0]
    total = cum[V - 1]
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
    s = draft_residual_sum(q, kids, i, qp)
    if s == 0.0:
        return False
    divide_kernel(qp, s)
    return True


@njit(cache=True, error_model="numpy")
def draft_residual_sum(q, kids, i, qp):
    """:func:`draft_residual_kernel` before its division: ``qp`` gets q without kids[:i], and the result is
    their sequential sum, or 0.0 when it is not positive (no mass: the residual stays undivided)."""
    for x in range(q.shape[0]):
        qp[x] = q[x]
    for j in range(i):
        qp[kids[j]] = 0.0
    s = seqsum_kernel(qp)
    return 0.0 if s <= 0.0 else s


@njit(cache=True, error_model="numpy")
def divide_kernel(a, divisor):
    """``a[x] = a[x] / divisor`` in place, unless ``divisor`` is 0.0 (then ``a`` is left as it is)."""
    if divisor != 0.0:
        for x in range(a.shape[0]):
            a[x] = a[x] / divisor


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


# ---------------------------------------------------------------- R3
@njit(cache=True, error_model="numpy")
def greedy_acceptable_kernel(p, top, x, nb, code, k, param):
    """``theory.stages.greedy_acceptable`` given ``top = argmax p``."""
    if x == top:
        return True
    _, c = merge_count_row_kernel(p, 1.0, x, nb, code, k, param)
    mx = p[x] + c
    return mx > p[top] or (mx == p[top] and x < top)
