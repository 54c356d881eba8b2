"""The worlds fitted to the shipped models: which preset a decoding reads, and the model's figures.

The fit itself is :mod:`simulate.fit` (figures, one bisection per knob; its docstring defines every
figure) and :mod:`simulate.fit_kappa` (context sensitivity); ``relaxspec fit`` runs it on any captured
traces. This module is its caller for the shipped Fashion-MNIST models: :func:`model_figures` measures
the figures teacher-forced along a model's own samples (``relaxspec mini ambiguity --fit`` hands them to
:func:`fit_world`), and :data:`FITTED_PRESETS` names the presets that fit gave for each model and
drafter. The ``mini`` preset came from an earlier fit of top-1 and 1 - TV only (``fit_world`` in this
module at commit c716263).
"""

from __future__ import annotations

import numpy as np

from relaxspec.simulate.fit import (  # re-exported: the fit moved to simulate.fit
    DEEP_FIGURE,
    FIT_FIGURES,
    RANKED_DRAFTS,
    REPORTED_FIGURES,
    fit_world,
    node_figures,
    params_literal,
    ranked_mass,
    summarise,
    world_figures,
)
from relaxspec.simulate.worlds import LatentParams, LatentWorld, world_stats
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


def world_key(drafter: str, rule: Rule | str) -> str:
    """Which fitted world a decoding reads: the drafter's, along greedy paths for rule r3 (greedy
    decoding visits other states than sampling does)."""
    return f"{drafter}-greedy" if as_rule(rule).is_greedy else drafter


def fitted_preset(target_sha256: str, key: str) -> str | None:
    """The preset fitted to the target with these weights (its card's ``weights_sha256``) for
    :func:`world_key` ``key``; None when no world is fitted to it."""
    return FITTED_PRESETS.get(target_sha256, {}).get(key)


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


def stats_of(params: LatentParams, n_sequences: int = 8, seq_len: int = 64) -> dict[str, float]:
    """world-stats figures of a world with ``params`` (same keys as the model's)."""
    s = world_stats(LatentWorld(params), n_sequences=n_sequences, seq_len=seq_len)
    return {k: float(getattr(s, v)) for k, v in STAT_NAMES.items()}


__all__ = ["DEEP_FIGURE", "FITTED_PRESETS", "FIT_FIGURES", "RANKED_DRAFTS", "REPORTED_FIGURES", "STAT_NAMES",
           "fit_world", "fitted_preset", "model_figures", "node_figures", "params_literal", "ranked_mass",
           "stats_of", "summarise", "world_figures", "world_key"]
