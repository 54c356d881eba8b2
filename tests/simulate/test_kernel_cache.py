"""The one-line notice before a cold first run compiles the simulator's Numba kernels (issue 26 item 17):
it appears when Numba's cache lacks them (an empty ``NUMBA_CACHE_DIR``) and not once they are cached."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from relaxspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = "from numba import njit\n\n\n@njit(cache=True)\ndef bump(x):\n    return x + 1\n"


def _python(code: str, cache: Path, *path: Path) -> str:
    """Run ``code`` in a fresh interpreter whose Numba cache is ``cache``; its stdout."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *path)))}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_cold_cache_is_announced(tmp_path) -> None:
    """An empty Numba cache: the simulator's entry kernels are not cached, and the notice says that they
    are compiled once and roughly how long it takes."""
    code = "from relaxspec.simulate.kernel_cache import compile_notice\nprint(compile_notice())"
    out = _python(code, tmp_path / "empty")
    assert "compiling the simulator's Numba kernels" in out and "minutes" in out and "once" in out
    assert "\n" not in out


def test_a_warm_cache_is_not_announced(tmp_path) -> None:
    """A cached kernel (compiled by an earlier process into the same cache) is not cold; before its first
    compilation it is."""
    (tmp_path / "tiny_kernel.py").write_text(TINY)
    code = ("from relaxspec.simulate.kernel_cache import cold_kernels\nimport tiny_kernel\n"
            "print(cold_kernels([('tiny_kernel', 'bump')]))\ntiny_kernel.bump(1)")
    cache = tmp_path / "cache"
    assert _python(code, cache, tmp_path) == "['tiny_kernel.bump']"
    assert _python(code, cache, tmp_path) == "[]"


