"""Executing the analysis notebooks (``notebooks/*.ipynb``): ``relaxspec figures`` and the CI test.

Notebooks are committed without outputs (:func:`output_problems` says which
cells hold some). :func:`execute` runs one with nbclient in a fresh kernel at a
given size (``RELAXSPEC_NB_SIZE``) with its figures going to a chosen folder
(``RELAXSPEC_FIGURES``), in a chosen working folder, and raises on the first
failing cell. ``relaxspec figures`` runs them all at full size into
``figures/`` with a progress bar per notebook.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from relaxspec.nbenv import FIGURES_VAR, ROOT_VAR, SIZE_VAR, SIZES, figures_dir, repo_root

FULL_TIMEOUT_S = 1800  # per cell
SMALL_TIMEOUT_S = 600


def notebooks_dir() -> Path:
    """``notebooks/`` at the repository root."""
    return repo_root() / "notebooks"


def notebook_paths(directory: Path | None = None, only: list[str] | None = None) -> list[Path]:
    """The notebooks in ``directory`` in name order; ``only`` keeps those named or prefixed by one of them."""
    directory = Path(directory) if directory is not None else notebooks_dir()
    paths = sorted(p for p in directory.glob("*.ipynb") if not p.name.startswith("."))
    if only:
        paths = [p for p in paths if any(p.name.startswith(o) or p.stem == o for o in only)]
        if not paths:
            raise ValueError(f"no notebook in {directory} matches {only}")
    return paths


def output_problems(path: Path) -> list[str]:
    """Cells of the notebook at ``path`` that hold outputs or execution counts (should be none)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"{path.name} cell {i}: has outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"{path.name} cell {i}: has an execution count")
    return problems


def execute(path: Path, *, size: str, figures: Path, workdir: Path | None = None,
            timeout: int | None = None, progress: bool = False, save_to: Path | None = None):
    """Run the notebook at ``path`` top to bottom in a fresh kernel; returns the executed notebook.

    The kernel sees ``RELAXSPEC_NB_SIZE=size``, ``RELAXSPEC_FIGURES=figures`` and
    ``RELAXSPEC_ROOT``; it runs in ``workdir`` (default: the notebook's folder).
    Raises ``nbclient.exceptions.CellExecutionError`` on the first failing cell.
    ``save_to`` writes the executed notebook there.
    """
    import nbformat
    from nbclient import NotebookClient

    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ)
    env.update({SIZE_VAR: size, FIGURES_VAR: str(Path(figures).resolve()), ROOT_VAR: str(repo_root())})
    workdir = Path(workdir) if workdir is not None else path.parent
    client = NotebookClient(nb, timeout=timeout or (SMALL_TIMEOUT_S if size == "small" else FULL_TIMEOUT_S),
                            kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(c.cell_type == "code" for c in nb.cells), desc=path.stem, unit="cell",
                   file=sys.stdout)
        client.on_cell_executed = lambda **kw: bar.update(1)
    try:
        client.execute(env=env)
    finally:
        if bar is not None:
            bar.close()
        if save_to is not None:
            Path(save_to).parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, save_to)
    return nb


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec figures``."""
    p.add_argument("--size", choices=SIZES, default="full", help="sample sizes")
    p.add_argument("--out", default=None,
                   help="figure folder (default: $RELAXSPEC_FIGURES or figures/ at the repository root; "
                        "figures/small/ for --size small)")
    p.add_argument("--notebooks", default=None, help="notebook folder (default: notebooks/)")
    p.add_argument("--only", default="", help="comma-separated notebook names or prefixes, e.g. 01,03")
    p.add_argument("--executed", default=None, help="also write the executed notebooks into this folder")
    p.add_argument("--timeout", type=int, default=None, help="seconds per cell")
    p.set_defaults(func=_figures)


def figures_output(size: str, out: str | None) -> Path:
    """Where ``relaxspec figures`` writes: ``--out``, else ``RELAXSPEC_FIGURES`` or ``figures/``; a
    ``small`` run goes to its ``small/`` subfolder, so that a quick pass never overwrites the full-size
    figures the README shows."""
    path = Path(out) if out else figures_dir() / ("small" if size == "small" else "")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _figures(args: argparse.Namespace) -> int:
    from nbclient.exceptions import CellExecutionError

    out = figures_output(args.size, args.out)
    only = [o.strip() for o in args.only.split(",") if o.strip()]
    paths = notebook_paths(Path(args.notebooks) if args.notebooks else None, only)
    if not paths:
        raise ValueError("no notebooks to run")
    before = {p: p.stat().st_mtime for p in out.glob("*")}
    failed = []
    t_all = time.perf_counter()
    for i, path in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {path.name} ({args.size})", flush=True)
        t0 = time.perf_counter()
        saved = Path(args.executed) / path.name if args.executed else None
        try:
            execute(path, size=args.size, figures=out, timeout=args.timeout, progress=True, save_to=saved)
        except CellExecutionError as err:
            failed.append(path.name)
            print(f"{path.name} failed:\n{err}", file=sys.stderr)
        print(f"    {path.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    written = sorted(p for p in out.glob("*") if before.get(p) != p.stat().st_mtime)
    print(f"{len(paths) - len(failed)} of {len(paths)} notebooks ran in {time.perf_counter() - t_all:.0f} s; "
          f"{len(written)} figure files written to {out}")
    for p in written:
        print(f"  {p}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
