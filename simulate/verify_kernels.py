"""Numba kernels of node and tree verification (SPEC section 3): R1, R2, R3.

Operation-for-operation twins of ``theory.stages`` / ``theory.sampler`` /
``theory.tree`` (sequential loops, no fastmath, no reordering), so that given
the same distributions and uniforms they take bit-identical decisions.

Array conventions (validated by the Python layer, never here):

- ``p``, ``q``: float64 rows over V tokens;
- ``nb``: int32 neighbour table (V, W), W >= k (the official variant reads
  ``min(k + 1, W)`` columns);
- a relaxation is ``(code, k, param)``: code 0 none, 1 additive (param =
  delta), 2 multiplicative (param = lam); ``variant`` 0 principled, 1 official;
- ``rule`` 1, 2 or 3.

R1 keeps its residual implicit: ``r(x) = 0`` if ``mark[x] == epoch`` else
``p(x)`` (or 1.0 once the residual degenerated to uniform), so a rejection
costs O(k) and no row is copied. ``epoch`` grows per verified node and per
degeneration, so ``mark`` never needs clearing.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

RULE_CODES = {"r1": 1, "r2": 2, "r3": 3}
VARIANT_CODES = {"principled": 0, "official": 1}


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
def r1_merge(p, mark, epoch, unif, Z, x, nb, code, k, param):
    """``theory.relax.merge_count`` on the implicit residual: returns (J, C_J)."""
    if code == 0 or k == 0:
        return 0, 0.0
    if code == 1:
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
def r1_accept_prob(rx, c, Z):
    """``min(1, (r(x) + C_J) / Z)`` (1 when Z <= 0), as in ``theory.stages.r1_stage``."""
    if Z > 0.0:
        return min(1.0, (rx + c) / Z)
    return 1.0


@njit(cache=True, error_model="numpy")
def zero_count(J, k, width, variant):
    """How many neighbours a rejection zeroes besides x (``theory.stages.zero_set``)."""
    if variant == 1 and J >= 1:
        return min(k + 1, width)
    return J


@njit(cache=True, error_model="numpy")
def r1_reject(p, mark, epoch, unif, Z, x, J, nb, k, variant):
    """``theory.stages.r1_reject`` on the zero set of x: returns (Z, epoch, unif)."""
    removed = r1_value(p, mark, epoch, unif, x)
    mark[x] = epoch
    n = zero_count(J, k, nb.shape[1], variant)
    for j in range(n):
        t = nb[x, j]
        removed += r1_value(p, mark, epoch, unif, t)
        mark[t] = epoch
    Z = Z - removed
    if Z <= 0.0:
        return float(p.shape[0]), epoch + 1, True
    return Z, epoch, unif


@njit(cache=True, error_model="numpy")
def r1_sample_node(p, kids, u_kids, mark, epoch, code, k, param, variant, nb):
    """Verify one node under R1 with the children's uniforms.

    Returns ``(i, epoch, unif)``: the accepted child's index (-1 if none) and
    the residual's state for :func:`r1_draw` (``epoch`` is the node's own)."""
    epoch += 1
    unif = False
    Z = 1.0
    for i in range(kids.shape[0]):
        x = kids[i]
        J, c = r1_merge(p, mark, epoch, unif, Z, x, nb, code, k, param)
        a = r1_accept_prob(r1_value(p, mark, epoch, unif, x), c, Z)
        if u_kids[i] < a:
            return i, epoch, unif
        Z, epoch, unif = r1_reject(p, mark, epoch, unif, Z, x, J, nb, k, variant)
    return -1, epoch, unif


@njit(cache=True, error_model="numpy")
def r1_draw(p, mark, epoch, unif, u):
    """``theory.sampler.draw_token`` on the implicit R1 residual."""
    V = p.shape[0]
    total = 0.0
    for x in range(V):
        total += r1_value(p, mark, epoch, unif, x)
    if total <= 0.0:
        return min(int(u * V), V - 1)
    t = u * total
    acc = 0.0
    last = -1
    for x in range(V):
        rx = r1_value(p, mark, epoch, unif, x)
        acc += rx
        if acc > t:
            return x
        if rx > 0.0:
            last = x
    return last


# ---------------------------------------------------------------- plain rows
@njit(cache=True, error_model="numpy")
def draw_token(r, u):
    """``theory.sampler.draw_token``: inverse CDF on a sequential cumulative sum."""
    V = r.shape[0]
    total = 0.0
    for x in range(V):
        total += r[x]
    if total <= 0.0:
        return min(int(u * V), V - 1)
    t = u * total
    acc = 0.0
    last = -1
    for x in range(V):
        acc += r[x]
        if acc > t:
            return x
        if r[x] > 0.0:
            last = x
    return last


@njit(cache=True, error_model="numpy")
def seqsum(a):
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
def merge_row(r, total, x, nb, code, k, param):
    """``theory.relax.merge_count`` on an explicit row: (J, C_J)."""
    if code == 0 or k == 0:
        return 0, 0.0
    if code == 1:
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
def r2_draft_residual(q, kids, i, qp):
    """``theory.stages.draft_residual`` of q without kids[:i], into ``qp``; False if no mass."""
    for x in range(q.shape[0]):
        qp[x] = q[x]
    for j in range(i):
        qp[kids[j]] = 0.0
    s = seqsum(qp)
    if s <= 0.0:
        return False
    for x in range(q.shape[0]):
        qp[x] = qp[x] / s
    return True


@njit(cache=True, error_model="numpy")
def r2_stage(r, qp, x, nb, code, k, param, variant, res):
    """``theory.stages.r2_stage``: acceptance of x; ``res`` gets the residual after a rejection."""
    V = r.shape[0]
    J, c = merge_row(r, 1.0, x, nb, code, k, param)
    a = min(1.0, (r[x] + c) / qp[x])
    if variant == 1:
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
    s = seqsum(res)
    if s <= 0.0:
        for y in range(V):
            res[y] = 1.0 / V
    else:
        for y in range(V):
            res[y] = res[y] / s
    return a


@njit(cache=True, error_model="numpy")
def r2_sample_node(p, q, kids, u_kids, code, k, param, variant, nb, r, qp, res):
    """Verify one node under R2; returns the accepted child's index or -1 (``r`` = residual)."""
    for x in range(p.shape[0]):
        r[x] = p[x]
    for i in range(kids.shape[0]):
        if not r2_draft_residual(q, kids, i, qp):
            break
        a = r2_stage(r, qp, kids[i], nb, code, k, param, variant, res)
        if u_kids[i] < a:
            return i
        for x in range(p.shape[0]):
            r[x] = res[x]
    return -1


