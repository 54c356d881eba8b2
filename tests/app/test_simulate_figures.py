"""relaxspec plot: the data each figure draws (facets, lines sorted by x, bars of one run, notes on rows
not drawn) and legends outside every axes; synthetic results, no sweep."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from relaxspec.cli import main
from relaxspec.figures import FigureData, LineKey, Panel, draw, line_styles, plan, plot_results, render
from relaxspec.results import COLUMNS, read_results
from relaxspec.theory.boost import Boost
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import Verification

DEMO_TREES = ["eagle2:10,4,59", "static:naive_extend_57", "ddd:10,11,5/7/9,-0.3,60", "sequoia:57,8",
              "latent:10,4,59", "latent-walk:10,4,59", "sequoia-walk:57,8"]
RELAXATIONS = [("none", 0.0, 1.0), ("additive", 0.05, 1.0), ("additive", 0.4, 1.0), ("additive", 0.1, 1.0),
               ("multiplicative", 0.0, 10.0), ("multiplicative", 0.0, 2.0)]  # deliberately unsorted


def row(tree: str = "eagle2:10,4,59", relax: str = "none", delta: float = 0.0, lam: float = 1.0, *,
        world: str = "ambiguous", rule: str = "r1", variant: str = "principled", temperature: float = 1.0,
        k: int | None = None, tokens: float | None = None, tree_depth: float = 3.0,
        accepted: float | None = None, tv: float | None = None, seed: int = 0, boost: str = "none") -> dict:
    """One results row with its verification's views (as ``relaxspec.results.load`` gives them); the numbers
    follow the relaxation unless given."""
    strength = delta + (lam - 1.0) / 20.0
    tokens = 1.5 + 4.0 * strength + (0.3 if temperature != 1.0 else 0.0) if tokens is None else tokens
    accepted = tokens - 1.0 if accepted is None else accepted
    k = 0 if relax == "none" else 1000 if k is None else k  # an exact test merges no neighbours: k = 0
    verification = str(Verification(rule, Relax(relax, k, delta, lam), variant, Boost.parse(boost)))
    return {"world": world, "tree": tree, "verification": verification, "rule": rule, "variant": variant,
            "relax": relax, "k": k,
            "delta": delta, "lam": lam, "temperature": temperature, "n_sequences": 4, "seq_len": 128,
            "seed": seed, "boost": boost, "settings": "{}", "mean_tokens_per_step": tokens,
            "se_tokens_per_step": 0.05, "mean_accepted_depth": accepted, "mean_tree_depth": tree_depth,
            "mean_tree_size": 57, "draft_calls_per_step": 4,
            "tv_bound_per_token": (0.0 if relax == "none" else strength / 2) if tv is None else tv,
            "tv_bound_per_sequence": 0.0, "seconds": 0.1}


def grid(**kw) -> list[dict]:
    return [row(relax=r, delta=d, lam=lam, **kw) for r, d, lam in RELAXATIONS]


def write(path, rows: list[dict]):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")  # the views are not stored
        w.writeheader()
        w.writerows(rows)
    return path


def figures(rows: list[dict]) -> tuple[dict[str, FigureData], list[str]]:
    figs, notes = plan(rows)
    return {f.name: f for f in figs}, notes


def panels(data: FigureData) -> list[Panel]:
    return [p for r in data.panels for p in r if p is not None]


def assert_sorted_and_labelled(data: FigureData) -> None:
    for panel in panels(data):
        labels = [line.style.label for line in panel.lines]
        assert all(labels) and len(set(labels)) == len(labels), labels
        for line in panel.lines:
            assert list(line.x) == sorted(line.x) and len(set(line.x)) == len(line.x), line


def test_two_temperatures_are_two_facets_with_sorted_labelled_lines() -> None:
    rows = grid(temperature=1.0) + grid(temperature=0.7)
    figs, _ = figures(rows)
    tokens = figs["tokens_vs_relaxation"]
    by_title = {p.title: p for p in panels(tokens)}
    assert {"ambiguous, T = 1", "ambiguous, T = 0.7"} <= {t for t in by_title}
    assert_sorted_and_labelled(tokens)
    for panel in panels(tokens):  # each line holds the runs of its panel's temperature only
        want = 1.8 if "0.7" in panel.title else 1.5
        assert all(line.y[0] == pytest.approx(want) for line in panel.lines)
    assert len(panels(tokens)) == 4  # 2 temperatures x (delta, lambda)


def test_r2_rows_are_drawn_with_their_rule_or_reported_with_a_reason() -> None:
    rows = [row("static:naive_extend_57", r, d, lam, rule="r2", tv=0.0 if r == "none" else np.nan)
            for r, d, lam in RELAXATIONS]
    figs, notes = figures(rows)
    lines = [ln for p in panels(figs["tokens_vs_relaxation"]) for ln in p.lines]
    assert lines and all(ln.style.label.endswith(", R2") and ln.style.linestyle == "-." for ln in lines)
    drawn = {(x, y) for ln in lines for x, y in zip(ln.x, ln.y, strict=True)}
    assert len(drawn) == len(rows) + 1  # every run; the exact one at delta = 0 and at lam = 1
    assert any("tradeoff" in n and "5 of 6 rows" in n and "NaN" in n and "r2" in n for n in notes)
    assert all(ln.x == (0.0,) for p in panels(figs["tradeoff"]) for ln in p.lines)


def test_depth_bars_show_the_tree_and_accepted_depth_of_one_run() -> None:
    rows = [row("sequoia:57,8", "none", tree_depth=2.0, accepted=0.5),
            row("sequoia:57,8", "additive", 0.1, tree_depth=4.0, accepted=1.5),
            row("sequoia:57,8", "additive", 0.4, tree_depth=5.0, accepted=2.44),
            row("sequoia:57,8", "multiplicative", lam=10.0, tree_depth=8.0, accepted=2.3)]
    figs, notes = figures(rows)
    (panel,) = panels(figs["depth"])
    assert panel.categories == ("Sequoia",)
    bars = {b.style.label: (b.tree_depth[0], b.accepted_depth[0]) for b in panel.bars}
    assert bars == {"exact": (2.0, 0.5), "LANTERN δ=0.4": (5.0, 2.44), "LANTERN++ λ=10": (8.0, 2.3)}
    assert any(n.startswith("depth: 1 of 4 rows not drawn") for n in notes)


def test_tradeoff_draws_one_line_per_family_sorted_by_tv() -> None:
    rows = grid(tree="eagle2:10,4,59") + grid(tree="static:naive_extend_57")
    figs, _ = figures(rows)
    tradeoff = figs["tradeoff"]
    assert_sorted_and_labelled(tradeoff)
    by_title = {p.title: p for p in panels(tradeoff)}
    assert set(by_title) == {"ambiguous: LANTERN δ", "ambiguous: LANTERN++ λ"}
    for title, n_runs in (("ambiguous: LANTERN δ", 4), ("ambiguous: LANTERN++ λ", 3)):
        lines = by_title[title].lines
        assert [ln.style.label for ln in lines] == ["EAGLE-2", "static naive_extend_57"]
        assert all(len(ln.x) == n_runs for ln in lines)


def test_every_varying_column_is_a_facet_a_style_or_a_label() -> None:
    rows = (grid() + grid(k=10) + grid(seed=1) + grid(world="confident")
            + grid(variant="official") + grid(rule="r3"))
    figs, _ = figures(rows)
    for name in ("tokens_vs_relaxation", "tradeoff"):
        assert_sorted_and_labelled(figs[name])
    looks = {(ln.style.label, ln.style.color, ln.style.linestyle, ln.style.fillstyle)
             for p in panels(figs["tokens_vs_relaxation"]) for ln in p.lines}
    labels = {look[0] for look in looks}
    assert {"EAGLE-2, k=1000, seed=0", "EAGLE-2, k=10, seed=0", "EAGLE-2, k=1000, seed=1",
            "EAGLE-2 (official), k=1000, seed=0", "EAGLE-2, greedy, k=1000, seed=0"} <= labels
    assert len({look[1:] for look in looks}) == len(looks)  # no two lines look alike
    assert {p.title for p in panels(figs["depth"])} == {"ambiguous", "confident"}


def test_trees_of_one_method_are_told_apart_by_spec_and_shade() -> None:
    a, b = LineKey("eagle2:10,4,59", "r1", "principled", 4, 128, 0), LineKey("eagle2:10,6,59", "r1",
                                                                          "principled", 4, 128, 0)
    styles = line_styles([a, b])
    assert styles[a].label == "EAGLE-2 [eagle2:10,4,59]" and styles[b].label == "EAGLE-2 [eagle2:10,6,59]"
    assert styles[a].color != styles[b].color and styles[a].marker == styles[b].marker


@pytest.fixture(scope="module")
def demo_rows() -> list[dict]:
    return [r for world in ("confident", "ambiguous") for t in DEMO_TREES for r in grid(tree=t, world=world)]


@pytest.mark.parametrize("name", ["tokens_vs_relaxation", "depth", "tradeoff"])
def test_legends_cover_no_axes(demo_rows, name) -> None:
    figs, _ = figures(demo_rows)
    fig = draw(figs[name])
    try:
        renderer = fig.canvas.get_renderer()
        fig.canvas.draw()
        (legend,) = fig.legends
        box = legend.get_window_extent(renderer)
        assert len(legend.get_texts()) == (3 if name == "depth" else len(DEMO_TREES))
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (name, ax.get_title())
            assert not ax.get_legend()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_plot_writes_pdf_and_png_and_the_cli_names_the_rows_not_drawn(tmp_path, capsys) -> None:
    rows = [row("chain:4", r, d, lam, rule="r2", tv=0.0 if r == "none" else np.nan)
            for r, d, lam in RELAXATIONS]
    csv_path = write(tmp_path / "r2.csv", rows)
    assert len(read_results(csv_path)) == len(RELAXATIONS)
    paths = plot_results(csv_path, tmp_path / "a")
    assert sorted(p.name for p in paths) == sorted(f"{n}.{e}" for n in ("tokens_vs_relaxation", "depth",
                                                                        "tradeoff") for e in ("pdf", "png"))
    assert render(csv_path, tmp_path / "b").notes
    assert main(["plot", str(csv_path), "--out", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "tradeoff: 5 of 6 rows not drawn" in err and "r2" in err


GSD, BUDGET = "gsd:G=10,tau=0.3,dist=1", "budget:tv=0.05,k=8"


def boosted_rows() -> list[dict]:
    """Issue 26 item 15: one tree and rule, unboosted and with two boosts (relax none on every row)."""
    return [row("sequoia:57,8", rule="r4", tokens=t, tv=tv, boost=b)
            for b, t, tv in (("none", 6.23, 0.0), (GSD, 6.70, 0.01), (BUDGET, 8.35, 0.05))]


def test_boosted_rows_are_series_of_their_own() -> None:
    """Each boost is its own series, labelled with its boost and styled as its method (figstyle.METHODS:
    GSD rose, the budget cyan), in every figure; nothing collapses onto the unboosted line."""
    from relaxspec.figstyle import METHODS

    figs, notes = figures(boosted_rows())
    assert not notes
    for name in ("tokens_vs_relaxation", "tradeoff"):
        assert_sorted_and_labelled(figs[name])
        (panel,) = panels(figs[name])
        by_label = {ln.style.label: ln for ln in panel.lines}
        assert {label: ln.y for label, ln in by_label.items()} == {
            "Sequoia, r4": (6.23,), f"Sequoia, r4 + GSD {GSD[4:]}": (6.70,),
            f"Sequoia, r4 + budget {BUDGET[7:]}": (8.35,)}
        assert len({(ln.style.color, ln.style.marker) for ln in panel.lines}) == 3
        assert by_label[f"Sequoia, r4 + GSD {GSD[4:]}"].style.color == METHODS["gsd"].color
        assert by_label[f"Sequoia, r4 + budget {BUDGET[7:]}"].style.color == METHODS["budget-r4"].color
    tradeoff = {ln.y: ln.x for ln in panels(figs["tradeoff"])[0].lines}
    assert tradeoff == {(6.23,): (0.0,), (6.70,): (0.01,), (8.35,): (0.05,)}
    (panel,) = panels(figs["depth"])
    assert panel.categories == ("Sequoia, r4",)
    assert {b.style.label: b.accepted_depth for b in panel.bars} == {
        "exact": (5.23,), f"GSD {GSD[4:]}": (5.70,), f"budget {BUDGET[7:]}": (7.35,)}


def test_rows_of_other_settings_are_lines_of_their_own() -> None:
    """A sweep rerun with another world override into the same CSV (issue 27 item 4): its rows are lines
    of their own in the world's facet, labelled by the setting."""
    wide = '{"world_overrides":{"vocab_size":4096}}'
    rows = grid() + [{**r, "settings": wide} for r in grid()]
    figs, _ = figures(rows)
    for name in ("tokens_vs_relaxation", "tradeoff"):
        assert_sorted_and_labelled(figs[name])
    labels = {ln.style.label for p in panels(figs["tokens_vs_relaxation"]) for ln in p.lines}
    assert {"EAGLE-2, defaults", "EAGLE-2, vocab_size=4096"} <= labels


