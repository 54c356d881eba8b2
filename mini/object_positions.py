"""Which token positions hold the garment, and the target's ambiguity over them and over the rest.

Fashion-MNIST's garments lie on a black background. With 512 codes the
background is one code that any model predicts with near certainty, which
dilutes an average over all positions; with thousands of codes black
patches spread over many near-black codes. To report ambiguity where the
image has content, a position (a cell of the 8 x 8 token grid: a 4 x 4
pixel patch of the 32 x 32 image) *holds the object* when any pixel of its
patch in the decoded image is at least :data:`OBJECT_THRESHOLD` (32 of 255,
an eighth of full intensity); otherwise it is background. The rule reads
the decoded image, not the codes, so it means the same for every tokenizer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from relaxspec.mini.ambiguity import position_stats, teacher_forced
from relaxspec.mini.shipped import MiniModel
from relaxspec.mini.tokenizer import decode_tokens

OBJECT_THRESHOLD = 32
PARTS = ("all", "object", "background")


def object_cells(images: np.ndarray, grid: int = 8, threshold: int = OBJECT_THRESHOLD) -> np.ndarray:
    """``(N, grid * grid)`` booleans (row-major cells): does the cell's patch of the uint8 images
    ``(N, H, W)`` hold a pixel >= ``threshold``?"""
    images = np.asarray(images)
    if images.ndim != 3 or images.shape[1] % grid or images.shape[2] % grid:
        raise ValueError(f"images must be (N, H, W) with H and W multiples of {grid}, got {images.shape}")
    n, h, w = images.shape
    patches = images.reshape(n, grid, h // grid, grid, w // grid)
    return (patches.max(axis=(2, 4)) >= threshold).reshape(n, grid * grid)


def split_ambiguity(mini: MiniModel, tokens: np.ndarray, labels: np.ndarray, cfg_scale: float,
                    batch: int = 20) -> dict[str, Any]:
    """The world-stats figures of :func:`mini.ambiguity.model_ambiguity` (positions 1..63 of each
    sequence: where both drafters can draft) over all positions, the object positions and the
    background positions of the decoded ``tokens``, with each part's position count."""
    tokens = np.asarray(tokens, dtype=np.int64)
    cells = object_cells(decode_tokens(mini.tokenizer, tokens))[:, 1:]
    sums: dict[str, dict[str, float]] = {part: {} for part in PARTS}
    counts = dict.fromkeys(PARTS, 0)
    for i in range(0, len(tokens), batch):
        tf = teacher_forced(mini, tokens[i:i + batch], labels[i:i + batch], cfg_scale)
        is_object = cells[i:i + batch].reshape(-1)
        for part, rows in (("all", np.ones_like(is_object)), ("object", is_object),
                           ("background", ~is_object)):
            n = int(rows.sum())
            if n == 0:
                continue
            stats = position_stats(tf.p[rows], {"eagle": tf.q_eagle[rows], "draft_gpt": tf.q_gpt[rows]})
            for key, value in stats.items():
                sums[part][key] = sums[part].get(key, 0.0) + value * n
            counts[part] += n
    out: dict[str, Any] = {part: {**{k: v / counts[part] for k, v in sums[part].items()},
                                  "positions": counts[part]} for part in PARTS}
    out["object_fraction"] = counts["object"] / max(counts["all"], 1)
    out["object_threshold"] = OBJECT_THRESHOLD
    return out
