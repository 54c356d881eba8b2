"""Image quality under relaxation: generate with each decoding configuration, then FD and class accuracy.

Image ``i`` of every configuration has class ``i % 10`` and the decoder's
uniforms keyed by (seed, i), so the rows of the table (and the sample grids)
compare the same classes and seeds. Each generated image is appended to
``OUT/<config>/images.jsonl`` as soon as it is done (tokens, steps, the
emitted and exactly expected tokens of every speculative step, the summed
per-step TV bound): an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from mini.decoding import DecodeConfig, StepScorer, make_decoder
from mini.evaluator import image_quality
from mini.fashion_mnist import NUM_CLASSES
from mini.shipped import MiniModel
from mini.tokenizer import decode_tokens

EAGLE2 = {"top_k": 10, "depth": 4, "total_tokens": 59}
STATIC = {"choices": "naive_extend_57"}
NEIGHBOURS_K = 50  # LANTERN's k = 1000 of V = 16384 is ~6% of the vocabulary; 50 of 512 is ~10%

QUALITY_CONFIGS: list[DecodeConfig] = [
    DecodeConfig("AR"),
    DecodeConfig("exact EAGLE-2", tree="eagle2", tree_args=EAGLE2),
    *[DecodeConfig(f"LANTERN delta={d}", tree="eagle2", tree_args=EAGLE2,
                   relax=f"additive:k={NEIGHBOURS_K},delta={d}") for d in (0.1, 0.2, 0.4)],
    DecodeConfig("exact static", tree="static", tree_args=STATIC),
    *[DecodeConfig(f"LANTERN++ lam={lam}", tree="static", tree_args=STATIC,
                   relax=f"multiplicative:k={NEIGHBOURS_K},lam={lam}") for lam in (2, 5, 10)],
]
TABLE_COLUMNS = ("config", "decoding", "n_images", "fd", "class_accuracy", "tokens_per_step",
                 "expected_tokens_per_step", "target_forwards_per_image", "tv_bound_per_sequence",
                 "seconds_per_image")


def slug(name: str) -> str:
    """A folder name for a configuration name."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", name).strip("_")


def read_records(path: Path) -> list[dict[str, Any]]:
    """The finished images of one configuration (a torn last line from an interruption is dropped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


def generate_config(mini: MiniModel, config: DecodeConfig, n_images: int, out: Path, seed: int = 0,
                    progress: bool = True) -> list[dict[str, Any]]:
    """Generate images ``0..n_images-1`` of ``config`` (resuming) and return their records."""
    folder = out / slug(config.name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "images.jsonl"
    records = read_records(path)
    done = {r["index"] for r in records}
    todo = [i for i in range(n_images) if i not in done]
    if not todo:
        return sorted((r for r in records if r["index"] < n_images), key=lambda r: r["index"])
    with open(path, "w") as f:  # rewrite without a torn tail
        f.writelines(json.dumps(r) + "\n" for r in records)
    decoder = make_decoder(mini, config)
    with open(path, "a") as f:
        for i in tqdm(todo, desc=config.name, disable=not progress, unit="img"):
            scorer = StepScorer(mini, config)
            start = time.perf_counter()
            result = decoder.generate(i % NUM_CLASSES, seed, sequence=i, trace=scorer)
            rec = {"index": i, "label": i % NUM_CLASSES, "seed": seed, "tokens": result.tokens.tolist(),
                   "steps": len(result.steps), "emitted": scorer.emitted,
                   "tree_depths": [st.depth for st in result.steps if st.nodes > 1],
                   "expected": [round(x, 6) for x in scorer.expected],
                   "tv_bound": float(np.nansum(scorer.tv)) if scorer.tv else 0.0,
                   "seconds": time.perf_counter() - start}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            records.append(rec)
    return sorted((r for r in records if r["index"] < n_images), key=lambda r: r["index"])


def summarise(mini: MiniModel, config: DecodeConfig, records: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: FD and class accuracy of the decoded images, tokens per step, TV bound, time."""
    tokens = np.array([r["tokens"] for r in records], dtype=np.int64)
    labels = np.array([r["label"] for r in records])
    with torch.no_grad():
        images = decode_tokens(mini.tokenizer, tokens)
    q = image_quality(mini.evaluator, images, labels)
    emitted = [e for r in records for e in r["emitted"]]
    expected = [e for r in records for e in r["expected"]]
    return {
        "config": config.name, "decoding": config.describe(), "n_images": len(records),
        "fd": round(q["fd"], 3), "class_accuracy": round(q["class_accuracy"], 4),
        "tokens_per_step": round(float(np.mean(emitted)), 4) if emitted else 1.0,
        "expected_tokens_per_step": round(float(np.mean(expected)), 4) if expected else 1.0,
        "target_forwards_per_image": round(float(np.mean([r["steps"] for r in records])), 2),
        "tv_bound_per_sequence": round(float(np.mean([r["tv_bound"] for r in records])), 4),
        "seconds_per_image": round(float(np.mean([r["seconds"] for r in records])), 3),
    }


def run_quality(mini: MiniModel, out: Path, n_images: int = 1000, configs: list[DecodeConfig] | None = None,
                seed: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """Generate and score every configuration; write ``OUT/quality.csv`` and return its rows."""
    out = Path(out)
    rows = []
    for config in configs or QUALITY_CONFIGS:
        records = generate_config(mini, config, n_images, out, seed, progress)
        rows.append(summarise(mini, config, records))
        write_table(out / "quality.csv", rows)
    return rows


def real_baseline(mini: MiniModel, images: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """The table's reference row: the same metrics on real test images."""
    q = image_quality(mini.evaluator, images, labels)
    return {"config": "real test images", "decoding": "Fashion-MNIST test sample", "n_images": len(images),
            "fd": round(q["fd"], 3), "class_accuracy": round(q["class_accuracy"], 4)}


def write_table(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write table rows to a CSV (atomically)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
