"""What a notebook reads from its environment: the size switch, where figures go, the repository.

- ``RELAXSPEC_NB_SIZE`` = ``small`` | ``full`` (default ``full``): every
  notebook picks its sample sizes with :func:`pick`. CI runs ``small``
  (seconds per notebook, a smoke test of every cell), ``relaxspec figures``
  runs ``full`` (the figures of the paper).
- ``RELAXSPEC_FIGURES``: the folder figures are written to (default
  ``figures/`` at the repository root).
- ``RELAXSPEC_ROOT``: the repository root, when the notebook cannot find it
  (it looks beside the installed package, then upwards from the working folder).
- ``RELAXSPEC_MODEL`` = ``mini`` | ``ambiguous`` (default ``mini``): the shipped model the notebooks'
  real-model cells load (:func:`shipped_model`, :func:`load_shipped`).

Prose that quotes numbers is printed from code with :func:`say` (Markdown),
so that every number in a notebook's text is computed by the notebook.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

SIZE_VAR = "RELAXSPEC_NB_SIZE"
FIGURES_VAR = "RELAXSPEC_FIGURES"
ROOT_VAR = "RELAXSPEC_ROOT"
MODEL_VAR = "RELAXSPEC_MODEL"
SIZES = ("small", "full")
DEFAULT_SIZE = "full"

T = TypeVar("T")


def size() -> str:
    """The run size from ``RELAXSPEC_NB_SIZE`` (``small`` or ``full``)."""
    value = os.environ.get(SIZE_VAR, DEFAULT_SIZE).strip().lower() or DEFAULT_SIZE
    if value not in SIZES:
        raise ValueError(f"{SIZE_VAR} must be one of {SIZES}, got {value!r}")
    return value


def pick(small: T, full: T) -> T:
    """``small`` or ``full``, by the run size."""
    return small if size() == "small" else full


def _is_root(path: Path) -> bool:
    return (path / "pyproject.toml").is_file() and (path / "relaxspec").is_dir()


def repo_root() -> Path:
    """The repository root: ``RELAXSPEC_ROOT``, the package's parent, or above the working folder."""
    if os.environ.get(ROOT_VAR):
        root = Path(os.environ[ROOT_VAR]).expanduser().resolve()
        if not _is_root(root):
            raise ValueError(f"{ROOT_VAR}={root} is not a relaxspec checkout (no pyproject.toml, relaxspec/)")
        return root
    here = Path(__file__).resolve().parents[1]
    if _is_root(here):
        return here
    for parent in [Path.cwd(), *Path.cwd().parents]:
        if _is_root(parent):
            return parent
    raise ValueError(f"cannot find the relaxspec repository; set {ROOT_VAR}")


def figures_dir() -> Path:
    """Where figures are written (``RELAXSPEC_FIGURES`` or ``<root>/figures``); created if missing."""
    value = os.environ.get(FIGURES_VAR, "").strip()
    path = Path(value).expanduser() if value else repo_root() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def env_path(var: str) -> Path | None:
    """The path in environment variable ``var`` (None when unset or empty); must exist."""
    value = os.environ.get(var, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.exists():
        raise ValueError(f"{var}={value} does not exist")
    return path


def say(text: str) -> None:
    """Show computed prose as Markdown in a notebook (plain print elsewhere)."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover - IPython ships with ipykernel
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(Markdown(text))


# The mini model of issue 5 (branch ``mini``): package ``mini``, weights in ``weights/`` as
# ``NAME.safetensors`` + ``NAME.json`` per component.
SHIPPED_COMPONENTS = ("tokenizer", "target", "eagle_head", "draft_gpt", "evaluator")


def _model_folders() -> dict[str, str]:
    """``mini.weights.MODEL_DIRS`` as folders of the repository (imported when asked for: it loads torch)."""
    from relaxspec.mini.weights import MODEL_DIRS, WEIGHTS_DIR

    return {name: path.relative_to(WEIGHTS_DIR.parent).as_posix() for name, path in MODEL_DIRS.items()}


def shipped_model() -> str:
    """The shipped model the notebook uses: ``RELAXSPEC_MODEL`` (``mini`` or ``ambiguous``, default
    ``mini``); ValueError naming a bad value."""
    value = os.environ.get(MODEL_VAR, "mini").strip().lower() or "mini"
    models = _model_folders()
    if value not in models:
        raise ValueError(f"{MODEL_VAR} must be one of {', '.join(models)}, got {value!r}")
    return value


def shipped_model_missing() -> str | None:
    """None when the shipped model (:func:`shipped_model`) can be loaded (``mini.shipped``); otherwise what
    is missing. The ``ambiguous`` model shares the first one's evaluator."""
    import importlib.util

    if importlib.util.find_spec("mini") is None or importlib.util.find_spec("relaxspec.mini.shipped") is None:
        return "the `mini` package (issue 5, the Fashion-MNIST model) is not in this checkout yet"
    folder = _model_folders()[shipped_model()]
    weights = repo_root() / folder
    needed = [c for c in SHIPPED_COMPONENTS if folder == "weights" or c != "evaluator"]
    absent = [c for c in needed
              if not ((weights / f"{c}.safetensors").is_file() and (weights / f"{c}.json").is_file())]
    if absent:
        return f"`{folder}/` lacks the trained component(s) {', '.join(absent)}"
    return None


def load_shipped():
    """``mini.shipped.load_mini`` on the folder of :func:`shipped_model`."""
    from relaxspec.mini.shipped import load_mini

    return load_mini(repo_root() / _model_folders()[shipped_model()])
