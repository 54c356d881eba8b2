"""Hypothesis settings profiles for the suite.

``ci`` (loaded when the environment sets ``CI``, as `.ci/run` does) is derandomized:
every run draws the same examples, so a test cannot fail at random; a failing example
found locally is pinned with ``@example``. ``dev`` (the default elsewhere) keeps
Hypothesis' random search. ``HYPOTHESIS_PROFILE`` picks one explicitly.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
