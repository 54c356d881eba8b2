"""The frontier comparison on the shipped models (:mod:`relaxspec.studies.frontier`): every method the
reference decoder runs (``Method.decoder``) generates images (resumable, one folder per model), scored by
FD with its bootstrap sd against the noise floor, class accuracy, tokens per target forward (a VVS skip
step's tokens count with no forward) and the TV bound per image.

:data:`SHIPPED_MODELS`: the first model (``weights/``, V = 512, 16 x 16 tokens) as ``shipped`` and the
ambiguous one (``weights/ambiguous``, V = 8192, 8 x 8 tokens) as ``shipped ambiguous``, where issue 29's
goal is read. Both use the first model's evaluator (the evaluator judges images, not tokens).
"""

from __future__ import annotations

from pathlib import Path

from tqdm.auto import tqdm

from relaxspec.core.trees.spec import draft_source
from relaxspec.studies.frontier_methods import SHIPPED_K, Method, methods, methods_2026
from relaxspec.studies.optimality import fmt_tv, trace_optimality_rows
from relaxspec.theory.verification import DraftSource

SHIPPED_MODELS = {"shipped": ("weights", "shipped"),
                  "shipped ambiguous": ("weights/ambiguous", "shipped-ambiguous")}
"""Setting name -> (weights folder in the repository, output folder under ``OUT``)."""
QUICK_TRACE_IMAGES, QUICK_TRACE_NODES = 1, 24
SHIPPED_TRACE_IMAGES = 10  # images whose every tree node enters the shipped model's optimality row


def shipped_methods(with_2026: bool = True) -> list[Method]:
    """The methods the shipped models' reference decoder runs (``Method.decoder``); without issue 29's rows
    when not ``with_2026`` (``--quick``: SJD-PAC's column product makes its images 10x slower to decode,
    and the decoder's own tests cover those rows)."""
    new = {m.label for m in methods_2026()}
    return [m for m in methods() if m.decoder and (with_2026 or m.label not in new)]


def shipped_configs(with_2026: bool = True) -> list:
    """The methods as the mini model's decoding configurations (EAGLE head as the drafter)."""
    from relaxspec.mini.decoding import DecodeConfig

    return [DecodeConfig(m.label) if m.tree == "ar" else
            DecodeConfig(m.label, tree=m.tree, verification=m.verification_for(SHIPPED_K))
            for m in shipped_methods(with_2026)]


def load_model(setting: str):
    """The shipped model of ``setting`` (:data:`SHIPPED_MODELS`)."""
    from relaxspec.mini.shipped import load_mini
    from relaxspec.nbenv import repo_root

    if setting not in SHIPPED_MODELS:
        raise ValueError(f"the shipped models are {tuple(SHIPPED_MODELS)}, got {setting!r}")
    return load_mini(repo_root() / SHIPPED_MODELS[setting][0])


def tokens_per_forward(records: list[dict]) -> float:
    """Emitted tokens per target forward over the records' speculative steps (a skip step makes none;
    records written before skips were recorded count none); 1 for AR (no speculative step)."""
    emitted = [e for r in records for e in r["emitted"]]
    if not emitted:
        return 1.0
    return round(sum(emitted) / (len(emitted) - sum(r.get("skips", 0) for r in records)), 4)


