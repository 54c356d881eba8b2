"""``relaxspec theory demo``: acceptance and distortion of every rule on a LlamaGen-sized node.

One node with V = 16384 tokens, a random unit codebook in R^8, a flat target
p = softmax(beta <E_x, z>) (beta tuned so that max p = 0.1) and a draft q
that sees a noisy z. The node has m = 4 children: the top-4 tokens of q for
R1 and R3 (exact), four draws without replacement from q for R2 (Monte Carlo
over draw orders, exact given each order; R2 cannot be enumerated at this V).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.bounds import r1_distortion, r2_stage_bound, r3_tv_bound
from relaxspec.theory.distributions import total_variation
from relaxspec.theory.multidraft import optimal_deterministic_acceptance, optimal_multidraft_acceptance
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import Relax
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import node_outcome, r2_given_states

TARGET_TOP1 = 0.1


def relaxations(k: int) -> list[Relax]:
    """The demo's relaxations: none, additive (4 deltas), multiplicative (3 lams)."""
    return (
        [Relax.none()]
        + [Relax.additive(k, d) for d in (0.05, 0.1, 0.2, 0.4)]
        + [Relax.multiplicative(k, lam) for lam in (2.0, 5.0, 10.0)]
    )


def softmax(z: np.ndarray) -> np.ndarray:
    """Softmax in float64."""
    e = np.exp(z - z.max())
    return e / e.sum()


