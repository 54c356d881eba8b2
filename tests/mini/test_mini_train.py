"""``relaxspec train-mini --quick``: every component trains, cards are written, runs resume."""

from __future__ import annotations

import pytest

from relaxspec.cli import main
from relaxspec.mini import fashion_mnist as fm
from relaxspec.mini.report import training_table
from relaxspec.mini.train_mini import COMPONENTS, train_all
from relaxspec.mini.weights import WEIGHTS_DIR, component_done, read_card


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    if not fm.dataset_available():
        pytest.skip("training needs the full Fashion-MNIST data set (apt-get install dataset-fashion-mnist)")
    out = tmp_path_factory.mktemp("quick")
    cards = train_all(out, quick=True, progress=False, command="relaxspec train-mini --quick")
    return out, cards


def test_quick_training_writes_every_component(quick_run):
    out, cards = quick_run
    assert list(cards) == [name for name, _ in COMPONENTS]
    for name in cards:
        assert component_done(out, name)
        card = read_card(out, name)
        assert card["training_command"] == "relaxspec train-mini --quick"
        assert card["training_seconds"] >= 0 and card["metrics"]


def test_quick_training_resumes_without_retraining(quick_run, capsys):
    out, _ = quick_run
    assert train_all(out, quick=True, progress=False) == {}
    assert "skipped" in capsys.readouterr().out + capsys.readouterr().err


def test_quick_never_writes_into_shipped_weights():
    with pytest.raises(ValueError, match="never writes"):
        train_all(WEIGHTS_DIR, quick=True, progress=False)


def test_unknown_component_is_named(tmp_path):
    assert main(["train-mini", "--quick", "--out", str(tmp_path), "--only", "evaluator,vae"]) == 2


def test_report_renders_the_training_table(quick_run):
    out, _ = quick_run
    text = "\n".join(training_table(out))
    assert all(f"| {name} |" in text for name, _ in COMPONENTS)
    assert "| total |" in text
