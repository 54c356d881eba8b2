"""Whether the simulator's Numba kernels are compiled in Numba's on-disk cache (issue 26 item 17).

The kernels are compiled with ``cache=True``: the first run on a machine (or with an empty
``NUMBA_CACHE_DIR``, or after a kernel's source changed) compiles them, for minutes with no output, while
a progress bar's first estimate reads hours; every later run loads them in seconds. :func:`compile_notice`
says so in one line before such a run (``relaxspec simulate`` and ``relaxspec demo`` print it).
:func:`warm` compiles them ahead: ``relaxspec warm-up`` (``make test`` runs it before the tests, so that
its two pytest workers, and the processes their tests start, do not each compile them at once).

Numba checks a cached kernel against its own source file only. A kernel that reads a constant of another
module (``world_kernels.N_FPARAMS``, the rule codes of ``theory.rules``) keeps the value it was compiled
with when only that other module changes: after a ``git pull`` it would load and return numbers computed
with the old constant, silently. :func:`drop_stale_caches` (run when ``relaxspec.simulate`` is imported,
before any kernel loads) therefore keys the whole cache by a digest of every source file of the layers
kernels read (:data:`SOURCE_LAYERS`) and empties it when that digest changes.

The command lives in the CLI (``relaxspec.simulate_cli``), not here: this module is imported by the
``relaxspec.simulate`` package, and ``python -m`` on a module its package has already imported runs a
second copy of it (runpy's ``RuntimeWarning``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ENTRY_KERNELS: tuple[tuple[str, str], ...] = (
    ("relaxspec.simulate.engine", "simulate_kernel"),
    ("relaxspec.simulate.jacobi_kernels", "jacobi_kernel"),
    ("relaxspec.simulate.coupled_kernels", "coupled_kernel"),
    ("relaxspec.simulate.vvs_kernels", "vvs_kernel"),
)
"""(module, name) of the kernels a simulation calls from Python; compiling one compiles every kernel it
calls, each cached on its own."""
MODULE = "relaxspec.simulate.kernel_cache"
"""This module's import name (what each compiling process of :func:`warm` imports)."""
SOURCE_LAYERS = ("theory", "core", "simulate")
"""The layers whose modules kernels import (code and constants): any change to one of their files
invalidates every cached kernel."""
SOURCES_MARKER = "relaxspec-kernel-sources.sha256"
"""The file in Numba's cache folder holding the digest of the sources its kernels were compiled from."""
COMPILE_MINUTES = (1, 4)
"""A cold compilation's wall time in minutes: 1.5-2 on an idle 2-core machine (BENCHMARKS.md, ``relaxspec
demo`` from a cold cache), 4 on a loaded one (issue 26)."""


def is_cached(dispatcher: object) -> bool | None:
    """Whether Numba's cache holds a current compilation of ``dispatcher`` (a ``@njit(cache=True)``
    function); None when that cannot be told (no cache, ``NUMBA_DISABLE_JIT``, other Numba internals)."""
    try:
        # Numba's own test when it loads a function: an index file of this Numba version for this source
        # file's stamp (an edited source reads as empty).
        return bool(dispatcher._cache._cache_file._load_index())  # type: ignore[attr-defined]
    except Exception:  # internals of another Numba version: say nothing rather than guess
        return None


def sources_digest() -> str:
    """SHA-256 over the path and bytes of every ``.py`` file of :data:`SOURCE_LAYERS`, in path order."""
    digest = hashlib.sha256()
    for layer in SOURCE_LAYERS:
        spec = importlib.util.find_spec(f"relaxspec.{layer}")
        for folder in map(Path, spec.submodule_search_locations or ()) if spec else ():
            for f in sorted(folder.rglob("*.py")):
                digest.update(f"{layer}/{f.relative_to(folder).as_posix()}\0".encode())
                digest.update(f.read_bytes())
    return digest.hexdigest()


