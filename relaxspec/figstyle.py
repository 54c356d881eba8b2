"""One figure style for every figure of the suite: two-column paper sizes, fonts, palette, methods.

- Sizes: :data:`COLUMN_WIDTH` (3.3 in, one column) and :data:`FULL_WIDTH`
  (6.9 in, both columns); font sizes read at print size (7 pt text).
- Palette: Okabe and Ito's colour-blind-safe scheme (:data:`OKABE_ITO`)
  for the tree policies, Paul Tol's *muted* scheme (:data:`PALETTE`) for
  the verification rules (exact grey, LANTERN teal, LANTERN++ purple).
- Methods: one mapping from a method to its label, colour, marker and line
  style (:func:`method_style`). A method is a tree policy (AR, EAGLE-2, DDD,
  static ``naive_extend_57`` / ``mc_sim_7b_63``, Sequoia, chains) or a
  verification rule (exact, LANTERN delta, LANTERN++ lam), given as a spec
  string (``"eagle2:10,4,59"``: :mod:`core.trees.spec`'s grammar, which is also
  ``str(policy)``; ``"additive:k=1000,delta=0.1"``), a policy object or a
  ``theory.Relax``. Every
  method has its own (colour, marker, line style) and every tree policy its
  own marker; the seven trees of ``relaxspec demo`` have seven colours. Trees
  that extend another (issue 7's ``latent-diverse``, ``sequoia-diverse``,
  ``costaware``; ``mc_sim_7b_63``) share a colour with a sibling and are
  dashed; chains are grey and dashed. The official variants keep their method's colour with dashed lines
  and open markers; rule R2 dash-dots, R3 dots (official R2: dash-dot-dot).
  Methods added later register with :func:`register_method`. A method is drawn as one verification
  verifies it (:func:`method_style`'s ``verification``: its rule, variant and boost); a boosted run (GSD,
  Cool-SD, the budget) is drawn in its boost's colour and marker with its tree's line style.
- Legends go outside the axes (:func:`figure_legend`), so they cover no data;
  depths of a run are drawn one way (:func:`depth_bars`).

Use :func:`pyplot` to get a styled ``matplotlib.pyplot``, :func:`subplots`
for a figure of paper width and :func:`save` to write vector PDF + PNG.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from relaxspec.core.trees.spec import tree_kind
from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import Verification

COLUMN_WIDTH = 3.3  # inches: one column of a two-column paper
FULL_WIDTH = 6.9  # inches: a figure across both columns
PNG_DPI = 150  # enough for the README and slides; the PDF is the figure for papers
FORMATS = ("pdf", "png")

# Paul Tol's muted qualitative scheme (https://personal.sron.nl/~pault/), colour-blind safe.
PALETTE: dict[str, str] = {
    "indigo": "#332288", "cyan": "#88CCEE", "teal": "#44AA99", "green": "#117733", "olive": "#999933",
    "sand": "#DDCC77", "rose": "#CC6677", "wine": "#882255", "purple": "#AA4499",
}
# Okabe and Ito's scheme (https://jfly.uni-koeln.de/color/), colour-blind safe: the tree policies.
OKABE_ITO: dict[str, str] = {
    "blue": "#0072B2", "vermillion": "#D55E00", "green": "#009E73", "orange": "#E69F00", "sky": "#56B4E9",
    "purple": "#CC79A7", "black": "#000000", "yellow": "#F0E442",
}
BLACK, GREY = "#000000", "#777777"

RC: dict[str, Any] = {
    "font.size": 7, "axes.titlesize": 7.5, "axes.labelsize": 7, "legend.fontsize": 6,
    "xtick.labelsize": 6, "ytick.labelsize": 6, "lines.linewidth": 1.1, "lines.markersize": 3.5,
    "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6, "axes.grid": True,
    "grid.alpha": 0.3, "grid.linewidth": 0.5, "legend.frameon": False, "figure.dpi": 120,
    "savefig.dpi": PNG_DPI, "savefig.bbox": "tight", "savefig.pad_inches": 0.02, "pdf.fonttype": 42,
    "ps.fonttype": 42, "mathtext.fontset": "dejavusans", "axes.spines.top": False,
    "axes.spines.right": False, "errorbar.capsize": 1.5,
}


@dataclass(frozen=True)
class MethodStyle:
    """How one method is drawn: legend label, colour, marker, line style and marker fill."""

    label: str
    color: str
    marker: str
    linestyle: str = "-"
    fillstyle: str = "full"

    def kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot`` / ``errorbar`` (``overrides`` win)."""
        kw = {"label": self.label, "color": self.color, "marker": self.marker, "linestyle": self.linestyle,
              "fillstyle": self.fillstyle}
        kw.update(overrides)
        return kw


