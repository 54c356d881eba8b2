"""Hypothesis settings profiles for the checks, registered when :mod:`relaxspec.testing` is imported.

==========================  ============  ===============================================
profile                     max_examples  for
==========================  ============  ===============================================
``relaxspec-quick``         25            a test run while writing a rule
``relaxspec-thorough``      500           a search before claiming a guarantee
``relaxspec-ci``            100           CI: derandomized (the same examples every run),
                                          no example database, failures print a blob
==========================  ============  ===============================================

All three have no deadline (a Numba rule compiles on its first call). Load one with
``load_profile("quick")``, ``hypothesis.settings.load_profile("relaxspec-ci")`` or
``pytest --relaxspec-profile=ci`` (:mod:`relaxspec.testing.plugin`). Registering never loads a
profile: until one is loaded the active profile is whatever the user's conftest chose.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

__all__ = ["PROFILES", "load_profile", "register_profiles"]

PROFILES = {"quick": "relaxspec-quick", "thorough": "relaxspec-thorough", "ci": "relaxspec-ci"}
"""Short name (the pytest option's value) -> Hypothesis profile name."""


def register_profiles() -> None:
    """Register the three profiles with Hypothesis (idempotent)."""
    slow = [HealthCheck.too_slow]
    settings.register_profile(PROFILES["quick"], max_examples=25, deadline=None, suppress_health_check=slow)
    settings.register_profile(PROFILES["thorough"], max_examples=500, deadline=None,
                              suppress_health_check=slow)
    settings.register_profile(PROFILES["ci"], max_examples=100, deadline=None, derandomize=True,
                              database=None, print_blob=True, suppress_health_check=slow)


def load_profile(name: str) -> None:
    """Load a profile by short name (``quick``, ``thorough``, ``ci``) or full name (``relaxspec-ci``)."""
    full = PROFILES.get(name, name)
    if full not in PROFILES.values():
        raise ValueError(f"unknown relaxspec profile {name!r}; expected one of {sorted(PROFILES)}")
    settings.load_profile(full)


register_profiles()