# ---------------------------------------------------------------- R3
@njit(cache=True, error_model="numpy")
def greedy_acceptable(p, top, x, nb, code, k, param):
    """``theory.stages.greedy_acceptable`` given ``top = argmax p``."""
    if x == top:
        return True
    _, c = merge_row(p, 1.0, x, nb, code, k, param)
    mx = p[x] + c
    return mx > p[top] or (mx == p[top] and x < top)


# ---------------------------------------------------------------- trees
@njit(cache=True, error_model="numpy")
def children_csr(parents, n, cstart, cidx):
    """Children of every node (increasing index) as CSR: cidx[cstart[v]:cstart[v+1]]."""
    for v in range(n + 1):
        cstart[v] = 0
    for v in range(1, n):
        cstart[parents[v] + 1] += 1
    for v in range(n):
        cstart[v + 1] += cstart[v]
    fill = cstart[:n].copy()
    for v in range(1, n):
        u = parents[v]
        cidx[fill[u]] = v
        fill[u] += 1


@njit(cache=True, error_model="numpy")
def greedy_ok(parents, tokens, n, cstart, p_rows, prow, code, k, param, nb, ok, tops):
    """R3 acceptability of every node (root True, ``theory.tree.greedy_path``).

    ``tops[u]`` gets argmax p_u for every acceptable node with children (else -1);
    rows of nodes under an unacceptable parent are never read."""
    ok[0] = True
    for u in range(n):
        tops[u] = -1
    for v in range(1, n):
        u = parents[v]
        if not ok[u]:
            ok[v] = False
            continue
        if tops[u] < 0:
            tops[u] = argmax_row(p_rows[prow[u]])
        ok[v] = greedy_acceptable(p_rows[prow[u]], tops[u], tokens[v], nb, code, k, param)


@njit(cache=True, error_model="numpy")
def greedy_end(depths, n, ok):
    """End of the longest acceptable chain (first in node order among the deepest)."""
    best = 0
    for v in range(1, n):
        if ok[v] and depths[v] > depths[best]:
            best = v
    return best


