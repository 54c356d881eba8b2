"""Numba simulators of relaxed speculative decoding on draft trees.

Public API
----------
- :func:`verify_step`: the Numba twin of ``theory.sample_step``;
  :func:`step_expectation`: exact per-step expectations.
- Tree policies (:mod:`simulate.policies`): :class:`StaticTree`
  (``mc_sim_7b_63``, ``naive_extend_57``, ``chain(n)``), :class:`Eagle2Tree`,
  :class:`DDDTree`, :class:`SequoiaTree`; each has a NumPy ``build(q_root,
  draft, u)`` returning a :class:`BuiltTree`.
- Worlds (:mod:`simulate.worlds`): :class:`LatentWorld` (presets
  ``confident`` / ``ambiguous``), :class:`StationaryWorld`, :class:`TraceWorld`.
- :func:`run` -> :class:`SimResult`.
"""

from simulate.engine import SimResult, run
from simulate.policies import BuiltTree, DDDTree, Eagle2Tree, StaticTree, TreePolicy
from simulate.sequoia import SequoiaTree, measure_positional_acceptance
from simulate.verify import StepExpectation, step_expectation, verify_step
from simulate.worlds import PRESETS, LatentParams, LatentWorld, StationaryWorld, TraceWorld, world_stats

__all__ = [
    "PRESETS",
    "BuiltTree",
    "DDDTree",
    "Eagle2Tree",
    "LatentParams",
    "LatentWorld",
    "SequoiaTree",
    "SimResult",
    "StaticTree",
    "StationaryWorld",
    "StepExpectation",
    "TraceWorld",
    "TreePolicy",
    "measure_positional_acceptance",
    "run",
    "step_expectation",
    "verify_step",
    "world_stats",
]
