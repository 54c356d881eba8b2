"""Standard figures of a results CSV (``relaxspec plot``): vector PDF + PNG, two-column paper sizes,
in the suite's figure style (:mod:`relaxspec.figstyle`: fonts, palette, one style per tree policy).

1. ``tokens_vs_relaxation``: tokens per step against the relaxation
   strength (LANTERN delta, LANTERN++ lam), one panel per world, one line per tree.
2. ``depth``: mean tree depth and mean accepted depth per tree, exact and
   most relaxed, one panel per world.
3. ``tradeoff``: tokens per step against the TV bound per token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from relaxspec.figstyle import FULL_WIDTH, METHODS, MethodStyle, method_key, method_style, pyplot, save
from simulate.sweep import read_results

# tree depth, accepted depth with the exact test, with the most relaxed test
DEPTH_COLOURS = ("#DDDDDD", METHODS["exact"].color, METHODS["lantern"].color)


def tree_styles(trees: list[str]) -> dict[str, MethodStyle]:
    """One style per tree spec; trees of one family in a CSV are told apart by their full spec."""
    keys = [method_key(t) for t in trees]
    return {t: method_style(t, label=t if keys.count(k) > 1 else None)
            for t, k in zip(trees, keys, strict=True)}


def _key(row) -> tuple:
    return (row["world"], row["tree"], row["rule"], row["variant"], row["temperature"])


def plot_results(csv_path: str | Path, out: str | Path) -> list[Path]:
    """Write the standard figures for ``csv_path`` into ``out``; returns the files written."""
    rows = read_results(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} holds no results")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plt = pyplot(headless=True)
    worlds = sorted({r["world"] for r in rows})
    trees = sorted({r["tree"] for r in rows})
    styles = tree_styles(trees)
    written: list[Path] = []

    # 1. tokens per step vs relaxation strength
    fig, axes = plt.subplots(2, len(worlds), figsize=(FULL_WIDTH, 4.2), squeeze=False, sharey="col")
    for j, world in enumerate(worlds):
        for i, (kind, label) in enumerate((("additive", "LANTERN $\\delta$"), ("multiplicative",
                                                                               "LANTERN++ $\\lambda$"))):
            ax = axes[i][j]
            for tree in trees:
                sel = [r for r in rows if r["world"] == world and r["tree"] == tree and r["rule"] == "r1"
                       and r["variant"] == "principled"]
                exact = [r for r in sel if r["relax"] == "none"]
                pts = sorted((r["delta"] if kind == "additive" else r["lam"], r["mean_tokens_per_step"],
                              r["se_tokens_per_step"]) for r in sel if r["relax"] == kind)
                if exact:
                    pts = [(0.0 if kind == "additive" else 1.0, exact[0]["mean_tokens_per_step"],
                            exact[0]["se_tokens_per_step"])] + pts
                if len(pts) < 1:
                    continue
                x, y, e = (np.array(v) for v in zip(*pts, strict=True))
                ax.errorbar(x, y, yerr=e, **styles[tree].kwargs())
            ax.set_xlabel(label + (" (TV budget)" if kind == "additive" else " (mass ratio)"))
            ax.set_ylabel("tokens per step")
            ax.set_title(f"{world}")
    axes[0][0].legend(loc="upper left")
    fig.tight_layout()
    written += save(fig, out, "tokens_vs_relaxation")
    plt.close(fig)

    # 2. tree depth vs accepted depth, exact and most relaxed
    fig, axes = plt.subplots(1, len(worlds), figsize=(FULL_WIDTH, 2.4), squeeze=False, sharey=True)
    for j, world in enumerate(worlds):
        ax = axes[0][j]
        sel = [r for r in rows if r["world"] == world and r["rule"] == "r1" and r["variant"] == "principled"]
        xs = np.arange(len(trees))
        for off, (label, pick) in enumerate((
            ("tree depth", lambda rs: rs[0]["mean_tree_depth"] if rs else np.nan),
            ("accepted, exact", lambda rs: next((r["mean_accepted_depth"] for r in rs
                                                 if r["relax"] == "none"), np.nan)),
            ("accepted, most relaxed", lambda rs: max((r["mean_accepted_depth"] for r in rs
                                                       if r["relax"] != "none"), default=np.nan)),
        )):
            vals = [pick([r for r in sel if r["tree"] == t]) for t in trees]
            ax.bar(xs + (off - 1) * 0.27, vals, width=0.27, label=label, color=DEPTH_COLOURS[off])
        ax.set_xticks(xs)
        ax.set_xticklabels([styles[t].label for t in trees], rotation=30, ha="right")
        ax.set_ylabel("depth (tokens)")
        ax.set_title(world)
    axes[0][0].legend(loc="upper left")
    fig.tight_layout()
    written += save(fig, out, "depth")
    plt.close(fig)

    # 3. speed / distortion trade-off
    fig, axes = plt.subplots(1, len(worlds), figsize=(FULL_WIDTH, 2.4), squeeze=False)
    for j, world in enumerate(worlds):
        ax = axes[0][j]
        for tree in trees:
            sel = [r for r in rows if r["world"] == world and r["tree"] == tree and r["rule"] == "r1"
                   and r["variant"] == "principled" and np.isfinite(r["tv_bound_per_token"])]
            sel.sort(key=lambda r: r["tv_bound_per_token"])
            ax.plot([r["tv_bound_per_token"] for r in sel], [r["mean_tokens_per_step"] for r in sel],
                    **styles[tree].kwargs())
        ax.set_xlabel("TV bound per token")
        ax.set_ylabel("tokens per step")
        ax.set_title(world)
    axes[0][0].legend(loc="lower right")
    fig.tight_layout()
    written += save(fig, out, "tradeoff")
    plt.close(fig)
    return written