@njit(cache=True, error_model="numpy")
def walk(parents, tokens, depths, n, cstart, cidx, p_rows, prow, q_rows, qrow, u_accept, u_draw,
         rule, code, k, param, variant, nb, mark, epoch, scratch, path):
    """One verification step (``theory.tree.sample_step``) on precomputed rows.

    ``p_rows[prow[v]]`` must hold p_v for every node with children (and
    ``q_rows[qrow[v]]`` q_v for R2). Fills ``path`` and returns
    ``(path_len, bonus, epoch)``; ``bonus = -1`` means the walk ended at the
    leaf ``path[path_len - 1]`` and the bonus is drawn from (R3: is the argmax
    of) that leaf's p with ``u_draw[leaf]``, which the caller computes.
    ``scratch`` is (3, V) float64 scratch for R2.
    """
    if rule == 3:
        tops = np.empty(n, dtype=np.int64)
        ok = np.empty(n, dtype=np.bool_)
        greedy_ok(parents, tokens, n, cstart, p_rows, prow, code, k, param, nb, ok, tops)
        end = greedy_end(depths, n, ok)
        m = depths[end] + 1
        v = end
        for i in range(m - 1, -1, -1):
            path[i] = v
            v = parents[v]
        if cstart[end + 1] > cstart[end]:
            return m, tops[end], epoch
        return m, -1, epoch
    m = 1
    path[0] = 0
    u = 0
    while True:
        lo, hi = cstart[u], cstart[u + 1]
        if hi == lo:
            return m, -1, epoch
        kids = np.empty(hi - lo, dtype=np.int64)
        ukids = np.empty(hi - lo)
        for j in range(hi - lo):
            kids[j] = tokens[cidx[lo + j]]
            ukids[j] = u_accept[cidx[lo + j]]
        p = p_rows[prow[u]]
        if rule == 1:
            i, epoch, unif = r1_sample_node(p, kids, ukids, mark, epoch, code, k, param, variant, nb)
            if i < 0:
                return m, r1_draw(p, mark, epoch, unif, u_draw[u]), epoch
        else:
            i = r2_sample_node(p, q_rows[qrow[u]], kids, ukids, code, k, param, variant, nb,
                               scratch[0], scratch[1], scratch[2])
            if i < 0:
                return m, draw_token(scratch[0], u_draw[u]), epoch
        u = cidx[lo + i]
        path[m] = u
        m += 1


# ---------------------------------------------------------------- exact outcomes
@njit(cache=True, error_model="numpy")
def _r1_tv_full(p, kids, accept, reach, mark, epoch, unif):
    """TV of R1's emitted token from p, in O(V). A residual without mass emits a uniform token
    (``draw_token`` on a zero vector)."""
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
def r1_node_exact(p, psum, kids, mark, seen, epoch, code, k, param, variant, nb, accept):
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
        J, c = r1_merge(p, mark, epoch, unif, Z, x, nb, code, k, param)
        a = r1_accept_prob(r1_value(p, mark, epoch, unif, x), c, Z)
        accept[i] = reach * a
        reach *= 1.0 - a
        if reach == 0.0:
            break
        nz[i] = zero_count(J, k, nb.shape[1], variant)
        Z, epoch, unif = r1_reject(p, mark, epoch, unif, Z, x, J, nb, k, variant)
    if code == 0 or k == 0:
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
def r2_node_exact(p, q, kids, code, k, param, variant, nb, accept, r, qp, res):
    """Exact R2 acceptance given the draw order (``theory.verify._r2_given``): fills ``accept``."""
    for x in range(p.shape[0]):
        r[x] = p[x]
    reach = 1.0
    m = kids.shape[0]
    for i in range(m):
        accept[i] = 0.0
    for i in range(m):
        if not r2_draft_residual(q, kids, i, qp):
            break
        a = r2_stage(r, qp, kids[i], nb, code, k, param, variant, res)
        accept[i] = reach * a
        reach *= 1.0 - a
        if reach == 0.0:
            break
        for x in range(p.shape[0]):
            r[x] = res[x]


