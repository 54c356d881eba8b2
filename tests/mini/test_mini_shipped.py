"""The shipped mini model: cards, shapes, a forward pass, generation, trace capture and replay."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from relaxspec.mini import fashion_mnist as fm
from relaxspec.mini.decoding import DecodeConfig, StepScorer, make_decoder
from relaxspec.mini.quality import EAGLE2, STATIC
from relaxspec.mini.shipped import COMPONENT_NAMES, GRID_TOKENS, check_vocabularies, load_mini
from relaxspec.mini.tokenizer import decode_tokens, encode_images, psnr
from relaxspec.mini.validation import capture
from relaxspec.mini.weights import WEIGHTS_DIR, read_card
from relaxspec.reference.model import Transformer
from relaxspec.reference.replay import replay


@pytest.fixture(scope="module")
def mini():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_mini()
    torch.set_num_threads(threads)


def test_cards_and_sizes():
    total = 0
    for name in COMPONENT_NAMES:
        card = read_card(WEIGHTS_DIR, name)
        assert card["training_command"].startswith("relaxspec train-mini")
        assert card["training_seconds"] > 0 and card["metrics"]
        total += (WEIGHTS_DIR / card["weights_file"]).stat().st_size
    assert total <= 25 * 2**20
    tok = read_card(WEIGHTS_DIR, "tokenizer")
    assert 512 <= tok["config"]["codebook_size"] <= 1024 and tok["config"]["codebook_embed_dim"] == 8
    assert tok["metrics"]["fraction_used"] > 0.9
    target = read_card(WEIGHTS_DIR, "target")
    assert 6 <= target["config"]["n_layer"] <= 8 and 256 <= target["config"]["dim"] <= 384
    assert target["config"]["class_dropout_prob"] > 0
    assert target["metrics"]["test_nll_per_token_nats"] < np.log(tok["config"]["codebook_size"])


def test_shapes_and_forward_pass(mini):
    V = mini.vocab_size
    assert mini.target.cfg.vocab_size == V == mini.draft_gpt.cfg.vocab_size
    assert mini.target.cfg.block_size == GRID_TOKENS and mini.tokenizer.cfg.downsample == 4
    n_draft = sum(p.numel() for p in mini.draft_gpt.parameters())
    assert n_draft < sum(p.numel() for p in mini.target.parameters())
    images, labels = fm.load_sample()
    tokens = encode_images(mini.tokenizer, images[:100])
    assert tokens.shape == (100, GRID_TOKENS) and tokens.min() >= 0 and tokens.max() < V
    recon = decode_tokens(mini.tokenizer, tokens)
    card_psnr = read_card(WEIGHTS_DIR, "tokenizer")["metrics"]["psnr_db"]
    assert psnr(recon, fm.pad_to_32(images[:100])) > card_psnr - 2
    with torch.no_grad():
        logits = mini.target(torch.as_tensor(tokens[:4, :-1], dtype=torch.long), torch.as_tensor(labels[:4]))
    assert logits.shape == (4, GRID_TOKENS, V) and torch.isfinite(logits).all()
    assert mini.neighbours().shape == (V, V - 1)


def test_vocabulary_mismatch_is_named(mini):
    other = Transformer(replace(mini.target.cfg, vocab_size=mini.vocab_size // 2))
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        check_vocabularies(mini.tokenizer, {"target": other})


@pytest.mark.parametrize("config", [
    DecodeConfig("AR"),
    DecodeConfig("EAGLE-2 exact", tree=EAGLE2),
    DecodeConfig("LANTERN++", tree=STATIC, verification="r1+lantern++:k=50,lam=5"),
], ids=lambda c: c.name)
def test_generation_is_deterministic(mini, config):
    decoder = make_decoder(mini, config)
    scorer = StepScorer(mini, config)
    a = decoder.generate(7, seed=3, sequence=0, trace=scorer)
    b = decoder.generate(7, seed=3, sequence=0)
    assert np.array_equal(a.tokens, b.tokens) and a.tokens.shape == (GRID_TOKENS,)
    assert 0 <= a.tokens.min() and a.tokens.max() < mini.vocab_size
    assert sum(s.tokens for s in a.steps) >= GRID_TOKENS
    if not config.is_ar:
        assert len(scorer.expected) == len(scorer.emitted) > 0
    image = decode_tokens(mini.tokenizer, a.tokens[None])
    assert image.shape == (1, 32, 32) and image.dtype == np.uint8


def test_captured_trace_replays_exactly(mini, tmp_path):
    config = DecodeConfig("LANTERN", tree=EAGLE2, verification="r1+lantern:k=50,delta=0.2")
    path = capture(mini, config, 2, tmp_path, progress=False)
    report = replay(path, require_simulate=True)
    assert report.steps > 2 and report.ok, report.mismatches[:3]
    assert "simulate" in report.engines and "theory" in report.engines


def test_quality_runs_of_different_sizes_share_one_table(tmp_path):
    """`relaxspec mini quality` in two runs (other configurations, other image counts) resumes into one
    table whose rows say their own counts, with real-image rows and the FD noise floor."""
    import csv
    import json

    from relaxspec.cli import main

    base = ["mini", "--out", str(tmp_path), "--no-progress", "quality", "--scheduler", "none"]
    assert main([*base, "--n-images", "12", "--configs", "AR"]) == 0
    assert main([*base, "--n-images", "3", "--configs", "exact EAGLE-2"]) == 0
    with open(tmp_path / "quality.csv", newline="") as f:
        rows = {r["config"]: r for r in csv.DictReader(f)}
    assert rows["AR"]["n_images"] == "12" and rows["exact EAGLE-2"]["n_images"] == "3"
    assert {"real test images A", "real test images B"} <= set(rows)
    assert float(rows["exact EAGLE-2"]["tokens_per_step"]) > 1.0
    noise = json.loads((tmp_path / "noise.json").read_text())
    assert noise["n_images"] == 20 and noise["fd_between"]["real A vs real B"] > 0
    assert (tmp_path / "samples.png").stat().st_size > 0


def test_eagle_below_root_is_the_depth_one_draft(mini):
    """The comb tree gives each position's depth-1 draft over the real prefix: with the real features
    in the leaves it is the head's ordinary teacher-forced output; a leaf does not see later tokens."""
    from relaxspec.mini.ambiguity import comb_parents, eagle_below_root

    np.testing.assert_array_equal(comb_parents(4), [-1, 0, 1, 2, 0, 1, 2])
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, mini.target.cfg.vocab_size, (2, 12), generator=g)
    label = torch.tensor([3, 7])
    with torch.no_grad():
        _, hidden = mini.target(tokens, label, return_hidden=True)
        hidden = hidden[:, :-1]
        pred = mini.eagle_head(mini.target.embed_tokens(tokens), hidden)
        real = eagle_below_root(mini.eagle_head, mini.target, tokens, hidden, leaf_features=hidden[:, 1:])
        torch.testing.assert_close(real, mini.target.logits(pred[:, 1:]), rtol=1e-4, atol=1e-4)
        deep = eagle_below_root(mini.eagle_head, mini.target, tokens, hidden)
        short = eagle_below_root(mini.eagle_head, mini.target, tokens[:, :6], hidden[:, :6])
        torch.testing.assert_close(short, deep[:, :5], rtol=1e-4, atol=1e-4)
        assert not torch.allclose(deep, real, atol=1e-3)  # its own features: another draft