# Method families. Keys are what :func:`method_key` returns.
_OI = OKABE_ITO
METHODS: dict[str, MethodStyle] = {
    "ar": MethodStyle("AR", BLACK, "x", ":"),
    "exact": MethodStyle("exact", GREY, "o"),
    "lantern": MethodStyle("LANTERN", PALETTE["teal"], "o"),
    "lantern++": MethodStyle("LANTERN++", PALETTE["purple"], "s"),
    "eagle2": MethodStyle("EAGLE-2", _OI["blue"], "o"),
    "ddd": MethodStyle("DDD", _OI["sky"], "s"),
    "naive_extend_57": MethodStyle("static naive_extend_57", _OI["vermillion"], "^"),
    "mc_sim_7b_63": MethodStyle("static mc_sim_7b_63", _OI["vermillion"], "v", "--"),
    "sequoia": MethodStyle("Sequoia", _OI["green"], "D"),
    "chain": MethodStyle("chain", GREY, "P", "--"),
    # issue 7: children ranked by proximity mass q~ (latent), q~ with diverse siblings, the R1 walk on q
    "latent": MethodStyle("latent EAGLE-2", _OI["orange"], "<"),
    "latent-diverse": MethodStyle("latent EAGLE-2, diverse", _OI["orange"], ">", "--"),
    "latent-walk": MethodStyle("latent EAGLE-2, walk", _OI["purple"], "p"),
    "sequoia-walk": MethodStyle("Sequoia, walk", _OI["black"], "X"),
    "sequoia-diverse": MethodStyle("Sequoia, diverse", _OI["black"], "d", "--"),
    "costaware": MethodStyle("cost-aware Sequoia", _OI["green"], "H", "--"),
    # the 2025 frontier (issues 14, 15): Jacobi windows, group and depth-scaled acceptance
    "jacobi": MethodStyle("SJD", PALETTE["olive"], "*"),
    "gsd": MethodStyle("GSD", PALETTE["rose"], "h"),
    "cool-sd": MethodStyle("Cool-SD", PALETTE["indigo"], "8"),
    "r4": MethodStyle("traversal R4", PALETTE["wine"], "P"),
    "r4-jacobi": MethodStyle("SJD + R4", PALETTE["wine"], "X", "--"),
    "budget": MethodStyle("R2 + budget (ours)", PALETTE["cyan"], "d", "--"),
    "budget-r4": MethodStyle("R4 + budget (ours)", PALETTE["cyan"], "D"),
    "budget-jacobi": MethodStyle("SJD + R4 + budget (ours)", PALETTE["sand"], "v", "-."),
    # LANTERN++ verified as LANTERN verifies (R1 on EAGLE-2); the 2026 frontier (SPEC 10): SCD's coupled
    # and SJD-PAC's windows, VVS's skipped verification
    "lantern++-r1": MethodStyle("LANTERN++ (R1, EAGLE-2)", PALETTE["purple"], "s", "--"),
    "scd": MethodStyle("SCD", PALETTE["olive"], "p", "--"),
    "pac": MethodStyle("SJD-PAC", PALETTE["green"], ">", "-."),
    "vvs": MethodStyle("VVS", _OI["blue"], "<", ":"),
    # ours on the 2026 frontier: the budgeted relaxation on SCD's and SJD-PAC's windows (docs/theory.md 15.6)
    "budget-scd": MethodStyle("SCD + budget (ours)", PALETTE["cyan"], "p", ":"),
    "budget-pac": MethodStyle("SJD-PAC + budget (ours)", PALETTE["cyan"], ">", "-."),
    "vvs-bounded": MethodStyle("VVS, bounded skips (ours)", PALETTE["cyan"], "<", ":"),
}
# Colours not yet taken by a family, in the order :func:`register_method` hands them out.
RESERVED_COLOURS = [_OI["yellow"]]
UNKNOWN = MethodStyle("?", "#BBBBBB", "*", "-")

