"""pytest plugin (entry point ``pytest11: relaxspec``): ``pytest --relaxspec-profile=quick|thorough|ci``
loads that Hypothesis profile (:mod:`relaxspec.testing.profiles`) for the run.

Without the option the plugin changes nothing: a conftest's own profile stays active. With it,
the profile is loaded in ``pytest_configure``, after the initial conftests, so it wins over
theirs. The plugin imports only Hypothesis and the profiles (not the checks, nor theory), so it
costs nothing in projects that never use it; ``-p no:relaxspec`` disables it.
"""

from __future__ import annotations

import pytest

from relaxspec.testing.profiles import PROFILES, load_profile

OPTION = "--relaxspec-profile"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--relaxspec-profile``."""
    group = parser.getgroup("relaxspec", "relaxspec.testing: property checks of verification rules")
    group.addoption(OPTION, action="store", choices=sorted(PROFILES), default=None, dest="relaxspec_profile",
                    help="load the relaxspec-<name> Hypothesis settings profile "
                         "(quick: 25 examples; thorough: 500; ci: 100, derandomized)")


def pytest_configure(config: pytest.Config) -> None:
    """Load the chosen profile, if any."""
    name = config.getoption("relaxspec_profile", default=None)
    if name:
        load_profile(name)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say which relaxspec profile the run uses."""
    name = config.getoption("relaxspec_profile", default=None)
    return f"relaxspec: hypothesis profile {PROFILES[name]}" if name else None
