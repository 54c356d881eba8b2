"""The shared figure style: one style per method, paper sizes, PDF + PNG output; the notebook
environment (size switch, figure folder)."""

from __future__ import annotations

import pytest

from relaxspec import figstyle, nbenv
from simulate.policies import DDDTree, Eagle2Tree, StaticTree
from theory.relax import Relax

FAMILIES = {
    "ar": "AR", "exact": "exact", "eagle2": "EAGLE-2", "ddd": "DDD",
    "naive_extend_57": "static naive_extend_57", "mc_sim_7b_63": "static mc_sim_7b_63", "sequoia": "Sequoia",
}


def test_every_family_has_its_own_colour_and_label() -> None:
    colours = [s.color for s in figstyle.METHODS.values()]
    assert len(set(colours)) == len(colours)
    for key, label in FAMILIES.items():
        assert figstyle.METHODS[key].label == label


@pytest.mark.parametrize("method, key", [
    ("eagle2:10,4,59", "eagle2"), (Eagle2Tree(10, 4, 59), "eagle2"), ("ddd:10,11,5/7/9,-0.3,60", "ddd"),
    (DDDTree(), "ddd"), ("static:naive_extend_57", "naive_extend_57"),
    (StaticTree.naive_extend_57(), "naive_extend_57"),
    ("mc_sim_7b_63", "mc_sim_7b_63"), ("sequoia:57,8", "sequoia"), ("sequoia-57-8", "sequoia"),
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
    official = figstyle.method_style(Relax.additive(10, 0.2), variant="official")
    assert official.label.endswith("(official)")
    assert official.linestyle == "--" and official.fillstyle == "none"
    r2 = figstyle.method_style("static:naive_extend_57", rule="r2")
    assert r2.label == "static naive_extend_57, R2" and r2.linestyle == "-."
    assert figstyle.method_style("eagle2", label="mine").label == "mine"


@pytest.mark.parametrize("method, label", [
    ("latent:10,4,58", "latent EAGLE-2"), ("latent-10-4-58", "latent EAGLE-2"),
    ("latent-diverse:10,4,58", "latent EAGLE-2, diverse"), ("latent-walk:10,4,58", "latent EAGLE-2, walk"),
    ("latent-walk-10-8-58", "latent EAGLE-2, walk"), ("sequoia-diverse:57,8", "Sequoia, diverse"),
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
        assert style.color not in (figstyle.METHODS["sequoia"].color, figstyle.METHODS["eagle2"].color)


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