DEFAULT_VERIFICATION = Verification()
"""What :func:`method_style` draws a method with when told nothing else: rule R1, exact."""
RULE_LINESTYLES = {"r1": None, "r2": "-.", "r3": ":"}
RULE_SUFFIX = {"r1": "", "r2": ", R2", "r3": ", greedy"}
OFFICIAL_LINESTYLES = {"r1": "--", "r2": (0, (4, 1, 1, 1, 1, 1)), "r3": (0, (1, 2))}


def register_method(key: str, label: str, marker: str = "h", color: str | None = None) -> MethodStyle:
    """Add a method family (e.g. a new tree policy); the colour defaults to the next reserved one."""
    if key in METHODS:
        raise ValueError(f"method {key!r} is already registered as {METHODS[key]}")
    if color is None:
        used = {s.color for s in METHODS.values()}
        free = [c for c in RESERVED_COLOURS if c not in used]
        color = free[0] if free else UNKNOWN.color
    METHODS[key] = MethodStyle(label, color, marker)
    return METHODS[key]


_RELAX_KINDS = ("additive", "multiplicative")
# Sequoia variants drawn as Sequoia, named in the label: the vector measured with the exact rule, and
# children ranked by q~ (relaxspec.sweep's tree kinds).
_SEQUOIA_SUFFIX = {"sequoia-lossless": ", exact-rule vector", "sequoia-latent": ", latent"}
_COST_AWARE_MODES = ("latent", "diverse", "walk")  # costaware:N,DEPTH,MODE (mode q: no suffix)


def method_key(method: object) -> str:
    """The family key of a method (see the module docstring); unknown names are returned as given."""
    if isinstance(method, Relax):
        return {"none": "exact", "additive": "lantern", "multiplicative": "lantern++"}[method.kind]
    text = str(method).strip()
    if text.lower() in ("exact", "none", "lossless"):
        return "exact"
    if text.lower() in METHODS:
        return text.lower()
    if text.split(":")[0] in _RELAX_KINDS:
        return method_key(Relax.parse(text))
    return _tree_family(text) or text


def _tree_family(spec: str) -> str | None:
    """The family of a tree spec (core.trees.spec's grammar), None if ``spec`` is not one."""
    try:
        kind = tree_kind(spec)
    except ValueError:
        return None
    if kind == "static":
        name = spec.partition(":")[2]
        return name if name in METHODS else "static"
    return "sequoia" if kind in _SEQUOIA_SUFFIX else kind


def relax_label(relax: Relax | str, *, show_k: bool = False) -> str:
    """``exact``, ``LANTERN δ=0.1`` or ``LANTERN++ λ=2`` (with ``k=...`` when ``show_k``)."""
    r = Relax.parse(relax) if isinstance(relax, str) else relax
    if not r.merges_neighbours:
        return METHODS["exact"].label
    k = f", k={r.k}" if show_k else ""
    if r.is_additive:
        return f"{METHODS['lantern'].label} δ={r.delta:g}{k}"
    return f"{METHODS['lantern++'].label} λ={r.lam:g}{k}"


