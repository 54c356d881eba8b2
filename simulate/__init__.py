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

from simulate.policies import BuiltTree, DDDTree, Eagle2Tree, StaticTree, TreePolicy
from simulate.verify import StepExpectation, step_expectation, verify_step

__all__ = [
    "BuiltTree",
    "DDDTree",
    "Eagle2Tree",
    "StaticTree",
    "StepExpectation",
    "TreePolicy",
    "step_expectation",
    "verify_step",
]
