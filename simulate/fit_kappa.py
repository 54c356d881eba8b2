"""Fitting a world's context sensitivity kappa_1..kappa_M (SPEC 11) to a model's, and the whole fit.

:func:`fit_kappa` chooses the knobs of SPEC 11's parameterisation, ``prefix_noise`` (the share of the
transition noise keyed by the whole prefix: the level kappa keeps at long lags), ``lag1_noise`` (the
share keyed by the token before: kappa_1 above what rho's memory gives, kappa_2 a little through rho)
and, on a grid,
``grid_above`` and ``grid_diagonal`` (the bumps at lags W and W +- 1), by Nelder-Mead on the squared
error of kappa_1..kappa_M measured in the world (:func:`simulate.context.world_context_sensitivity`,
its sequences keyed by one seed, so that the objective is a deterministic function of the knobs), and
with ``fit_rho`` the state's memory ``rho`` too (the decay of kappa_2, kappa_3, ...).
:func:`fit_world_model` is the whole fit: the figures of :func:`simulate.fit.fit_world`, then kappa's
knobs and rho, then the figures again with rho held (the figures' knobs move kappa a little), and
reports every figure and kappa beside its goal. rho is kappa's, not top-1's persistence's: on a grid the
token above and the token before carry top-1's persistence as rho does, and fitting top1_lag1 last
drove rho to 0 on the first shipped model (kappa_2..kappa_6 0 against 0.04-0.12, the Jacobi windows'
tokens per forward 18-37% low), where kappa's rho puts SJD within 2.4% and the other window rows 8-22%
high (docs/mini_model.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize

from relaxspec.simulate.context import ContextSensitivity, world_context_sensitivity
from relaxspec.simulate.fit import fit_world, fitted_figures
from relaxspec.simulate.world_params import MAX_GRID_WIDTH, LatentParams
from relaxspec.simulate.worlds import LatentWorld

KAPPA_SEQUENCES = 16  # the world's kappa during the fit: 16 sequences of 64 tokens (a few ms a call)
KAPPA_LEN = 64
KAPPA_EVALS = 120  # Nelder-Mead's budget of kappa measurements


def kappa_knobs(grid_width: int, fit_rho: bool = False) -> tuple[str, ...]:
    """The parameters :func:`fit_kappa` chooses: ``prefix_noise``, ``lag1_noise``, the grid's weights
    on a grid, and ``rho`` with ``fit_rho``."""
    noise = ("prefix_noise", "lag1_noise")
    grid = ("grid_above", "grid_diagonal") if grid_width > 0 else ()
    return noise + grid + (("rho",) if fit_rho else ())


def world_kappa(params: LatentParams, n_lags: int, n_sequences: int = KAPPA_SEQUENCES,
                seq_len: int = KAPPA_LEN, seed: int = 0) -> ContextSensitivity:
    """kappa_1..kappa_{n_lags} of the world with ``params`` (``seq_len`` at least ``n_lags + 1``)."""
    return world_context_sensitivity(LatentWorld(params), n_lags, n_sequences=n_sequences,
                                     seq_len=max(seq_len, n_lags + 1), seed=seed)


def fit_kappa(goal: np.ndarray, params: LatentParams, n_sequences: int = KAPPA_SEQUENCES,
              seq_len: int = KAPPA_LEN, max_evals: int = KAPPA_EVALS, seed: int = 0, fit_rho: bool = False
              ) -> tuple[LatentParams, ContextSensitivity]:
    """``params`` with :func:`kappa_knobs` chosen so that the world's kappa_1..kappa_M comes near
    ``goal`` (M = its length; least squares); also the world's kappa then. ``fit_rho``: rho is a knob
    too (else ``params``' is kept)."""
    goal = np.asarray(goal, dtype=np.float64)
    if goal.ndim != 1 or goal.size < 1 or not np.isfinite(goal).all() or (goal < 0).any() or (goal > 1).any():
        raise ValueError(f"kappa goals must be a non-empty list of TVs in [0, 1], got {goal.tolist()}")
    knobs = kappa_knobs(params.grid_width, fit_rho)
    n_grid = len(knobs) - 2 - fit_rho

    # unbounded coordinates (a bounded simplex collapses onto a bound): x[0] = logit of sqrt(prefix_noise),
    # the prefix-keyed share of the noise's std (kappa's far level moves with it about linearly; with the
    # variance share it jumps from 0 within the first 1%), x[1] = logit of sqrt(lag1_noise / (1 -
    # prefix_noise)) (the shares add to at most 1), the grid's weights as logs, rho as a logit
    def make(x: np.ndarray) -> LatentParams:
        f = round(float(_sigmoid(x[0]) ** 2), 4)
        g = np.floor((1.0 - f) * _sigmoid(x[1]) ** 2 * 1e4) / 1e4  # rounded down: f + g stays <= 1
        v = [f, g] + [round(float(np.exp(a)), 4) for a in x[2:2 + n_grid]]
        v += [round(_sigmoid(x[-1]), 4)] if fit_rho else []
        return replace(params, **{k: float(a) for k, a in zip(knobs, v, strict=True)})

    def loss(x: np.ndarray) -> float:
        k = world_kappa(make(x), goal.size, n_sequences, seq_len, seed).kappa
        return float(((k - goal) ** 2).sum())

    share = float(np.clip(np.sqrt(min(params.prefix_noise, 0.1)), 0.01, 0.99))  # prefix-keyed: kappa is flat
    lag1 = float(np.clip(np.sqrt(params.lag1_noise / max(1.0 - params.prefix_noise, 1e-9)), 0.1, 0.99))
    grid = [np.log(max(getattr(params, k), 0.05)) for k in knobs[2:2 + n_grid]]
    rho = [_logit(float(np.clip(params.rho, 0.05, 0.95)))] if fit_rho else []
    x0 = np.array([_logit(share), _logit(lag1)] + grid + rho)
    simplex = np.vstack([x0] + [x0 + np.eye(len(knobs))[i] for i in range(len(knobs))])
    best = minimize(loss, x0, method="Nelder-Mead",
                    options={"maxfev": max_evals, "xatol": 1e-2, "fatol": 1e-7, "initial_simplex": simplex})
    fitted = make(best.x)
    return fitted, world_kappa(fitted, goal.size, n_sequences, seq_len, seed)


def _sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


def _logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


@dataclass(frozen=True)
class WorldFit:
    """A fitted world and how well it matches.

    Attributes
    ----------
    params : the world's parameters.
    goals, figures : the model's figures and the fitted world's (:mod:`simulate.fit`'s names).
    fitted : the figures the fit matched (the others are reported only).
    kappa_goal, kappa : the model's kappa_1..kappa_M and the world's (None without a kappa goal).
    """

    params: LatentParams
    goals: dict[str, float]
    figures: dict[str, float]
    fitted: tuple[str, ...]
    kappa_goal: ContextSensitivity | None = None
    kappa: ContextSensitivity | None = None

    def rows(self) -> list[tuple[str, float, float, bool]]:
        """(figure, model's, world's, fitted) for every figure the model has, then kappa by lag."""
        out = [(name, self.goals[name], self.figures.get(name, float("nan")), name in self.fitted)
               for name in self.goals]
        if self.kappa_goal is not None and self.kappa is not None:
            pairs = zip(self.kappa_goal.lags, self.kappa_goal.kappa, self.kappa.kappa, strict=True)
            out += [(f"kappa_{m}", float(g), float(w), True) for m, g, w in pairs]
        return out


def fit_world_model(goals: dict[str, float], base: LatentParams, kappa_goal: ContextSensitivity | None = None,
                    *, grid_width: int = 0, rounds: int = 3, iters: int = 12, n_sequences: int = 32,
                    seq_len: int = 64, greedy: bool = False, kappa_evals: int = KAPPA_EVALS,
                    progress: Callable[[str], None] | None = None) -> WorldFit:
    """The whole fit (module docstring): ``base`` (at the model's V) gives every parameter not fitted;
    ``grid_width`` the world's token grid (0: none); without ``kappa_goal`` the figures only (the base's
    noise keys and grid are kept; with it, rho is kappa's and top1_lag1 is reported, not fitted)."""
    bad = isinstance(grid_width, bool) or not isinstance(grid_width, int)
    if bad or not 0 <= grid_width <= MAX_GRID_WIDTH:
        raise ValueError(f"grid width must be an integer in [0, {MAX_GRID_WIDTH}] (0: no grid), got "
                         f"{grid_width!r}")
    fit_args = {"rounds": rounds, "iters": iters, "n_sequences": n_sequences, "seq_len": seq_len,
                "greedy": greedy, "progress": progress}
    if kappa_goal is None:
        params, figures = fit_world(goals, base, **fit_args)
        return WorldFit(params, dict(goals), figures, fitted_figures(goals))
    zero = {"grid_above": 0.0, "grid_diagonal": 0.0} if grid_width == 0 else {}
    params = replace(base, grid_width=grid_width, **zero)
    params, _ = fit_world(goals, params, **fit_args)
    params, _ = fit_kappa(kappa_goal.kappa, params, max_evals=kappa_evals, fit_rho=True)
    params, figures = fit_world(goals, params, hold_rho=True, **fit_args)
    kappa = world_kappa(params, kappa_goal.kappa.size)
    return WorldFit(params, dict(goals), figures, fitted_figures(goals, hold_rho=True), kappa_goal, kappa)