# A boost's family (theory.boost.Boost.kind) -> its METHODS key (rule r4's budget has its own) and the short
# name its label starts with.
_BOOST_KEYS = {"group": "gsd", "depth": "cool-sd", "budget": "budget"}
_BOOST_NAMES = {"group": "GSD", "depth": "Cool-SD", "budget": "budget"}


def boost_key(verification: Verification | str) -> str | None:
    """The METHODS key of a verification's boost (``gsd``, ``cool-sd``, ``budget``; ``budget-r4`` under rule
    R4), None for no boost."""
    v = Verification.parse(verification)
    if v.boost.is_none:
        return None
    key = _BOOST_KEYS[v.boost.kind]
    return f"{key}-r4" if f"{key}-r4" in METHODS and v.is_traversal else key


def boost_label(boost: Boost | str) -> str:
    """``GSD G=10,tau=0.3,dist=1``, ``Cool-SD omega=2.5/1.5``, ``budget tv=0.05,k=8``: the family and
    every parameter of the canonical spec, so two boosts never share a label; ``""`` for no boost."""
    b = Boost.parse(boost) if isinstance(boost, str) else boost
    return "" if b.is_none else f"{_BOOST_NAMES[b.kind]} {str(b).partition(':')[2]}"


def method_style(method: object, verification: Verification | str = DEFAULT_VERIFICATION, *,
                 label: str | None = None) -> MethodStyle:
    """The style of ``method`` verified by ``verification`` (a :class:`theory.verification.Verification`
    or its spec; a relaxation's label carries its parameter).

    The verification's official variant draws dashed with open markers; its
    rule r2 / r3 changes the line style and tags the label. Its boost takes
    the boost's colour and marker (:func:`boost_key`) and adds `` + ``
    :func:`boost_label`; the line style stays the tree's and rule's. Its
    relaxation is not drawn: the method (a tree, or a relaxation) or the x
    axis shows it. ``label`` replaces the label.
    """
    v = Verification.parse(verification)
    key = boost_key(v)
    if key is not None:
        style = method_style(method, replace(v, boost=NO_BOOST))
        style = replace(style, label=f"{style.label} + {boost_label(v.boost)}", color=METHODS[key].color,
                        marker=METHODS[key].marker)
        return style if label is None else replace(style, label=label)
    rule, variant = v.rule, v.variant
    key = method_key(method)
    base = METHODS.get(key, replace(UNKNOWN, label=key))
    text = base.label
    if isinstance(method, Relax) or (isinstance(method, str) and method.split(":")[0] in _RELAX_KINDS):
        text = relax_label(method)  # type: ignore[arg-type]
    if key == "chain":
        text = f"chain of {str(method).partition(':')[2]}"
    if key == "sequoia":
        text += _SEQUOIA_SUFFIX.get(str(method).strip().partition(":")[0].lower(), "")
    if key == "costaware":
        mode = str(method).strip().rsplit(",", 1)[-1].lower()
        text += f", {mode}" if mode in _COST_AWARE_MODES else ""
    text += RULE_SUFFIX.get(rule, f", {rule}")
    style = replace(base, label=text)
    if RULE_LINESTYLES.get(rule):
        style = replace(style, linestyle=RULE_LINESTYLES[rule])
    if variant.is_official:
        style = replace(style, label=style.label + " (official)", fillstyle="none",
                        linestyle=OFFICIAL_LINESTYLES.get(rule, "--"))
    if label is not None:
        style = replace(style, label=label)
    return style


def shades(color: str, n: int, lightest: float = 0.35) -> list[str]:
    """``n`` shades of ``color`` from light (mixed with white) to the colour itself: a swept parameter."""
    from matplotlib.colors import to_hex, to_rgb

    rgb = to_rgb(color)
    if n == 1:
        return [to_hex(rgb)]
    out = []
    for i in range(n):
        t = lightest + (1.0 - lightest) * i / (n - 1)
        out.append(to_hex(tuple(1.0 - t * (1.0 - c) for c in rgb)))
    return out


