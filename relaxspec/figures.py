"""Standard figures of a results CSV (``relaxspec plot``): vector PDF + PNG, two-column paper sizes,
in the suite's figure style (:mod:`relaxspec.figstyle`: fonts, colour-blind-safe palette, one style per
method, legends outside the axes).

1. ``tokens_vs_relaxation``: tokens per step against the relaxation strength,
   a row of panels per family (LANTERN delta, LANTERN++ lam; the exact run
   at delta = 0 and lam = 1), one line per tree.
2. ``depth``: per tree, the tree depth (light bar) and the accepted depth
   (dark bar) of the same run, for the exact run and the most relaxed run of
   each family (largest delta or lam, then largest k).
3. ``tradeoff``: tokens per step against the TV bound per token, one line
   per tree and family, sorted by the TV bound.

The figures read a row's verification through the views :func:`relaxspec.results.load` derives from its
``verification`` column (rule, variant, relax, k, delta, lam, boost). Every varying column has a place:
world and temperature are facets (a column of panels each; a row each beyond two facets), tree, rule,
variant and boost the line's style (:func:`relaxspec.figstyle.method_style`; a boosted run, relax
``none``, is a series of its own: a point at the exact x of ``tokens_vs_relaxation``, at its TV bound in
``tradeoff``, a bar of its own in ``depth``), delta and lam the x axis; k, n_sequences, seq_len, seed and
settings, where they vary, the line's label (of the settings, what tells lines apart) and a shade of its
colour. Rows a figure does not draw are named in notes (:func:`render`). Each figure is first computed as
data (:func:`plan`: panels of sorted lines and bars), then drawn (:func:`draw`).

Over 400 lines: the three standard figures are planned as data and drawn from it in one place, so the
tests that check the data also check what is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np

from relaxspec.figstyle import (
    COLUMN_WIDTH,
    DEPTH_LEGEND,
    FULL_WIDTH,
    METHODS,
    MethodStyle,
    boost_key,
    boost_label,
    depth_bars,
    figure_legend,
    method_key,
    method_style,
    relax_label,
    save,
    shades,
    style,
)
from relaxspec.results import COLUMNS, NO_SETTINGS, config_key, load, settings_differences, with_views
from relaxspec.theory.boost import Boost
from relaxspec.theory.relax import Relax, RelaxKind, Variant, as_variant
from relaxspec.theory.rules import Rule, as_rule
from relaxspec.theory.verification import Verification

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

# varying: in a line's label and a shade of its colour
EXTRAS = ("k", "n_sequences", "seq_len", "seed", "settings")
TOKENS, TV = "mean_tokens_per_step", "tv_bound_per_token"


@dataclass(frozen=True)
class Family:
    """A relaxation family: its ``relax`` column value, its parameter column and the exact run's x."""

    kind: str
    param: str
    exact_x: float
    method: str  # figstyle.METHODS key
    symbol: str
    axis: str

    @property
    def name(self) -> str:
        """``LANTERN δ`` or ``LANTERN++ λ``."""
        return f"{METHODS[self.method].label} {self.symbol}"


FAMILIES = (
    Family("additive", "delta", 0.0, "lantern", "δ", "LANTERN δ (TV budget)"),
    Family("multiplicative", "lam", 1.0, "lantern++", "λ", "LANTERN++ λ (mass ratio)"),
)


def boost_of(row: dict) -> str:
    """A row's ``boost`` column (``none`` where it has none: a file from before boosts, a synthetic row)."""
    b = row.get("boost")
    return "none" if b is None or b == "" or (isinstance(b, float) and np.isnan(b)) else str(b)


class LineKey(NamedTuple):
    """What one line is drawn for (within a facet): a tree, rule, variant and run size; ``k`` or None; the
    boost (a boosted run is a series of its own, never the unboosted run's line); the ``settings`` (a run
    with another world override or Sequoia measurement is a line of its own)."""

    tree: str
    rule: str
    variant: str
    n_sequences: float
    seq_len: float
    seed: float
    k: float | None = None
    boost: str = "none"
    settings: str = NO_SETTINGS

    @classmethod
    def of(cls, row: dict, k: bool = False) -> LineKey:
        """The key of ``row`` (with its k when ``k``)."""
        return cls(row["tree"], row["rule"], row["variant"], row["n_sequences"], row["seq_len"], row["seed"],
                   row["k"] if k else None, boost_of(row), row.get("settings", NO_SETTINGS))

    @property
    def verification(self) -> Verification:
        """The line's verification but its relaxation (the x axis): rule, variant and boost, which style it
        (:func:`relaxspec.figstyle.method_style`)."""
        return Verification(as_rule(self.rule), variant=as_variant(self.variant),
                            boost=Boost.parse(self.boost))


