"""The shared figure style: one style per method, paper sizes, PDF + PNG output; the notebook
environment (size switch, figure folder)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from relaxspec import figstyle, nbenv
from relaxspec.core.trees.policies import DDDTree, Eagle2Tree, StaticTree
from relaxspec.demo import DEMO_CONFIG
from relaxspec.theory.boost import Boost
from relaxspec.theory.relax import Relax, Variant
from relaxspec.theory.rules import Rule
from relaxspec.theory.verification import Verification

FAMILIES = {
    "ar": "AR", "exact": "exact", "eagle2": "EAGLE-2", "ddd": "DDD",
    "naive_extend_57": "static naive_extend_57", "mc_sim_7b_63": "static mc_sim_7b_63", "sequoia": "Sequoia",
}


TREES = ("ar", "eagle2", "ddd", "naive_extend_57", "mc_sim_7b_63", "sequoia", "chain", "latent",
         "latent-diverse", "latent-walk", "sequoia-diverse", "sequoia-walk", "costaware")
# Machado, Oliveira and Fernandes (2009), severity 1: linear-RGB simulation of each dichromacy.
CVD = {"normal": np.eye(3),
       "protan": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                           [-0.003882, -0.048116, 1.051998]]),
       "deutan": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                           [-0.011820, 0.042940, 0.968881]]),
       "tritan": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                           [0.004733, 0.691367, 0.303900]])}
SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])


def cielab(colour: str, vision: str) -> np.ndarray:
    """CIELAB (D65) of ``colour`` as seen with ``vision``."""
    from matplotlib.colors import to_rgb

    c = np.array(to_rgb(colour))
    linear = np.clip(CVD[vision] @ np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4), 0, 1)
    t = SRGB_TO_XYZ @ linear / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_every_method_has_its_own_look_and_label() -> None:
    looks = [(s.color, s.marker, s.linestyle) for s in figstyle.METHODS.values()]
    assert len(set(looks)) == len(looks)
    markers = [figstyle.METHODS[t].marker for t in TREES]
    assert len(set(markers)) == len(markers)
    for key, label in FAMILIES.items():
        assert figstyle.METHODS[key].label == label


def test_the_demos_trees_have_distinct_colours_under_colour_blindness() -> None:
    """The seven trees of ``relaxspec demo``: every pair of colours at least 15 CIELAB units apart with
    normal vision and each simulated dichromacy (the palette before issue 12: 9, protanopia)."""
    colours = {t: figstyle.method_style(t).color for t in DEMO_CONFIG["trees"]}
    for vision in CVD:
        lab = {t: cielab(c, vision) for t, c in colours.items()}
        for a, b in itertools.combinations(lab, 2):
            assert np.linalg.norm(lab[a] - lab[b]) >= 15, (vision, a, b)


@pytest.mark.parametrize("method, key", [
    ("eagle2:10,4,59", "eagle2"), (Eagle2Tree(10, 4, 59), "eagle2"), ("ddd:10,11,5/7/9,-0.3,60", "ddd"),
    (DDDTree(), "ddd"), ("static:naive_extend_57", "naive_extend_57"),
    (StaticTree.naive_extend_57(), "naive_extend_57"),
    ("mc_sim_7b_63", "mc_sim_7b_63"), ("sequoia:57,8", "sequoia"), ("sequoia-lossless:57,8", "sequoia"),
    (StaticTree.chain(4), "chain"), ("AR", "ar"), ("none", "exact"), (Relax.none(), "exact"),
    ("additive:k=1000,delta=0.1", "lantern"), (Relax.multiplicative(10, 2.0), "lantern++"),
])
def test_spec_strings_names_and_objects_map_to_one_family(method, key) -> None:
    assert figstyle.method_key(method) == key
    assert figstyle.method_style(method).color == figstyle.METHODS[key].color


def test_labels_carry_the_relaxation_parameter_variant_and_rule() -> None:
    assert figstyle.method_style(Relax.additive(1000, 0.1)).label == "LANTERN δ=0.1"
    assert figstyle.method_style("multiplicative:k=1000,lam=2").label == "LANTERN++ λ=2"
    assert figstyle.relax_label(Relax.additive(50, 0.2), show_k=True) == "LANTERN δ=0.2, k=50"
    official = figstyle.method_style(Relax.additive(10, 0.2), "r1/official")
    assert official.label.endswith("(official)")
    assert official.linestyle == "--" and official.fillstyle == "none"
    r2 = figstyle.method_style("static:naive_extend_57", "r2")
    assert r2.label == "static naive_extend_57, R2" and r2.linestyle == "-."
    assert figstyle.method_style("eagle2", label="mine").label == "mine"


def test_a_method_is_styled_by_one_verification() -> None:
    """``method_style`` and ``boost_key`` take one Verification (or its spec), not its rule, variant and
    boost apart: the rule and variant set the line, the boost the colour and marker, the relaxation
    nothing (the method or the x axis shows it)."""
    tree = "static:naive_extend_57"
    v = Verification(Rule.R2, variant=Variant.OFFICIAL, boost=Boost.parse("gsd:G=4"))
    assert figstyle.method_style(tree, v) == figstyle.method_style(tree, str(v))
    style = figstyle.method_style(tree, v)
    plain = figstyle.method_style(tree, "r2/official")
    assert style.label == "static naive_extend_57, R2 (official) + GSD G=4,tau=0.15,dist=0.5"
    assert (style.color, style.marker) == (figstyle.METHODS["gsd"].color, figstyle.METHODS["gsd"].marker)
    assert (style.linestyle, style.fillstyle) == (plain.linestyle, plain.fillstyle) == (
        figstyle.OFFICIAL_LINESTYLES["r2"], "none")
    assert figstyle.method_style("eagle2", "r1+lantern:k=8,delta=0.1") == figstyle.method_style("eagle2")
    r4 = figstyle.method_style(tree, "r4+budget:tv=0.1,k=8", label="mine")
    assert r4.label == "mine" and r4.color == figstyle.METHODS["budget-r4"].color
    assert [figstyle.boost_key(s) for s in ("r2+budget:tv=0.1,k=8", "r4+budget:tv=0.1,k=8", "r2+cool:delta=2",
                                            "r2+gsd:G=4", "r1+lantern:k=8,delta=0.1")] == [
        "budget", "budget-r4", "cool-sd", "gsd", None]
    with pytest.raises(TypeError):
        figstyle.method_style(tree, rule="r2")  # type: ignore[call-arg]


@pytest.mark.parametrize("method, label", [
    ("latent:10,4,58", "latent EAGLE-2"), ("latent:10,4,58,40", "latent EAGLE-2"),
    ("latent-diverse:10,4,58", "latent EAGLE-2, diverse"), ("latent-walk:10,4,58", "latent EAGLE-2, walk"),
    ("latent-walk:10,8,58", "latent EAGLE-2, walk"), ("sequoia-diverse:57,8", "Sequoia, diverse"),
    ("sequoia-walk:57,8", "Sequoia, walk"), ("costaware:57,8,walk", "cost-aware Sequoia, walk"),
    ("costaware:57,8", "cost-aware Sequoia"), ("sequoia:57,8", "Sequoia"),
    ("sequoia-lossless:57,8", "Sequoia, exact-rule vector"), ("sequoia-latent:57,8", "Sequoia, latent"),
])
def test_relaxation_aware_trees_have_their_own_labels(method, label) -> None:
    style = figstyle.method_style(method)
    assert style.label == label
    family = figstyle.method_key(method)
    assert style.color == figstyle.METHODS[family].color
    if family not in ("sequoia", "eagle2"):  # a new family, not drawn like the tree it extends
        for base in ("sequoia", "eagle2"):
            assert (style.marker, style.linestyle) != (figstyle.METHODS[base].marker,
                                                       figstyle.METHODS[base].linestyle)


def test_unknown_methods_fall_back_and_new_ones_register(monkeypatch) -> None:
    assert figstyle.method_style("my-policy").label == "my-policy"
    monkeypatch.setattr(figstyle, "METHODS", dict(figstyle.METHODS))
    style = figstyle.register_method("aware", "relaxation-aware tree")
    assert style.color == figstyle.RESERVED_COLOURS[0]
    assert figstyle.method_style("aware").label == "relaxation-aware tree"
    with pytest.raises(ValueError, match="already registered"):
        figstyle.register_method("aware", "again")


def test_figures_are_written_at_paper_width_as_pdf_and_png(tmp_path) -> None:
    plt = figstyle.pyplot(headless=True)
    fig, ax = figstyle.subplots(width="column")
    assert fig.get_size_inches()[0] == pytest.approx(figstyle.COLUMN_WIDTH)
    ax.plot([0, 1], [0, 1], **figstyle.method_style("eagle2").kwargs())
    paths = figstyle.save(fig, tmp_path / "out", "demo")
    plt.close(fig)
    assert [p.name for p in paths] == ["demo.pdf", "demo.png"]
    assert paths[0].read_bytes().startswith(b"%PDF") and paths[1].read_bytes()[1:4] == b"PNG"
    assert len(figstyle.shades(figstyle.PALETTE["teal"], 3)) == 3
    with pytest.raises(ValueError, match="width"):
        figstyle.subplots(width="huge")


def test_the_figure_legend_sits_below_every_axes() -> None:
    plt = figstyle.pyplot(headless=True)
    fig, axes = figstyle.subplots(1, 2, width="full")
    for ax in axes:
        for t in DEMO_CONFIG["trees"]:
            ax.plot([0, 1], [1, 0], **figstyle.method_style(t).kwargs())
    fig.tight_layout()
    legend = figstyle.figure_legend(fig)
    fig.canvas.draw()
    box = legend.get_window_extent()
    assert len(legend.get_texts()) == len(DEMO_CONFIG["trees"])  # each label once
    assert all(not box.overlaps(ax.get_window_extent()) for ax in axes)
    left = figstyle.figure_legend(fig, axes[0], title=figstyle.DEPTH_LEGEND)  # one under the left panel
    fig.canvas.draw()
    centre = left.get_window_extent().x0 + left.get_window_extent().width / 2
    ax_box = axes[0].get_window_extent()
    assert ax_box.x0 < centre < ax_box.x1 and not left.get_window_extent().overlaps(ax_box)
    assert figstyle.figure_legend(plt.figure()) is None
    plt.close("all")


def test_size_switch_and_figure_folder(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(nbenv.SIZE_VAR, raising=False)
    assert nbenv.size() == "full" and nbenv.pick(1, 2) == 2
    monkeypatch.setenv(nbenv.SIZE_VAR, "small")
    assert nbenv.pick(1, 2) == 1
    monkeypatch.setenv(nbenv.SIZE_VAR, "huge")
    with pytest.raises(ValueError, match="RELAXSPEC_NB_SIZE"):
        nbenv.size()
    monkeypatch.setenv(nbenv.FIGURES_VAR, str(tmp_path / "figs"))
    assert nbenv.figures_dir() == tmp_path / "figs" and (tmp_path / "figs").is_dir()
    assert (nbenv.repo_root() / "pyproject.toml").is_file()
    assert nbenv.env_path("RELAXSPEC_UNSET_FOR_TEST") is None
    monkeypatch.setenv("RELAXSPEC_MISSING_PATH", str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="does not exist"):
        nbenv.env_path("RELAXSPEC_MISSING_PATH")