def style_params() -> dict[str, Any]:
    """The suite's rcParams: :data:`RC` and the Okabe-Ito colour cycle (yellow left out)."""
    from cycler import cycler

    return {**RC, "axes.prop_cycle": cycler(color=[c for n, c in OKABE_ITO.items() if n != "yellow"])}


def apply() -> None:
    """Set matplotlib's rcParams to the suite's style (Okabe-Ito as the default colour cycle)."""
    import matplotlib as mpl

    mpl.rcParams.update(style_params())


@contextmanager
def style() -> Iterator[None]:
    """The suite's style inside the block only: the caller's rcParams are restored after it."""
    import matplotlib as mpl

    with mpl.rc_context(style_params()):
        yield


def pyplot(headless: bool = False):
    """``matplotlib.pyplot`` with the style applied; ``headless`` selects the Agg backend first."""
    import matplotlib

    if headless:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apply()
    return plt


def subplots(nrows: int = 1, ncols: int = 1, *, width: str | float = "full", height: float | None = None,
             **kw: Any):
    """``plt.subplots`` at paper width (``"column"``, ``"full"`` or inches); height 2.2 in per row."""
    import matplotlib.pyplot as plt

    w = {"column": COLUMN_WIDTH, "full": FULL_WIDTH}.get(width, width) if isinstance(width, str) else width
    if not isinstance(w, (int, float)):
        raise ValueError(f"width must be 'column', 'full' or inches, got {width!r}")
    return plt.subplots(nrows, ncols, figsize=(float(w), height or 2.2 * nrows), **kw)


def panel_label(ax, letter: str) -> None:
    """A bold panel letter ((a), (b), ...) in the top-left corner outside the axes."""
    ax.set_title(f"({letter})", loc="left", fontweight="bold", fontsize=RC["axes.titlesize"])


def figure_legend(fig, axes=None, *, ncol: int | None = None, **kw: Any):
    """One legend for ``axes`` (default: all of ``fig``'s), below the figure: outside every axes, so it
    covers no data.

    Entries come from those axes, each label once, in order of appearance;
    the legend is centred under them; ``ncol`` defaults to about one column
    per 1.7 in of their width. Call it after ``tight_layout``; :func:`save`
    keeps it (tight bounding box). Returns the legend, or ``None`` when no
    artist has a label.
    """
    axes = list(np.ravel(axes)) if axes is not None else fig.axes
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if not entries:
        return None
    left = min(ax.get_position().x0 for ax in axes)
    right = max(ax.get_position().x1 for ax in axes)
    if len(axes) == len(fig.axes):
        left, right = 0.0, 1.0
    ncol = ncol or max(1, min(len(entries), round((right - left) * fig.get_figwidth() / 1.7)))
    return fig.legend(list(entries.values()), list(entries), loc="upper center",
                      bbox_to_anchor=((left + right) / 2, 0.0), ncol=ncol, **kw)


DEPTH_LEGEND = "light: tree depth, dark: accepted depth (same run)"


def depth_bars(ax, x, tree_depth, accepted_depth, *, width: float, color: str, label: str | None = None,
               yerr=None):
    """Depths of runs as bars at ``x``: each run's tree depth light and outlined, its accepted depth dark
    in front (the same run's, so never taller); explain them with :data:`DEPTH_LEGEND`."""
    ax.bar(x, tree_depth, width, color=shades(color, 2, lightest=0.3)[0], edgecolor=color, linewidth=0.4)
    return ax.bar(x, accepted_depth, width, yerr=yerr, color=color, label=label, error_kw={"elinewidth": 0.6})


def save(fig, out: str | Path, name: str, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write ``out/name.pdf`` (vector) and ``out/name.png``; returns the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in formats:
        path = out / f"{name}.{ext}"
        fig.savefig(path, dpi=PNG_DPI, bbox_inches="tight", metadata={"CreationDate": None}
                    if ext == "pdf" else None)
        paths.append(path)
    return paths
