"""Sample grids of the mini model: one row per decoding configuration, same classes and seeds per column."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from relaxspec.mini.fashion_mnist import CLASS_NAMES  # noqa: E402


def sample_grid(rows: list[tuple[str, np.ndarray]], labels: np.ndarray, path: Path, title: str) -> Path:
    """Write a labelled PNG grid: ``rows`` of (name, uint8 images (n, 32, 32)), columns labelled by class."""
    if not rows:
        raise ValueError("no rows to draw")
    n = min(len(images) for _, images in rows)
    fig, axes = plt.subplots(len(rows), n, figsize=(0.9 * n + 1.6, 0.95 * len(rows) + 0.6), squeeze=False)
    for r, (name, images) in enumerate(rows):
        for c in range(n):
            ax = axes[r, c]
            ax.imshow(images[c], cmap="gray", vmin=0, vmax=255)
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(CLASS_NAMES[int(labels[c])], fontsize=7)
        axes[r, 0].set_ylabel(name, fontsize=7, rotation=0, ha="right", va="center")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
