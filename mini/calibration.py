"""Fitting a latent-field world (``simulate.worlds.LatentParams``) to a real model and its drafter.

The fit matches *figures* measured the same way on the model (teacher-forced
along its own samples, :func:`model_figures`) and on the world (along
sequences sampled from its target, :func:`world_figures`):

- ``top1``: mean top-1 probability of p;
- ``top1_sd``: its standard deviation over positions (a real image has easy
  and hard stretches, and tree decoding skips through the easy ones and stops
  at the hard ones, so the mean alone mispredicts tokens per step);
- ``top1_lag1``: the lag-1 autocorrelation of top-1 along a sequence (how
  long a stretch lasts);
- ``accept_ranked``: mean p-mass of q's 10 most likely tokens (the root
  acceptance of R1 with 10 ranked drafts: EAGLE-2's first layer);
- ``draft_entropy``: mean entropy of q in nats (how flat the drafter is,
  which with its ranking sets R2's sampled-draft acceptance);
- ``accept_ranked_deep`` (a drafter that drifts below the root, the EAGLE
  head): ``accept_ranked`` of the drafter one level below a tree's root
  (``mini.ambiguity.eagle_below_root``; the world's ``draft_drift``).

One knob per figure: the target's ``beta`` (bisection on log beta),
``beta_spread`` and ``rho``; the drafter's error scale (a common factor on
``draft_sigma`` and ``draft_token_noise`` from the base world's values), its
``draft_beta / beta`` and its ``draft_drift``. Each figure is monotone in its
knob, so each knob is a bisection; the knobs are visited in rounds, the
target's first (its figures do not depend on the drafter), each round ending
with the knob of the figure that matters most (top-1, the ranked
acceptance). Figures that are not fitted (entropy, top-10 mass, 1 - TV(p,
q)) are reported beside the model's to show how far the world's shape is
from it. The ``mini`` preset came from an earlier fit of top-1 and 1 - TV only
(``fit_world`` in this module at commit c716263).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace

import numpy as np

from relaxspec.simulate.worlds import (
    PRESETS,
    LatentParams,
    LatentWorld,
    ambiguity,
    sampled_nodes,
    world_stats,
)
from relaxspec.theory.distributions import total_variation
from relaxspec.theory.rules import Rule, as_rule

# The world presets fitted to the shipped models, by the SHA-256 of the target's weights and by drafter
# and greedy decoding (:func:`world_key`; the "calibrated world" of the simulator validation,
# `relaxspec mini validate`).
FITTED_PRESETS = {
    "101344bae52830edab8965ca56c64f6a7d6b378ec2eece683601fbc5b0278a75": {
        "eagle": "mini-fit", "draft_gpt": "mini-fit-draft-gpt", "eagle-greedy": "mini-fit-greedy"},
    "758bce4689f5a99167685614e4991bcf0d58aa32f8bb5506f8cef13ba32af5b6": {
        "eagle": "mini-ambiguous", "draft_gpt": "mini-ambiguous-draft-gpt",
        "eagle-greedy": "mini-ambiguous-greedy"},
}
STAT_NAMES = {"top1": "mean_top1", "entropy": "mean_entropy", "top10_mass": "mean_top10_mass",
              "acceptance": "mean_acceptance"}
FIT_FIGURES = ("top1", "top1_sd", "top1_lag1", "accept_ranked", "draft_entropy")
DEEP_FIGURE = "accept_ranked_deep"
REPORTED_FIGURES = ("entropy", "top10_mass", "accept_sampled")
RANKED_DRAFTS = 10


def world_key(drafter: str, rule: Rule | str) -> str:
    """Which fitted world a decoding reads: the drafter's, along greedy paths for rule r3 (greedy
    decoding visits other states than sampling does)."""
    return f"{drafter}-greedy" if as_rule(rule).is_greedy else drafter


def fitted_preset(target_sha256: str, key: str) -> str | None:
    """The preset fitted to the target with these weights (its card's ``weights_sha256``) for
    :func:`world_key` ``key``; None when no world is fitted to it."""
    return FITTED_PRESETS.get(target_sha256, {}).get(key)


def ranked_mass(p: np.ndarray, q: np.ndarray) -> float:
    """p-mass of q's ``RANKED_DRAFTS`` most likely tokens."""
    return float(p[np.argpartition(-q, RANKED_DRAFTS - 1)[:RANKED_DRAFTS]].sum())


def node_figures(p: np.ndarray, q: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """(top-1, entropy, top-10 mass, p-mass of q's top 10, entropy of q, 1 - TV) at one node."""
    top1, entropy, top10 = ambiguity(p)
    return (top1, entropy, top10, ranked_mass(p, q), ambiguity(q)[1], 1.0 - total_variation(p, q))


def summarise(per_node: np.ndarray) -> dict[str, float]:
    """Figures of an (S sequences, L positions, 6) array of :func:`node_figures` in sequence order."""
    per_node = np.asarray(per_node, dtype=np.float64)
    if per_node.ndim != 3 or per_node.shape[1] < 2 or per_node.shape[2] != 6:
        raise ValueError(f"need (sequences, positions >= 2, 6) node figures, got shape {per_node.shape}")
    top1 = per_node[..., 0]
    dev = top1 - top1.mean()
    lag1 = float((dev[:, 1:] * dev[:, :-1]).mean() / dev.var()) if dev.var() > 0 else 0.0
    means = per_node.reshape(-1, 6).mean(axis=0)
    return {"top1": float(means[0]), "top1_sd": float(top1.std()), "top1_lag1": lag1,
            "accept_ranked": float(means[3]), "draft_entropy": float(means[4]),
            "entropy": float(means[1]), "top10_mass": float(means[2]), "accept_sampled": float(means[5])}


def world_figures(params: LatentParams, n_sequences: int = 32, seq_len: int = 64, deep: bool = False,
                  greedy: bool = False) -> dict[str, float]:
    """Figures of the world with ``params`` along ``n_sequences`` sampled sequences (``greedy``: along
    greedy paths; ``deep``: also ``accept_ranked_deep``, the drafter at depth 1 at the same nodes)."""
    world = LatentWorld(params)
    path = {"n_sequences": n_sequences, "seq_len": seq_len, "greedy": greedy}
    rows = [node_figures(p, q) for p, q in sampled_nodes(world, **path)]
    out = summarise(np.array(rows).reshape(n_sequences, seq_len, 6))
    if deep:
        out[DEEP_FIGURE] = float(np.mean([ranked_mass(p, q) for p, q in sampled_nodes(world, **path,
                                                                                       draft_depth=1)]))
    return out


def model_figures(p: np.ndarray, q: np.ndarray, positions: int, q_deep: np.ndarray | None = None
                  ) -> dict[str, float]:
    """Figures of a model from its p and a drafter's q (rows in sequence order, ``positions`` per
    sequence), e.g. ``mini.ambiguity.teacher_forced``'s; ``q_deep``: the drafter one level below a
    root at positions 2.. of each sequence (``positions - 1`` rows per sequence), for
    ``accept_ranked_deep``."""
    if p.shape != q.shape or p.ndim != 2 or p.shape[0] % positions:
        raise ValueError(f"p and q must be (sequences x {positions}, V) alike, got {p.shape}, {q.shape}")
    rows = [node_figures(a, b) for a, b in zip(p, q, strict=True)]
    out = summarise(np.array(rows).reshape(-1, positions, 6))
    if q_deep is not None:
        later = p.reshape(-1, positions, p.shape[1])[:, 1:].reshape(-1, p.shape[1])
        if q_deep.shape != later.shape:
            raise ValueError(f"q_deep must hold {positions - 1} rows per sequence, shape {later.shape}, got "
                             f"{q_deep.shape}")
        out[DEEP_FIGURE] = float(np.mean([ranked_mass(a, b) for a, b in zip(later, q_deep, strict=True)]))
    return out


def _bisect(f: Callable[[float], float], lo: float, hi: float, goal: float, increasing: bool,
            iters: int) -> float:
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if (f(mid) < goal) == increasing:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _check_goals(goals: dict[str, float], names: tuple[str, ...]) -> None:
    for name in names:
        v = goals.get(name)
        if v is None or not np.isfinite(v):
            raise ValueError(f"the fit needs a finite figure {name!r}, got {v!r}")


def fit_world(goals: dict[str, float], base: LatentParams | None = None, rounds: int = 3, iters: int = 12,
              n_sequences: int = 32, seq_len: int = 64, target: LatentParams | None = None,
              greedy: bool = False,
              progress: Callable[[str], None] | None = None) -> tuple[LatentParams, dict[str, float]]:
    """Parameters whose world matches the :data:`FIT_FIGURES` in ``goals`` (and ``accept_ranked_deep``
    when ``goals`` has it: the drafter drifts below the root); also the world's figures.

    ``target``: parameters whose target side (beta, beta_spread, rho) is kept, fitting only the
    drafter (a second drafter of the same model). ``base`` (default the ``ambiguous`` preset)
    gives everything that is not fitted. ``greedy``: the goals were measured along the model's greedy
    paths and the world's figures are too (the states greedy decoding, rule r3, visits).
    """
    _check_goals(goals, FIT_FIGURES)
    deep = DEEP_FIGURE in goals
    if deep:
        _check_goals(goals, (DEEP_FIGURE,))
    params = replace(target or base or PRESETS["ambiguous"], draft_drift=0.0)
    base_sigma, base_noise = params.draft_sigma, params.draft_token_noise
    if base_sigma == 0 and base_noise == 0:
        raise ValueError("the base world's drafter is exact: no error to scale")
    ratio = params.draft_beta / params.beta

    def figure(name: str, p: LatentParams) -> float:
        value = world_figures(p, n_sequences, seq_len, deep=name == DEEP_FIGURE, greedy=greedy)[name]
        if progress is not None:
            progress(f"{name} {value:.4f} (goal {goals[name]:.4f})")
        return value

    def fit(name: str, make: Callable[[float], LatentParams], lo: float, hi: float, increasing: bool,
            log: bool = False) -> float:
        if log:
            return math.exp(_bisect(lambda v: figure(name, make(math.exp(v))), math.log(lo), math.log(hi),
                                    goals[name], increasing, iters))
        return _bisect(lambda v: figure(name, make(v)), lo, hi, goals[name], increasing, iters)

    def with_target(beta: float, spread: float, rho: float) -> LatentParams:
        return replace(params, beta=round(beta, 3), draft_beta=round(beta * ratio, 3),
                       beta_spread=round(spread, 4), rho=round(rho, 4))

    if target is None:
        b, s, r = params.beta, params.beta_spread, params.rho
        for _ in range(rounds):
            s = fit("top1_sd", lambda v, b=b, r=r: with_target(b, v, r), 0.0, 4.0, True)
            r = fit("top1_lag1", lambda v, b=b, s=s: with_target(b, s, v), 0.0, 0.95, True)
            b = fit("top1", lambda v, s=s, r=r: with_target(v, s, r), 1.0, 1000.0, True, log=True)
        params = with_target(b, s, r)

    def drafter(factor: float, ratio: float, drift: float) -> LatentParams:
        return replace(params, draft_sigma=round(factor * base_sigma, 5),
                       draft_token_noise=round(factor * base_noise, 5),
                       draft_beta=round(ratio * params.beta, 3), draft_drift=round(drift, 5))

    factor, drift = 1.0, 0.0
    for _ in range(rounds):
        ratio = fit("draft_entropy", lambda v, f=factor, d=drift: drafter(f, v, d), 0.05, 2.0, False)
        if deep:
            drift = fit(DEEP_FIGURE, lambda v, f=factor, r=ratio: drafter(f, r, v), 0.0, 2.0, False)
        factor = fit("accept_ranked", lambda v, r=ratio, d=drift: drafter(v, r, d), 0.0, 4.0, False)
    params = drafter(factor, ratio, drift)
    return params, world_figures(params, n_sequences, seq_len, deep=deep, greedy=greedy)


def stats_of(params: LatentParams, n_sequences: int = 8, seq_len: int = 64) -> dict[str, float]:
    """world-stats figures of a world with ``params`` (same keys as the model's)."""
    s = world_stats(LatentWorld(params), n_sequences=n_sequences, seq_len=seq_len)
    return {k: float(getattr(s, v)) for k, v in STAT_NAMES.items()}


def params_literal(params: LatentParams) -> str:
    """The ``LatentParams(...)`` literal of ``params`` (for pasting into PRESETS)."""
    fields = ", ".join(f"{k}={v!r}" for k, v in asdict(params).items())
    return f"LatentParams({fields})"
