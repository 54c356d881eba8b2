"""Optimal lossless multi-draft acceptance (SPEC section 4), for comparison with the rules.

With k i.i.d. drafts X_1..X_k ~ q, the largest probability that a lossless
verifier (one whose output is distributed exactly as p) outputs one of the
drafts is

    alpha*(p, q, k) = min over H of [ 1 - p(H) + 1 - (1 - q(H))^k ]

(a max-flow / min-cut statement over couplings of p and q^k). The minimum is
attained on a prefix of the tokens sorted by decreasing p/q (proof in
docs/theory.md, "Optimal multi-draft acceptance"), so it costs O(V log V);
``method="enumerate"`` checks every subset (V <= 16). With a deterministic
draft set S the optimum is p(S).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.boost import Boost
from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.sampled_trees import PrefixModel, step_law
from relaxspec.theory.traversal import traversal_ends
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import check_children, node_outcome

ENUMERATE_MAX_V = 16


def optimal_multidraft_acceptance(
    p: np.ndarray, q: np.ndarray, k: int, *, method: str = "sorted"
) -> float:
    """Largest acceptance of a lossless verifier with ``k`` i.i.d. drafts from ``q``.

    ``method="sorted"`` minimises over the V + 1 prefixes of the tokens in
    decreasing p/q order (tokens with q = 0 first); ``"enumerate"`` over all
    2^V subsets, refused beyond V = 16. k = 1 gives 1 - TV(p, q).
    """
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"number of drafts k must be an integer >= 1, got {k!r}")
    k = int(k)
    if method == "sorted":
        ratio = np.divide(p, q, out=np.full_like(p, np.inf), where=q > 0)
        ratio[(p == 0) & (q == 0)] = 0.0  # such tokens change no cut
        order = np.argsort(-ratio, kind="stable")
        pH = np.concatenate(([0.0], np.cumsum(p[order])))
        qH = np.minimum(np.concatenate(([0.0], np.cumsum(q[order]))), 1.0)
        return float(np.min(2.0 - pH - (1.0 - qH) ** k))
    if method == "enumerate":
        V = p.size
        if V > ENUMERATE_MAX_V:
            raise ValueError(
                f"subset enumeration is limited to V <= {ENUMERATE_MAX_V} (got V = {V}); "
                "use method='sorted', which is exact"
            )
        masks = (np.arange(2**V)[:, None] >> np.arange(V)[None, :]) & 1
        pH = masks @ p
        qH = np.minimum(masks @ q, 1.0)
        return float(np.min(2.0 - pH - (1.0 - qH) ** k))
    raise ValueError(f"unknown method {method!r}; expected 'sorted' or 'enumerate'")


def optimal_deterministic_acceptance(p: np.ndarray, drafts: Sequence[int] | np.ndarray) -> float:
    """Largest acceptance of a lossless verifier with the fixed draft set ``drafts``: p(S)."""
    p = validate_distribution(p, name="p")
    kids = check_children(drafts, p.size)
    return float(p[kids].sum())


# ------------------------------------------------------------------ drafts without replacement (SPEC 9.7)
WOR_PANEL_NODES = 24
"""Gauss-Legendre nodes per panel of :func:`wor_all_in_prefixes`' time grid."""
WOR_PANELS = (-40, 64)
"""The time grid's panels are [2^j, 2^(j+1)] for j in this range, after [0, 2^-40]."""
WOR_TAIL_TOL = 1e-12
"""Largest tail mass (beyond the grid) :func:`wor_all_in_prefixes` accepts before refusing."""


def _check_k(k: int) -> int:
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"number of drafts k must be an integer >= 1, got {k!r}")
    return int(k)


def wor_all_in_table(q: np.ndarray, k: int) -> np.ndarray:
    """P(all k draws without replacement from q land in A) for every subset A (index: bit mask), exact.

    A dynamic program over the sets drawn so far (each step from ``theory.stages.draft_residual``'s
    q' = q without the drawn tokens, renormalised), then a sum over subsets. When q has fewer than k
    tokens with mass the draws stop early and "all in A" means supp(q) within A. Refused beyond
    V = 16.
    """
    q = validate_distribution(q, name="q")
    k = _check_k(k)
    V = q.size
    if V > ENUMERATE_MAX_V:
        raise ValueError(f"subset enumeration is limited to V <= {ENUMERATE_MAX_V} (got V = {V}); "
                         "use wor_all_in_prefixes (level sets) instead")
    support = np.flatnonzero(q > 0)
    cur = {0: 1.0}
    for _ in range(min(k, support.size)):
        nxt: dict[int, float] = {}
        for drawn, w in cur.items():
            qp = q.copy()
            qp[[t for t in support if drawn >> int(t) & 1]] = 0.0
            qp /= qp.sum()
            for x in support:
                if not drawn >> int(x) & 1:
                    key = drawn | 1 << int(x)
                    nxt[key] = nxt.get(key, 0.0) + w * float(qp[x])
        cur = nxt
    table = np.zeros(2**V)
    for mask, w in cur.items():
        table[mask] += w
    masks = np.arange(2**V)
    for i in range(V):  # sum over subsets: table[A] = sum over drawn sets S within A
        has = (masks >> i) & 1 == 1
        table[has] += table[masks[has] ^ (1 << i)]
    return table


