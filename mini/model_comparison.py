"""Both shipped models and the synthetic worlds side by side: ambiguity, class accuracy and FD.

``relaxspec mini compare`` generates ``n`` AR samples with each model's
target (classes 0-9 in turn, CFG 2.0, temperature 1, the quality table's
seeds; resumable, under ``OUT/compare/<model>/``), measures along them the
world-stats figures over all positions and over the object positions
(:mod:`mini.object_positions`), the class accuracy and FD of the decoded
samples (FD against the stored test statistics, with its bootstrap standard
deviation) and, as FD's noise floor at ``n`` images, the FD between two
disjoint halves of the committed real test sample, and the context sensitivity kappa_1..kappa_9
(SPEC 11; W + 1 for the 8 x 8 token grid) of each model along its first ``kappa_images`` samples
(:mod:`mini.context_sensitivity`) and of every world preset along ``kappa_sequences`` sequences of
``kappa_len`` tokens (:mod:`simulate.context`), with standard errors. It writes
``OUT/compare/comparison.json`` and the markdown tables of
docs/mini_model.md ("The ambiguous model", "Context sensitivity") to ``OUT/compare/comparison.md``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from relaxspec.mini.context_sensitivity import model_context_sensitivity
from relaxspec.mini.decoding import CFG_SCALE
from relaxspec.mini.evaluator import fd_between, image_quality
from relaxspec.mini.fashion_mnist import load_sample
from relaxspec.mini.object_positions import split_ambiguity
from relaxspec.mini.quality import BOOTSTRAP, QUALITY_CONFIGS, decoded_images, generate_config, real_halves
from relaxspec.mini.shipped import GRID_TOKENS, load_mini
from relaxspec.mini.weights import MODEL_DIRS

AR = QUALITY_CONFIGS[0]
GRID_WIDTH = math.isqrt(GRID_TOKENS)  # the shipped models' 8 x 8 token grid
KAPPA_LAGS = GRID_WIDTH + 1  # kappa_1..kappa_{W+1}: the token before .. the token above-left (SPEC 11)


def measure_model(name: str, weights: Path, out: Path, n_images: int, seed: int = 0,
                  progress: bool = True, kappa_images: int = 40) -> dict[str, Any]:
    """Ambiguity (all / object / background positions), class accuracy and FD of ``n_images`` AR
    samples of the model in ``weights`` (generated into ``out/name``, resuming), and its context
    sensitivity along the first ``kappa_images`` of them."""
    mini = load_mini(weights)
    records = generate_config(mini, AR, n_images, Path(out) / name, seed, progress)
    tokens = np.array([r["tokens"] for r in records])
    labels = np.array([r["label"] for r in records])
    quality = image_quality(mini.evaluator, decoded_images(mini, records), labels, bootstrap=BOOTSTRAP)
    context = model_context_sensitivity(mini, tokens[:kappa_images], labels[:kappa_images], CFG_SCALE,
                                        KAPPA_LAGS, seed=seed)
    return {"codebook_size": mini.vocab_size, "n_images": len(records), "cfg_scale": CFG_SCALE,
            "target_sha256": mini.checkpoint_sha256("target"),
            "ambiguity": split_ambiguity(mini, tokens, labels, CFG_SCALE),
            "class_accuracy": quality["class_accuracy"], "fd": quality["fd"],
            "fd_bootstrap_sd": quality["fd_bootstrap_sd"], "context": context.as_dict()}


def compare(out: Path, n_images: int = 200, seed: int = 0, progress: bool = True,
            models: dict[str, Path] | None = None, kappa_images: int = 40, kappa_sequences: int = 16,
            kappa_len: int = 256) -> dict[str, Any]:
    """Measure every model (default: both shipped ones) and the world presets; write
    ``out/comparison.json`` and ``out/comparison.md``; return the results."""
    from relaxspec.mini.calibration import stats_of
    from relaxspec.simulate.context import world_context_sensitivity
    from relaxspec.simulate.worlds import PRESETS, LatentWorld

    if n_images < 10:
        raise ValueError(f"--n-images must be >= 10 (one image per class at least), got {n_images}")
    if not 2 <= kappa_images <= n_images:
        raise ValueError(f"--kappa-images must be in [2, --n-images = {n_images}], got {kappa_images}")
    if kappa_sequences < 2:
        raise ValueError(f"--kappa-sequences must be >= 2, got {kappa_sequences}")
    if kappa_len <= KAPPA_LAGS:
        raise ValueError(f"--kappa-len must be > {KAPPA_LAGS} (a token {KAPPA_LAGS} back), got {kappa_len}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models = models or MODEL_DIRS
    result: dict[str, Any] = {"models": {name: measure_model(name, path, out, n_images, seed, progress,
                                                             kappa_images)
                                         for name, path in models.items()}}
    images, labels = load_sample()
    n_real = min(n_images, len(labels) // 2)
    (a, _), (b, _) = real_halves(images, labels, n_real)
    evaluator = load_mini(next(iter(models.values())), drafters=False).evaluator
    result["noise_floor"] = {"n_images": n_real, "fd_real_a_vs_real_b": fd_between(evaluator, a, b)}
    result["worlds"] = {name: stats_of(PRESETS[name]) for name in PRESETS}
    result["world_context"] = {name: world_context_sensitivity(
        LatentWorld.preset(name), KAPPA_LAGS, n_sequences=kappa_sequences, seq_len=kappa_len,
        seed=seed).as_dict() for name in PRESETS}
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
    return "\n".join(lines + [""] + context_table(result)) + "\n"


def context_table(result: dict[str, Any]) -> list[str]:
    """Markdown rows of kappa_m ± its standard error, models (teacher-forced along their samples) above
    the world presets (along sampled sequences); none for a comparison measured without kappa."""
    if not result.get("world_context") or any("context" not in m for m in result["models"].values()):
        return []
    def cells(c: dict) -> list[str]:
        return [f"{k:.3f} ± {e:.3f}" for k, e in zip(c["kappa"], c["stderr"], strict=True)]

    rows = [[f"`{name}` model ({m['codebook_size']:,} codes; {m['context']['units']} images x 64 tokens)",
             *cells(m["context"])] for name, m in result["models"].items()]
    rows += [[f"`{name}` world ({c['units']} x {c['positions'][0] + 1} tokens)", *cells(c)]
             for name, c in result["world_context"].items()]
    n = len(next(iter(result["world_context"].values()))["kappa"])
    return _table(["model / world", *[f"kappa_{m}" for m in range(1, n + 1)]], rows)
