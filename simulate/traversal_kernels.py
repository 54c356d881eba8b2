"""Numba kernels of traversal verification (R4, SPEC 9.6) and its relaxed versions (SPEC 9.4-9.5).

Operation-for-operation twins of ``theory.traversal.TraversalWalk`` (the loop, its arithmetic and its
uniforms: ``u_accept[v]`` is node v's eta, ``u_draw[v]`` draws the bonus where the step ends), so that
given the same rows and uniforms the kernel takes theory's decisions. Trees arrive as in
:mod:`simulate.step_kernels`: a parent array in topological order, children as CSR in draw order
(``cstart``, ``cidx``; ``ktok[j] = tokens[cidx[j]]``), p at node v in ``p_rows[prow[v]]`` and q in
``q_rows[qrow[v]]`` (nodes with children). The boost ``bs`` is :mod:`simulate.verify_kernels`' tuple:
none, GSD's group ratio, Cool-SD's depth factor or the budget (every node its own ``delta``).

Lazy, not eager. Theory recomputes alpha and every stage over a node's whole live subtree after each
rejection; a stage's values are functions of its node's state (P_u, Q_u, alpha(u), its remaining budget
and deleted children), which change only through a rejection below u or a new alpha(u). The kernel keeps a
node's stage ``fresh`` until one of those changes and computes it only when a test passes through the node
(from the root, follow the first live child), so it reads p only on the paths it tests and spends O(V)
per node there; the values it computes are the ones theory holds at that moment. A stage fixes alpha of
u's first live child, the only child a test can reach before u's state changes again.

State ``ts`` (:func:`traversal_scratch`, per node v): ``alpha``, ``deleted`` (v's deleted children: the
first ones in draw order), ``left`` (budget), ``excess`` (Delta of v's current stage), ``entered`` (the
last stage a test entered), ``fresh``, ``pmod`` (P_v is its residual in ``pbuf[qrow[v]]``, not p_v),
``qok`` (Q_v, the draft residual, is current in ``qbuf[qrow[v]]``), O(V) scratch for the budget's stage
and for a GSD or Cool-SD stage's ratios (GSD's rank order, the ratio of every draftable token: its
Delta reads them all), and the divisors ``pdiv`` and ``qdiv``.

Normalised when read. P_u := [alpha P_u - Q_u]^+ / S and Q_u := q_u without the deleted tokens / its sum
are divisions of every entry by one number. The kernel keeps the undivided entries and the divisor
(``pdiv[u]``, ``qdiv[u]``; 0 once divided, or for a Q_u with no mass) and divides an entry where it is
read: a division is the same float whenever it happens, so every value is theory's. An exact R4 stage
reads one entry of each, and a rejection reads both rows in one pass, so on a Jacobi window, where each
rejection is followed by a test of the parent only, no row is divided in full; a boosted stage and a
residual draw divide theirs once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from relaxspec.simulate.boost_kernels import (
    boosted_ratios_kernel,
    budget_ratio_kernel,
    budget_stage_kernel,
)
from relaxspec.simulate.verify_kernels import (
    divide_kernel,
    draft_residual_sum,
    draw_token_kernel,
    seqsum_kernel,
)
from relaxspec.theory.rules import BOOST_BUDGET, BOOST_GROUP, BOOST_NONE


@njit(cache=True, error_model="numpy")
def traversal_scratch(n, n_rows, V, bkind):
    """The R4 state of a tree of up to ``n`` nodes whose nodes with children own rows ``0..n_rows-1``
    (``qrow``), over V tokens, for boost kind ``bkind`` (module docstring)."""
    vb = V if bkind == BOOST_BUDGET else 0
    vg = V if bkind == BOOST_GROUP else 0
    vr = V if bkind != BOOST_NONE and bkind != BOOST_BUDGET else 0
    return (np.ones(n), np.zeros(n, dtype=np.int64), np.zeros(n), np.zeros(n), np.full(n, -1, dtype=np.int64),
            np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_),
            np.empty((n_rows, V)), np.empty((n_rows, V)), np.empty(vb), np.empty(vb), np.empty(vb),
            np.empty(vb), np.empty(vg, dtype=np.int64), np.empty(vr), np.zeros(n), np.zeros(n))


@njit(cache=True, error_model="numpy")
def traversal_reset(ts, n, bs):
    """A new step on ``n`` nodes: alpha 1, nothing deleted, every node's budget ``delta`` (the budget
    boost), every stage to compute."""
    alpha, deleted, left, excess, entered, fresh, pmod, qok = ts[:8]
    budget = bs[8] if bs[0] == BOOST_BUDGET else 0.0
    for v in range(n):
        alpha[v] = 1.0
        deleted[v] = 0
        left[v] = budget
        excess[v] = 0.0
        entered[v] = -1
        fresh[v] = False
        pmod[v] = False
        qok[v] = False


@njit(cache=True, error_model="numpy")
def child_tokens_csr(tokens, n, cidx, ktok):
    """``ktok[j] = tokens[cidx[j]]``: every node's child tokens in draw order, as CSR."""
    for j in range(n - 1):
        ktok[j] = tokens[cidx[j]]


