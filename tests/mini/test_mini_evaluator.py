"""The shipped evaluator: loading, accuracy on the committed sample, Frechet distance."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from relaxspec.mini import fashion_mnist as fm
from relaxspec.mini.evaluator import (
    FEATURE_DIM,
    feature_stats,
    frechet_distance,
    image_quality,
    load_evaluator,
    predict,
)
from relaxspec.mini.weights import WEIGHTS_DIR, load_component


@pytest.fixture(scope="module")
def evaluator():
    return load_evaluator()


def test_card_describes_the_weights(evaluator):
    model, card = evaluator
    assert card["component"] == "evaluator" and card["config"]["feature_dim"] == FEATURE_DIM
    assert card["metrics"]["test_accuracy"] >= 0.90 and card["metrics"]["n_test"] == 10000
    assert card["training_command"].startswith("relaxspec train-mini")
    assert model.fd_sigma.shape == (FEATURE_DIM, FEATURE_DIM)


def test_accuracy_on_committed_sample(evaluator):
    model, card = evaluator
    images, labels = fm.load_sample()
    _, preds = predict(model, images)
    acc = float(np.mean(preds == labels))
    assert acc == card["metrics"]["sample_accuracy"]
    assert acc >= 0.90


def test_real_images_have_small_fd_and_noise_a_large_one(evaluator):
    model, _ = evaluator
    images, labels = fm.load_sample()
    real = image_quality(model, images[:1000], labels[:1000])
    noise = np.random.default_rng(0).integers(0, 256, size=(1000, 32, 32), dtype=np.uint8)
    fake = image_quality(model, noise, labels[:1000])
    assert real["class_accuracy"] >= 0.9
    assert real["fd"] * 20 < fake["fd"]


def test_frechet_distance_properties():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(500, 6)), rng.normal(1.0, 2.0, size=(500, 6))
    mu_a, s_a = feature_stats(a)
    mu_b, s_b = feature_stats(b)
    assert frechet_distance(mu_a, s_a, mu_a, s_a) == pytest.approx(0.0, abs=1e-8)
    assert frechet_distance(mu_a, s_a, mu_b, s_b) == pytest.approx(frechet_distance(mu_b, s_b, mu_a, s_a))
    # Gaussians with diagonal covariances: |mu|^2 + sum (sqrt(s1) - sqrt(s2))^2
    fd = frechet_distance(np.zeros(2), np.eye(2), np.ones(2), 4 * np.eye(2))
    assert fd == pytest.approx(2.0 + 2.0)
    with pytest.raises(ValueError, match="mismatched"):
        frechet_distance(np.zeros(2), np.eye(2), np.zeros(3), np.eye(3))


def test_corrupt_or_mismatched_weights_are_named(tmp_path):
    for f in ("evaluator.safetensors", "evaluator.json"):
        shutil.copy(WEIGHTS_DIR / f, tmp_path / f)
    data = bytearray((tmp_path / "evaluator.safetensors").read_bytes())
    data[-10] ^= 0xFF
    (tmp_path / "evaluator.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt"):
        load_component(tmp_path, "evaluator")
    (tmp_path / "evaluator.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_component(tmp_path, "evaluator")
    with pytest.raises(FileNotFoundError, match="missing"):
        load_component(tmp_path, "tokenizer")
