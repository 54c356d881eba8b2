"""Image quality under relaxation: generate with each decoding configuration, then FD and class accuracy.

Image ``i`` of every configuration has class ``i % 10`` and the decoder's
uniforms keyed by (seed, i), so the rows of the table (and the sample grids)
compare the same classes and seeds. Each generated image is appended to
``OUT/<config>/images.jsonl`` as soon as it is done (tokens, steps, the
emitted and exactly expected tokens of every speculative step, the summed
per-step TV bound): an interrupted run resumes where it stopped. On a Dask
cluster (:func:`generate_all`'s ``executor``, ``relaxspec mini quality
--scheduler``) the images are generated in tasks of a few images each, one
torch thread per worker, and their records appended here as tasks finish.

Noise: every row carries a bootstrap standard deviation of its FD, and
:func:`noise_floor` measures the FD between sets that sample one
distribution (two disjoint halves of the real test sample; AR and exact
speculative decoding), the floor below which FD differences mean nothing.
"""

from __future__ import annotations

import csv
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from relaxspec.mini.decoding import DecodeConfig, StepScorer, make_decoder
from relaxspec.mini.evaluator import fd_between, image_quality
from relaxspec.mini.fashion_mnist import NUM_CLASSES
from relaxspec.mini.shipped import MiniModel, load_mini
from relaxspec.mini.tokenizer import decode_tokens

if TYPE_CHECKING:
    from relaxspec.core.execution import Executor

EAGLE2 = "eagle2:10,4,59"
STATIC = "static:naive_extend_57"
NEIGHBOURS_K = 50  # LANTERN's k = 1000 of V = 16384 is ~6% of the vocabulary; 50 of 512 is ~10%

QUALITY_CONFIGS: list[DecodeConfig] = [
    DecodeConfig("AR"),
    DecodeConfig("exact EAGLE-2", tree=EAGLE2),
    *[DecodeConfig(f"LANTERN delta={d}", tree=EAGLE2,
                   verification=f"r1+lantern:k={NEIGHBOURS_K},delta={d}") for d in (0.1, 0.2, 0.4)],
    DecodeConfig("exact static", tree=STATIC),
    *[DecodeConfig(f"LANTERN++ lam={lam}", tree=STATIC,
                   verification=f"r1+lantern++:k={NEIGHBOURS_K},lam={lam}") for lam in (2, 5, 10)],
]
BOOTSTRAP = 100  # resamples for the FD's standard deviation
MIN_BOOTSTRAP_IMAGES = 10  # fewer images: no bootstrap sd (NaN)
IMAGES_PER_TASK = 10  # images per task on a cluster (about 5 to 20 s of decoding each)
# Lossless configurations: they sample the target's distribution, so FDs between them are noise.
LOSSLESS = ("AR", "exact EAGLE-2", "exact static")
TABLE_COLUMNS = ("config", "decoding", "n_images", "fd", "fd_bootstrap_sd", "class_accuracy",
                 "tokens_per_step", "expected_tokens_per_step", "target_forwards_per_image",
                 "tv_bound_per_sequence", "seconds_per_image")


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