def test_an_images_tv_bound_is_unknown_where_a_steps_is(mini, tmp_path):
    """LANTERN++'s relaxed R2 has no computable TV (docs/theory.md, Finding 3): every step's is NaN, so
    an image's summed bound and the row's are NaN, not the 0 a NaN-skipping sum gave; a lossless R2
    image's is 0 and R1 + LANTERN++'s a finite positive bound."""
    from relaxspec.mini.quality import generate_config, summarise

    rows = {}
    for name, v in (("relaxed r2", "r2+lantern++:k=50,lam=5"), ("exact r2", "r2"),
                    ("relaxed r1", "r1+lantern++:k=50,lam=5")):
        config = DecodeConfig(name, tree=STATIC, verification=v)
        records = generate_config(mini, config, 2, tmp_path, progress=False)
        rows[name] = ([r["tv_bound"] for r in records], summarise(mini, config, records))
    assert all(np.isnan(t) for t in rows["relaxed r2"][0])
    assert np.isnan(rows["relaxed r2"][1]["tv_bound_per_sequence"])
    assert rows["exact r2"][0] == [0.0, 0.0] and rows["exact r2"][1]["tv_bound_per_sequence"] == 0.0
    assert all(0.0 < t < np.inf for t in rows["relaxed r1"][0])
