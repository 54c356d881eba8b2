"""Both shipped models and the synthetic worlds side by side: ambiguity, class accuracy and FD.

``relaxspec mini compare`` generates ``n`` AR samples with each model's
target (classes 0-9 in turn, CFG 2.0, temperature 1, the quality table's
seeds; resumable, under ``OUT/compare/<model>/``), measures along them the
world-stats figures over all positions and over the object positions
(:mod:`mini.object_positions`), the class accuracy and FD of the decoded
samples (FD against the stored test statistics, with its bootstrap standard
deviation) and, as FD's noise floor at ``n`` images, the FD between two
disjoint halves of the committed real test sample. It writes
``OUT/compare/comparison.json`` and the markdown tables of
docs/mini_model.md ("The ambiguous model") to ``OUT/compare/comparison.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from relaxspec.mini.decoding import CFG_SCALE
from relaxspec.mini.evaluator import fd_between, image_quality
from relaxspec.mini.fashion_mnist import load_sample
from relaxspec.mini.object_positions import split_ambiguity
from relaxspec.mini.quality import BOOTSTRAP, QUALITY_CONFIGS, decoded_images, generate_config, real_halves
from relaxspec.mini.shipped import load_mini
from relaxspec.mini.weights import MODEL_DIRS

AR = QUALITY_CONFIGS[0]


def measure_model(name: str, weights: Path, out: Path, n_images: int, seed: int = 0,
                  progress: bool = True) -> dict[str, Any]:
    """Ambiguity (all / object / background positions), class accuracy and FD of ``n_images`` AR
    samples of the model in ``weights`` (generated into ``out/name``, resuming)."""
    mini = load_mini(weights)
    records = generate_config(mini, AR, n_images, Path(out) / name, seed, progress)
    tokens = np.array([r["tokens"] for r in records])
    labels = np.array([r["label"] for r in records])
    quality = image_quality(mini.evaluator, decoded_images(mini, records), labels, bootstrap=BOOTSTRAP)
    return {"codebook_size": mini.vocab_size, "n_images": len(records), "cfg_scale": CFG_SCALE,
            "target_sha256": mini.checkpoint_sha256("target"),
            "ambiguity": split_ambiguity(mini, tokens, labels, CFG_SCALE),
            "class_accuracy": quality["class_accuracy"], "fd": quality["fd"],
            "fd_bootstrap_sd": quality["fd_bootstrap_sd"]}


def compare(out: Path, n_images: int = 200, seed: int = 0, progress: bool = True,
            models: dict[str, Path] | None = None) -> dict[str, Any]:
    """Measure every model (default: both shipped ones) and the world presets; write
    ``out/comparison.json`` and ``out/comparison.md``; return the results."""
    from relaxspec.mini.calibration import stats_of
    from relaxspec.simulate.worlds import PRESETS

    if n_images < 10:
        raise ValueError(f"--n-images must be >= 10 (one image per class at least), got {n_images}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models = models or MODEL_DIRS
    result: dict[str, Any] = {"models": {name: measure_model(name, path, out, n_images, seed, progress)
                                         for name, path in models.items()}}
    images, labels = load_sample()
    n_real = min(n_images, len(labels) // 2)
    (a, _), (b, _) = real_halves(images, labels, n_real)
    evaluator = load_mini(next(iter(models.values())), drafters=False).evaluator
    result["noise_floor"] = {"n_images": n_real, "fd_real_a_vs_real_b": fd_between(evaluator, a, b)}
    result["worlds"] = {name: stats_of(PRESETS[name]) for name in PRESETS}
    (out / "comparison.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "comparison.md").write_text(render(result))
    return result


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows]


def render(result: dict[str, Any]) -> str:
    """The two markdown tables: ambiguity (models by position kind, then the worlds) and quality."""
    rows = []
    for name, m in result["models"].items():
        amb = m["ambiguity"]
        for part in ("all", "object"):
            s = amb[part]
            where = (f"all positions ({s['positions']:,})" if part == "all" else
                     f"object positions ({s['positions']:,}, {100 * amb['object_fraction']:.0f}%)")
            rows.append([f"`{name}` model ({m['codebook_size']:,} codes, CFG {m['cfg_scale']}, "
                         f"{m['n_images']} AR samples), {where}", f"{s['top1']:.3f}", f"{s['entropy']:.3f}",
                         f"{s['top10_mass']:.3f}",
                         f"EAGLE head {s['accept_eagle']:.3f}; draft GPT {s['accept_draft_gpt']:.3f}"])
    for name, s in result["worlds"].items():
        rows.append([f"`{name}` world preset", f"{s['top1']:.3f}", f"{s['entropy']:.3f}",
                     f"{s['top10_mass']:.3f}", f"{s['acceptance']:.3f}"])
    lines = _table(["model / world", "mean top-1", "mean entropy (nats)", "mean top-10 mass",
                    "mean 1 - TV(p, q)"], rows)
    noise = result["noise_floor"]
    quality = [[f"`{name}`", f"{m['codebook_size']:,}", str(m["n_images"]), f"{m['class_accuracy']:.3f}",
                f"{m['fd']:.3f} ± {m['fd_bootstrap_sd']:.3f}", f"{noise['fd_real_a_vs_real_b']:.3f}"]
               for name, m in result["models"].items()]
    lines += [""] + _table(["model", "codes", "AR samples", "class accuracy", "FD ± bootstrap sd",
                            f"FD real vs real ({noise['n_images']} each)"], quality)
    return "\n".join(lines) + "\n"
