"""Fitting a latent-field world (:class:`simulate.worlds.LatentParams`) to a model's figures.

The fit matches *figures* measured the same way on a model (teacher-forced along its own samples,
``mini.calibration.model_figures``, or along the committed sequences of captured traces,
:mod:`simulate.fit_traces`) and on the world (along sequences sampled from its target,
:func:`world_figures`):

- ``top1``: mean top-1 probability of p;
- ``top1_sd``: its standard deviation over positions (a real image has easy and hard stretches, and
  tree decoding skips through the easy ones and stops at the hard ones, so the mean alone mispredicts
  tokens per step);
- ``top1_lag1``: the lag-1 autocorrelation of top-1 along a sequence (how long a stretch lasts);
- ``accept_ranked``: mean p-mass of q's 10 most likely tokens (the root acceptance of R1 with 10
  ranked drafts: EAGLE-2's first layer);
- ``draft_entropy``: mean entropy of q in nats (how flat the drafter is, which with its ranking sets
  R2's sampled-draft acceptance);
- ``accept_ranked_deep`` (a drafter that drifts below the root, the EAGLE head): ``accept_ranked`` of
  the drafter one level below a tree's root (the world's ``draft_drift``).

One knob per figure: the target's ``beta`` (bisection on log beta), ``beta_spread`` and ``rho``; the
drafter's error scale (a common factor on ``draft_sigma`` and ``draft_token_noise`` from the base
world's values), its ``draft_beta / beta`` and its ``draft_drift``. Each figure is monotone in its knob,
so each knob is a bisection; the knobs are visited in rounds, the target's first (its figures do not
depend on the drafter), each round ending with the knob of the figure that matters most (top-1, the
ranked acceptance). Without drafter figures (traces of AR decoding or Jacobi windows: no drafter ran)
only the target is fitted and the drafter is the base world's. Figures that are not fitted (entropy,
top-10 mass, 1 - TV(p, q)) are reported beside the model's to show how far the world's shape is from
it. The context sensitivity kappa_m (SPEC 11) is fitted by :mod:`simulate.fit_kappa`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace

import numpy as np

from relaxspec.simulate.worlds import PRESETS, LatentParams, LatentWorld, ambiguity, sampled_nodes
from relaxspec.theory.distributions import total_variation

TARGET_FIGURES = ("top1", "top1_sd", "top1_lag1")
DRAFT_FIGURES = ("accept_ranked", "draft_entropy")
FIT_FIGURES = TARGET_FIGURES + DRAFT_FIGURES
DEEP_FIGURE = "accept_ranked_deep"
REPORTED_FIGURES = ("entropy", "top10_mass", "accept_sampled")
RANKED_DRAFTS = 10


def ranked_mass(p: np.ndarray, q: np.ndarray) -> float:
    """p-mass of q's ``RANKED_DRAFTS`` most likely tokens."""
    return float(p[np.argpartition(-q, RANKED_DRAFTS - 1)[:RANKED_DRAFTS]].sum())


