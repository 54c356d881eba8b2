"""Markdown tables of the mini model's cards and analyses (what docs/mini_model.md shows).

``relaxspec mini report`` renders, from the weights' cards and the files the
other ``relaxspec mini`` commands wrote into ``--out``, the training table,
the ambiguity table, the image-quality table and the validation table; any
analysis not run yet is left out.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from relaxspec.mini.shipped import COMPONENT_NAMES
from relaxspec.mini.weights import card_path, read_card


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows]


def training_table(weights: Path) -> list[str]:
    """Components, parameters, storage, budget, wall and CPU seconds (training loop; whole component:
    data, encoding, training and metric passes), load average, key metrics."""
    rows = []
    totals = [0.0, 0.0, 0.0, 0.0]
    for name in COMPONENT_NAMES:
        if name == "evaluator" and not card_path(weights, name).is_file():
            continue  # a folder that shares the first model's evaluator (weights/ambiguous)
        c = read_card(weights, name)
        m = c["metrics"]
        key = {
            "evaluator": f"test accuracy {m.get('test_accuracy', 0):.4f} "
                         f"(sample {m.get('sample_accuracy', 0):.4f})",
            "tokenizer": f"PSNR {m.get('psnr_db', 0):.2f} dB, codes used {m.get('fraction_used', 0):.3f}, "
                         f"perplexity {m.get('perplexity', 0):.1f}",
            "target": f"test NLL {m.get('test_nll_per_token_nats', 0):.4f} nats/token "
                      f"(train {m.get('train_nll_per_token_nats', 0):.4f})",
            "draft_gpt": f"test NLL {m.get('test_nll_per_token_nats', 0):.4f} nats/token "
                         f"(train {m.get('train_nll_per_token_nats', 0):.4f})",
            "eagle_head": f"top-1 agreement {m.get('top1_agreement', 0):.4f}, CE {m.get('cls', 0):.4f}",
        }[name]
        budget = c.get("budget", {})
        steps = budget.get("steps", budget.get("epochs"))
        unit = "steps" if "steps" in budget else "epochs"
        times = [c["training_seconds"], c.get("training_cpu_seconds"), c.get("component_seconds"),
                 c.get("component_cpu_seconds")]
        totals = [t + (v or 0.0) for t, v in zip(totals, times, strict=True)]
        load = c.get("load_average", {})
        size = (weights / c["weights_file"]).stat().st_size / 2**20
        rows.append([name, f"{c['n_parameters']:,}", c["storage_dtype"], f"{size:.2f}",
                     f"{steps} {unit} x {budget.get('batch')}",
                     *("n/a" if v is None else f"{v:.0f}" for v in times),
                     f"{load['start']:.2f} / {load['end']:.2f}" if load else "n/a", key])
    rows.append(["total", "", "", "", "", *(f"{t:.0f}" for t in totals), "", ""])
    return _table(["component", "parameters", "stored as", "MiB", "budget", "loop wall s", "loop CPU s",
                   "component wall s", "component CPU s", "load avg (start / end)", "metrics"], rows)


def ambiguity_table(path: Path) -> list[str]:
    """The model's ambiguity next to the presets (and the fitted world when present)."""
    d = json.loads(path.read_text())
    m = d["model"]
    rows = [[f"mini model (target, CFG {d['cfg_scale']}, {d['n_images']} AR samples)", f"{m['top1']:.3f}",
             f"{m['entropy']:.3f}", f"{m['top10_mass']:.3f}",
             f"EAGLE head {m['accept_eagle']:.3f}; draft GPT {m['accept_draft_gpt']:.3f}"]]
    for name, s in d["worlds"].items():
        rows.append([f"`{name}` world preset", f"{s['top1']:.3f}", f"{s['entropy']:.3f}",
                     f"{s['top10_mass']:.3f}", f"{s['acceptance']:.3f}"])
    table = _table(["model / world", "mean top-1", "mean entropy (nats)", "mean top-10 mass",
                    "mean 1 - TV(p, q)"], rows)
    return table + ["", *fit_table(d["fitted"])] if "fitted" in d else table


def fit_table(fitted: dict) -> list[str]:
    """Each fitted world's figures next to the model's (``relaxspec mini ambiguity --fit``): the fitted
    ones first, then those only reported."""
    from relaxspec.mini.calibration import DEEP_FIGURE, FIT_FIGURES, REPORTED_FIGURES

    keys = list(fitted)
    rows = []
    for name in (*FIT_FIGURES, DEEP_FIGURE, *REPORTED_FIGURES):
        cells = [f"{f['model'][name]:.3f} / {f['world'][name]:.3f}" if name in f["model"] else ""
                 for f in (fitted[k] for k in keys)]
        rows.append([name + ("" if name in REPORTED_FIGURES else " (fitted)"), *cells])
    params = [f"- `{k}`: `{fitted[k]['params']}`" for k in keys]
    return _table(["figure", *(f"{k}: model / world" for k in keys)], rows) + ["", *params]


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def quality_table(path: Path) -> list[str]:
    """The image-quality table."""
    rows = [[r["config"], r["decoding"], r["n_images"], f"{r['fd']} ± {r.get('fd_bootstrap_sd', '')}",
             r["class_accuracy"], r["tokens_per_step"], r["expected_tokens_per_step"],
             r["target_forwards_per_image"], r["tv_bound_per_sequence"]]
            for r in _csv_rows(path)]
    return _table(["configuration", "decoding", "images", "FD ± bootstrap sd", "class accuracy",
                   "tokens/step", "exact E[tokens/step]", "target forwards/image", "TV bound/sequence"], rows)


def noise_table(path: Path) -> list[str]:
    """FD between sets that sample one distribution (the noise floor)."""
    d = json.loads(path.read_text())
    return _table(["sets (same distribution)", "images each", "FD between them"],
                  [[k, str(d["n_images"]), f"{v:.3f}"] for k, v in d["fd_between"].items()])


def validation_table(path: Path) -> list[str]:
    """The simulator-validation table."""
    rows = [[r["config"], r["sequences"], r["speculative_steps"], r["replay_mismatches"],
             r["measured_tokens_per_step"], r["trace_driven_prediction"],
             f"{100 * float(r['trace_driven_rel_error']):.1f}%", f"`{r['world']}`" if r.get("world") else "",
             r.get("world_prediction") or "",
             f"{100 * float(r['world_rel_error']):.1f}%" if r.get("world_rel_error") else ""]
            for r in _csv_rows(path)]
    return _table(["configuration", "sequences", "speculative steps", "replay mismatches",
                   "measured tokens/step", "trace-driven", "rel. error", "fitted world", "world's prediction",
                   "rel. error"], rows)


def render(weights: Path, out: Path) -> str:
    """All available tables as markdown."""
    parts = ["### Training", ""] + training_table(weights)
    for title, name, fn in (("Ambiguity", "ambiguity.json", ambiguity_table),
                            ("Image quality", "quality.csv", quality_table),
                            ("FD noise floor", "noise.json", noise_table),
                            ("Simulator validation", "validation/validation.csv", validation_table)):
        if (out / name).exists():
            parts += ["", f"### {title}", ""] + fn(out / name)
    return "\n".join(parts) + "\n"
