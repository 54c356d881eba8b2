"""The validation's tables (``relaxspec mini validate --docs``): one per model, written into the docs.

:func:`render` turns ``OUT/validation.csv`` and the fitted worlds' files (``OUT/worlds/KEY.toml``, whose
``[fit]`` table holds every figure and kappa as model / world) into markdown: the rows with their
errors, the worlds' figures beside the model's, and for every row the world misses by more than
:data:`GOAL`, by how much and which measured property of the model the world lacks (:func:`misfits`).
:func:`write_section` replaces the text between a section's two markers in a markdown file, so the
docs hold what the command printed, not a copy made by hand.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from relaxspec.mini.decoding import DecodeConfig
from relaxspec.mini.validation import WORLD_LEN, WORLD_SEQUENCES

GOAL = 0.05  # the goal: every row's prediction within 5% of the decoder
Z = 2.0  # a figure misses when the world is more than Z combined standard errors from the model
TARGET = ("top1", "top1_sd", "top1_lag1")
DRAFTER = ("accept_ranked", "draft_entropy", "accept_ranked_deep", "accept_sampled")
SHAPE = ("entropy", "top10_mass")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if math.isfinite(x) else ""


def _num(row: dict[str, Any], key: str, fmt: str = "{:.4f}") -> str:
    v = row.get(key)
    return fmt.format(v) if isinstance(v, int | float) and math.isfinite(v) else ""


def misfits(fit: dict[str, Any], params: Any, model_grid: int) -> dict[str, list[str]]:
    """The properties a fitted world lacks, from its ``[fit]`` table: per group (``kappa``, ``top-1``,
    ``drafter``, ``shape``, ``grid``) the figures whose world value lies more than :data:`Z` combined
    standard errors (or, with none recorded, 5%) from the model's, each as ``name model/world``."""
    out: dict[str, list[str]] = {"kappa": [], "top-1": [], "drafter": [], "shape": [], "grid": []}
    kappa = fit.get("kappa")
    if kappa:
        for m, g, w, sg, sw in zip(kappa["lags"], kappa["model"], kappa["world"], kappa["model_stderr"],
                                   kappa["world_stderr"], strict=True):
            if abs(w - g) > Z * math.hypot(sg, sw):
                out["kappa"].append(f"kappa_{m} {g:.3f}/{w:.3f}")
    else:
        out["kappa"].append("not measured")
    groups = (("top-1", TARGET), ("drafter", DRAFTER), ("shape", SHAPE))
    for group, names in groups:
        for name in names:
            f = fit.get("figures", {}).get(name)
            if f is None:
                continue
            g, w = f["model"], f["world"]
            se = f.get("model_stderr")
            off = abs(w - g) > (Z * se if se else GOAL * abs(g))
            if off:
                out[group].append(f"{name} {g:.3f}/{w:.3f}{'' if f.get('fitted') else ' (not fitted)'}")
    if params.grid_width != model_grid:
        out["grid"].append(f"width {params.grid_width} (model {model_grid})")
    return out


