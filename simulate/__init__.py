"""Numba simulators of relaxed speculative decoding on draft trees.

Public API
----------
- :func:`verify_step`: the Numba twin of ``theory.sample_step``;
  :func:`step_expectation`: exact per-step expectations.
- Worlds (:mod:`simulate.worlds`): :class:`LatentWorld` (presets
  ``confident`` / ``ambiguous`` / ``mini``), :class:`StationaryWorld`, :class:`TraceWorld`.
- :func:`run` -> :class:`SimResult` (p only where the walk goes;
  ``exact_expectations=True`` adds theory's exact per-step expectations), for any
  tree policy of :mod:`core.trees`.
- :func:`measure_positional_acceptance`: Sequoia's acceptance vector measured in a world.
"""

from relaxspec.simulate.acceptance import measure_positional_acceptance
from relaxspec.simulate.engine import run
from relaxspec.simulate.results import SimResult
from relaxspec.simulate.verify import StepExpectation, step_expectation, verify_step
from relaxspec.simulate.worlds import (
    PRESETS,
    LatentParams,
    LatentWorld,
    StationaryWorld,
    TraceWorld,
    world_stats,
)

__all__ = [
    "PRESETS",
    "LatentParams",
    "LatentWorld",
    "SimResult",
    "StationaryWorld",
    "StepExpectation",
    "TraceWorld",
    "measure_positional_acceptance",
    "run",
    "step_expectation",
    "verify_step",
    "world_stats",
]