@pytest.mark.parametrize("notice", ["compiling the simulator's Numba kernels (once)", None])
def test_the_simulate_command_prints_the_notice_before_running(tmp_path, monkeypatch, capsys, notice) -> None:
    """``relaxspec simulate`` prints the notice (one line on stderr) before its sweep, and nothing when the
    cache is warm."""
    import relaxspec.sweep
    from relaxspec.simulate import kernel_cache

    order = []
    monkeypatch.setattr(kernel_cache, "compile_notice", lambda: order.append("notice") or notice)
    monkeypatch.setattr(relaxspec.sweep, "run_sweep", lambda *a, **kw: order.append("sweep") or [])
    cfg = tmp_path / "grid.toml"
    cfg.write_text('worlds = ["ambiguous"]\ntrees = ["chain:2"]\n')
    assert main(["simulate", str(cfg), "--results", str(tmp_path / "r.csv"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert order == ["notice", "sweep"]
    assert err == (f"relaxspec: note: {notice}\n" if notice else "")


def test_warm_compiles_only_the_cold_kernels(simulator_kernels, monkeypatch, capsys) -> None:
    """``relaxspec warm-up`` (``make test`` runs it first): nothing to do on a warm cache; the cold kernels,
    each in a process of its own, else; a failed one is named."""
    from relaxspec.simulate import kernel_cache

    assert importlib.import_module(kernel_cache.MODULE) is kernel_cache  # what each process imports
    assert kernel_cache.warm() == []
    assert main(["warm-up"]) == 0 and capsys.readouterr().out == "the simulator's kernels are cached\n"
    names = [f"{m}.{n}" for m, n in kernel_cache.ENTRY_KERNELS]
    warm_one = kernel_cache.warm_one
    monkeypatch.setattr(kernel_cache, "cold_kernels", lambda kernels=(): names)
    monkeypatch.setattr(kernel_cache, "warm_one", lambda kernel: None)  # --serial: in this process
    assert main(["warm-up", "--serial"]) == 0 and capsys.readouterr().out == f"compiled {', '.join(names)}\n"
    assert main(["warm-up"]) == 0 and capsys.readouterr().out == f"compiled {', '.join(names)}\n"
    monkeypatch.setattr(kernel_cache, "cold_kernels", lambda kernels=(): [names[0], "relaxspec.nowhere.k"])
    with pytest.raises(RuntimeError, match=r"compiling relaxspec\.nowhere\.k failed"):
        kernel_cache.warm()
    with pytest.raises(ValueError, match="unknown entry kernel 'relaxspec.nowhere.k'"):
        warm_one("relaxspec.nowhere.k")


def test_make_tests_warm_up_runs_without_a_warning(simulator_kernels) -> None:
    """The command the Makefile's ``test`` target runs before pytest (``python -m`` on a module the
    ``relaxspec.simulate`` package imports printed runpy's ``RuntimeWarning`` on stderr) writes nothing to
    stderr; on a warm cache it compiles nothing."""
    recipe = (ROOT / "Makefile").read_text().partition("\ntest: setup\n")[2].splitlines()
    warm_up = recipe[0].strip()
    assert "pytest" in recipe[1] and warm_up.startswith("$(BIN)/"), recipe[:2]
    command = warm_up.replace("$(BIN)/", str(Path(sys.executable).parent) + "/").split()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "the simulator's kernels are cached\n")


def _bare_prange_indices(tree: ast.AST) -> list[int]:
    """Lines of calls inside a ``for i in prange(...)`` loop that pass the bare index ``i``."""
    lines = []
    for loop in ast.walk(tree):
        if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
                and getattr(loop.iter.func, "id", None) == "prange" and isinstance(loop.target, ast.Name)):
            continue
        for call in (n for stmt in loop.body for n in ast.walk(stmt) if isinstance(n, ast.Call)):
            bare = any(isinstance(a, ast.Name) and a.id == loop.target.id for a in call.args)
            if bare and ast.unparse(call.func) != "np.int64":
                lines.append(call.lineno)
    return lines


def test_parallel_kernels_hand_their_sequence_kernels_an_int64_index() -> None:
    """Numba types a prange loop twice, as a range (an int64 index) and as the parallel body (uint64):
    a kernel called with the bare index compiles twice (14% of a cold compile of simulate_kernel), so
    each call passes ``np.int64(s)``. The check fails on a loop that passes the bare index."""
    sources = sorted((ROOT / "simulate").glob("*.py"))
    found = {p.name: _bare_prange_indices(ast.parse(p.read_text())) for p in sources}
    assert sum(1 for p in sources if "prange(" in p.read_text()) >= 5
    assert {name: lines for name, lines in found.items() if lines} == {}
    bad = ast.parse("for s in prange(n):\n    kernel(np.int64(s), W)\n    kernel(s, W)\n")
    assert _bare_prange_indices(bad) == [3]


def test_a_cache_compiled_from_other_sources_is_dropped(tmp_path):
    """A kernel reading another module's constant keeps the value it was compiled with when only that
    module changes (Numba checks a kernel's own file): the cache folder is keyed by the digest of every
    source of the layers kernels read, emptied of Numba's files (only those) when it differs."""
    from types import SimpleNamespace

    from relaxspec.simulate.kernel_cache import SOURCES_MARKER, drop_stale_caches, sources_digest

    fake = SimpleNamespace(_cache=SimpleNamespace(_cache_path=str(tmp_path)))
    for name in ("k-1.py311.nbi", "k-1.py311.1.nbc", "engine.cpython-311.pyc"):
        (tmp_path / name).write_text("x")
    assert drop_stale_caches(fake) is True  # no digest recorded: compiled from unknown sources
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.cpython-311.pyc", SOURCES_MARKER]
    assert (tmp_path / SOURCES_MARKER).read_text().strip() == sources_digest()
    (tmp_path / "k-2.py311.nbi").write_text("x")  # compiled from the current sources: kept
    assert drop_stale_caches(fake) is False and (tmp_path / "k-2.py311.nbi").exists()
    (tmp_path / SOURCES_MARKER).write_text("0" * 64)  # a source changed since
    assert drop_stale_caches(fake) is True and not (tmp_path / "k-2.py311.nbi").exists()
    assert drop_stale_caches(SimpleNamespace()) is False  # no cache to locate: nothing to do


def test_importing_the_simulator_records_its_sources_digest():
    import relaxspec.simulate  # noqa: F401 (the import keys the cache)
    from relaxspec.simulate.engine import simulate_kernel
    from relaxspec.simulate.kernel_cache import SOURCES_MARKER, sources_digest

    marker = Path(simulate_kernel._cache._cache_path) / SOURCES_MARKER
    assert marker.read_text().strip() == sources_digest()