def figures_table(worlds: dict[str, tuple[Any, dict[str, Any]]]) -> list[str]:
    """The fitted worlds' figures and kappa beside the model's (``model / world``), one column per world."""
    keys = list(worlds)
    names: list[str] = []
    for _, fit in worlds.values():
        names += [n for n in fit.get("figures", {}) if n not in names]
    lines = ["| figure | " + " | ".join(f"`{k}`: model / world" for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for name in names:
        cells = []
        for k in keys:
            f = worlds[k][1].get("figures", {}).get(name)
            cells.append("" if f is None else f"{f['model']:.3f} / {f['world']:.3f}"
                         + ("" if f.get("fitted") else " (not fitted)"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lags = max((worlds[k][1].get("kappa", {}).get("lags", []) for k in keys), key=len, default=[])
    for i, m in enumerate(lags):
        cells = []
        for k in keys:
            kap = worlds[k][1].get("kappa")
            cells.append("" if not kap or i >= len(kap["lags"]) else
                         f"{kap['model'][i]:.3f} ± {kap['model_stderr'][i]:.3f} / {kap['world'][i]:.3f}")
        lines.append(f"| kappa_{m} | " + " | ".join(cells) + " |")
    lines.append("| grid width | " + " | ".join(str(worlds[k][0].grid_width) for k in keys) + " |")
    return lines


def render(rows: dict[str, dict[str, Any]], configs: list[DecodeConfig], worlds: dict[str, tuple[Any, dict]],
           *, model: str, command: str, model_grid: int = 8, pick: dict[str, Any] | None = None) -> list[str]:
    """The section of one model: the command, the rows table, advise's pick, the worlds' figures, the
    misses."""
    done = [c for c in configs if c.name in rows]
    predicted = [c for c in done if "world_prediction" in rows[c.name]]
    partial = len(predicted) < len(configs)
    counts = sorted({rows[c.name]["sequences"] for c in done})
    lines = [f"```bash\n{command}\n```", ""]
    if partial:
        lines += [f"**Partial**: {len(done)} of {len(configs)} configurations measured, {len(predicted)} "
                  "predicted by the fitted world; the run resumes where it stopped.", ""]
    lines += [f"{model}: {', '.join(map(str, counts)) or 'no'} images per row (class i % 10, uniforms "
              "keyed by (seed, i)); tokens per target forward over the speculative steps, ± its standard "
              f"error over images; the fitted world's prediction over {WORLD_SEQUENCES} sequences x "
              f"{WORLD_LEN} tokens, ± its standard error over sequences.", "",
              "| configuration | speculative steps | replay mismatches | measured tokens/forward "
              "| trace-driven | rel. error | fitted world | world's prediction | rel. error |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in done:
        r = rows[c.name]
        world = f"`{r['world_key']}`" if "world_prediction" in r else ""
        lines.append(
            f"| {c.name} | {r['speculative_steps']} | {r['replay_mismatches']} | "
            f"{_num(r, 'measured_tokens_per_forward')} ± {_num(r, 'measured_se')} | "
            f"{_num(r, 'trace_driven_prediction')} | {_pct(r.get('trace_driven_rel_error', math.nan))} | "
            f"{world} | {_num(r, 'world_prediction')}{' ± ' + _num(r, 'world_se') if world else ''} | "
            f"{_pct(r.get('world_rel_error', math.nan))} |")
    steps = sum(rows[c.name]["replayed_steps"] for c in done)
    mismatches = sum(rows[c.name]["replay_mismatches"] for c in done)
    within = [c for c in predicted if rows[c.name]["world_rel_error"] <= GOAL]
    lines += ["", f"Replay: {mismatches} mismatches in {steps:,} recorded steps. The fitted world is within "
              f"{GOAL:.0%} on {len(within)} of {len(predicted)} predicted rows."]
    if pick is not None:
        name = "advise's pick: " + pick["method"]
        r = rows.get(name)
        if r:
            decoded = (f"the decoder's row `{name}`: {r['measured_tokens_per_forward']:.4f} ± "
                       f"{r['measured_se']:.4f} tokens per forward")
        elif any(c.name == name for c in configs):
            decoded = "its row is still to be decoded"
        else:
            decoded = "a skip bounded by a TV reads the target after a skipped forward: no decoder row"
        lines += ["", f"`relaxspec advise` on the fitted `eagle` world, TV per token <= {pick['budget']:g}: "
                  f"top pick by predicted speed-up **{pick['method']}** (`{pick['tree']}`, "
                  f"`{pick['verification']}`), {float(pick['speedup']):.3f} ± "
                  f"{float(pick['se_speedup']):.3f}x, "
                  f"{float(pick['tokens_per_forward']):.3f} ± {float(pick['se_tokens_per_forward']):.3f} "
                  f"tokens per forward in the world ({pick['tv_kind']}; lossless best: "
                  f"{pick['lossless_best']}); {decoded}."]
    if worlds:
        lines += ["", "The fitted worlds (`relaxspec fit` on this model's lossless traces, kappa measured on "
                  "the model): every figure and kappa_m as model / world (kappa ± the model's standard "
                  "error).",
                  "", *figures_table(worlds)]
    missed = [c for c in predicted if rows[c.name]["world_rel_error"] > GOAL]
    if missed:
        lines += ["", "Rows the fitted world misses by more than 5%, and what the world lacks (figures more "
                  f"than {Z:g} standard errors from the model's, model/world):", ""]
        for c in missed:
            r = rows[c.name]
            sign = "high" if r["world_prediction"] > r["measured_tokens_per_forward"] else "low"
            params, fit = worlds[r["world_key"]]
            lacks = misfits(fit, params, model_grid)
            order = ("kappa", "top-1", "grid", "drafter", "shape") if c.is_jacobi else \
                ("drafter", "top-1", "shape", "kappa", "grid")
            said = "; ".join(f"{g}: {', '.join(lacks[g])}" for g in order if lacks[g]) or "no figure off"
            lines.append(f"- {c.name}: {_pct(r['world_rel_error'])} {sign} ({r['world_prediction']:.4f} "
                         f"against {r['measured_tokens_per_forward']:.4f} ± {r['measured_se']:.4f}); "
                         f"`{r['world_key']}` lacks {said}.")
    return lines


def load_worlds(folder: Path, keys: list[str]) -> dict[str, tuple[Any, dict[str, Any]]]:
    """The fitted worlds in ``folder`` (``KEY.toml``) that exist, as (parameters, ``[fit]`` table)."""
    from relaxspec.simulate.world_file import read_world_file

    return {k: read_world_file(folder / f"{k}.toml") for k in keys if (folder / f"{k}.toml").exists()}


def markers(section: str, command: str = "validate") -> tuple[str, str]:
    """The two lines between which :func:`write_section` writes ``section`` of ``relaxspec mini COMMAND``."""
    return (f"<!-- relaxspec mini {command}: {section} (generated; do not edit by hand) -->",
            f"<!-- end relaxspec mini {command}: {section} -->")


def write_section(doc: Path, section: str, lines: list[str], command: str = "validate") -> None:
    """Replace the text between ``section``'s markers in ``doc`` by ``lines`` (a ``ValueError`` naming the
    missing marker when the file lacks them)."""
    text = doc.read_text()
    begin, end = markers(section, command)
    if begin not in text or end not in text:
        raise ValueError(f"{doc} has no section {section!r}: add the lines {begin!r} and {end!r}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(head + begin + "\n\n" + "\n".join(lines) + "\n\n" + end + tail)
