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
- The package itself is callable: ``relaxspec.simulate(world, tree, verification, **settings)`` is
  :func:`simulate.inputs.simulate`, which takes each of world, tree and verification as an object or a
  spec string (``relaxspec.simulate("ambiguous", "eagle2:10,4,59", "r1", n_sequences=8)``).

Why a callable module: ``relaxspec.simulate`` must be this subpackage (``import relaxspec.simulate.worlds``
makes it the package's attribute, whatever ``relaxspec/__init__`` says) and also the one verb a researcher
calls. Its module object's class is :class:`SimulateModule`, a ``ModuleType`` whose ``__call__`` runs
:func:`simulate.inputs.simulate`; everything else about the module is unchanged.
"""

import sys
from types import ModuleType
from typing import Any

from relaxspec.simulate.acceptance import measure_positional_acceptance
from relaxspec.simulate.engine import run
from relaxspec.simulate.inputs import TreeLike, WorldLike, as_tree, as_world, simulate
from relaxspec.simulate.kernel_cache import drop_stale_caches
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
from relaxspec.theory.verification import Verification


class SimulateModule(ModuleType):
    """The class of the ``relaxspec.simulate`` module object: a module that can be called."""

    def __call__(self, world: WorldLike, tree: TreeLike, verification: Verification | str = "r1",
                 **settings: Any) -> SimResult:
        """:func:`simulate.inputs.simulate` (world, tree and verification as objects or spec strings)."""
        return simulate(world, tree, verification, **settings)


sys.modules[__name__].__class__ = SimulateModule
drop_stale_caches()  # before any kernel loads from Numba's cache: one compiled from other sources is stale

__all__ = [
    "PRESETS",
    "LatentParams",
    "LatentWorld",
    "SimResult",
    "StationaryWorld",
    "SimulateModule",
    "StepExpectation",
    "TraceWorld",
    "as_tree",
    "as_world",
    "measure_positional_acceptance",
    "run",
    "simulate",
    "step_expectation",
    "verify_step",
    "world_stats",
]