def pending_images(config: DecodeConfig, n_images: int,
                   out: Path) -> tuple[Path, list[dict[str, Any]], list[int]]:
    """``OUT/<config>/images.jsonl``, its finished records and the indices of ``0..n_images-1`` still to
    generate; when some are, a torn tail from an interruption is cut off first (the file is rewritten
    with its whole records)."""
    folder = out / slug(config.name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "images.jsonl"
    records = read_records(path)
    done = {r["index"] for r in records}
    todo = [i for i in range(n_images) if i not in done]
    if todo:
        with open(path, "w") as f:  # rewrite without a torn tail
            f.writelines(json.dumps(r) + "\n" for r in records)
    return path, records, todo


def generate_images(mini: MiniModel, config: DecodeConfig, indices: list[int],
                    seed: int = 0) -> Iterator[dict[str, Any]]:
    """Generate images ``indices`` of ``config``, yielding each one's record (tokens, steps, VVS's skip steps
    among them, the emitted and exactly expected tokens of every speculative step, the summed TV bound,
    seconds) as it is done."""
    decoder = make_decoder(mini, config)
    for i in indices:
        scorer = StepScorer(mini, config)
        start = time.perf_counter()
        result = decoder.generate(i % NUM_CLASSES, seed, sequence=i, trace=scorer)
        yield {"index": i, "label": i % NUM_CLASSES, "seed": seed, "tokens": result.tokens.tolist(),
               "steps": len(result.steps), "skips": sum(st.skipped for st in result.steps),
               "emitted": scorer.emitted,
               "tree_depths": [st.depth for st in result.steps if st.nodes > 1],
               "expected": [round(x, 6) for x in scorer.expected],
               "tv_bound": float(np.sum(scorer.tv)) if scorer.tv else 0.0,  # NaN where a step's is unknown
               "seconds": time.perf_counter() - start}


def generate_config(mini: MiniModel, config: DecodeConfig, n_images: int, out: Path, seed: int = 0,
                    progress: bool = True) -> list[dict[str, Any]]:
    """Generate images ``0..n_images-1`` of ``config`` in this process (resuming) and return their records."""
    path, records, todo = pending_images(config, n_images, out)
    if todo:
        with open(path, "a") as f:
            bar = tqdm(generate_images(mini, config, todo, seed), total=len(todo), desc=config.name,
                       disable=not progress, unit="img")
            for rec in bar:
                f.write(json.dumps(rec) + "\n")
                f.flush()
                records.append(rec)
    return sorted((r for r in records if r["index"] < n_images), key=lambda r: r["index"])


def decoded_images(mini: MiniModel, records: list[dict[str, Any]]) -> np.ndarray:
    """uint8 images (N, 32, 32) of generated records."""
    with torch.no_grad():
        return decode_tokens(mini.tokenizer, np.array([r["tokens"] for r in records], dtype=np.int64))


def table_quality(mini: MiniModel, images: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """A table row's image metrics, rounded: FD, its bootstrap sd (:data:`BOOTSTRAP` resamples; NaN under
    :data:`MIN_BOOTSTRAP_IMAGES` images, where resampling a handful says nothing) and class accuracy."""
    q = image_quality(mini.evaluator, images, labels,
                      bootstrap=BOOTSTRAP if len(images) >= MIN_BOOTSTRAP_IMAGES else 0)
    return {"fd": round(q["fd"], 3), "fd_bootstrap_sd": round(q.get("fd_bootstrap_sd", float("nan")), 3),
            "class_accuracy": round(q["class_accuracy"], 4)}


def summarise(mini: MiniModel, config: DecodeConfig, records: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: :func:`table_quality` of the decoded images, tokens per step, TV bound, time."""
    labels = np.array([r["label"] for r in records])
    q = table_quality(mini, decoded_images(mini, records), labels)
    emitted = [e for r in records for e in r["emitted"]]
    expected = [e for r in records for e in r["expected"]]
    return {
        "config": config.name, "decoding": config.describe(), "n_images": len(records), **q,
        "tokens_per_step": round(float(np.mean(emitted)), 4) if emitted else 1.0,
        "expected_tokens_per_step": round(float(np.mean(expected)), 4) if expected else 1.0,
        "target_forwards_per_image": round(float(np.mean([r["steps"] for r in records])), 2),
        # NaN where theory gives no TV (records written before NaN reached them summed the steps' as 0)
        "tv_bound_per_sequence": (round(float(np.mean([r["tv_bound"] for r in records])), 4)
                                  if config.verification.tv_computable else float("nan")),
        "seconds_per_image": round(float(np.mean([r["seconds"] for r in records])), 3),
    }


def finished_rows(mini: MiniModel, out: Path,
                  configs: list[DecodeConfig] | None = None) -> list[dict[str, Any]]:
    """Table rows of every configuration with images in ``out``, each scored on the images it has
    (indices 0..n-1: runs with different ``n_images`` share one table, each row saying its count)."""
    rows = []
    for config in configs or QUALITY_CONFIGS:
        records = read_records(Path(out) / slug(config.name) / "images.jsonl")
        records.sort(key=lambda r: r["index"])
        n = next((i for i, r in enumerate(records) if r["index"] != i), len(records))
        if n:
            rows.append(summarise(mini, config, records[:n]))
    return rows


def _slowest_first(config: DecodeConfig) -> int:
    return 0 if config.verification.relax.is_exact and not config.is_ar else 2 if config.is_ar else 1


def _generate_chunk(mini: MiniModel, config: DecodeConfig, indices: list[int],
                    seed: int) -> list[dict[str, Any]]:
    """A task of :func:`generate_all` on a cluster: the records of images ``indices`` (one torch thread)."""
    torch.set_num_threads(1)
    return list(generate_images(mini, config, indices, seed))


def generate_all(mini: MiniModel, out: Path, n_images: int = 1000, configs: list[DecodeConfig] | None = None,
                 seed: int = 0, progress: bool = True, executor: Executor | None = None) -> None:
    """Generate images ``0..n_images-1`` of every configuration into ``out`` (resuming).

    With a cluster ``executor`` (:class:`core.execution.Executor`) the images are generated in tasks of
    :data:`IMAGES_PER_TASK` (the slowest configurations first), each worker loading the model once from
    ``mini.directory``; each finished task's records are appended to their ``images.jsonl`` here, so an
    interruption loses only unfinished tasks. Otherwise the configurations run one after another here.
    Image ``i`` is the same wherever it is generated (its uniforms are keyed by (seed, i))."""
    configs, out = configs or QUALITY_CONFIGS, Path(out)
    if executor is None or executor.inline:
        for config in configs:
            generate_config(mini, config, n_images, out, seed, progress)
        return
    paths, calls, labels = {}, [], []
    drafters = mini.eagle_head is not None or mini.draft_gpt is not None
    model = executor.share(load_mini, mini.directory, 1, drafters)  # on a worker, from the weights' path
    for config in sorted(configs, key=_slowest_first):
        paths[config.name], _, todo = pending_images(config, n_images, out)
        for at in range(0, len(todo), IMAGES_PER_TASK):
            chunk = todo[at:at + IMAGES_PER_TASK]
            calls.append((model, config, chunk, seed))
            labels.append(f"{config.name} images {chunk[0]}..{chunk[-1]}")
    with tqdm(total=sum(len(c[2]) for c in calls), desc="images", unit="img", disable=not progress) as bar:
        for i, records in executor.run(_generate_chunk, calls, labels):
            with open(paths[calls[i][1].name], "a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in records))
            bar.update(len(records))


def run_quality(mini: MiniModel, out: Path, n_images: int = 1000, configs: list[DecodeConfig] | None = None,
                seed: int = 0, progress: bool = True,
                executor: Executor | None = None) -> list[dict[str, Any]]:
    """Generate (:func:`generate_all`) and score every configuration; write, return ``OUT/quality.csv``."""
    out = Path(out)
    configs = configs or QUALITY_CONFIGS
    generate_all(mini, out, n_images, configs, seed, progress, executor)
    rows = []
    for config in configs:
        records = generate_config(mini, config, n_images, out, seed, progress)
        rows.append(summarise(mini, config, records))
        write_table(out / "quality.csv", rows)
    return rows


def real_halves(images: np.ndarray, labels: np.ndarray, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two disjoint, class-balanced sets of ``n`` real images (n // 10 per class each, in sample order)."""
    per_class = n // NUM_CLASSES
    a, b = [], []
    for c in range(NUM_CLASSES):
        idx = np.flatnonzero(labels == c)
        if idx.size < 2 * per_class:
            raise ValueError(f"class {c} has {idx.size} sample images, fewer than 2 x {per_class}")
        a.append(idx[:per_class])
        b.append(idx[per_class:2 * per_class])
    return [(images[np.sort(np.concatenate(h))], labels[np.sort(np.concatenate(h))]) for h in (a, b)]


def real_baseline(mini: MiniModel, images: np.ndarray, labels: np.ndarray,
                  name: str = "real test images") -> dict[str, Any]:
    """A reference row: the same metrics on real test images."""
    return {"config": name, "decoding": "Fashion-MNIST test sample", "n_images": len(images),
            **table_quality(mini, images, labels)}


def noise_floor(mini: MiniModel, real: tuple[np.ndarray, np.ndarray], out: Path) -> dict[str, Any]:
    """FD between sets that sample one distribution: the two real image sets ``real`` (n each, from
    :func:`real_halves`) and the lossless configurations generated in ``out`` (when they have n images);
    written to ``OUT/noise.json``."""
    a, b = real
    n = len(a)
    pairs = {"real A vs real B": fd_between(mini.evaluator, a, b)}
    generated = {}
    for name in LOSSLESS:
        records = read_records(out / slug(name) / "images.jsonl")
        if len(records) >= n:
            generated[name] = decoded_images(mini, sorted(records, key=lambda r: r["index"])[:n])
    names = list(generated)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            pairs[f"{x} vs {y}"] = fd_between(mini.evaluator, generated[x], generated[y])
    result = {"n_images": n, "fd_between": {k: round(v, 3) for k, v in pairs.items()}}
    (Path(out) / "noise.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def write_table(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write table rows to a CSV (atomically)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
