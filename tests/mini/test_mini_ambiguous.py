"""``relaxspec train-mini --model ambiguous``: quick training, checkpoints, exact resume, clear errors."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch

from relaxspec.cli import main
from relaxspec.mini import fashion_mnist as fm
from relaxspec.mini.ambiguity import model_ambiguity
from relaxspec.mini.ambiguous_model import AMBIGUOUS_DIR, COMPONENTS
from relaxspec.mini.checkpointing import (
    LoopCheckpoint,
    TrainingInterrupted,
    clear_stop,
    stop_requested,
    termination_handler,
)
from relaxspec.mini.model_comparison import render
from relaxspec.mini.object_positions import OBJECT_THRESHOLD, object_cells, split_ambiguity
from relaxspec.mini.report import training_table
from relaxspec.mini.run_ledger import LEDGER_NAME
from relaxspec.mini.shipped import load_mini
from relaxspec.mini.tokenizer import encode_images
from relaxspec.mini.train_mini import train_all
from relaxspec.mini.weights import WEIGHTS_DIR, component_done, read_card

needs_data = pytest.mark.skipif(not fm.dataset_available(),
                                reason="training needs the full Fashion-MNIST data set "
                                       "(apt-get install dataset-fashion-mnist)")


def _quick(out, **kw):
    return train_all(out, model="ambiguous", quick=True, progress=False,
                     command="relaxspec train-mini --model ambiguous --quick", **kw)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    if not fm.dataset_available():
        pytest.skip("training needs the full Fashion-MNIST data set")
    out = tmp_path_factory.mktemp("ambiguous")
    return out, _quick(out)


@needs_data
def test_quick_run_writes_cards_like_the_first_model(uninterrupted):
    out, cards = uninterrupted
    assert list(cards) == list(COMPONENTS)
    for name in COMPONENTS:
        assert component_done(out, name)
        card = read_card(out, name)
        assert card["training_command"] == "relaxspec train-mini --model ambiguous --quick"
        assert "shared" in card["notes"] and card["metrics"]
        assert card["storage_dtype"] == ("float32" if name == "tokenizer" else "float16")
    tok = read_card(out, "tokenizer")
    assert tok["config"]["codebook_embed_dim"] == 8 and tok["config"]["codebook_l2_norm"]
    assert 0 < tok["metrics"]["fraction_used"] <= 1 and tok["metrics"]["train_usage"]["perplexity"] > 1
    assert not list((out / "checkpoints").glob("*.pt"))  # finished loops leave no checkpoint behind
    ledger = json.loads((out / LEDGER_NAME).read_text())
    assert [s["status"] for s in ledger["segments"]] == ["finished"]
    assert ledger["segments"][0]["components"] == list(COMPONENTS)


@needs_data
def test_quick_model_loads_with_the_shared_evaluator(uninterrupted):
    out, _ = uninterrupted
    mini = load_mini(out)
    assert mini.vocab_size == read_card(out, "tokenizer")["config"]["codebook_size"]
    assert mini.target.cfg.vocab_size == mini.vocab_size == mini.draft_gpt.cfg.vocab_size
    assert mini.cards["evaluator"]["weights_sha256"] == read_card(WEIGHTS_DIR, "evaluator")["weights_sha256"]


@needs_data
def test_interrupted_and_resumed_run_gives_identical_weights(uninterrupted, tmp_path):
    reference, _ = uninterrupted
    out = tmp_path / "resumed"
    with pytest.raises(TrainingInterrupted):
        _quick(out, stop_at={"tokenizer": 12})
    assert (out / "checkpoints" / "tokenizer.pt").is_file() and not component_done(out, "tokenizer")
    with pytest.raises(TrainingInterrupted):
        _quick(out, stop_at={"target": 9, "draft_gpt": 3})
    assert component_done(out, "tokenizer") and (out / "checkpoints" / "target.pt").is_file()
    with pytest.raises(TrainingInterrupted):
        _quick(out, stop_at={"draft_gpt": 3})  # target resumed at 10 and finished; EAGLE head trained
    _quick(out, resume=True)
    for name in COMPONENTS:
        assert read_card(out, name)["weights_sha256"] == read_card(reference, name)["weights_sha256"], name
    ledger = json.loads((out / LEDGER_NAME).read_text())
    assert [s["status"] for s in ledger["segments"]] == ["interrupted"] * 3 + ["finished"]
    total = sum(s["wall_seconds"] for s in ledger["segments"])
    assert ledger["wall_seconds"] == pytest.approx(total, abs=0.2)


def test_loop_checkpoint_restores_exactly_and_refuses_other_settings(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(5)
    opt.zero_grad()
    model(torch.randn(2, 4, generator=gen)).sum().backward()
    opt.step()
    state = {"model": model, "opt": opt, "gen": gen}
    ckpt = LoopCheckpoint(tmp_path / "loop.pt", {"budget": 1}, stop_at=1)
    with pytest.raises(TrainingInterrupted, match="after step 1 of 5"):
        ckpt.after_step(1, state, 5)
    expected_draw = torch.rand(3, generator=gen)
    fresh = torch.nn.Linear(4, 3)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    fresh_gen = torch.Generator()
    assert LoopCheckpoint(tmp_path / "loop.pt", {"budget": 1}).restore(
        {"model": fresh, "opt": fresh_opt, "gen": fresh_gen}) == 1
    assert torch.equal(fresh.weight, model.weight)
    assert torch.equal(fresh_opt.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert torch.equal(torch.rand(3, generator=fresh_gen), expected_draw)
    with pytest.raises(ValueError, match="other settings"):
        LoopCheckpoint(tmp_path / "loop.pt", {"budget": 2}).restore({"model": fresh})
    (tmp_path / "torn.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="unreadable"):
        LoopCheckpoint(tmp_path / "torn.pt", {}).restore({"model": fresh})


def test_sigterm_requests_a_stop_instead_of_killing():
    previous = signal.getsignal(signal.SIGTERM)
    with termination_handler():
        assert stop_requested() is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop_requested() == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is previous
    clear_stop()


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "ambiguous", "--resume", "--force"], "pass one of them"),
    (["--model", "ambiguous", "--resume"], "nothing to resume"),
    (["--model", "ambiguous", "--only", "evaluator"], "evaluator is shared"),
    (["--model", "ambiguous", "--checkpoint-every", "0"], "must be > 0"),
    (["--model", "mini", "--resume"], "checkpointed model"),
])
def test_bad_options_are_clear_errors(tmp_path, capsys, argv, message):
    assert main(["train-mini", "--quick", "--out", str(tmp_path / "run"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_quick_never_writes_into_either_shipped_folder(capsys):
    for folder in (AMBIGUOUS_DIR, WEIGHTS_DIR):
        assert main(["train-mini", "--model", "ambiguous", "--quick", "--out", str(folder)]) == 2
        assert "never writes into the shipped weights folder" in capsys.readouterr().err


def test_unknown_model_is_named(capsys):
    with pytest.raises(SystemExit):
        main(["train-mini", "--model", "llamagen"])
    assert "invalid choice: 'llamagen'" in capsys.readouterr().err


def test_object_cells_mark_exactly_the_patches_with_a_bright_pixel():
    images = np.zeros((2, 32, 32), dtype=np.uint8)
    images[0, 5, 9] = OBJECT_THRESHOLD          # cell (1, 2) of image 0
    images[0, 31, 0] = OBJECT_THRESHOLD - 1     # below the threshold: background
    images[1, 28:, 28:] = 255                   # cell (7, 7) of image 1
    cells = object_cells(images)
    assert cells.shape == (2, 64)
    assert np.flatnonzero(cells[0]).tolist() == [1 * 8 + 2] and np.flatnonzero(cells[1]).tolist() == [63]
    with pytest.raises(ValueError, match="multiples of 8"):
        object_cells(np.zeros((1, 28, 30), dtype=np.uint8))


@needs_data
def test_split_ambiguity_partitions_the_positions_of_model_ambiguity(uninterrupted):
    out, _ = uninterrupted
    mini = load_mini(out)
    images, labels = fm.load_sample()
    pick = np.arange(0, 2000, 250)  # 8 real test images, several classes
    tokens = encode_images(mini.tokenizer, images[pick]).astype(np.int64)
    split = split_ambiguity(mini, tokens, labels[pick], 2.0, batch=3)
    whole = model_ambiguity(mini, tokens, labels[pick], 2.0)
    assert split["all"]["positions"] == whole["positions"] == 8 * 63
    assert split["object"]["positions"] + split["background"]["positions"] == 8 * 63
    assert 0 < split["object"]["positions"] < 8 * 63
    for key in ("top1", "entropy", "top10_mass", "accept_eagle", "accept_draft_gpt"):
        assert split["all"][key] == pytest.approx(whole[key], rel=1e-9)
        parts = sum(split[p][key] * split[p]["positions"] for p in ("object", "background"))
        assert parts == pytest.approx(whole[key] * whole["positions"], rel=1e-9)


def test_comparison_tables_show_both_position_kinds_and_the_noise_floor():
    stats = {"top1": 0.1, "entropy": 4.0, "top10_mass": 0.4, "accept_eagle": 0.7, "accept_draft_gpt": 0.6,
             "positions": 100}
    model = {"codebook_size": 8192, "n_images": 2, "cfg_scale": 2.0, "class_accuracy": 0.9, "fd": 5.0,
             "fd_bootstrap_sd": 0.5, "ambiguity": {"all": stats, "object": {**stats, "positions": 60},
                                                   "object_fraction": 0.6}}
    text = render({"models": {"ambiguous": model}, "noise_floor": {"n_images": 2, "fd_real_a_vs_real_b": 0.3},
                   "worlds": {"confident": {"top1": 0.75, "entropy": 0.7, "top10_mass": 1.0,
                                            "acceptance": 0.84}}})
    assert "all positions (100)" in text and "object positions (60, 60%)" in text
    assert "| `confident` world preset | 0.750 |" in text and "| 0.300 |" in text


@needs_data
def test_report_renders_the_training_table_without_an_evaluator(uninterrupted):
    out, _ = uninterrupted
    text = "\n".join(training_table(out))
    assert all(f"| {name} |" in text for name in COMPONENTS) and "| evaluator |" not in text


def test_the_shipped_ambiguous_model_loads_and_decodes_in_the_demo(tmp_path):
    """`relaxspec demo --model ambiguous`'s real-model section on the committed weights (2 images per row):
    8,192 codes, every demo configuration decodes, the speculative rows emit more than one token per step."""
    from relaxspec.mini.demo import mini_section

    lines = mini_section(tmp_path / "mini-ambiguous", n_images=2, progress=False, model="ambiguous")
    text = "\n".join(lines)
    assert "V = 8192" in text and "shipped Fashion-MNIST model, ambiguous" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    assert float(rows["exact EAGLE-2"].split(" | ")[1]) > 1.0
    assert (tmp_path / "mini-ambiguous" / "samples.png").is_file()
