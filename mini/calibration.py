"""Fitting a latent-field world (``simulate.worlds.LatentParams``) to a real model's ambiguity.

Two one-dimensional searches, alternated: the target's inverse temperature
``beta`` (with ``draft_beta = beta``) sets the mean top-1 probability; a
common factor on the drafter's errors (its state noise ``draft_sigma`` and its
per-token error ``draft_token_noise``, from the base world's values) sets the
mean single-draft acceptance 1 - TV(p, q) (factor 0: the drafter is the
target). Both figures are monotone in their knob, so each search is a
bisection (on log beta). Entropy and top-10 mass are not fitted:
they are reported next to the model's to show how far the world's shape is
from the model's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace

from simulate.worlds import PRESETS, LatentParams, LatentWorld, world_stats

# The world preset fitted to the shipped model (the "calibrated world" of the simulator validation).
MODEL_PRESET = "mini"
STAT_NAMES = {"top1": "mean_top1", "entropy": "mean_entropy", "top10_mass": "mean_top10_mass",
              "acceptance": "mean_acceptance"}


def stats_of(params: LatentParams, n_sequences: int = 8, seq_len: int = 64) -> dict[str, float]:
    """world-stats figures of a world with ``params`` (same keys as the model's)."""
    s = world_stats(LatentWorld(params), n_sequences=n_sequences, seq_len=seq_len)
    return {k: float(getattr(s, v)) for k, v in STAT_NAMES.items()}


def _bisect(f, lo: float, hi: float, goal: float, increasing: bool, iters: int) -> float:
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if (f(mid) < goal) == increasing:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_world(top1: float, acceptance: float, base: LatentParams | None = None, rounds: int = 2,
              iters: int = 12, n_sequences: int = 8,
              seq_len: int = 64) -> tuple[LatentParams, dict[str, float]]:
    """Parameters whose world matches ``top1`` and ``acceptance``; also the fitted world's stats."""
    if not (0 < top1 < 1 and 0 < acceptance < 1):
        raise ValueError(f"top1 and acceptance must lie in (0, 1), got {top1}, {acceptance}")
    params = base or PRESETS["ambiguous"]
    base_sigma, base_noise = params.draft_sigma, params.draft_token_noise
    if base_sigma == 0 and base_noise == 0:
        raise ValueError("the base world's drafter is exact: no error to scale")

    def with_beta(log_beta: float) -> LatentParams:
        b = math.exp(log_beta)
        return replace(params, beta=round(b, 3), draft_beta=round(b, 3))

    for _ in range(rounds):
        log_beta = _bisect(lambda lb: stats_of(with_beta(lb), n_sequences, seq_len)["top1"],
                           math.log(1.0), math.log(1000.0), top1, increasing=True, iters=iters)
        params = with_beta(log_beta)

        def drafter_errors(f: float, fixed: LatentParams = params) -> LatentParams:
            return replace(fixed, draft_sigma=round(f * base_sigma, 5),
                           draft_token_noise=round(f * base_noise, 5))

        def accept_at(f: float) -> float:
            return stats_of(drafter_errors(f), n_sequences, seq_len)["acceptance"]

        factor = _bisect(accept_at, 0.0, 4.0, acceptance, increasing=False, iters=iters)
        params = drafter_errors(factor)
    return params, stats_of(params, n_sequences, seq_len)


def params_literal(params: LatentParams) -> str:
    """The ``LatentParams(...)`` literal of ``params`` (for pasting into PRESETS)."""
    fields = ", ".join(f"{k}={v!r}" for k, v in asdict(params).items())
    return f"LatentParams({fields})"
