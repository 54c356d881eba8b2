"""relaxspec: exact analysis, simulation and a reference decoder for relaxed speculative decoding.

The names a researcher needs, at ``import relaxspec`` (README: Python quickstart)::

    import relaxspec
    res = relaxspec.simulate("ambiguous", "eagle2:10,4,59", "r2+lantern++:k=50,lam=5", n_sequences=8)
    res.to_frame()

- ``simulate(world, tree, verification="r1", **settings)`` -> :class:`SimResult`: the subpackage
  ``relaxspec.simulate`` is callable (``relaxspec.simulate.inputs.simulate``); world, tree and verification
  are objects or spec strings: a preset's name or a trace folder; a tree spec (``"eagle2:10,4,59"``,
  ``"jacobi:15"``, ``"static:naive_extend_57"``, ``"sequoia:57,8"``: ``relaxspec.core.trees.spec``); a
  verification spec (``"r1"``, ``"r2+lantern++:k=1000,lam=5"``: :class:`Verification`).
- Worlds: :class:`LatentWorld` (``LatentWorld.preset("ambiguous")``), :class:`StationaryWorld`,
  :class:`TraceWorld`, :func:`world` (a world from its name or folder).
- Trees: :func:`tree` (a policy from its spec, built in a world under a verification when it needs them).
- Verification: :class:`Verification` (``Verification.parse("r1+lantern:k=1000,delta=0.1")``).
- Exact quantities (theory, float64): :func:`node_outcome` (one node's acceptance and TV),
  :func:`expected_tokens_per_step` and :func:`step_expectation` (a tree's step), :func:`sample_step` (one
  step drawn), :class:`Tree`.
- Results: :func:`load_results` (a sweep's CSV or Parquet file as a typed DataFrame); plots:
  :func:`render` (a results DataFrame or file -> figures; the caller's matplotlib backend is kept).

Each name loads its layer on first use (module ``__getattr__``): ``import relaxspec`` itself imports no
layer, no Numba and no torch (``relaxspec --help`` stays fast; ``tests/package/test_layers.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # exact node and step quantities (theory)
    "Tree": "relaxspec.theory.tree",
    "expected_tokens_per_step": "relaxspec.theory.tree",
    "node_outcome": "relaxspec.theory.verify",
    "sample_step": "relaxspec.theory.tree",
    "step_expectation": "relaxspec.theory.tree",
    "Verification": "relaxspec.theory.verification",
    # worlds and the simulator
    "LatentWorld": "relaxspec.simulate.worlds",
    "SimResult": "relaxspec.simulate.results",
    "StationaryWorld": "relaxspec.simulate.worlds",
    "TraceWorld": "relaxspec.simulate.worlds",
    "world": "relaxspec.simulate.inputs:as_world",
    # trees
    "tree": "relaxspec.simulate.inputs:as_tree",
    # results and plots
    "load_results": "relaxspec.results:load",
    "render": "relaxspec.figures:render",
}
"""Public name -> ``module`` (the same name there) or ``module:name``."""

__all__ = [  # the names of _EXPORTS and simulate (tests/app/test_api.py keeps them in step)
    "LatentWorld",
    "SimResult",
    "StationaryWorld",
    "TraceWorld",
    "Tree",
    "Verification",
    "__version__",
    "expected_tokens_per_step",
    "load_results",
    "node_outcome",
    "render",
    "sample_step",
    "simulate",
    "step_expectation",
    "tree",
    "world",
]

if TYPE_CHECKING:  # what a type checker sees; at run time each is loaded by __getattr__
    from relaxspec.figures import render
    from relaxspec.results import load as load_results
    from relaxspec.simulate import SimulateModule
    from relaxspec.simulate.inputs import as_tree as tree
    from relaxspec.simulate.inputs import as_world as world
    from relaxspec.simulate.results import SimResult
    from relaxspec.simulate.worlds import LatentWorld, StationaryWorld, TraceWorld
    from relaxspec.theory.tree import Tree, expected_tokens_per_step, sample_step, step_expectation
    from relaxspec.theory.verification import Verification
    from relaxspec.theory.verify import node_outcome

    simulate: SimulateModule


def __getattr__(name: str) -> Any:
    """Load a public name's layer on first use (:data:`_EXPORTS`; ``simulate``: the callable subpackage)."""
    if name == "simulate":
        return importlib.import_module("relaxspec.simulate")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'relaxspec' has no attribute {name!r}")
    module, _, attr = _EXPORTS[name].partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