@njit(cache=True, error_model="numpy")
def _target_parts(u, p_rows, prow, qrow, ts):
    """P_u as (entries, divisor): P_u(x) = entries[x] / divisor, or entries[x] where the divisor is 0 (its
    residual once a child of u was rejected, else p_u)."""
    if ts[6][u]:
        return ts[8][qrow[u]], ts[16][u]
    return p_rows[prow[u]], 0.0


@njit(cache=True, error_model="numpy")
def _draft_parts(u, cstart, ktok, q_rows, qrow, ts):
    """Q_u as (entries, divisor), like :func:`_target_parts`: q_u without the tokens of u's deleted
    children and the sum of what is left (``draft_residual_sum``; 0 when it has no mass, whose Q_u is
    the copy itself)."""
    qbuf, qok, deleted, qdiv = ts[9], ts[7], ts[1], ts[17]
    if not qok[u]:
        lo, hi = cstart[u], cstart[u + 1]
        qdiv[u] = draft_residual_sum(q_rows[qrow[u]], ktok[lo:hi], deleted[u], qbuf[qrow[u]])
        qok[u] = True
    return qbuf[qrow[u]], qdiv[u]


@njit(cache=True, error_model="numpy")
def _entry(entries, divisor, x):
    """Entry x of a row kept as (entries, divisor)."""
    return entries[x] / divisor if divisor != 0.0 else entries[x]


@njit(cache=True, error_model="numpy")
def _target(u, p_rows, prow, qrow, ts):
    """P_u, divided in full."""
    P, d = _target_parts(u, p_rows, prow, qrow, ts)
    divide_kernel(P, d)
    ts[16][u] = 0.0  # (read only while P_u is a residual)
    return P


@njit(cache=True, error_model="numpy")
def _draft(u, cstart, ktok, q_rows, qrow, ts):
    """Q_u, divided in full (``draft_residual``)."""
    Q, d = _draft_parts(u, cstart, ktok, q_rows, qrow, ts)
    divide_kernel(Q, d)
    ts[17][u] = 0.0
    return Q


@njit(cache=True, error_model="numpy")
def _boost_excess(P, Q, a, depth, bs, order, b):
    """Delta of a GSD or Cool-SD stage: sum over Q's support of Q(x) |min(1, a b(x)) - min(1, a P/Q)|,
    ``b(x)`` the edge ratio (``theory.traversal.edge_ratio``: ``simulate.boost_kernels``), left in ``b``
    for every x of Q's support."""
    boosted_ratios_kernel(P, Q, depth, bs, order, b)
    total = 0.0
    for x in range(P.shape[0]):
        if Q[x] > 0.0:
            boosted = min(1.0, a * b[x])
            exact = min(1.0, a * (P[x] / Q[x]))
            total += Q[x] * abs(boosted - exact)
    return total


@njit(cache=True, error_model="numpy")
def _stage(u, depths, cstart, cidx, ktok, p_rows, prow, q_rows, qrow, bs, ts):
    """u's current stage (``TraversalWalk._stage``): alpha of its first live child and its Delta."""
    alpha, deleted, left, excess, entered, fresh = ts[:6]
    if fresh[u]:
        return
    a = alpha[u]
    j = cstart[u] + deleted[u]
    c = cidx[j]
    x = ktok[j]
    if bs[0] == BOOST_NONE:  # one entry of each: P(x) / Q(x)
        P, dp = _target_parts(u, p_rows, prow, qrow, ts)
        Q, dq = _draft_parts(u, cstart, ktok, q_rows, qrow, ts)
        alpha[c] = min(1.0, a * (_entry(P, dp, x) / _entry(Q, dq, x)))
        excess[u] = 0.0
        fresh[c] = False
        fresh[u] = True
        return
    P = _target(u, p_rows, prow, qrow, ts)
    Q = _draft(u, cstart, ktok, q_rows, qrow, ts)
    if bs[0] == BOOST_BUDGET:
        eps, g, cc, t = ts[10], ts[11], ts[12], ts[13]
        s, charge = budget_stage_kernel(P, Q, x, a, left[u], bs[9], eps, g, cc, t)
        b = budget_ratio_kernel(P, Q, x, s, eps)
        excess[u] = charge
    else:  # the Delta reads every draftable token's ratio, x's among them
        ratios = ts[15]
        excess[u] = _boost_excess(P, Q, a, depths[u] + 1, bs, ts[14], ratios)
        b = ratios[x]
    alpha[c] = min(1.0, a * b)
    fresh[c] = False
    fresh[u] = True


