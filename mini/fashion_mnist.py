"""Fashion-MNIST: the real images the shipped mini model is trained and evaluated on.

The full data set (60,000 train + 10,000 test grayscale 28 x 28 images, 10
classes, MIT licence, (c) 2017 Zalando SE) comes from the Debian package
``dataset-fashion-mnist`` as idx files under ``/usr/share/datasets/fashion-mnist``.
Only training needs it: a balanced sample of 2,000 test images ships with the
repository (``data/fashion_mnist/``) for the tests, the demo and the quality
figures. Images are padded with black to 32 x 32 (2 pixels each side) so the
VQ tokenizer's downsampling by 4 gives an 8 x 8 token grid.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

DATASET_DIR = Path(os.environ.get("RELAXSPEC_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))
SAMPLE_PATH = Path(__file__).resolve().parents[1] / "data" / "fashion_mnist" / "test_sample_2000.npz"
CLASS_NAMES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
NUM_CLASSES = len(CLASS_NAMES)
RAW_SIZE = 28
IMAGE_SIZE = 32
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000),
}
INSTALL_HINT = (
    "install the Debian package: `sudo apt-get install dataset-fashion-mnist` "
    "(or point RELAXSPEC_FASHION_MNIST at a folder holding the four idx .gz files)"
)


class DatasetMissingError(FileNotFoundError):
    """The full Fashion-MNIST data set is not installed."""


def dataset_available(root: Path | None = None) -> bool:
    """Whether all four idx files of the full data set are present."""
    root = DATASET_DIR if root is None else Path(root)
    return all((root / f).is_file() for img, lab, _ in _FILES.values() for f in (img, lab))


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file (optionally gzip-compressed) of unsigned bytes into an array.

    Raises
    ------
    ValueError
        If the magic number, dimensions or payload size are wrong.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise ValueError(f"idx file {path} cannot be read: {err}") from err
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"idx file {path} has a bad magic number")
    if data[2] != 0x08:
        raise ValueError(f"idx file {path} holds type 0x{data[2]:02x}, expected unsigned bytes (0x08)")
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    size = int(np.prod(shape)) if shape else 0
    if len(data) != header + size:
        raise ValueError(f"idx file {path} has {len(data) - header} payload bytes, expected {size}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape).copy()


def load_split(split: str, root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The full ``train`` or ``test`` split: images ``(N, 28, 28)`` uint8 and labels ``(N,)`` int64.

    Raises
    ------
    DatasetMissingError
        If the Debian package is not installed (the message says how to install it).
    """
    if split not in _FILES:
        raise ValueError(f"split must be one of {sorted(_FILES)}, got {split!r}")
    root = DATASET_DIR if root is None else Path(root)
    img_name, lab_name, n = _FILES[split]
    missing = [f for f in (img_name, lab_name) if not (root / f).is_file()]
    if missing:
        raise DatasetMissingError(
            f"Fashion-MNIST {split} files {missing} not found in {root}: {INSTALL_HINT}"
        )
    images = read_idx(root / img_name)
    labels = read_idx(root / lab_name).astype(np.int64)
    if images.shape != (n, RAW_SIZE, RAW_SIZE) or labels.shape != (n,):
        raise ValueError(f"Fashion-MNIST {split}: images {images.shape}, labels {labels.shape}; "
                         f"expected ({n}, 28, 28) and ({n},)")
    if labels.min() < 0 or labels.max() >= NUM_CLASSES:
        raise ValueError(f"Fashion-MNIST {split} labels outside 0..{NUM_CLASSES - 1}")
    return images, labels


def pad_to_32(images: np.ndarray) -> np.ndarray:
    """Pad ``(..., 28, 28)`` images with zeros to ``(..., 32, 32)`` (2 pixels each side)."""
    images = np.asarray(images)
    if images.shape[-2:] != (RAW_SIZE, RAW_SIZE):
        raise ValueError(f"expected 28 x 28 images, got shape {images.shape}")
    pad = [(0, 0)] * (images.ndim - 2) + [(2, 2), (2, 2)]
    return np.pad(images, pad)


def to_unit_range(images: np.ndarray) -> np.ndarray:
    """uint8 images in [0, 255] as float32 in [-1, 1] (the tokenizer's and evaluator's input range)."""
    return np.asarray(images, dtype=np.float32) / 127.5 - 1.0


def balanced_sample(labels: np.ndarray, per_class: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of ``per_class`` items drawn without replacement from each class."""
    rng = np.random.default_rng(seed)
    picks = []
    for c in range(NUM_CLASSES):
        idx = np.flatnonzero(labels == c)
        if idx.size < per_class:
            raise ValueError(f"class {c} has {idx.size} items, fewer than {per_class}")
        picks.append(rng.choice(idx, per_class, replace=False))
    return np.sort(np.concatenate(picks))


def write_sample(path: Path = SAMPLE_PATH, per_class: int = 200, seed: int = 0,
                 root: Path | None = None) -> Path:
    """Write the committed test sample (needs the full data set): 28 x 28 uint8 images, labels, indices."""
    images, labels = load_split("test", root)
    idx = balanced_sample(labels, per_class, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, images=images[idx], labels=labels[idx].astype(np.uint8),
                        test_index=idx.astype(np.int32))
    return path


def load_sample(path: Path = SAMPLE_PATH) -> tuple[np.ndarray, np.ndarray]:
    """The committed test sample: images ``(2000, 28, 28)`` uint8 and labels ``(2000,)`` int64."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"the Fashion-MNIST test sample {path} is missing from the checkout")
    try:
        with np.load(path, allow_pickle=False) as z:
            images, labels = z["images"], z["labels"].astype(np.int64)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"the Fashion-MNIST test sample {path} is corrupt: {err}") from err
    if images.dtype != np.uint8 or images.shape[1:] != (RAW_SIZE, RAW_SIZE) or len(labels) != len(images):
        raise ValueError(f"the Fashion-MNIST test sample {path} has images {images.dtype} "
                         f"{images.shape} and {len(labels)} labels")
    return images, labels