@njit(cache=True, error_model="numpy")
def exact_step(parents, tokens, depths, n, cstart, cidx, p_rows, prow, psums, q_rows, qrow,
               rule, code, k, param, variant, nb, mark, seen, epoch, scratch, edge, reach):
    """Exact expectations of one step given the tree and rows.

    Fills ``edge[v]`` = P(v accepted | parent reached) and ``reach[v]`` =
    P(v on the accepted path). Returns ``(E[tokens], E[TV bound], epoch)``:
    E[tokens] = 1 + sum of reach over non-root nodes (R3: 1 + greedy depth);
    the TV bound is sum over internal nodes u of reach[u] * TV_u, the TV of
    the token u emits from p_u (R3: from the greedy point mass; R2: NaN when
    relaxed, since it is exact only averaged over draw orders).
    """
    edge[0] = 1.0
    reach[0] = 1.0
    relaxed = not (code == 0 or k == 0)
    if rule == 3:
        tops = np.empty(n, dtype=np.int64)
        ok = np.empty(n, dtype=np.bool_)
        greedy_ok(parents, tokens, n, cstart, p_rows, prow, code, k, param, nb, ok, tops)
        end = greedy_end(depths, n, ok)
        for v in range(1, n):
            edge[v] = 0.0
            reach[v] = 0.0
        tv = 0.0
        v = end
        while v != 0:
            u = parents[v]
            edge[v] = 1.0
            reach[v] = 1.0
            if tokens[v] != tops[u]:
                tv += 1.0
            v = u
        return 1.0 + depths[end], tv, epoch
    tvs = np.zeros(n)
    for u in range(n):
        lo, hi = cstart[u], cstart[u + 1]
        if hi == lo:
            continue
        m = hi - lo
        kids = np.empty(m, dtype=np.int64)
        acc = np.empty(m)
        for j in range(m):
            kids[j] = tokens[cidx[lo + j]]
        if rule == 1:
            tv_u, epoch = r1_node_exact(p_rows[prow[u]], psums[u], kids, mark, seen, epoch, code, k,
                                        param, variant, nb, acc)
        else:
            r2_node_exact(p_rows[prow[u]], q_rows[qrow[u]], kids, code, k, param, variant, nb, acc,
                          scratch[0], scratch[1], scratch[2])
            tv_u = math.nan if relaxed else 0.0
        for j in range(m):
            edge[cidx[lo + j]] = acc[j]
        tvs[u] = tv_u
    total = 1.0
    etv = 0.0
    for v in range(1, n):
        reach[v] = reach[parents[v]] * edge[v]
        total += reach[v]
    for u in range(n):
        if cstart[u + 1] > cstart[u]:
            etv += reach[u] * tvs[u]
    return total, etv, epoch


@njit(cache=True, error_model="numpy")
def leaf_bonus(p_leaf, u, rule):
    """Bonus token at a leaf: a draw from p (R1, R2) or its argmax (R3)."""
    if rule == 3:
        return argmax_row(p_leaf)
    return draw_token(p_leaf, u)


@njit(cache=True, error_model="numpy")
def verify_tree(parents, tokens, depths, p_rows, q_rows, u_accept, u_draw, rule, code, k, param,
                variant, nb):
    """A whole verification step on rows given for every node; returns (path, bonus)."""
    n = parents.shape[0]
    V = p_rows.shape[1]
    cstart = np.empty(n + 1, dtype=np.int64)
    cidx = np.empty(max(n - 1, 1), dtype=np.int64)
    children_csr(parents, n, cstart, cidx)
    rows = np.arange(n)
    mark = np.zeros(V, dtype=np.int64)
    scratch = np.empty((3, V))
    path = np.empty(n, dtype=np.int64)
    m, bonus, _ = walk(parents, tokens, depths, n, cstart, cidx, p_rows, rows, q_rows, rows, u_accept,
                       u_draw, rule, code, k, param, variant, nb, mark, 0, scratch, path)
    if bonus < 0:
        leaf = path[m - 1]
        bonus = leaf_bonus(p_rows[leaf], u_draw[leaf], rule)
    return path[:m].copy(), bonus


@njit(cache=True, error_model="numpy")
def exact_tree(parents, tokens, depths, p_rows, q_rows, rule, code, k, param, variant, nb):
    """Exact expectations of a step on rows given for every node: (E[tokens], E[TV], edge, reach)."""
    n = parents.shape[0]
    V = p_rows.shape[1]
    cstart = np.empty(n + 1, dtype=np.int64)
    cidx = np.empty(max(n - 1, 1), dtype=np.int64)
    children_csr(parents, n, cstart, cidx)
    rows = np.arange(n)
    psums = np.empty(n)
    for v in range(n):
        psums[v] = seqsum(p_rows[v])
    mark = np.zeros(V, dtype=np.int64)
    seen = np.zeros(V, dtype=np.int64)
    scratch = np.empty((3, V))
    edge = np.empty(n)
    reach = np.empty(n)
    tokens_e, tv_e, _ = exact_step(parents, tokens, depths, n, cstart, cidx, p_rows, rows, psums, q_rows,
                                   rows, rule, code, k, param, variant, nb, mark, seen, 0, scratch, edge,
                                   reach)
    return tokens_e, tv_e, edge, reach