@dataclass(frozen=True)
class Line:
    """One line of a panel, x sorted."""

    style: MethodStyle
    x: tuple[float, ...]
    y: tuple[float, ...]
    yerr: tuple[float, ...]


@dataclass(frozen=True)
class Bars:
    """One run per category: its tree depth and accepted depth (NaN: no such run)."""

    style: MethodStyle
    tree_depth: tuple[float, ...]
    accepted_depth: tuple[float, ...]
    yerr: tuple[float, ...]


@dataclass(frozen=True)
class Panel:
    """One axes: a title, axis labels and lines, or bars over categories."""

    title: str
    xlabel: str
    ylabel: str
    lines: tuple[Line, ...] = ()
    categories: tuple[str, ...] = ()
    bars: tuple[Bars, ...] = ()


@dataclass(frozen=True)
class FigureData:
    """A figure as data: a grid of panels (rows x facets) and notes on the rows it does not draw."""

    name: str
    panels: tuple[tuple[Panel | None, ...], ...]
    notes: tuple[str, ...] = ()
    row_height: float = 2.0
    sharey: Literal["row", "col"] | bool = False
    legend_title: str | None = None


@dataclass(frozen=True)
class Rendered:
    """The files :func:`render` wrote and its notes on rows not drawn (one line each)."""

    paths: list[Path]
    notes: list[str]


def _finite(row: dict, *cols: str) -> bool:
    return all(np.isfinite(row[c]) for c in cols)


def _facets(rows: list[dict]) -> list[tuple[str, float]]:
    return list(dict.fromkeys((r["world"], r["temperature"]) for r in rows))


def _facet_title(facet: tuple[str, float], several_temperatures: bool) -> str:
    world, temperature = facet
    return f"{world}, T = {temperature:g}" if several_temperatures else world


def _varying(keys: Iterable[LineKey]) -> list[str]:
    keys = list(keys)
    return [c for c in EXTRAS if len({getattr(k, c) for k in keys if getattr(k, c) is not None}) > 1]


def _varying_settings(keys: list[LineKey]) -> dict[LineKey, str]:
    """Each key's settings that tell it from the keys that differ from it in nothing else
    (:func:`relaxspec.results.settings_differences`); empty for a key alone."""
    groups: dict[LineKey, list[LineKey]] = {}
    for key in keys:
        groups.setdefault(key._replace(settings=NO_SETTINGS), []).append(key)
    out = {}
    for group in groups.values():
        shown = settings_differences([k.settings for k in group]) if len(group) > 1 else {}
        out.update({key: shown.get(key.settings, "") for key in group})
    return out


def _labels(keys: list[LineKey], varying: list[str]) -> dict[LineKey, str]:
    """Method label (figstyle), the tree spec where one method has several, the varying extras (of the
    settings, the names that vary: :func:`_varying_settings`)."""
    specs: dict[tuple, set[str]] = {}
    for key in keys:
        specs.setdefault((method_key(key.tree), key.rule, key.variant, key.boost), set()).add(key.tree)
    settings = _varying_settings(keys) if "settings" in varying else {}
    out = {}
    for key in keys:
        label = method_style(key.tree, key.verification).label
        if len(specs[method_key(key.tree), key.rule, key.variant, key.boost]) > 1:
            label += f" [{key.tree}]"
        extras = [settings[key] if c == "settings" else f"{c}={getattr(key, c):g}"
                  for c in varying if getattr(key, c) is not None]
        out[key] = ", ".join([label, *(e for e in extras if e)])
    return out


def line_styles(keys: Iterable[LineKey]) -> dict[LineKey, MethodStyle]:
    """One style per line key: the method's (figstyle), labelled apart; keys that would look alike get
    shades of the colour (darkest first)."""
    keys = list(dict.fromkeys(keys))
    labels = _labels(keys, _varying(keys))
    styles = {key: method_style(key.tree, key.verification, label=labels[key]) for key in keys}
    looks: dict[tuple, list[LineKey]] = {}
    for key, st in styles.items():
        looks.setdefault((st.color, st.marker, st.linestyle, st.fillstyle), []).append(key)
    for (color, *_), members in looks.items():
        if len(members) > 1:
            for key, shade in zip(members, shades(color, len(members), lightest=0.45)[::-1], strict=True):
                styles[key] = replace(styles[key], color=shade)
    return styles


