"""The suite's own set-up (tests/conftest.py): a derandomized run imports every local module before its
first test, so Hypothesis' examples do not depend on the tests selected, their order or the worker."""

from __future__ import annotations

import sys

from conftest import local_module_names
from hypothesis import settings


def test_a_derandomized_run_imports_every_local_module_first(local_modules: list[str]) -> None:
    names = local_module_names()
    assert {"relaxspec.nbenv", "relaxspec.theory.boost", "relaxspec.simulate.engine",
            "relaxspec.reference.model", "relaxspec.mini.train_mini"} <= set(names)
    if settings.default.derandomize:
        assert local_modules == names and not [n for n in names if n not in sys.modules]
    else:
        assert local_modules == []
