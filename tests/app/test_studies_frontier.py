"""benchmarks/frontier.py's study (relaxspec.studies.frontier): what its report says about the run it made
(issue 26 item 16), without running it."""

from __future__ import annotations

import pytest

from relaxspec.simulate.worlds import PRESETS
from relaxspec.studies.frontier import WORLDS, table, world_vocab
from relaxspec.studies.study_options import QUICK_WORLD


@pytest.mark.parametrize("overrides", [QUICK_WORLD, {}], ids=["quick", "full"])
def test_the_world_table_names_the_vocabulary_it_ran(overrides) -> None:
    """The table's heading gives the V the worlds ran at: the --quick overrides' (2048), else the presets'."""
    V = overrides.get("vocab_size", PRESETS[WORLDS[0]].vocab_size)
    assert world_vocab(overrides) == V == (2048 if overrides else 16384)
    assert table([], [], 0, None, world_vocab(overrides))[0] == f"### Synthetic worlds (V = {V})"