def node_figures(p: np.ndarray, q: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """(top-1, entropy, top-10 mass, p-mass of q's top 10, entropy of q, 1 - TV) at one node."""
    top1, entropy, top10 = ambiguity(p)
    return (top1, entropy, top10, ranked_mass(p, q), ambiguity(q)[1], 1.0 - total_variation(p, q))


def top1_figures(top1: np.ndarray) -> dict[str, float]:
    """``top1``, ``top1_sd`` and ``top1_lag1`` of an (S sequences, L >= 2 positions) array of top-1
    probabilities in sequence order (the lag-1 autocorrelation about the overall mean)."""
    top1 = np.asarray(top1, dtype=np.float64)
    if top1.ndim != 2 or top1.shape[1] < 2:
        raise ValueError(f"need (sequences, positions >= 2) top-1 probabilities, got shape {top1.shape}")
    dev = top1 - top1.mean()
    lag1 = float((dev[:, 1:] * dev[:, :-1]).mean() / dev.var()) if dev.var() > 0 else 0.0
    return {"top1": float(top1.mean()), "top1_sd": float(top1.std()), "top1_lag1": lag1}


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


def fitted_figures(goals: dict[str, float], hold_rho: bool = False) -> tuple[str, ...]:
    """The figures :func:`fit_world` fits for ``goals``: the target's (without ``top1_lag1``, rho's, when
    ``hold_rho``); the drafter's when ``goals`` has any of them; ``accept_ranked_deep`` when it has that."""
    drafter = any(goals.get(n) is not None for n in DRAFT_FIGURES + (DEEP_FIGURE,))
    target = tuple(n for n in TARGET_FIGURES if not (hold_rho and n == "top1_lag1"))
    return target + (DRAFT_FIGURES if drafter else ()) + (
        (DEEP_FIGURE,) if goals.get(DEEP_FIGURE) is not None else ())


def fit_world(goals: dict[str, float], base: LatentParams | None = None, rounds: int = 3, iters: int = 12,
              n_sequences: int = 32, seq_len: int = 64, target: LatentParams | None = None,
              greedy: bool = False, hold_rho: bool = False,
              progress: Callable[[str], None] | None = None) -> tuple[LatentParams, dict[str, float]]:
    """Parameters whose world matches the figures :func:`fitted_figures` names in ``goals``; also the
    world's figures.

    ``target``: parameters whose target side (beta, beta_spread, rho) is kept, fitting only the
    drafter (a second drafter of the same model). ``base`` (default the ``ambiguous`` preset) gives
    everything that is not fitted (the drafter too when ``goals`` has no drafter figure). ``greedy``:
    the goals were measured along the model's greedy paths and the world's figures are too (the states
    greedy decoding, rule r3, visits). ``hold_rho``: keep ``params``' rho (chosen by the kappa fit,
    :mod:`simulate.fit_kappa`) and leave top1_lag1 unfitted.
    """
    names = fitted_figures(goals, hold_rho)
    _check_goals(goals, names)
    drafter_fit = DRAFT_FIGURES[0] in names
    deep = DEEP_FIGURE in names
    if target is not None and not drafter_fit:
        raise ValueError(f"a second drafter's fit (target given) needs the drafter's figures {DRAFT_FIGURES}")
    params = target or base or PRESETS["ambiguous"]
    if drafter_fit:
        params = replace(params, draft_drift=0.0)
    base_sigma, base_noise = params.draft_sigma, params.draft_token_noise
    if drafter_fit and base_sigma == 0 and base_noise == 0:
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
            if not hold_rho:
                r = fit("top1_lag1", lambda v, b=b, s=s: with_target(b, s, v), 0.0, 0.95, True)
            b = fit("top1", lambda v, s=s, r=r: with_target(v, s, r), 1.0, 1000.0, True, log=True)
        params = with_target(b, s, r)

    def drafter(factor: float, ratio: float, drift: float) -> LatentParams:
        return replace(params, draft_sigma=round(factor * base_sigma, 5),
                       draft_token_noise=round(factor * base_noise, 5),
                       draft_beta=round(ratio * params.beta, 3), draft_drift=round(drift, 5))

    if drafter_fit:
        factor, drift = 1.0, 0.0
        for _ in range(rounds):
            ratio = fit("draft_entropy", lambda v, f=factor, d=drift: drafter(f, v, d), 0.05, 2.0, False)
            if deep:
                drift = fit(DEEP_FIGURE, lambda v, f=factor, r=ratio: drafter(f, r, v), 0.0, 2.0, False)
            factor = fit("accept_ranked", lambda v, r=ratio, d=drift: drafter(v, r, d), 0.0, 4.0, False)
        params = drafter(factor, ratio, drift)
    return params, world_figures(params, n_sequences, seq_len, deep=deep, greedy=greedy)


def params_literal(params: LatentParams) -> str:
    """The ``LatentParams(...)`` literal of ``params`` (for pasting into PRESETS)."""
    fields = ", ".join(f"{k}={v!r}" for k, v in asdict(params).items())
    return f"LatentParams({fields})"
