"""What a simulation decodes, from the values a researcher writes: a world, a tree and a verification,
each an object or its spec string; :func:`simulate` runs :func:`simulate.engine.run` on them (it is what
calling the package, ``relaxspec.simulate(...)``, does).

- :func:`as_world`: a world, a preset's name (``"ambiguous"``, ``"confident"``, ``"mini"``:
  :data:`simulate.worlds.PRESETS`), a world file's path (``"fitted.toml"``: :mod:`simulate.world_file`)
  or a captured trace's folder (a :class:`simulate.worlds.TraceWorld`).
- :func:`as_tree`: a tree policy, a :class:`core.trees.jacobi.JacobiWindow`, ``None`` or a tree spec
  (``"eagle2:10,4,59"``, ``"jacobi:15"``, ``"static:naive_extend_57"``, ...; the grammar of
  :mod:`core.trees.spec`). What a spec cannot say comes from the world and the verification, as in a
  sweep: a relaxation-aware selection reads the verification's relaxation and the world's neighbour table;
  a Sequoia-type tree is built from the positional acceptance vector measured in the world
  (:func:`simulate.acceptance.measure_positional_acceptance`, with
  :data:`simulate.acceptance.SEQUOIA_MEASUREMENT`);
  ``costaware`` reads the packaged cost table (:meth:`core.cost.CostModel.from_table`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from relaxspec.core.cost import CostModel
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.policies import TreePolicy
from relaxspec.core.trees.selection import ChildSelector
from relaxspec.core.trees.spec import parse_tree
from relaxspec.simulate.acceptance import SEQUOIA_MEASUREMENT, measure_positional_acceptance
from relaxspec.simulate.engine import run
from relaxspec.simulate.kernel_cache import compile_notice
from relaxspec.simulate.results import SimResult
from relaxspec.simulate.world_file import is_world_file
from relaxspec.simulate.worlds import PRESETS, LatentWorld, TraceWorld, World
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import Verification

log = logging.getLogger(__name__)

TreeLike = TreePolicy | JacobiWindow | str | None
"""What :func:`as_tree` (and so ``simulate.run``) takes as a tree."""
WorldLike = World | str | Path
"""What :func:`as_world` (and so ``simulate.run``) takes as a world."""


def as_world(world: WorldLike) -> World:
    """The world ``world`` names: itself, the preset of that name, the world file at that path (``*.toml``)
    or the trace captured in that folder.

    Raises
    ------
    ValueError
        For a string or path that is neither a preset nor a folder.
    """
    if isinstance(world, World):
        return world
    if (isinstance(world, str) and world in PRESETS) or is_world_file(world):
        return LatentWorld.preset(world)
    if isinstance(world, (str, Path)) and Path(world).is_dir():
        return TraceWorld(world)
    if isinstance(world, (str, Path)):
        raise ValueError(f"unknown world {str(world)!r}: a preset ({', '.join(sorted(PRESETS))}) or a "
                         "captured trace's folder")
    raise ValueError(f"a world is a simulate world, a preset's name or a trace folder, got "
                     f"{type(world).__name__}")


def as_tree(tree: TreeLike, world: World | None = None, verification: Verification | str = "r1", *,
            temperature: float = 1.0, seed: int = 0, threads: int | None = None,
            sequoia: dict[str, int] | None = None,
            cost: CostModel | Callable[[], CostModel] | None = None) -> TreePolicy | JacobiWindow | None:
    """The tree ``tree`` names (a policy, a window or ``None`` is returned as it is).

    Parameters
    ----------
    tree : a tree policy, a Jacobi window, ``None`` (a trace world's recorded trees) or a tree spec.
    world : the world the tree decodes (its neighbour table for relaxation-aware selections; where a
        Sequoia-type tree's acceptance vector is measured); only specs that need it ask for it.
    verification : the verification the tree is verified with (a spec string parses); a relaxation-aware
        selection reads its relaxation, a Sequoia-type tree's vector is measured under it.
    temperature, seed, threads : the measurement's (its seed is ``seed + 1``, as in a sweep).
    sequoia : the measurement's ``width``, ``n_sequences`` and ``seq_len`` (default
        :data:`simulate.acceptance.SEQUOIA_MEASUREMENT`).
    cost : the cost model of a ``costaware`` tree (default: the packaged CPU table, GPT-B).
    """
    if not isinstance(tree, str):
        return tree
    v = Verification.parse(verification)
    settings = {**SEQUOIA_MEASUREMENT, **(sequoia or {})}

    def acceptance(selector: ChildSelector, relax: Relax) -> list[float]:
        if world is None:
            raise ValueError(f"tree {tree!r} is built from an acceptance vector measured in a world: give "
                             "the world")
        return measure_positional_acceptance(
            world, v.measured_with(relax), width=settings["width"], n_sequences=settings["n_sequences"],
            seq_len=settings["seq_len"], temperature=temperature,
            seed=seed + 1, threads=threads, selector=selector).tolist()

    def neighbours(k: int) -> np.ndarray:
        table = None if world is None else world.neighbours(k)
        if table is None:
            raise ValueError(f"tree {tree!r} reads a world's neighbour table: give a world that has one")
        return table

    return parse_tree(tree, relax=v.relax, neighbours=neighbours, acceptance=acceptance,
                      cost=CostModel.from_table if cost is None else cost)


_announced = False
"""Whether this process has checked Numba's cache for :func:`simulate` (once is enough: the first run
compiles whatever was cold)."""


def simulate(world: WorldLike, tree: TreeLike, verification: Verification | str = "r1", **settings: Any
             ) -> SimResult:
    """Decode in ``world`` with ``tree`` verified by ``verification``; each may be a spec string.

    ``relaxspec.simulate("ambiguous", "eagle2:10,4,59", "r2+lantern++:k=50,lam=5", n_sequences=8)``.
    ``settings`` are :func:`simulate.engine.run`'s (``n_sequences``, ``seq_len``, ``temperature``,
    ``seed``, ``threads``, ``backend``, ``exact_expectations``); the tree is built as :func:`as_tree` says,
    under the same temperature, seed and threads. The first call in a process whose Numba cache lacks the
    kernels says so in one line (logger ``relaxspec.simulate``, a warning: shown without any set-up)
    before compiling them for minutes.
    """
    global _announced
    w = as_world(world)
    v = Verification.parse(verification)
    if not _announced:  # before a Sequoia-type tree's measurement compiles anything
        _announced = True
        notice = compile_notice()
        if notice:
            log.warning("relaxspec: note: %s", notice)
    policy = None
    if not isinstance(w, TraceWorld):  # a trace brings its own recorded trees
        policy = as_tree(tree, w, v, temperature=settings.get("temperature", 1.0),
                         seed=settings.get("seed", 0), threads=settings.get("threads"))
    return run(w, policy, v, **settings)
