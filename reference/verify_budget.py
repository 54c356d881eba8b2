"""The budgeted stage of SPEC 9.5 in torch, batched over rows: ``theory.budget``'s proximity masses,
scale and stage for the device verifier's R2 and R4 walks (``reference.verify_traversal``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from relaxspec.reference.verify_ops import seqsum

FEW_ROWS = 8  # below this many rows proximity_masses gathers (m, V, k) at once


def proximity_masses(r: torch.Tensor, nb: torch.Tensor) -> torch.Tensor:
    """eps(x) of every token x for each row of ``r`` (m, V): ``theory.budget.proximity_masses``, the
    sequential sum of r over all of x's k neighbours ``nb`` (V, k), uncapped (rounding may lift it past 1).

    One neighbour column at a time, added in column order: the same left-to-right sum as a cumulative sum
    over an (m, V, k) gather, bit for bit, without that tensor (at m = 40 rows of V = 8192 and k = 50
    about 2-3x faster on the CPU; it was 73% of a budgeted step on the ambiguous shipped model). A few rows
    take the gather (at one row it is about 2x faster than the loop)."""
    if r.shape[0] < FEW_ROWS or nb.shape[1] == 0:
        return seqsum(r[:, nb])
    cols = nb.t().contiguous()
    acc = torch.index_select(r, 1, cols[0])
    for j in range(1, cols.shape[0]):
        acc += torch.index_select(r, 1, cols[j])
    return acc


def budget_scales(gap: torch.Tensor, slope: torch.Tensor, support: torch.Tensor,
                  remaining: torch.Tensor) -> torch.Tensor:
    """``theory.budget.budget_scale`` for each row of ``gap``, ``slope`` (m, V) over the tokens in
    ``support``, with ``remaining`` (m,): the sort and the scan of the breakpoints, vectorised (tokens
    outside the positive set sort last with zero gap and slope, so that every sum is theory's)."""
    zero = torch.zeros((), dtype=gap.dtype, device=gap.device)
    on = support & (gap > 0.0) & (slope > 0.0)
    g = torch.where(on, gap, zero)
    c = torch.where(on, slope, zero)
    whole = seqsum(torch.minimum(g, c))
    t = torch.where(on, g / torch.where(on, c, torch.ones_like(c)), torch.full_like(g, float("inf")))
    t, order = torch.sort(t, dim=-1, stable=True)
    g, c, on = g.gather(-1, order), c.gather(-1, order), on.gather(-1, order)
    open_slope = torch.flip(torch.cumsum(torch.flip(c, dims=(-1,)), dim=-1), dims=(-1,))
    saturated = torch.cat((torch.zeros_like(g[:, :1]), torch.cumsum(g, dim=-1)[:, :-1]), dim=-1)
    rem = remaining.unsqueeze(-1)
    stop = on & ((t >= 1.0) | (saturated + t * open_slope > rem))
    j = torch.argmax(stop.to(torch.uint8), dim=-1, keepdim=True)  # the first stop
    s = ((remaining - saturated.gather(-1, j).squeeze(-1)) / open_slope.gather(-1, j).squeeze(-1))
    s = torch.where(stop.any(dim=-1), s.clamp(0.0, 1.0), torch.ones_like(s))
    s = torch.where(whole <= remaining, torch.ones_like(s), s)
    return torch.where(remaining <= 0.0, torch.zeros_like(s), s)


@dataclass(frozen=True)
class BudgetStages:
    """Budgeted stages of m rows (``theory.budget.budget_stage``): ``ratio`` and ``accept`` (m, V), valid
    where the draft residual has mass; ``charge`` (m,) each stage's Delta."""

    ratio: torch.Tensor
    accept: torch.Tensor
    charge: torch.Tensor


def budget_stages(r: torch.Tensor, qp: torch.Tensor, alpha: torch.Tensor, remaining: torch.Tensor,
                  nb: torch.Tensor) -> BudgetStages:
    """The budgeted stages on residual targets ``r`` and draft residuals ``qp`` (m, V) with path weights
    ``alpha`` and budgets ``remaining`` (m,), neighbour columns ``nb`` (V, k)."""
    support = qp > 0.0
    a = alpha.unsqueeze(-1)
    eps = proximity_masses(r, nb)
    gap = torch.clamp(qp - a * r, min=0.0)
    s = budget_scales(gap, a * eps, support, remaining)
    qt = torch.where(support, qp, torch.ones_like(qp))
    ratio = (r + s.unsqueeze(-1) * eps) / qt
    accept = torch.clamp(a * ratio, max=1.0)
    exact = torch.clamp(a * (r / qt), max=1.0)
    charge = seqsum(torch.where(support, qp * (accept - exact), torch.zeros_like(qp)))
    return BudgetStages(ratio, accept, charge)


# ------------------------------------------------------------------ edge ratios of the other boosts


__all__ = ["BudgetStages", "budget_scales", "budget_stages", "proximity_masses"]
