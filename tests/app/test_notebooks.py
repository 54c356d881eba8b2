"""The analysis notebooks: committed without outputs, and each one runs top to bottom at the small size
(in a temporary folder, figures written there, never into the repository); ``relaxspec figures``."""

from __future__ import annotations

import json

import pytest

from relaxspec.cli import main
from relaxspec.notebooks import execute, notebook_paths, notebooks_dir, output_problems

NOTEBOOKS = notebook_paths()


def test_there_are_notebooks() -> None:
    names = [p.name for p in NOTEBOOKS]
    assert names == sorted(names) and len(names) >= 5, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path) -> None:
    assert output_problems(path) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_at_small_size(path, tmp_path) -> None:
    figures = tmp_path / "figures"
    nb = execute(path, size="small", figures=figures, workdir=tmp_path)
    written = {p.name for p in figures.iterdir()}
    stems = {p.rsplit(".", 1)[0] for p in written}
    assert stems, f"{path.name} wrote no figure"
    for stem in stems:  # every figure in both formats
        assert {f"{stem}.pdf", f"{stem}.png"} <= written
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert not list(tmp_path.glob("*.ipynb")) and not (notebooks_dir() / "figures").exists()


def _tiny_notebook(path, body: str) -> None:
    cells = [{"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {}, "outputs": [],
              "source": body}]
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "python3",
                                "display_name": "Python 3", "language": "python"}},
                                "nbformat": 4, "nbformat_minor": 5}))


def test_relaxspec_figures_runs_notebooks_and_reports_failures(tmp_path, capsys) -> None:
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _tiny_notebook(nbs / "01_ok.ipynb", "from relaxspec import figstyle, nbenv\n"
                   "plt = figstyle.pyplot()\nfig, ax = figstyle.subplots(width='column')\n"
                   "ax.plot([0, 1], [nbenv.pick(1, 2)] * 2)\n"
                   "figstyle.save(fig, nbenv.figures_dir(), 'tiny_' + nbenv.size())")
    _tiny_notebook(nbs / "02_fails.ipynb", "raise RuntimeError('boom')")
    out = tmp_path / "figs"
    args = ["figures", "--notebooks", str(nbs), "--out", str(out)]
    assert main([*args, "--size", "small", "--only", "01"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["tiny_small.pdf", "tiny_small.png"]
    assert output_problems(nbs / "01_ok.ipynb") == []  # the source notebook is not written to
    assert main([*args, "--only", "02"]) == 1
    assert "boom" in capsys.readouterr().err
    assert main([*args, "--only", "03"]) == 2


def test_a_small_figures_run_never_overwrites_the_readme_figures(tmp_path, monkeypatch) -> None:
    """`relaxspec figures --size small` writes to figures/small/ (the README's full-size PNGs stay)."""
    from relaxspec.notebooks import figures_output

    monkeypatch.setenv("RELAXSPEC_FIGURES", str(tmp_path / "figs"))
    assert figures_output("full", None) == tmp_path / "figs"
    assert figures_output("small", None) == tmp_path / "figs" / "small"
    assert figures_output("small", str(tmp_path / "mine")) == tmp_path / "mine"
    assert (tmp_path / "figs" / "small").is_dir()


def test_the_notebooks_model_switch(tmp_path, monkeypatch) -> None:
    """RELAXSPEC_MODEL picks the shipped model the notebooks load; a bad value is named; a model whose
    folder lacks its components says which."""
    from relaxspec import nbenv

    monkeypatch.delenv(nbenv.MODEL_VAR, raising=False)
    assert nbenv.shipped_model() == "mini"
    monkeypatch.setenv(nbenv.MODEL_VAR, "llamagen")
    with pytest.raises(ValueError, match="RELAXSPEC_MODEL must be one of mini, ambiguous"):
        nbenv.shipped_model()
    monkeypatch.setenv(nbenv.MODEL_VAR, "ambiguous")
    monkeypatch.setenv(nbenv.ROOT_VAR, str(tmp_path))
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "relaxspec").mkdir()
    (tmp_path / "weights" / "ambiguous").mkdir(parents=True)
    missing = nbenv.shipped_model_missing()
    assert missing is not None and "`weights/ambiguous/` lacks" in missing and "evaluator" not in missing