def _exact_rows(rows: list[dict]) -> dict[LineKey, dict]:
    """Exact rows by line key; official variants share the principled run (the sweep runs it once)."""
    exact = {LineKey.of(r): r for r in rows if r["relax"] == RelaxKind.NONE}
    for key, r in list(exact.items()):
        if key.variant == Variant.PRINCIPLED:
            exact.setdefault(key._replace(variant=Variant.OFFICIAL), r)
    return exact


def _line_keys(rows: list[dict], k_varies: bool) -> list[LineKey]:
    """The key of every line (what :func:`line_styles` styles): relaxed runs' (with k where k varies),
    and exact runs' of trees with no relaxed run."""
    relaxed = [LineKey.of(r, k=k_varies) for r in rows if r["relax"] != RelaxKind.NONE]
    series = {k._replace(k=None) for k in relaxed}
    return list(dict.fromkeys(relaxed + [k for k in map(LineKey.of, rows) if k not in series]))


def family_lines(rows: list[dict], family: Family, x: Callable[[dict], float],
                 styles: dict[LineKey, MethodStyle], k_varies: bool) -> list[Line]:
    """The lines of one panel: per line key the family's runs plus the exact run, sorted by ``x``.

    A tree without runs of ``family`` is drawn as its exact point alone, in the style of its first line.
    """
    exact = _exact_rows(rows)
    groups: dict[LineKey, list[dict]] = {}
    for r in rows:
        if r["relax"] == family.kind:
            groups.setdefault(LineKey.of(r, k=k_varies), []).append(r)
    series = {g._replace(k=None) for g in groups}
    lone = [k for k, r in exact.items() if r["variant"] == k.variant and k not in series]
    lines = []
    for key in [*groups, *lone]:
        base = exact.get(key._replace(k=None))
        runs = groups.get(key, []) + ([base] if base else [])
        xs, ys, es = zip(*sorted((x(r), r[TOKENS], r["se_tokens_per_step"]) for r in runs), strict=True)
        style = styles.get(key) or next(st for k, st in styles.items() if k._replace(k=None) == key)
        lines.append(Line(style, xs, ys, es))
    return lines


def _relax_of(row: dict) -> Relax:
    if row["relax"] == RelaxKind.ADDITIVE:
        return Relax.additive(int(row["k"]), row["delta"])
    return Relax.multiplicative(int(row["k"]), row["lam"])


def _most_relaxed(runs: list[dict], family: Family) -> dict | None:
    return max(runs, key=lambda r: (r[family.param], r["k"]), default=None)


def _bars(style: MethodStyle, picked: list[dict | None]) -> Bars:
    def col(c: str) -> tuple[float, ...]:
        return tuple(r[c] if r else np.nan for r in picked)

    return Bars(style, col("mean_tree_depth"), col("mean_accepted_depth"), col("se_tokens_per_step"))


def _wrap(panels: list[Panel], ncols: int = 2) -> tuple[tuple[Panel | None, ...], ...]:
    """Panels in rows of at most ``ncols`` (the last row padded with None)."""
    padded = panels + [None] * (-len(panels) % ncols)
    return tuple(tuple(padded[i:i + ncols]) for i in range(0, len(padded), ncols))


@dataclass(frozen=True)
class _Setting:
    """What every figure of one CSV shares: its rows by facet, facet titles, families and line styles."""

    by_facet: list[list[dict]]
    titles: list[str]
    families: list[Family]
    k_varies: bool
    styles: dict[LineKey, MethodStyle]

    @classmethod
    def of(cls, rows: list[dict]) -> _Setting:
        facets = _facets(rows)
        several_t = len({t for _, t in facets}) > 1
        k_varies = len({r["k"] for r in rows if r["relax"] != RelaxKind.NONE}) > 1
        return cls([[r for r in rows if (r["world"], r["temperature"]) == f] for f in facets],
                   [_facet_title(f, several_t) for f in facets],
                   [f for f in FAMILIES if any(r["relax"] == f.kind for r in rows)] or [FAMILIES[0]],
                   k_varies, line_styles(_line_keys(rows, k_varies)))


