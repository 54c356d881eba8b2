"""Building blocks of the mini-model analyses: ambiguity figures, records, configurations, report."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mini.ambiguity import position_stats
from mini.calibration import params_literal
from mini.decoding import DecodeConfig
from mini.quality import QUALITY_CONFIGS, read_records, slug
from simulate.worlds import PRESETS, LatentParams


def test_position_stats_on_known_distributions():
    V = 20
    uniform = np.full((3, V), 1 / V)
    point = np.zeros((3, V))
    point[:, 4] = 1.0
    s = position_stats(uniform, {"same": uniform, "point": point})
    assert s["top1"] == pytest.approx(1 / V) and s["top10_mass"] == pytest.approx(0.5)
    assert s["entropy"] == pytest.approx(np.log(V))
    assert s["accept_same"] == pytest.approx(1.0) and s["accept_point"] == pytest.approx(1 / V)
    s = position_stats(point, {})
    assert s == {"top1": 1.0, "entropy": 0.0, "top10_mass": 1.0}
    with pytest.raises(ValueError, match="shape"):
        position_stats(uniform, {"short": point[:2]})


def test_records_drop_a_torn_last_line(tmp_path):
    path = tmp_path / "images.jsonl"
    path.write_text(json.dumps({"index": 0}) + "\n" + json.dumps({"index": 1}) + "\n" + '{"index": 2, "tok')
    assert [r["index"] for r in read_records(path)] == [0, 1]
    assert read_records(tmp_path / "missing.jsonl") == []


def test_configurations_are_named_and_validated():
    names = [c.name for c in QUALITY_CONFIGS]
    assert len(set(names)) == len(names) and len({slug(n) for n in names}) == len(names)
    assert QUALITY_CONFIGS[0].is_ar and all(not c.is_ar for c in QUALITY_CONFIGS[1:])
    with pytest.raises(ValueError, match="drafter"):
        DecodeConfig("x", tree="eagle2", drafter="oracle")
    with pytest.raises(ValueError):
        DecodeConfig("x", relax="additive:k=5,delta=2")


def test_params_literal_round_trips():
    text = params_literal(PRESETS["ambiguous"])
    assert eval(text, {"LatentParams": LatentParams}) == PRESETS["ambiguous"]