def beta_for_top1(logits: np.ndarray, top1: float) -> float:
    """Inverse temperature beta with max softmax(beta * logits) = ``top1`` (bisection)."""
    lo, hi = 0.0, 1.0
    while softmax(hi * logits).max() < top1:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if softmax(mid * logits).max() < top1 else (lo, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Example:
    """The demo's node: codebook, neighbour table, target, draft and R1/R3 children."""

    codebook: np.ndarray
    neighbours: np.ndarray
    p: np.ndarray
    q: np.ndarray
    children: np.ndarray
    beta: float


def make_example(
    seed: int, vocab_size: int = 16384, dim: int = 8, k_max: int = 1024, m: int = 4,
    noise: float = 0.1,
) -> Example:
    """Random unit codebook, flat target with max p = 0.1, noisy draft, top-m children of q."""
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((vocab_size, dim))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    z = rng.standard_normal(dim)
    z /= np.linalg.norm(z)
    beta = beta_for_top1(E @ z, TARGET_TOP1)
    p = softmax(beta * (E @ z))
    zq = z + noise * rng.standard_normal(dim)
    zq /= np.linalg.norm(zq)
    q = softmax(beta * (E @ zq))
    children = np.argsort(-q, kind="stable")[:m]
    # int64 once, so that node_outcome does not convert the 16384 x 1024 table per call
    nb = neighbour_table(E, min(k_max, vocab_size - 1)).astype(np.int64)
    return Example(E, nb, p, q, children, beta)


@dataclass(frozen=True)
class Row:
    """One line of the table; ``se_*`` are Monte Carlo standard errors (0 when exact)."""

    rule: str
    relax: Relax
    variant: str
    accept: float
    tv: float | None
    tv_lower: float | None
    bound: float
    nominal: float | None
    method: str
    se_accept: float = 0.0
    se_tv: float = 0.0
    se_bound: float = 0.0


def exact_rows(ex: Example, relax: Relax, variants: list[str]) -> list[Row]:
    """R1 and R3 rows: exact."""
    rows = []
    for variant in variants:
        out = node_outcome(ex.p, ex.children, Verification("r1", relax, variant), neighbours=ex.neighbours)
        dist = r1_distortion(ex.p, ex.children, relax=relax, neighbours=ex.neighbours,
                             variant=variant)
        rows.append(Row("r1", relax, variant, 1.0 - out.reject_prob, out.tv, None, dist.bound,
                        dist.nominal if relax.merges_neighbours else 0.0, "exact"))
    out = node_outcome(ex.p, ex.children, Verification("r3", relax), neighbours=ex.neighbours)
    bound = r3_tv_bound(ex.p, ex.children, relax=relax, neighbours=ex.neighbours)
    rows.append(Row("r3", relax, "-", 1.0 - out.reject_prob, out.tv, None, bound, None, "exact"))
    return rows


def r2_rows(ex: Example, relax: Relax, variants: list[str], orders: np.ndarray) -> list[Row]:
    """R2 rows: average over the sampled draw orders of quantities exact given the order.

    Per order: P(some child accepted), the R2 bound's stage terms (coarse
    per-stage bound) and the emitted mass on S = {q > p}; E(S) - p(S) is a
    lower bound on TV(emitted, p).
    """
    S = ex.q > ex.p
    pS = float(ex.p[S].sum())
    rows = []
    for variant in variants:
        acc, bnd, mass_S = (np.zeros(len(orders)) for _ in range(3))
        for n, order in enumerate(orders):
            for s in r2_given_states(ex.p, ex.q, order, ex.neighbours, relax, variant):
                if s.qp is None:
                    mass_S[n] += s.weight * float(s.r[S].sum())
                    break
                a = s.weight * s.accept[0]
                acc[n] += a
                mass_S[n] += a * float(S[order[s.stage]])
                bnd[n] += s.weight * r2_stage_bound(s.r, s.qp, relax=relax,
                                                    neighbours=ex.neighbours, variant=variant,
                                                    coarse=True)
        se = lambda x: float(x.std(ddof=1) / np.sqrt(x.size))  # noqa: E731
        tv_low = mass_S - pS
        rows.append(Row("r2", relax, variant, float(acc.mean()), None, float(tv_low.mean()),
                        float(bnd.mean()), relax.delta if relax.is_additive else None,
                        f"MC {len(orders)} orders", se(acc), se(tv_low), se(bnd)))
    return rows


def format_table(rows: list[Row]) -> str:
    """The table as fixed-width text."""
    head = (f"{'rule':4} {'relaxation':28} {'variant':10} {'P(acc)':>14} {'E[tok]':>6} "
            f"{'TV':>16} {'TV bound':>14} {'nominal':>8}  method")
    lines = [head, "-" * len(head)]

    for r in rows:
        mc = r.method != "exact"

        def pm(x: float, se: float, mc: bool = mc) -> str:
            return f"{x:.4f}±{se:.4f}" if mc else f"{x:.4f}"

        tv = pm(r.tv, 0.0) if r.tv is not None else ">= " + pm(r.tv_lower or 0.0, r.se_tv)
        nominal = f"{r.nominal:.4f}" if r.nominal is not None else "-"
        lines.append(
            f"{r.rule:4} {str(r.relax):28} {r.variant:10} {pm(r.accept, r.se_accept):>14} "
            f"{1.0 + r.accept:6.3f} {tv:>16} {pm(min(1.0, r.bound), r.se_bound):>14} {nominal:>8}  "
            f"{r.method}"
        )
    return "\n".join(lines)


def report(seed: int = 0, *, vocab_size: int = 16384, k: int = 1000, m: int = 4, n_orders: int = 1000) -> str:
    """The demo's text: the example, the table of every rule and relaxation, and how to read it."""
    t0 = time.perf_counter()
    k = min(k, vocab_size - 2)  # the official variants read k + 1 neighbours
    ex = make_example(seed, vocab_size=vocab_size, k_max=max(1024, k + 1), m=m)
    rng = np.random.default_rng([seed, 1])
    orders = np.array([draw_without_replacement(ex.q, rng.random(m)) for _ in range(n_orders)])
    lines = [
        f"relaxspec theory demo (seed {seed}): one node, V = {vocab_size}, unit codebook in "
        f"R^{ex.codebook.shape[1]}, m = {m} children",
        f"target p = softmax(beta <E_x, z>), beta = {ex.beta:.2f}: max p = {ex.p.max():.3f}, "
        f"p(top-10) = {np.sort(ex.p)[-10:].sum():.3f}; draft q: max q = {ex.q.max():.3f}, "
        f"1 - TV(p, q) = {1.0 - total_variation(ex.p, ex.q):.3f}",
        f"R1/R3 children = top-{m} of q {ex.children.tolist()}; lossless optimum with these "
        f"drafts p(S) = {optimal_deterministic_acceptance(ex.p, ex.children):.4f}; with {m} "
        f"i.i.d. drafts from q = {optimal_multidraft_acceptance(ex.p, ex.q, m):.4f}",
        "",
    ]
    rows: list[Row] = []
    for relax in relaxations(k):
        variants = ["principled"] if not relax.merges_neighbours else ["principled", "official"]
        rows += exact_rows(ex, relax, variants)
        rows += r2_rows(ex, relax, variants, orders)
    order = {"r1": 0, "r2": 1, "r3": 2}
    rows.sort(key=lambda r: order[r.rule])
    lines += [format_table(rows), "",
              "E[tok] = 1 + P(acc): tokens emitted by this node when its children are leaves.\n"
              "TV = TV(emitted, p) (R3: from the greedy point mass); bounds are proved in "
              "docs/theory.md.\n"
              "R1 bound: target mass removed from the residual other than tested children, p(D); "
              "nominal = delta * E[#tested] or (lam - 1) * p(tested children): principled R1 stays "
              "below it, official R1 need not.\n"
              f"R2: Monte Carlo over {n_orders} draw orders (theory.sampler.draw_without_replacement, "
              f"seed [{seed}, 1]), exact given each order, ± one standard error. Its TV cannot be "
              "estimated at this V; shown is the lower bound E(S) - p(S), S = {q > p}, and the "
              "coarse R2 bound (not limited by delta: see docs). Bounds are shown as min(1, bound).\n"
              f"({time.perf_counter() - t0:.1f} s)"]
    return "\n".join(lines)