def _line_figure(name: str, s: _Setting, sel: Callable[[dict], bool], x: Callable[[Family, dict], float],
                 xlabel: Callable[[Family], str], title: Callable[[str, Family], str]) -> FigureData:
    """Tokens per step against ``x``: a panel per family and facet (families in rows up to two facets,
    in columns beyond)."""
    grid = [[Panel(title(t, fam), xlabel(fam), "tokens per step", tuple(family_lines(
        [r for r in rows if sel(r)], fam, partial(x, fam), s.styles, s.k_varies)))
        for t, rows in zip(s.titles, s.by_facet, strict=True)] for fam in s.families]
    if len(s.titles) <= 2:
        return FigureData(name, tuple(map(tuple, grid)), sharey="col")
    return FigureData(name, tuple(zip(*grid, strict=True)), sharey="row")


def _depth_figure(s: _Setting) -> FigureData:
    """Tree and accepted depth of the same runs, per tree: the exact run, each boosted run and the most
    relaxed run of each family."""
    rows = [r for facet in s.by_facet for r in facet]
    keys = list(dict.fromkeys(LineKey.of(r)._replace(boost="none") for r in rows))  # categories: no boost
    labels = _labels(keys, [c for c in _varying(keys) if c != "k"])
    boosts = list(dict.fromkeys(b for b in map(boost_of, rows) if b != "none"))
    families = [f for f in s.families if any(r["relax"] == f.kind for r in rows)]  # no empty bars
    picked: dict[str, list[list[dict | None]]] = {"exact": [], **{b: [] for b in boosts}}
    for sel in s.by_facet:
        exact = _exact_rows(sel)
        for b in ("exact", *boosts):  # each boost: a bar of its own beside the exact run's
            picked[b].append([exact.get(k._replace(boost="none" if b == "exact" else b)) for k in keys])
        for fam in families:
            runs = [[r for r in sel if r["relax"] == fam.kind and LineKey.of(r) == k] for k in keys]
            picked.setdefault(fam.kind, []).append([_most_relaxed(rs, fam) for rs in runs])
    styles = {"exact": METHODS["exact"]}
    for b in boosts:
        key = boost_key(Verification(Rule.R2, boost=Boost.parse(b)))  # the family colour, whatever the rule
        assert key is not None  # boosts: the rows' boosts other than none
        styles[b] = replace(METHODS[key], label=boost_label(b))
    for fam in families:
        chosen = [r for facet in picked[fam.kind] for r in facet if r]
        label = (relax_label(_relax_of(chosen[0]), show_k=s.k_varies)
                 if chosen and len({(r[fam.param], r["k"]) for r in chosen}) == 1
                 else f"{METHODS[fam.method].label}, largest {fam.symbol}")
        styles[fam.kind] = replace(METHODS[fam.method], label=label)
    panels = [Panel(title, "", "depth (tokens)", categories=tuple(labels[k] for k in keys),
                    bars=tuple(_bars(styles[kind], picked[kind][j]) for kind in picked))
              for j, title in enumerate(s.titles)]
    drawn = {id(r) for per_facet in picked.values() for facet in per_facet for r in facet if r}
    left = sum(id(r) not in drawn for r in rows)
    largest = ", ".join(f.symbol for f in families)
    notes = (f"depth: {left} of {len(rows)} rows not drawn: it shows the exact and boosted runs and the most "
             f"relaxed run of each family (largest {largest}, then largest k) per tree; tokens_vs_relaxation "
             "draws them all",) if left else ()
    return FigureData("depth", _wrap(panels, min(2, len(panels))), notes, row_height=2.4,
                      legend_title=DEPTH_LEGEND)


