"""The NumPy oracle of coupled Jacobi windows (SCD, SPEC 10.1) and SJD-PAC windows (SPEC 10.2).

The readable twin of :mod:`simulate.coupled_kernels`: fed the same uniforms, it takes the same decisions.
Its semantics are :mod:`theory.coupled`'s (whose exact laws the tests compare it with):

A window is L *columns*; column c holds its candidates (the spine draft first) and the law ``q_c`` they
were drawn from, a full row (one-hot for a fresh token). One target forward gives ``P[c]``, the target at
window position c + 1 after the spine drafts of columns < c (0-based; ``P[L]`` after the whole spine).
The verified tree is the column product (every node at depth c has column c's candidates as children),
walked by rule R2 with children drawn without replacement: candidate i of column c passes when
``u < min(1, r(x)/q'(x))`` (``q'(x) = 0``: when ``r(x) > 0``), a rejection sets ``r := norm((r - q')^+)``
and ``q' := q'`` without x; when all of a column's candidates fail, the residual is drawn and the step
ends; after L columns the bonus is drawn from the path's p. Off the spine, p is computed along the path.
With the budgeted relaxation (SPEC 9.5) a node is verified by ``theory.budget.sample_budget_node`` (its
stages share its budget tv) and the step records the charges of the stages each deciding node tested.

After a rejection at column c the next window's columns come from old columns kk = c + 1..L (P[kk] is
their p): the spine draft is sampled from P[kk] (``coupling="none"``: SJD, PAC without AC), coupled
(keep the old draft x with probability ``min(1, P(x)/q(x))``, else draw from ``norm((P - q)^+)``; stored
with ``P``, or a kept draft with its old q when ``store_official``), or the Gumbel-max of ``P[kk]`` with
the noise of its absolute position (``gumbel``); column kk = L is always a draw from ``P[L]`` (or its
Gumbel-max). PD adds ``width - 1`` siblings at the first ``depth`` new columns, drawn without
replacement from the stored law (``principled``) or, as SJD-PAC's code does, from the coupling's residual
(``official``; a kept spine not excluded). The last c columns are fresh (uniform or copies, as SJD).

Uniforms (``step_counter(step, node, purpose)`` of the sequence's stream): ``U_ACCEPT`` node
``c * width + i`` tests candidate i of column c; ``U_DRAW`` node c is column c's residual draw or its
SJD sample, node L the bonus or ``t_{L+1}``; ``U_TREE`` node k a fresh slot; ``U_COUPLE`` node kk the
keep test of old column kk, ``REDRAW_BASE + kk`` its residual redraw, ``SIBLING_BASE + kk * MAX_WIDTH + i``
its sibling i; the Gumbel noise of absolute position n is ``noise_uniforms(key, n, V)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from relaxspec.simulate.coupled_kernels import (
    COUPLE_GUMBEL,
    COUPLE_NONE,
    MAX_WIDTH,
    REDRAW_BASE,
    SIBLING_BASE,
    SIBLINGS_OFFICIAL,
    U_COUPLE,
    WindowCodes,
)
from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE
from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.budget import budget_r2_given_states, budget_stage, sample_budget_node
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.stages import seqsum

Uniform = Callable[[int, int, int], float]
"""``u(step, node, purpose)``: the uniform a step spends there."""
Noise = Callable[[int, int], np.ndarray]
"""``noise(position, V)``: the (V,) uniforms of the Gumbel noise fixed at an absolute position."""


@dataclass(frozen=True)
class CoupledStep:
    """One forward: drafts accepted, tokens emitted (accepted + 1), the accepted candidate of column 0
    (-1 if none), the verified tree's size, the window's exact E[tokens] and E[TV] (NaN unless asked for,
    or when a column holds several candidates) and the budget's charges of the emitted tokens' nodes (0
    unboosted)."""

    accepted: int
    tokens: np.ndarray
    choice: int
    tree_size: int
    expected_tokens: float
    expected_tv: float = np.nan
    token_tv: float = 0.0


def _norm(w: np.ndarray) -> np.ndarray | None:
    s = seqsum(w)
    return w / s if s > 0.0 else None


def _gumbel_max(P: np.ndarray, u: np.ndarray) -> int:
    """``argmax_y log P(y) + g_y`` with ``g_y = -log(-log u_y)`` (tokens with P = 0 never win; ties: the
    lowest token)."""
    with np.errstate(divide="ignore"):
        score = np.where(P > 0.0, np.log(P) - np.log(-np.log(u)), -np.inf)
    return int(np.argmax(score))


def _draw_without(law: np.ndarray, first: list[int], more: int, u: Callable[[int], float]) -> list[int]:
    """``more`` draws without replacement from ``law``, the tokens in ``first`` excluded (fewer when the
    support runs out); draw i spends ``u(i)``."""
    out: list[int] = []
    rest = law.copy()
    rest[first] = 0.0
    for i in range(more):
        r = _norm(rest)
        if r is None:
            break
        y = draw_token(r, u(i))
        out.append(y)
        rest[y] = 0.0
    return out


def tree_size(widths: list[int]) -> int:
    """Draft nodes of the column product of columns with these candidate counts."""
    size, level = 0, 1
    for w in widths:
        level *= w
        size += level
    return size


def _r2_node(r, q, cands, c, step, codes: WindowCodes, u: Uniform) -> tuple[int, int, float]:
    """R2 at the node of column ``c`` (module docstring): (accepted index or -1, the residual draw or -1,
    0.0)."""
    qp = q.copy()
    for i, x in enumerate(cands):
        qx = qp[x] if qp is not None else 0.0
        a = min(1.0, r[x] / qx) if qx > 0.0 else (1.0 if r[x] > 0.0 else 0.0)
        if u(step, c * codes.width + i, U_ACCEPT) < a:
            return i, -1, 0.0
        if qp is not None:
            nr = _norm(np.maximum(r - qp, 0.0))
            r = nr if nr is not None else np.full(r.size, 1.0 / r.size)
            qp[x] = 0.0
            qp = _norm(qp)
    return -1, draw_token(r, u(step, c, U_DRAW)), 0.0


def _budget_node(r, q, cands, c, step, codes: WindowCodes, u: Uniform, boost: Boost, nb: np.ndarray
                 ) -> tuple[int, int, float]:
    """Budgeted R2 at the node of column ``c``: (accepted index or -1, the residual draw or -1, the
    charges of the stages it tested, summed in order as the kernel sums them)."""
    kids = np.array(cands, dtype=np.int64)
    ua = np.array([u(step, c * codes.width + i, U_ACCEPT) for i in range(kids.size)])
    hit, tok = sample_budget_node(r, q, kids, ua, u(step, c, U_DRAW), boost=boost, nb=nb)
    tested = hit + 1 if hit >= 0 else kids.size
    charge = 0.0
    for st in budget_r2_given_states(r, q, kids, nb, boost):
        if st.stage is not None and st.index < tested:
            charge += st.stage.charge
    return hit, (-1 if hit >= 0 else tok), charge


def _verify(cols, P, states, target, advance, step, codes: WindowCodes, u: Uniform, boost: Boost, nb):
    """R2 (budgeted when ``boost`` is the budget) over the column product: ``(emitted drafts, rejected
    column or L, token or -1, choice, the state and p at the path's end, the charges of the deciding
    nodes)``."""
    L = len(cols)
    row, state, on_spine, choice = P[0], states[0], True, -1
    emitted: list[int] = []
    charged = 0.0
    for c, (cands, q) in enumerate(cols):
        if boost.uses_budget:
            hit, token, node = _budget_node(row, q, cands, c, step, codes, u, boost, nb)
        else:
            hit, token, node = _r2_node(row, q, cands, c, step, codes, u)
        charged += node
        if hit < 0:
            return emitted, c, token, choice, state, row, charged
        x = cands[hit]
        choice = hit if c == 0 else choice
        emitted.append(x)
        if on_spine and hit == 0:
            row, state = P[c + 1], states[c + 1]
        else:
            on_spine = False
            state = advance(state, x)
            row = target(state)
    return emitted, L, -1, choice, state, row, charged


def _expected(cols, P, boost: Boost, nb) -> tuple[float, float]:
    """E[tokens] and E[TV] of a window whose columns hold one candidate each, given its drafts."""
    reach, e_tok, e_tv = 1.0, 1.0, 0.0
    for k, (cands, q) in enumerate(cols):
        x = cands[0]
        if boost.uses_budget:  # one stage with the node's whole budget
            st = budget_stage(P[k], q, nb, boost, boost.tv)
            e_tv += reach * st.charge
            reach *= float(st.accept[st.of(x)])
        else:
            reach *= min(1.0, P[k][x] / q[x])
        e_tok += reach
    return e_tok, e_tv


def _next_columns(cols, P, c, pos, codes: WindowCodes, step, u: Uniform, noise: Noise):
    """The columns the next window keeps after a rejection at column ``c`` (module docstring)."""
    L, V = len(cols), P.shape[1]
    out = []
    for kk in range(c + 1, L + 1):
        Pk = P[kk]
        stored, kept, res = Pk, False, Pk
        if codes.coupling == COUPLE_GUMBEL:
            y = _gumbel_max(Pk, noise(pos + kk, V))
        elif kk == L or codes.coupling == COUPLE_NONE:
            y = draw_token(Pk, u(step, kk, U_DRAW))
        else:  # COUPLE_MAXIMAL
            x, q = cols[kk][0][0], cols[kk][1]
            a = min(1.0, Pk[x] / q[x])
            nr = _norm(np.maximum(Pk - q, 0.0))
            res = nr if nr is not None else Pk
            if u(step, kk, U_COUPLE) < a or nr is None:
                y, kept = x, True
                stored = q if codes.store_official else Pk
            else:
                y = draw_token(nr, u(step, REDRAW_BASE + kk, U_COUPLE))
        cands = [y]
        more = codes.width - 1 if kk - c <= codes.depth else 0
        if more:
            def su(i: int, kk: int = kk) -> float:
                return u(step, SIBLING_BASE + kk * MAX_WIDTH + 1 + i, U_COUPLE)
            if codes.siblings != SIBLINGS_OFFICIAL:
                cands += _draw_without(stored, [y], more, su)
            else:
                cands += _draw_without(res, [] if kept else [y], more, su)
        out.append((cands, stored))
    return out


def _fresh(cols, L, V, copy, last, step, u: Uniform):
    left = cols[-1][0][0] if cols else last
    for k in range(len(cols), L):
        tok = left if copy and left >= 0 else min(int(u(step, k, U_TREE) * V), V - 1)
        q = np.zeros(V)
        q[tok] = 1.0
        cols.append(([tok], q))
        left = tok
    return cols


def decode_coupled(target: Callable[[object], np.ndarray], advance: Callable[[object, int], object],
                   state: object, vocab_size: int, codes: WindowCodes, n_tokens: int, u: Uniform,
                   noise: Noise, *, exact: bool = False, boost: Boost = NO_BOOST,
                   nb: np.ndarray | None = None) -> list[CoupledStep]:
    """Decode at least ``n_tokens`` tokens with a coupled or PAC window (the last step may overshoot).

    ``target(state)`` is p after a prefix's state, ``advance(state, x)`` the state after token x,
    ``codes`` the window (:func:`simulate.coupled_kernels.window_codes`), ``u`` and ``noise`` the
    uniforms (module docstring). ``exact`` adds E[tokens] and E[TV] given each single-candidate window;
    ``boost``: the budgeted relaxation (``nb`` its table, ``theory.budget.check_budget``) or none."""
    L, V = codes.window, vocab_size
    cols: list = []
    last, pos, steps = -1, 0, []
    while pos < n_tokens:
        step = len(steps)
        cols = _fresh(cols, L, V, codes.copy, last, step, u)
        states = [state]
        for cands, _ in cols:
            states.append(advance(states[-1], cands[0]))
        P = np.array([target(s) for s in states])
        emitted, c, token, choice, before, row, charged = _verify(cols, P, states, target, advance, step,
                                                                  codes, u, boost, nb)
        if c == L:  # all L columns passed: the bonus from the path's p
            token = (_gumbel_max(row, noise(pos + L, V)) if codes.coupling == COUPLE_GUMBEL
                     else draw_token(row, u(step, L, U_DRAW)))
        e_tok = e_tv = np.nan
        if exact and all(len(cands) == 1 for cands, _ in cols):
            e_tok, e_tv = _expected(cols, P, boost, nb)
        steps.append(CoupledStep(len(emitted), np.array([*emitted, token], dtype=np.int64), choice,
                                 tree_size([len(cands) for cands, _ in cols]), e_tok, e_tv, charged))
        cols = _next_columns(cols, P, c, pos, codes, step, u, noise) if c < L else []
        state = advance(before, token)
        last = token
        pos += len(emitted) + 1
    return steps


__all__ = ["CoupledStep", "Noise", "Uniform", "decode_coupled", "tree_size"]