def wor_all_in_prefixes(q: np.ndarray, order: np.ndarray, k: int) -> np.ndarray:
    """P(all k draws without replacement from q land in A_j) for the prefixes A_j = order[:j], j = 0..V.

    With exponential clocks E_x ~ Exp(q(x)) the draws are the first k clocks to ring, so with
    c = 1 - q(A) and N_A(t) the number of A's clocks rung by time t,

        P(all in A) = 1 - int_0^inf c e^{-c t} P(N_A(t) < k) dt,

    where c is summed over the tokens outside A (exactly 0 for A = V) and N_A(t) is a sum of independent
    Bernoulli(1 - e^{-q(x) t}) (a Poisson-binomial law, updated one token at a time as A grows). The
    integral is composite Gauss-Legendre on the panels [0, 2^-40] and [2^j, 2^(j+1)]
    (:data:`WOR_PANELS`, :data:`WOR_PANEL_NODES` nodes each): geometric panels follow every rate of
    the exponential mixture. The mass beyond the grid is at most e^{-c T} P(N_A(T) < k); above
    :data:`WOR_TAIL_TOL` the call is refused. Agrees with
    :func:`wor_all_in_table` to 1e-12 in the tests; O(V k n_nodes).
    """
    q = validate_distribution(q, name="q")
    k = min(_check_k(k), int(np.count_nonzero(q > 0)))
    order = np.asarray(order, dtype=np.int64)
    if order.shape != (q.size,) or not np.array_equal(np.sort(order), np.arange(q.size)):
        raise ValueError("order must be a permutation of the tokens")
    x, w = np.polynomial.legendre.leggauss(WOR_PANEL_NODES)
    lo, hi = WOR_PANELS
    edges = np.concatenate(([0.0], 2.0 ** np.arange(lo, hi + 1)))
    a, b = edges[:-1, None], edges[1:, None]
    t = ((b - a) / 2 * x + (b + a) / 2).ravel()
    wt = ((b - a) / 2 * w).ravel()
    T = edges[-1]
    count = np.zeros((k, t.size))  # P(N_A(t) = j), j < k
    count[0] = 1.0
    count_T = np.zeros(k)
    count_T[0] = 1.0
    outside = np.concatenate((np.add.accumulate(q[order][::-1])[::-1], [0.0]))  # c_j = q(V \ A_j)
    out = np.empty(q.size + 1)
    for j in range(q.size + 1):
        c = float(outside[j])
        below = count.sum(axis=0)
        if c <= 0.0:
            out[j] = 1.0
        else:
            tail = np.exp(-c * T) * count_T.sum()
            if tail > WOR_TAIL_TOL:
                raise ValueError(f"the quadrature of P(all in A) leaves {tail:.2e} beyond its grid "
                                 "(draft probabilities too small); use wor_all_in_table at small V")
            out[j] = 1.0 - float(np.sum(wt * c * np.exp(-c * t) * below))
        if j < q.size and q[order[j]] > 0.0:
            rung = -np.expm1(-q[order[j]] * t)
            for i in range(k - 1, 0, -1):
                count[i] = count[i] * (1.0 - rung) + count[i - 1] * rung
            count[0] = count[0] * (1.0 - rung)
            rung_T = -np.expm1(-q[order[j]] * T)
            count_T[1:] = count_T[1:] * (1.0 - rung_T) + count_T[:-1] * rung_T
            count_T[0] *= 1.0 - rung_T
    return np.clip(out, 0.0, 1.0)


def ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Tokens by increasing p/q (q = 0 < p last, p = q = 0 first; ties by id): the prefixes are the
    level sets {p/q < tau} of SPEC 9.7."""
    ratio = np.divide(p, q, out=np.full_like(p, np.inf), where=q > 0)
    ratio[(p == 0) & (q == 0)] = 0.0
    return np.argsort(ratio, kind="stable")


def optimal_wor_acceptance(p: np.ndarray, q: np.ndarray, k: int, *, method: str = "sorted") -> float:
    """Largest acceptance of a lossless verifier with ``k`` drafts drawn from ``q`` without replacement:
    1 - max over A of [P(all k draws in A) - p(A)] (SPEC 9.7).

    ``method="sorted"``: the maximum over the V + 1 level sets of p/q (:func:`ratio_order`, proof that
    it is the maximum over all sets in docs/theory.md, section 13), with the probabilities of
    :func:`wor_all_in_prefixes`; ``"enumerate"``: every subset, exact (:func:`wor_all_in_table`,
    V <= 16). k = 1 gives 1 - TV(p, q); k >= the size of q's support gives p(supp q).
    """
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    k = _check_k(k)
    if method == "sorted":
        order = ratio_order(p, q)
        pA = np.concatenate(([0.0], np.cumsum(p[order])))
        return float(1.0 - np.max(wor_all_in_prefixes(q, order, k) - pA))
    if method == "enumerate":
        table = wor_all_in_table(q, k)
        masks = (np.arange(2**p.size)[:, None] >> np.arange(p.size)[None, :]) & 1
        return float(1.0 - np.max(table - masks @ p))
    raise ValueError(f"unknown method {method!r}; expected 'sorted' or 'enumerate'")


# ------------------------------------------------------------------ the rules next to the optimum
@dataclass(frozen=True)
class NodeAcceptance:
    """Acceptance (P(some draft accepted)) of each rule at one node with ``drafts`` drafts, next to the
    optimal lossless acceptance of each draft model.

    ``r1``: lossless R1 on the top-``drafts`` tokens of q (ties by id), whose optimum is
    ``optimal_deterministic`` = p(S), which R1 attains; ``r2`` and ``r4``: lossless R2 and R4 with the
    drafts drawn from q without replacement (equal at one node), optimum ``optimal_wor``; ``gsd``: R2
    with GSD's group boost on the same drafts (lossy: it may exceed the optimum) and ``gsd_tv`` its
    exact TV (None without a boost); ``optimal_iid``: the optimum for i.i.d. drafts, for reference.
    Given a draw order, ``r2``, ``r4`` and ``gsd`` (and ``gsd_tv``) are conditional on it, while the
    optima average over draws.
    """

    drafts: int
    r1: float
    r2: float
    r4: float
    gsd: float | None
    gsd_tv: float | None
    optimal_deterministic: float
    optimal_wor: float
    optimal_iid: float

    def gaps(self) -> dict[str, float]:
        """How far each lossless rule is from the best possible for its draft model."""
        return {"r1": self.optimal_deterministic - self.r1, "r2": self.optimal_wor - self.r2,
                "r4": self.optimal_wor - self.r4}


def top_drafts(q: np.ndarray, k: int) -> np.ndarray:
    """The k most probable tokens of q, ties by lower id (R1's and R3's ranks, SPEC 5)."""
    return np.lexsort((np.arange(q.size), -q))[:k]


def node_acceptance(p: np.ndarray, q: np.ndarray, k: int, *, children: Sequence[int] | None = None,
                    gsd: Boost | None = None, emb: np.ndarray | None = None) -> NodeAcceptance:
    """R1, R2, R4 and GSD at one node next to the optimal acceptances (SPEC 9.7).

    ``children=None`` averages R2, R4 and GSD over every draw of the k drafts (exact; V <= 12, k <= 4);
    otherwise they are conditional on the draw order ``children`` (any V). ``gsd``: a group boost
    (``theory.boost.Boost.group``) with its embedding table ``emb``.
    """
    p = validate_distribution(p, name="p")
    q = validate_distribution(q, name="q", size=p.size)
    k = _check_k(k)
    if k > int(np.count_nonzero(q > 0)):
        raise ValueError(f"{k} drafts without replacement need at least {k} tokens with draft mass")
    if gsd is not None and (not isinstance(gsd, Boost) or not gsd.reads_embedding):
        raise ValueError(f"gsd must be a group boost (Boost.group(G, ...)), got {gsd!r}")
    S = top_drafts(q, k)
    r1 = 1.0 - node_outcome(p, S, "r1").reject_prob
    one_level = np.array([-1] + [0] * k)
    if children is None:
        drafts: int | np.ndarray = k
        law = step_law(one_level, PrefixModel.stationary(p, q),
                       lambda t, pr, qr: traversal_ends(t, pr, qr).ends)
        r4 = law.tokens - 1.0
    else:
        drafts = check_children(children, p.size)
        if drafts.size != k:
            raise ValueError(f"children has {drafts.size} tokens, expected k = {k}")
        tree = Tree(one_level, np.concatenate(([0], drafts)))
        rows = np.broadcast_to(p, (k + 1, p.size))
        r4 = traversal_ends(tree, rows, np.broadcast_to(q, (k + 1, p.size))).tokens - 1.0
    r2 = 1.0 - node_outcome(p, drafts, "r2", q=q).reject_prob
    g = gtv = None
    if gsd is not None:
        o = node_outcome(p, drafts, Verification("r2", boost=gsd), q=q, emb=emb)
        # given a draw order the emitted law is conditional on it (not a distortion): report the
        # per-stage SPEC 9.4 sum there, the exact TV when averaging over draws
        g, gtv = 1.0 - o.reject_prob, (o.tv if children is None else o.stage_tv)
    return NodeAcceptance(k, float(r1), float(r2), float(r4), g, gtv, float(p[S].sum()),
                          optimal_wor_acceptance(p, q, k), optimal_multidraft_acceptance(p, q, k))
