"""Hypothesis settings profiles for the suite.

``ci`` (loaded when the environment sets ``CI``, as `.ci/run` does) is derandomized:
every run draws the same examples, so a test cannot fail at random; a failing example
found locally is pinned with ``@example``. ``dev`` (the default elsewhere) keeps
Hypothesis' random search. ``HYPOTHESIS_PROFILE`` picks one explicitly.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def simulator_kernels() -> None:
    """The simulator's entry kernels compiled into Numba's cache, for tests that read a ``relaxspec simulate``
    command's stderr line by line: on a cold cache (a fresh clone, CI) the command first prints its one-line
    compile notice (``relaxspec.simulate.kernel_cache``), which those tests do not expect."""
    from relaxspec.simulate.kernel_cache import cold_kernels

    if not cold_kernels():
        return
    from relaxspec.core.trees import StaticTree
    from relaxspec.core.trees.jacobi import JacobiWindow
    from relaxspec.simulate.engine import run
    from relaxspec.simulate.worlds import LatentWorld

    world = LatentWorld.preset("ambiguous", vocab_size=512, n_clusters=32)
    run(world, StaticTree.chain(2), "r1", n_sequences=1, seq_len=2)
    run(world, JacobiWindow(2), "r2", n_sequences=1, seq_len=2)
    assert not cold_kernels(), cold_kernels()