def test_settings_every_line_shares_are_not_in_the_labels() -> None:
    """A sweep's world overrides (every run's) and a Sequoia table (only Sequoia trees read it) tell no two
    lines apart: the labels are the methods' alone, not the settings strung along rotated ticks and the
    legend (a sweep of tests/app/test_simulate_cli.py drew them so, overlapping)."""
    shared = '{"world_overrides":{"vocab_size":300,"n_clusters":20}}'
    sequoia = '{"sequoia":{"width":4},"world_overrides":{"vocab_size":300,"n_clusters":20}}'
    a = LineKey("chain:3", "r1", "principled", 2, 16, 1, settings=shared)
    b = LineKey("sequoia:6,3", "r1", "principled", 2, 16, 1, settings=sequoia)
    c = LineKey("sequoia:6,3", "r1", "principled", 2, 16, 1, settings=sequoia.replace("4", "8"))
    labels = {k: st.label for k, st in line_styles([a, b]).items()}
    assert labels == {a: "chain of 3", b: "Sequoia"}
    labels = {k: st.label for k, st in line_styles([a, b, c]).items()}
    assert labels == {a: "chain of 3", b: "Sequoia, sequoia.width=4", c: "Sequoia, sequoia.width=8"}


# ------------------------------------------------------------------ issue 27: render in a notebook
def test_render_takes_a_frame_or_a_path_and_writes_the_same_figures(tmp_path) -> None:
    from relaxspec.results import load

    csv_path = write(tmp_path / "r.csv", grid())
    by_path = render(csv_path, tmp_path / "a")
    by_frame = render(load(csv_path), tmp_path / "b")
    assert [p.name for p in by_frame.paths] == [p.name for p in by_path.paths]
    assert by_frame.notes == by_path.notes
    for a, b in zip(by_path.paths, by_frame.paths, strict=True):
        assert a.suffix != ".pdf" or a.read_bytes() == b.read_bytes()


def test_render_refuses_an_empty_or_foreign_frame(tmp_path) -> None:
    import pandas as pd

    with pytest.raises(ValueError, match="holds no results"):
        render(pd.DataFrame(columns=COLUMNS), tmp_path)
    with pytest.raises(ValueError, match=r"lacks the columns \['world'"):
        render(pd.DataFrame([row()]).drop(columns=["world"]), tmp_path)


def test_render_keeps_the_callers_backend_style_and_figures(tmp_path) -> None:
    """A notebook's inline backend and its own rcParams survive render (it drew on pyplot's Agg before)."""
    import matplotlib
    import matplotlib.pyplot as plt

    before = matplotlib.get_backend()
    plt.switch_backend("svg")  # stands for a kernel's inline backend: anything but Agg
    try:
        fig = plt.figure()
        rc = dict(matplotlib.rcParams)
        render(write(tmp_path / "r.csv", grid()), tmp_path / "out")
        assert matplotlib.get_backend() == "svg"
        assert dict(matplotlib.rcParams) == rc
        assert plt.get_fignums() == [fig.number]  # render's figures are not left in pyplot
    finally:
        plt.close("all")
        plt.switch_backend(before)