@njit(cache=True, error_model="numpy")
def traversal_next_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, prow, q_rows, qrow, bs, ts, path):
    """``TraversalWalk.next_test``: the first live node in post-order, its path in ``path[:m]``.

    Returns ``(m, need, charge)``: ``need`` >= 0 names a node on the path whose p row is missing (nothing
    was changed: compute the row and call again), else -1 and ``charge`` is the sum of the Deltas of the
    stages this test enters (root first)."""
    deleted, entered, excess, pmod = ts[1], ts[4], ts[3], ts[6]
    v = 0
    path[0] = 0
    m = 1
    while cstart[v] + deleted[v] < cstart[v + 1]:
        v = cidx[cstart[v] + deleted[v]]
        path[m] = v
        m += 1
    for i in range(m - 1):
        u = path[i]
        if not pmod[u] and prow[u] < 0:
            return m, u, 0.0
    charge = 0.0
    for i in range(m - 1):
        u = path[i]
        _stage(u, depths, cstart, cidx, ktok, p_rows, prow, q_rows, qrow, bs, ts)
        if entered[u] != deleted[u]:
            entered[u] = deleted[u]
            charge += excess[u]
    return m, -1, charge


@njit(cache=True, error_model="numpy")
def traversal_reject_kernel(v, parents, cstart, ktok, p_rows, prow, q_rows, qrow, bs, ts):
    """``TraversalWalk.reject``: delete the tested node v (not the root) and update its parent u:
    P_u := [alpha(u) P_u - Q_u]^+ / S (uniform if S <= 0), Q_u loses v's token, alpha(u) := S / (S + (1 -
    alpha(u))) (0, or 1 when alpha(u) was 1, if S <= 0), the budget pays the stage's Delta."""
    alpha, deleted, left, excess, entered, fresh, pmod, qok = ts[:8]
    u = parents[v]
    P, dp = _target_parts(u, p_rows, prow, qrow, ts)
    Q, dq = _draft_parts(u, cstart, ktok, q_rows, qrow, ts)
    a = alpha[u]
    res = ts[8][qrow[u]]  # may be P itself: each entry is read before it is written
    V = res.shape[0]
    if dp != 0.0 and dq != 0.0:  # one loop per case: no division where a row is already divided
        for x in range(V):
            res[x] = max(a * (P[x] / dp) - Q[x] / dq, 0.0)
    elif dp != 0.0:
        for x in range(V):
            res[x] = max(a * (P[x] / dp) - Q[x], 0.0)
    elif dq != 0.0:
        for x in range(V):
            res[x] = max(a * P[x] - Q[x] / dq, 0.0)
    else:
        for x in range(V):
            res[x] = max(a * P[x] - Q[x], 0.0)
    S = seqsum_kernel(res)
    if S > 0.0:
        ts[16][u] = S  # P_u = res / S, divided where it is read
    else:
        for x in range(V):
            res[x] = 1.0 / V
        ts[16][u] = 0.0
    pmod[u] = True
    if bs[0] == BOOST_BUDGET:
        left[u] -= excess[u]
    deleted[u] += 1
    qok[u] = False
    denom = S + (1.0 - a)  # exactly S when a = 1 (the root), so that alpha(root) stays 1.0
    if S > 0.0:
        alpha[u] = S / denom
    else:
        alpha[u] = 1.0 if denom <= 0.0 else 0.0
    fresh[u] = False


