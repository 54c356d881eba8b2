"""The mini-model part of ``relaxspec demo``: exact vs relaxed, dynamic vs static trees on real logits.

Ten images (one per class, same seeds in every row) per configuration with
the shipped model; a table of tokens per step (measured and simulate's exact
expectation), target forwards per image, the TV bound and the evaluator's
class accuracy, and a sample grid, appended to the demo's report.md. Ten
images are too few for a Fréchet distance, so the section quotes the FD of
the same configurations from the committed 1,000-image table in
docs/mini_model.md (with the command that made it) and says why.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from relaxspec.mini.decoding import DecodeConfig
from relaxspec.mini.figures import sample_grid
from relaxspec.mini.quality import BOOTSTRAP, QUALITY_CONFIGS, generate_config, summarise
from relaxspec.mini.shipped import load_mini
from relaxspec.mini.tokenizer import decode_tokens
from relaxspec.mini.weights import MODEL_DIRS

DEMO_NAMES = ("AR", "exact EAGLE-2", "LANTERN delta=0.2", "exact static", "LANTERN++ lam=5")
DEMO_IMAGES = 10
DOCS = Path(__file__).resolve().parents[1] / "docs" / "mini_model.md"
QUALITY_HEADING = "## Image quality under relaxation"
QUALITY_COMMAND = "relaxspec mini quality --n-images 1000 --workers 2"
FD_COLUMN = "FD ± bootstrap sd"


def mini_section(out: Path, n_images: int = DEMO_IMAGES, progress: bool = True, model: str = "mini"
                 ) -> list[str]:
    """Generate the demo images of the shipped ``model`` (``mini`` or ``ambiguous``) into ``out``
    (resumable) and return the report's markdown lines."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mini = load_mini(MODEL_DIRS[model])
        configs = [c for c in QUALITY_CONFIGS if c.name in DEMO_NAMES]
        rows, grid = [], []
        for c in configs:
            records = generate_config(mini, c, n_images, out, progress=progress)
            rows.append(summarise(mini, c, records))
            grid.append((c.name, decode_tokens(mini.tokenizer, np.array([r["tokens"] for r in records]))))
    finally:
        torch.set_num_threads(threads)
    name = "Mini model" if model == "mini" else f"The {model} model"
    png = sample_grid(grid, np.arange(n_images) % 10, out / "samples.png",
                      f"{name} (Fashion-MNIST, V = {mini.vocab_size}): same class and seed per column")
    n_tokens = len(records[0]["tokens"])
    quoted = " (1,000-image figures are quoted below)" if model == "mini" else ""
    lines = ["", "## The same comparison on a real visual AR model (the shipped Fashion-MNIST model, "
             f"{model})", "",
             f"Sample size: {n_images} images x {n_tokens} tokens per row (one per class, same uniforms in "
             f"every row): a demonstration, not a measurement{quoted}; target "
             f"{mini.cards['target']['config']['n_layer']} layers x {mini.cards['target']['config']['dim']}, "
             f"V = {mini.vocab_size}, EAGLE head drafter, R1, CFG 2.0. The TV bound is the sum of the exact "
             "per-step TVs (vacuous above 1).", "",
             "| configuration | tokens/step | exact E[tokens/step] | target forwards/image | "
             "TV bound/sequence | class accuracy |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['tokens_per_step']:.2f} | {r['expected_tokens_per_step']:.2f} | "
                     f"{r['target_forwards_per_image']:.1f} | {r['tv_bound_per_sequence']:.3f} | "
                     f"{r['class_accuracy']:.2f} |")
    lines += fd_lines(configs, [r["fd"] for r in rows], n_images, mini.evaluator.fc.out_features,
                      committed_quality() if model == "mini" else {})  # the 1,000-image table is mini's
    lines += ["", f"![samples]({png.relative_to(out.parent)})", ""]
    return lines


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def committed_quality(path: Path = DOCS) -> dict[str, dict[str, str]]:
    """The committed image-quality table of docs/mini_model.md as ``{configuration: {column: cell}}``
    (empty when the file or the table is missing)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    _, found, section = text.partition(QUALITY_HEADING)
    table = [ln for ln in section.split("\n## ", 1)[0].splitlines() if ln.startswith("|")]
    if not found or len(table) < 3:
        return {}
    header = _cells(table[0])
    return {cells[0]: dict(zip(header, cells, strict=False)) for cells in map(_cells, table[2:])}


def _fd(cell: str) -> tuple[float, float]:
    """(FD, bootstrap sd) of a table cell "4.516 ± 0.427"."""
    fd, _, sd = cell.partition("±")
    return float(fd), float(sd)


def lossless_twin(config: DecodeConfig, configs: list[DecodeConfig]) -> DecodeConfig | None:
    """The exact configuration with the same tree, drafter and rule as a relaxed one (None if exact)."""
    if config.verification.relax.is_exact:
        return None
    key = (config.tree, config.drafter, config.verification.rule)
    return next((c for c in configs if c.verification.relax.is_exact
                 and (c.tree, c.drafter, c.verification.rule) == key), None)


def fd_lines(configs: list[DecodeConfig], measured: list[float], n_images: int, feature_dim: int,
             committed: dict[str, dict[str, str]]) -> list[str]:
    """Why this run's FDs (``measured``, of ``n_images`` each) are not shown, and the committed
    1,000-image FDs of ``configs`` (quoted)."""
    lines = ["", f"Image quality (FD): {n_images} images per row are too few for a Fréchet distance: the "
             f"covariance of the evaluator's {feature_dim}-d features of {n_images} images has rank at most "
             f"{n_images - 1}, so this run's FDs against the test statistics ({min(measured):.1f} to "
             f"{max(measured):.1f}) are dominated by small-sample bias and noise, and are not shown per row."]
    if not all(c.name in committed for c in configs):
        return lines + [f"The 1,000-image FDs are made by `{QUALITY_COMMAND}` (docs/mini_model.md)."]
    lines[-1] += (" Quoted instead, not measured by this run: the committed table of docs/mini_model.md for "
                  f"the same configurations and seeds, made by `{QUALITY_COMMAND}`. ± is the bootstrap sd "
                  f"({BOOTSTRAP} resamples of the images); the last column is the FD above the same tree's "
                  "exact configuration in combined sds.")
    lines += ["", "| configuration | images | FD ± bootstrap sd | class accuracy | tokens/step | "
              "FD above exact |", "|---|---|---|---|---|---|"]
    for c in configs:
        row, twin = committed[c.name], lossless_twin(c, configs)
        above = ""
        if twin is not None and twin.name in committed:
            (fd, sd), (fd0, sd0) = _fd(row[FD_COLUMN]), _fd(committed[twin.name][FD_COLUMN])
            above = f"{fd - fd0:+.2f} ({(fd - fd0) / np.hypot(sd, sd0):.1f} sd) over {twin.name}"
        lines.append(f"| {c.name} | {row['images']} | {row[FD_COLUMN]} | {row['class accuracy']} | "
                     f"{row['tokens/step']} | {above} |")
    exact = [c.name for c in configs if c.verification.relax.is_exact]
    lossless = [_fd(committed[name][FD_COLUMN])[0] for name in exact]
    if len(lossless) > 1:
        lines += ["", f"The lossless rows ({', '.join(exact)}) sample the target's distribution: their "
                  f"spread ({min(lossless):.2f} to {max(lossless):.2f}) shows the noise of an FD at this "
                  "count."]
    return lines
