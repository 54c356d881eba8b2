"""Hypothesis settings profiles for the suite.

``ci`` (loaded when the environment sets ``CI``, as `.ci/run` does) is derandomized:
every run draws the same examples, so a test cannot fail at random; a failing example
found locally is pinned with ``@example``. ``dev`` (the default elsewhere) keeps
Hypothesis' random search. ``HYPOTHESIS_PROFILE`` picks one explicitly.

Hypothesis also draws constants found in the local source modules imported at the time, so a derandomized
test's examples would depend on which modules earlier tests happened to import: on the tests selected,
their order and, under pytest-xdist (``make test`` runs two workers), on which worker ran what. A
derandomized run therefore imports every local module before its first test (``local_modules``): a test
draws the same examples alone or in the whole suite, on one worker or two.
"""

import importlib
import os
import pkgutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

LAYERS = ("theory", "core", "simulate", "reference", "mini")

# A few test modules share another folder's helpers (``from test_reference_decode import ...``): every
# test folder is importable, so any test file also runs alone, not only when pytest has collected the file
# it imports from first.
sys.path[:0] = [str(d) for d in sorted(Path(__file__).parent.iterdir())
                 if d.is_dir() and d.name != "__pycache__"]


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread per test process. ``make test`` runs two pytest-xdist workers on a 2-core machine;
    torch's default of one intra-op thread per core would give each worker two threads that spin-wait
    for each other beside the other worker's: measured on the tiny decoders of the lossless tests, 10x
    the CPU time of one thread for the same tokens (the tests' models are too small to gain from it).
    Tests that run torch in their own worker processes set it there too (the CLIs do)."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def local_module_names() -> list[str]:
    """Every module of the package, each layer's included (``relaxspec.__main__`` runs the command line)."""
    import relaxspec

    names = [m.name for m in pkgutil.walk_packages(relaxspec.__path__, "relaxspec.")]
    for layer in LAYERS:
        package = importlib.import_module(f"relaxspec.{layer}")
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"relaxspec.{layer}.")]
    return sorted(set(names) - {"relaxspec.__main__"})


@pytest.fixture(scope="session", autouse=True)
def local_modules() -> list[str]:
    """In a derandomized run, every module of the package imported before the first test (module
    docstring). Hypothesis reads the modules in ``sys.modules``; the one test that loads a script of
    benchmarks/ does not register it there. The names imported; none in a random run."""
    if not settings.default.derandomize:
        return []
    names = local_module_names()
    for name in names:
        importlib.import_module(name)
    return names


@pytest.fixture(scope="session")
def simulator_kernels() -> None:
    """The simulator's entry kernels compiled into Numba's cache, for tests that read a ``relaxspec simulate``
    command's stderr line by line: on a cold cache (a fresh clone, CI) the command first prints its one-line
    compile notice (``relaxspec.simulate.kernel_cache``), which those tests do not expect."""
    from relaxspec.simulate.kernel_cache import cold_kernels, warm

    warm(parallel=False)
    assert not cold_kernels(), cold_kernels()