@njit(cache=True, error_model="numpy")
def traversal_walk_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, prow, q_rows, qrow, u_accept,
                          u_draw, bs, ts, path, charge, cum):
    """One R4 step (``theory.traversal.sample_traversal_step``) on the rows computed so far; resumable.

    The tested node v accepts iff ``u_accept[v] < alpha(v)`` (the root ends the step). Returns ``(m,
    bonus, need)``: ``need`` >= 0 asks for node need's p row (the state is kept: call again); else the
    accepted path is ``path[:m]`` and ``bonus`` the draw from P_v with ``u_draw[v]`` at its end v, or -1
    when P_v is v's own p row (the caller draws from it, as at an R2 leaf). ``charge[0]`` accumulates
    the Deltas of the stages the step entered (0 lossless); ``cum``: float64[V] scratch."""
    alpha, pmod = ts[0], ts[6]
    while True:
        m, need, ch = traversal_next_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, prow, q_rows,
                                            qrow, bs, ts, path)
        if need >= 0:
            return m, -1, need
        charge[0] += ch
        v = path[m - 1]
        if v == 0 or u_accept[v] < alpha[v]:
            if pmod[v]:
                return m, draw_token_kernel(_target(v, p_rows, prow, qrow, ts), u_draw[v], cum), -1
            return m, -1, -1
        traversal_reject_kernel(v, parents, cstart, ktok, p_rows, prow, q_rows, qrow, bs, ts)


@njit(cache=True, error_model="numpy")
def traversal_expectation_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, prow, q_rows, qrow, bs, ts,
                                 path, reach):
    """``theory.traversal.traversal_ends`` given the drawn tree (p at every node with children): the loop
    is one sequence of tests, test j happening with probability prod_{i<j} (1 - alpha_i). Resets ``ts``
    and rejects every tested node; fills ``reach[v]`` = P(v on the accepted path). Returns (E[tokens],
    the expected sum of the entered stages' Deltas: Theorem 12.3's bound on the step's TV)."""
    alpha = ts[0]
    traversal_reset(ts, n, bs)
    for v in range(n):
        reach[v] = 0.0
    live, bound, tokens = 1.0, 0.0, 0.0  # live: P(the loop reaches this test)
    while True:
        m, _, ch = traversal_next_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, prow, q_rows, qrow,
                                         bs, ts, path)
        v = path[m - 1]
        accept = 1.0 if v == 0 else alpha[v]
        bound += live * ch
        prob = live * accept
        if prob > 0.0:
            for i in range(m - 1, -1, -1):
                reach[path[i]] += prob
        tokens += prob * (depths[v] + 1)
        live *= 1.0 - accept
        if v == 0 or accept >= 1.0:
            return tokens, bound
        traversal_reject_kernel(v, parents, cstart, ktok, p_rows, prow, q_rows, qrow, bs, ts)


@njit(cache=True, error_model="numpy")
def traversal_step_kernel(parents, depths, n, cstart, cidx, tokens, p_rows, q_rows, rows, u_accept, u_draw,
                          bs):
    """A whole R4 step on rows given for every node (``rows``: the identity row map); returns (path,
    bonus, the Deltas of the stages it entered)."""
    ts = traversal_scratch(n, n, p_rows.shape[1], bs[0])
    ktok = np.empty(max(n - 1, 1), dtype=np.int64)
    child_tokens_csr(tokens, n, cidx, ktok)
    traversal_reset(ts, n, bs)
    path = np.empty(n, dtype=np.int64)
    charge = np.zeros(1)
    cum = np.empty(p_rows.shape[1])
    m, bonus, _ = traversal_walk_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, rows, q_rows, rows,
                                        u_accept, u_draw, bs, ts, path, charge, cum)
    if bonus < 0:
        end = path[m - 1]
        bonus = draw_token_kernel(p_rows[end], u_draw[end], cum)
    return path[:m].copy(), bonus, charge[0]


@njit(cache=True, error_model="numpy")
def traversal_step_expectation_kernel(parents, depths, n, cstart, cidx, tokens, p_rows, q_rows, rows, bs,
                                      edge, reach):
    """Exact expectations of an R4 step on rows given for every node: (E[tokens], TV bound); fills
    ``reach`` and ``edge[v]`` = reach(v) / reach(parent) (0 where the parent is never reached)."""
    ts = traversal_scratch(n, n, p_rows.shape[1], bs[0])
    ktok = np.empty(max(n - 1, 1), dtype=np.int64)
    child_tokens_csr(tokens, n, cidx, ktok)
    path = np.empty(n, dtype=np.int64)
    tok, bound = traversal_expectation_kernel(parents, depths, n, cstart, cidx, ktok, p_rows, rows, q_rows,
                                              rows, bs, ts, path, reach)
    edge[0] = 1.0
    for v in range(1, n):
        up = reach[parents[v]]
        edge[v] = reach[v] / up if up > 0.0 else 0.0
    return tok, bound