def _drawable(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """The rows every figure can draw (the last of repeated configurations), notes on the others."""
    notes = []
    unique = list({config_key(r): r for r in rows}.values())
    if len(unique) < len(rows):
        notes.append(f"all figures: {len(rows) - len(unique)} rows repeat an earlier row's configuration; "
                     "the last of each is drawn")
    kinds = {f.kind for f in FAMILIES} | {"none"}
    odd = sorted({r["relax"] for r in unique if r["relax"] not in kinds})
    if odd:
        notes.append(f"all figures: the rows of unknown relaxations {odd} are not drawn")
    bad = sum(r["relax"] in kinds and not _finite(r, TOKENS) for r in unique)
    if bad:
        notes.append(f"all figures: {bad} rows with no tokens per step (NaN) are not drawn")
    drawable = [r for r in unique if r["relax"] in kinds and _finite(r, TOKENS)]
    if not drawable:
        raise ValueError("no row of the results can be drawn: " + "; ".join(notes))
    return drawable, notes


def plan(rows: list[dict]) -> tuple[list[FigureData], list[str]]:
    """The standard figures of ``rows`` (a results CSV's) as data, and notes on the rows not drawn."""
    rows, notes = _drawable(rows)
    s = _Setting.of(rows)
    tokens = _line_figure("tokens_vs_relaxation", s, lambda r: True,
                          lambda fam, r: r[fam.param] if r["relax"] == fam.kind else fam.exact_x,
                          lambda fam: fam.axis, lambda t, fam: t)
    tradeoff = _line_figure("tradeoff", s, lambda r: _finite(r, TV), lambda fam, r: r[TV],
                            lambda fam: "TV bound per token (probability)", lambda t, fam: f"{t}: {fam.name}")
    no_tv = [r for r in rows if not _finite(r, TV)]
    if no_tv:
        rules = ", ".join(sorted({r["rule"] for r in no_tv}))
        tradeoff = replace(tradeoff, notes=(f"tradeoff: {len(no_tv)} of {len(rows)} rows not drawn: their TV "
                                            f"bound per token is NaN (rule {rules}: the simulator bounds no "
                                            "TV for them)",))
    figures = [tokens, _depth_figure(s), tradeoff]
    return figures, notes + [n for f in figures for n in f.notes]


def _draw_panel(ax, panel: Panel | None) -> None:
    if panel is None:
        ax.set_axis_off()
        return
    for line in panel.lines:
        ax.errorbar(line.x, line.y, yerr=line.yerr, **line.style.kwargs())
    if panel.bars:
        xs = np.arange(len(panel.categories))
        width = 0.8 / len(panel.bars)
        for i, b in enumerate(panel.bars):
            depth_bars(ax, xs + (i - (len(panel.bars) - 1) / 2) * width, b.tree_depth, b.accepted_depth,
                       width=width, color=b.style.color, label=b.style.label, yerr=b.yerr)
        ax.set_xticks(xs, panel.categories, rotation=30, ha="right")
    ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel)


def draw(data: FigureData) -> Figure:
    """The matplotlib figure of ``data`` in the suite's style: one axes per panel, one legend below them all.

    A :class:`~matplotlib.figure.Figure` with its own Agg canvas, outside pyplot: drawing it changes
    neither the caller's backend (a notebook's inline one) nor its rcParams, and leaves no figure open.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    nrows, ncols = len(data.panels), len(data.panels[0])
    width = FULL_WIDTH if ncols > 1 else COLUMN_WIDTH
    with style():
        fig = Figure(figsize=(width, data.row_height * nrows))
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=data.sharey)
        for i, row in enumerate(data.panels):
            for j, panel in enumerate(row):
                _draw_panel(axes[i][j], panel)
                if data.sharey == "row" and j:
                    axes[i][j].set_ylabel("")  # the row's first panel names the shared axis
        fig.tight_layout()
        figure_legend(fig, title=data.legend_title)
    return fig


def render(results: pd.DataFrame | str | Path, out: str | Path) -> Rendered:
    """Write the standard figures of ``results`` into ``out``; the files and notes on rows not drawn.

    Parameters
    ----------
    results : DataFrame, str or Path
        A frame of :func:`relaxspec.results.load` (or of its :data:`~relaxspec.results.COLUMNS`; the
        verification's views are derived from ``verification``), or the path of a results CSV or
        Parquet copy, read by :func:`relaxspec.results.load`.
    out : str or Path
        The folder of the PDF and PNG files (made if missing).

    Notes
    -----
    The caller's matplotlib backend and rcParams are left as they were (:func:`draw`).
    """
    if isinstance(results, str | Path):
        source, frame = str(results), load(results)
    else:
        source, frame = "the results frame", results
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{source} is not a results table: it lacks the columns {missing}")
        frame = with_views(frame[COLUMNS])  # the views as load gives them, whatever the frame held
    rows = frame.to_dict("records")
    if not rows:
        raise ValueError(f"{source} holds no results")
    figures, notes = plan(rows)
    paths: list[Path] = []
    with style():  # savefig reads rcParams too
        for data in figures:
            paths += save(draw(data), out, data.name)
    return Rendered(paths, notes)


def plot_results(results: pd.DataFrame | str | Path, out: str | Path) -> list[Path]:
    """Write the standard figures of ``results`` into ``out``; returns the files written
    (:func:`render` also returns notes on rows not drawn)."""
    return render(results, out).paths