def drop_stale_caches(dispatcher: object | None = None) -> bool:
    """Empty Numba's cache folder of the simulator's kernels (``dispatcher``'s: default the engine's entry
    kernel; all kernels live in one folder) when the sources it was compiled from differ from the current
    ones (module docstring), and record the current digest there. True when cached kernels were dropped.
    Nothing happens where the cache cannot be located or written (Numba then compiles in memory)."""
    if dispatcher is None:
        from relaxspec.simulate.engine import simulate_kernel as dispatcher
    try:
        folder = Path(dispatcher._cache._cache_path)  # type: ignore[attr-defined]
    except Exception:  # NUMBA_DISABLE_JIT, or another Numba's internals: nothing to keep consistent
        return False
    marker, digest = folder / SOURCES_MARKER, sources_digest()
    try:
        if marker.is_file() and marker.read_text().strip() == digest:
            return False
        stale = [f for pattern in ("*.nbi", "*.nbc") for f in folder.glob(pattern)]
        for f in stale:
            f.unlink(missing_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{SOURCES_MARKER}.{os.getpid()}"
        tmp.write_text(digest + "\n")
        tmp.replace(marker)  # atomic: a process starting beside this one reads the old or the new digest
    except OSError:  # a read-only cache folder: Numba falls back by itself
        return False
    return bool(stale)


def cold_kernels(kernels: Iterable[tuple[str, str]] = ENTRY_KERNELS) -> list[str]:
    """``module.name`` of each of ``kernels`` that Numba's cache lacks (it will be compiled on first use)."""
    cold = []
    for module, name in kernels:
        if is_cached(getattr(importlib.import_module(module), name)) is False:
            cold.append(f"{module}.{name}")
    return cold


def compile_notice() -> str | None:
    """One line announcing the compilation of a cold cache, or None when the kernels are cached."""
    if not cold_kernels():
        return None
    lo, hi = COMPILE_MINUTES
    return (f"compiling the simulator's Numba kernels into Numba's cache, once: about {lo}-{hi} minutes "
            "before the first configuration finishes (more on a busy machine; the progress bar's first "
            "estimate means nothing until then); later runs load them in seconds")


def warm_one(kernel: str) -> None:
    """Compile the entry kernel ``kernel`` (``module.name`` of :data:`ENTRY_KERNELS`) into Numba's cache
    with the smallest run that calls it (a compiled kernel loads in well under a second)."""
    from relaxspec.core.trees import StaticTree
    from relaxspec.core.trees.jacobi import JacobiWindow
    from relaxspec.core.trees.spec import parse_tree
    from relaxspec.simulate.engine import run
    from relaxspec.simulate.worlds import LatentWorld

    policies = {"relaxspec.simulate.engine.simulate_kernel": (StaticTree.chain(2), "r1"),
                "relaxspec.simulate.jacobi_kernels.jacobi_kernel": (JacobiWindow(2), "r2"),
                "relaxspec.simulate.coupled_kernels.coupled_kernel": (parse_tree("pac:3,width=2"), "r2"),
                "relaxspec.simulate.vvs_kernels.vvs_kernel": (parse_tree("vvs:2,2,4,uniform=2"), "r1")}
    if kernel not in policies:
        raise ValueError(f"unknown entry kernel {kernel!r}; expected one of {sorted(policies)}")
    policy, rule = policies[kernel]
    world = LatentWorld.preset("ambiguous", vocab_size=512, n_clusters=32)
    run(world, policy, rule, n_sequences=1, seq_len=2)


def warm(kernels: Iterable[tuple[str, str]] = ENTRY_KERNELS, parallel: bool = True) -> list[str]:
    """Compile each of ``kernels`` that the cache lacks, each in a process of its own at the same time
    (``parallel``, one per core on a 2-core machine) or one after another in this one; the ones compiled.
    Numba compiles a kernel on one core, and the two entry kernels together take most of a cold start."""
    cold = cold_kernels(kernels)
    if parallel and len(cold) > 1:
        procs = [subprocess.Popen([sys.executable, "-c", f"from {MODULE} import warm_one; warm_one({k!r})"])
                 for k in cold]
        failed = [k for k, p in zip(cold, procs, strict=True) if p.wait() != 0]
        if failed:
            raise RuntimeError(f"compiling {', '.join(failed)} failed (its error is printed above)")
    else:
        for kernel in cold:
            warm_one(kernel)
    return cold
