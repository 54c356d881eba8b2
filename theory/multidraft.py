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

import numpy as np

from theory.distributions import validate_distribution
from theory.verify import check_children

ENUMERATE_MAX_V = 16


def multidraft_cut_value(p: np.ndarray, q: np.ndarray, H: np.ndarray, k: int) -> float:
    """The cut 1 - p(H) + 1 - (1 - q(H))^k for a boolean mask ``H``."""
    return 2.0 - float(p[H].sum()) - (1.0 - float(q[H].sum())) ** k


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
