"""One import namespace (issue 27): a wheel installed in a fresh venv holds ``relaxspec`` and nothing
beside it, and every module imports from a folder that holds a user's own ``core/`` and ``simulate.py``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "relaxspec", "theory", "core", "simulate", "reference",
           "mini")
IMPORT_ALL = """
import importlib, pkgutil, sys
import relaxspec
names = [m.name for m in pkgutil.walk_packages(relaxspec.__path__, "relaxspec.")]
names += [f"relaxspec.{layer}.{m.name}" for layer in ("theory", "core", "simulate", "reference", "mini")
          for m in pkgutil.walk_packages(importlib.import_module(f"relaxspec.{layer}").__path__, "")]
for name in sorted(set(names) - {"relaxspec.__main__"}):  # __main__ runs the command line
    module = importlib.import_module(name)
    assert module.__file__.startswith(sys.argv[1]), (name, module.__file__)
import core, simulate  # the user's own, untouched by ours
assert core.MINE and simulate.MINE
print(len(set(names)))
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> tuple[Path, str]:
    """The project's wheel, built from a copy of its sources (the checkout gets no build/ or egg-info), and
    the build's log (``pip -v`` shows the build backend's warnings)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
        else:
            shutil.copy(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    log = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                          "--no-index", "-w", str(out), str(src)], check=True, capture_output=True, text=True)
    (whl,) = out.glob("relaxspec-*.whl")
    return whl, log.stdout + log.stderr


@pytest.fixture(scope="module")
def wheel(build: tuple[Path, str]) -> Path:
    return build[0]


def test_the_build_warns_nothing(build: tuple[Path, str]) -> None:
    """setuptools says nothing about the configuration (the cost tables' folder, data only, was once
    "absent from the packages configuration")."""
    log = build[1]
    assert "Warning:" not in log and "absent from the `packages`" not in log, log[-3000:]


def test_the_wheel_installs_one_package(wheel: Path) -> None:
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"relaxspec"}, tops
    names = zipfile.ZipFile(wheel).namelist()
    assert "relaxspec/py.typed" in names and "relaxspec/core/tables/decoder_cpu.csv" in names


def test_every_module_imports_beside_a_users_core_and_simulate(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # the dependencies (numpy, numba, torch, ...) from this environment, after the venv's own packages
    # (every site folder on this interpreter's path: a venv may chain to another's through a .pth file)
    sites = [sysconfig.get_path("purelib")] + [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("".join(f"{p}\n" for p in dict.fromkeys(sites)))
    user = tmp_path / "user"
    (user / "core").mkdir(parents=True)
    (user / "core" / "__init__.py").write_text("MINE = True\n")
    (user / "simulate.py").write_text("MINE = True\n")
    out = subprocess.run([str(python), "-c", IMPORT_ALL, str(site)], cwd=user, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 100
