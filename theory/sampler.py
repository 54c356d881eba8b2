"""Plain NumPy Monte Carlo oracle of every verification rule.

Readable, slow, and the reference that the Numba kernels in ``simulate`` and
the PyTorch decoder in ``reference`` must match decision for decision given
the same uniforms.

Uniform convention (trees and traces use it too): every tree node v owns two
uniforms in [0, 1): ``u_accept[v]``, spent when v is tested as a child
(accept iff ``u < a``), and ``u_draw[v]``, spent when a token is drawn from
the residual (or, at a leaf, from the target) at v.
"""

from __future__ import annotations

import numpy as np

from relaxspec.theory.boost_law import sampled_draft_stage
from relaxspec.theory.rules import Rule
from relaxspec.theory.stages import draft_residual, greedy_acceptable, r1_reject, r1_stage
from relaxspec.theory.verification import Verification, parse


def draw_token(r: np.ndarray, u: float) -> int:
    """Inverse-CDF draw from unnormalised weights ``r`` with uniform ``u``.

    The smallest x with cumsum[x] > u * total, where cumsum is sequential.
    A weight vector with no mass gives floor(u * V). The weights need not sum
    to 1 (residuals do not), but must be finite and >= 0, and ``u`` must be in
    [0, 1): else ``ValueError``. The checks cost one reduction on top of the
    cumulative sum (a NaN or infinite weight shows in its total).
    """
    if not 0.0 <= u < 1.0:  # False for NaN
        raise ValueError(f"draw_token: u must be a uniform in [0, 1), got {u!r}")
    cum = np.add.accumulate(r, dtype=np.float64)
    total = cum[-1]
    if not np.isfinite(total):
        bad = int(np.flatnonzero(~np.isfinite(r))[0]) if not np.isfinite(r).all() else -1
        raise ValueError(f"draw_token: weights have a NaN or infinite entry (index {bad}) or overflow")
    if r.min() < 0:
        bad = int(np.flatnonzero(r < 0)[0])
        raise ValueError(f"draw_token: weight {r[bad]!r} at index {bad} is negative")
    if total <= 0.0:
        return min(int(u * r.shape[0]), r.shape[0] - 1)
    t = u * total
    x = int(np.searchsorted(cum, t, side="right"))
    if x >= r.shape[0]:  # u * total rounded up to total: take the last token with mass
        x = int(np.flatnonzero(r > 0)[-1])
    return x


def sample_node(
    p: np.ndarray,
    children: np.ndarray,
    u_accept: np.ndarray,
    u_draw: float,
    verification: Verification | str,
    *,
    neighbours: np.ndarray,
    q: np.ndarray | None = None,
    depth: int = 1,
    emb: np.ndarray | None = None,
) -> tuple[int, int]:
    """Verify one node with explicit uniforms under ``verification`` (a value or its spec).

    ``neighbours`` is an int64 table (``theory.rules.neighbour_rows``);
    ``u_accept[i]`` is child i's uniform. Returns ``(i, token)``: the index of
    the accepted child (or -1) and the token the node emits. R2 takes a
    boost (``theory.boost.sampled_draft_stage``) for children at ``depth``
    with GSD's embedding table ``emb``. No input checking beyond the verification's own: callers
    validate the rows once per run (``theory.verify.check_node_inputs``). Rule r4 and the budget are
    refused (``ValueError``): they verify a whole step (``theory.rule_step``).
    """
    v = parse(verification)
    if v.walks_own_step:
        v.check_node_by_node()
    rule, relax, variant = v.rule, v.relax, v.variant
    if rule == Rule.R3:
        for i, c in enumerate(children):
            if greedy_acceptable(p, int(c), neighbours[c], relax):
                return i, int(c)
        return -1, int(np.argmax(p))
    if rule == Rule.R1:
        r, Z = p.astype(np.float64, copy=True), 1.0
        for i, c in enumerate(children):
            a, zeroed, _, _ = r1_stage(r, Z, int(c), neighbours[c], relax, variant)
            if u_accept[i] < a:
                return i, int(c)
            Z = r1_reject(r, Z, zeroed)
        return -1, draw_token(r, u_draw)
    if q is None:
        raise ValueError("rule r2 needs the draft distribution q")
    r = p.astype(np.float64, copy=True)
    for i, c in enumerate(children):
        qp = draft_residual(q, children[:i])
        if qp is None:
            break
        a, r_next = sampled_draft_stage(r, qp, int(c), neighbours[c], relax, variant, v.boost, depth, emb)
        if u_accept[i] < a:
            return i, int(c)
        r = r_next
    return -1, draw_token(r, u_draw)


def draw_without_replacement(q: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Successive draws without replacement from ``q``, one uniform each.

    Draw i is ``draw_token(q with earlier draws zeroed, u[i])``; stops early
    when ``q`` has no mass left. This is how R2 trees rank their children.
    """
    qr = q.astype(np.float64, copy=True)
    out = []
    for ui in u:
        if not np.any(qr > 0):
            break
        x = draw_token(qr, float(ui))
        out.append(x)
        qr[x] = 0.0
    return np.array(out, dtype=np.int64)
