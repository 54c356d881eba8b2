"""The report of ``relaxspec advise``: the ranked table (markdown and CSV) and the Pareto figure.

The table lists every run (:func:`relaxspec.studies.advise.rank`'s records): tokens per target forward,
SPEC 8's speed-up and the TV per token, each ± its standard error over sequences, which TV it is, whether
it is within the budget and its two ranks; above it, the lossless best beside the lossy best. The figure
(two-column width, PDF + PNG) plots tokens per target forward (a) and the predicted speed-up (b) against
the TV per token, one style per method family (:mod:`relaxspec.figstyle`), with the budget as a line,
the Pareto front of the rows within it, and one legend below the panels.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from relaxspec.studies.advise import TV_MEASURED, TV_UNKNOWN, bests

CSV_COLUMNS = ("method", "family", "tree", "verification", "tv_kind", "tokens_per_forward",
               "se_tokens_per_forward", "speedup", "se_speedup", "tv_per_token", "se_tv_per_token",
               "verified_per_forward", "draft_calls_per_forward", "within", "rank_tokens", "rank_speedup")
MARKS = {TV_MEASURED: "†", TV_UNKNOWN: "‡"}  # rows whose TV has no proved bound / is not recorded


def write_csv(rows: list[dict], path: Path) -> Path:
    """The table as CSV (full precision; empty ranks for rows outside the budget)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r[k] is None else r[k]) for k in CSV_COLUMNS})
    return path


def _pm(value: float, se: float, digits: int = 3) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f} ± {se:.{digits}f}" if np.isfinite(se) else f"{value:.{digits}f}"


def _pick(name: str, r: dict | None, col: str, unit: str) -> str:
    if r is None:
        return f"{name}: none within the budget"
    return (f"{name}: **{r['method']}** ({r['tree']}, `{r['verification']}`), {_pm(r[col], r['se_' + col])}"
            f"{unit}, TV per token {_pm(r['tv_per_token'], r['se_tv_per_token'], 4)} ({r['tv_kind']})")


def markdown(rows: list[dict], *, world: str, budget: float, cost: str, sizes: str,
             skipped: list[str]) -> list[str]:
    """The report's lines: the bests, the ranked table, what the marks mean and what did not run."""
    lines = [f"# relaxspec advise: {world}, TV per token <= {budget:g}", "",
             f"{sizes}; speed-up: SPEC 8 on {cost}; ± one standard error over sequences.", ""]
    for col, what, unit in (("speedup", "predicted speed-up", "x"),
                            ("tokens_per_forward", "tokens per target forward", " tokens per forward")):
        b = bests(rows, col)
        lines += [f"Best by {what}:", "", f"- {_pick('lossless', b['lossless'], col, unit)}",
                  f"- {_pick('lossy', b['lossy'], col, unit)}", ""]
    order = sorted(rows, key=lambda r: (r["rank_speedup"] is None, r["rank_speedup"] or 0))
    lines += ["| rank (speed-up) | rank (tokens) | method | tree | verification | tokens per target forward "
              "| "
              "speed-up (SPEC 8) | TV per token | TV | within budget |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in order:
        mark = MARKS.get(r["tv_kind"], "")
        lines.append(f"| {r['rank_speedup'] or '-'} | {r['rank_tokens'] or '-'} | {r['method']}{mark} | "
                     f"`{r['tree']}` | `{r['verification']}` | "
                     f"{_pm(r['tokens_per_forward'], r['se_tokens_per_forward'])} | "
                     f"{_pm(r['speedup'], r['se_speedup'])} | "
                     f"{_pm(r['tv_per_token'], r['se_tv_per_token'], 4)} | {r['tv_kind']} | "
                     f"{'yes' if r['within'] else 'no'} |")
    lines += ["", "TV: `lossless`, 0 by theorem; `exact`, the exact TV of the nodes that decided each token "
              "(SPEC 9.4), averaged over the run; `proved bound`, the realised terms of a proved per-node "
              f"bound (the budgeted relaxation, relaxed R4). {MARKS[TV_MEASURED]} `{TV_MEASURED}`: the "
              "simulator's exact TV of the emitted laws, with no proved bound (VVS); ranked by that "
              f"measurement. {MARKS[TV_UNKNOWN]} `{TV_UNKNOWN}`: the simulator records no TV for the run "
              "(SCD's and PAC's official variants, whose distortion depends on the window's history; a "
              "relaxed R2 test whose exact TV is not computed): shown, never ranked."]
    if skipped:
        lines += ["", "Not run in this world:", "", *[f"- {s}" for s in skipped]]
    return lines


def figure(rows: list[dict], budget: float, out: Path, name: str = "pareto") -> list[Path]:
    """Tokens per target forward (a) and SPEC 8's speed-up (b) against TV per token, error bars of one
    standard error, the budget as a dashed line and the Pareto front of the rows within it."""
    from relaxspec.figstyle import figure_legend, method_style, panel_label, pyplot, save, subplots

    plt = pyplot(headless=True)
    fig, axes = subplots(1, 2, width="full", height=2.6)
    shown = [r for r in rows if np.isfinite(r["tv_per_token"])]
    positive = [r["tv_per_token"] for r in shown if r["tv_per_token"] > 0]
    lin = min(positive + [budget if budget > 0 else 1e-3]) / 2  # linear around 0: lossless rows at TV 0
    for i, (ax, col, ylabel) in enumerate(zip(axes, ("tokens_per_forward", "speedup"),
                                              ("tokens per target forward", "speed-up over AR (×, SPEC 8)"),
                                              strict=True)):
        for fam in dict.fromkeys(r["family"] for r in shown):
            pts = sorted((r for r in shown if r["family"] == fam), key=lambda r: r["tv_per_token"])
            st = method_style(fam)
            ax.errorbar([r["tv_per_token"] for r in pts], [r[col] for r in pts],
                        xerr=[np.nan_to_num(r["se_tv_per_token"]) for r in pts],
                        yerr=[np.nan_to_num(r["se_" + col]) for r in pts], color=st.color, marker=st.marker,
                        ls=st.linestyle, label=st.label, elinewidth=0.6)
        front = pareto([r for r in shown if r["within"]], col)
        if front:
            ax.step([r["tv_per_token"] for r in front] + [budget], [r[col] for r in front] + [front[-1][col]],
                    where="post",
                    color="#777777", lw=2.5, alpha=0.35, zorder=0, label="Pareto front within the budget")
        ax.axvline(budget, color="#000000", ls="--", lw=0.8, label=f"TV budget {budget:g} per token")
        ax.set_xscale("symlog", linthresh=lin)
        ax.set_xlim(left=-lin / 2)  # the lossless rows (TV 0) clear of the axis
        ax.set_xlabel("TV per token (exact, proved bound or measured)")
        ax.set_ylabel(ylabel)
        panel_label(ax, "ab"[i])
    fig.tight_layout()
    figure_legend(fig, ncol=4)
    paths = save(fig, out, name)
    plt.close(fig)
    return paths


def pareto(rows: list[dict], col: str) -> list[dict]:
    """The rows no other row beats at once in ``col`` (higher) and TV per token (lower), by TV."""
    front, best = [], -np.inf
    for r in sorted(rows, key=lambda r: (r["tv_per_token"], -r[col])):
        if r[col] > best:
            front.append(r)
            best = r[col]
    return front