def shipped_rows(out: Path, n_images: int, generate: bool = True, setting: str = "shipped",
                 with_2026: bool = True) -> tuple[list[dict], dict]:
    """Generate (resuming, ``out/<model folder>``) ``n_images`` per method of :func:`shipped_methods` on the
    shipped model of ``setting``; score each; the noise floor. ``generate=False`` scores the images already
    generated (methods with fewer than ``n_images`` are left out: the report names them)."""
    import torch

    from relaxspec.mini.fashion_mnist import load_sample
    from relaxspec.mini.quality import (
        generate_config,
        noise_floor,
        read_records,
        real_halves,
        slug,
        summarise,
    )

    torch.set_num_threads(1)
    mini = load_model(setting)
    folder = out / SHIPPED_MODELS[setting][1]
    pairs = list(zip(shipped_configs(with_2026), shipped_methods(with_2026), strict=True))
    if generate:  # the budget's rows last (its proximity masses over V make them the slowest to decode)
        for c, _ in tqdm(sorted(pairs, key=lambda cm: cm[1].verification_for(SHIPPED_K).uses_budget),
                         desc=f"{setting} methods", unit="method"):
            generate_config(mini, c, n_images, folder, progress=False)
    rows = []
    for c, m in pairs:
        records = sorted(read_records(folder / slug(c.name) / "images.jsonl"), key=lambda r: r["index"])
        records = [r for i, r in enumerate(records[:n_images]) if r["index"] == i]
        if len(records) < n_images:  # not (all) generated yet (--report-only): named as not measured
            continue
        row = summarise(mini, c, records)
        if draft_source(m.tree) is DraftSource.COUPLED_OFFICIAL:  # its TV is not known per step (theory 15.2)
            row["tv_bound_per_sequence"] = float("nan")
        row.update({"setting": setting, "method": m.label, "family": m.family, "lossy": m.lossy,
                    "se": float("nan"), "tokens": tokens_per_forward(records),
                    "tv": row["tv_bound_per_sequence"]})
        rows.append(row)
    images, labels = load_sample()
    halves = real_halves(images, labels, min(max(n_images, 20), len(labels) // 2))
    floor = noise_floor(mini, (halves[0][0], halves[1][0]), folder)
    return rows, floor


def shipped_optimality_rows(out: Path, quick: bool = False) -> list[dict]:
    """:func:`trace_optimality_rows` on the first shipped model: a trace (resumable,
    ``OUT/<config>.trace``) of the exact static tree (R2) over :data:`SHIPPED_TRACE_IMAGES` images, GSD on
    the target's token embedding. Returns one row per number of children, setting ``shipped``."""
    import torch

    from relaxspec.mini.validation import capture
    from relaxspec.reference.decode import gsd_embedding

    torch.set_num_threads(1)
    mini = load_model("shipped")
    config = next(c for c, m in zip(shipped_configs(), shipped_methods(), strict=True)
                  if m.label == "exact static tree (R2)")
    path = capture(mini, config, QUICK_TRACE_IMAGES if quick else SHIPPED_TRACE_IMAGES, out, progress=False)
    return trace_optimality_rows(path, "shipped", emb=gsd_embedding("token", mini.target),
                                 max_nodes=QUICK_TRACE_NODES if quick else None)


def shipped_table(rows: list[dict], floors: dict[str, dict]) -> list[str]:
    """One table per shipped model of ``rows`` (in their order), with its noise floor (``floors``)."""
    lines: list[str] = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        here = [r for r in rows if r["setting"] == setting]
        counts = sorted({r["n_images"] for r in here})
        count = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        lines += ["", f"### {_title(setting)} ({count} images per row, the same classes and uniforms)", "",
                  "| method | tokens per target forward | TV bound per image | FD ± bootstrap sd | "
                  "class accuracy |",
                  "|---|---|---|---|---|"]
        for r in here:
            lines.append(f"| {r['method']} | {r['tokens']:.3f} | {fmt_tv(r['tv_bound_per_sequence'])} | "
                         f"{r['fd']:.2f} ± {r['fd_bootstrap_sd']:.2f} | {r['class_accuracy']:.3f} |")
        floor = floors.get(setting)
        if floor:
            pairs = ", ".join(f"{k}: {v:.2f}" for k, v in floor["fd_between"].items())
            lines += ["", f"Noise floor (FD between sets of one distribution, {floor['n_images']} images): "
                          f"{pairs}."]
    return lines


def _title(setting: str) -> str:
    return {"shipped": "Shipped model", "shipped ambiguous": "Shipped ambiguous model"}.get(setting, setting)


__all__ = ["SHIPPED_MODELS", "load_model", "shipped_configs", "shipped_methods", "shipped_optimality_rows",
           "shipped_rows", "shipped_table", "tokens_per_forward"]
