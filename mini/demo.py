"""The mini-model part of ``relaxspec demo``: exact vs relaxed, dynamic vs static trees on real logits.

Ten images (one per class, same seeds in every row) per configuration with
the shipped model; a table of tokens per step (measured and simulate's exact
expectation), target forwards per image, the TV bound and the evaluator's
class accuracy, and a sample grid, appended to the demo's report.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mini.figures import sample_grid
from mini.quality import QUALITY_CONFIGS, generate_config, summarise
from mini.shipped import load_mini
from mini.tokenizer import decode_tokens

DEMO_NAMES = ("AR", "exact EAGLE-2", "LANTERN delta=0.2", "exact static", "LANTERN++ lam=5")
DEMO_IMAGES = 10


def mini_section(out: Path, n_images: int = DEMO_IMAGES, progress: bool = True) -> list[str]:
    """Generate the demo images into ``out`` (resumable) and return the report's markdown lines."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mini = load_mini()
        configs = [c for c in QUALITY_CONFIGS if c.name in DEMO_NAMES]
        rows, grid = [], []
        for c in configs:
            records = generate_config(mini, c, n_images, out, progress=progress)
            rows.append(summarise(mini, c, records))
            grid.append((c.name, decode_tokens(mini.tokenizer, np.array([r["tokens"] for r in records]))))
    finally:
        torch.set_num_threads(threads)
    png = sample_grid(grid, np.arange(n_images) % 10, out / "samples.png",
                      "Mini model (Fashion-MNIST): same class and seed per column")
    lines = ["", "## The same comparison on a real visual AR model (the shipped Fashion-MNIST model)", "",
             f"{n_images} images per row (one per class, same uniforms in every row), target "
             f"{mini.cards['target']['config']['n_layer']} layers x {mini.cards['target']['config']['dim']}, "
             f"V = {mini.vocab_size}, EAGLE head drafter, R1, CFG 2.0. The full tables (more images, "
             "FD) are in docs/mini_model.md. The TV bound is the sum of the exact per-step TVs "
             "(vacuous above 1).", "",
             "| configuration | tokens/step | exact E[tokens/step] | target forwards/image | "
             "TV bound/sequence | class accuracy |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['tokens_per_step']:.2f} | {r['expected_tokens_per_step']:.2f} | "
                     f"{r['target_forwards_per_image']:.1f} | {r['tv_bound_per_sequence']:.3f} | "
                     f"{r['class_accuracy']:.2f} |")
    lines += ["", f"![samples]({png.relative_to(out.parent)})", ""]
    return lines
