"""Fashion-MNIST loader and the committed test sample."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from relaxspec.mini import fashion_mnist as fm

needs_dataset = pytest.mark.skipif(
    not fm.dataset_available(),
    reason="the full Fashion-MNIST data set is not installed (apt-get install dataset-fashion-mnist)",
)


def _write_idx(path, arr: np.ndarray, type_byte: int = 0x08) -> None:
    head = bytes([0, 0, type_byte, arr.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(head + arr.astype(np.uint8).tobytes())


def test_read_idx_round_trip_and_errors(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / "a.gz", arr)
    assert np.array_equal(fm.read_idx(tmp_path / "a.gz"), arr)
    _write_idx(tmp_path / "b.gz", arr, type_byte=0x0D)
    with pytest.raises(ValueError, match="unsigned bytes"):
        fm.read_idx(tmp_path / "b.gz")
    with gzip.open(tmp_path / "c.gz", "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"\x01\x02")
    with pytest.raises(ValueError, match="payload"):
        fm.read_idx(tmp_path / "c.gz")


def test_missing_dataset_says_how_to_install(tmp_path):
    assert not fm.dataset_available(tmp_path)
    with pytest.raises(fm.DatasetMissingError, match="apt-get install dataset-fashion-mnist"):
        fm.load_split("train", tmp_path)
    with pytest.raises(ValueError, match="split"):
        fm.load_split("validation", tmp_path)


def test_padding_to_32():
    x = np.full((3, 28, 28), 7, dtype=np.uint8)
    y = fm.pad_to_32(x)
    assert y.shape == (3, 32, 32)
    assert y[:, 2:30, 2:30].min() == 7 and y.sum() == x.sum()
    with pytest.raises(ValueError, match="28 x 28"):
        fm.pad_to_32(np.zeros((3, 32, 32), np.uint8))


def test_committed_sample_is_balanced_uint8():
    images, labels = fm.load_sample()
    assert images.shape == (2000, 28, 28) and images.dtype == np.uint8
    assert np.array_equal(np.bincount(labels, minlength=10), np.full(10, 200))
    assert fm.SAMPLE_PATH.stat().st_size < 2_000_000
    assert (fm.SAMPLE_PATH.parent / "LICENSE").read_text().count("Zalando") >= 1


def test_corrupt_sample_is_reported(tmp_path):
    bad = tmp_path / "s.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="corrupt"):
        fm.load_sample(bad)


@needs_dataset
def test_sample_matches_the_test_split():
    images, labels = fm.load_split("test")
    assert images.shape == (10000, 28, 28) and np.array_equal(np.bincount(labels), np.full(10, 1000))
    with np.load(fm.SAMPLE_PATH) as z:
        idx = z["test_index"]
        assert np.array_equal(z["images"], images[idx]) and np.array_equal(z["labels"], labels[idx])
    assert np.array_equal(idx, fm.balanced_sample(labels, 200, seed=0))
