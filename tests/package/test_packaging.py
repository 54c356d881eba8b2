"""Packaging as the ecosystem expects (issue 27): one version, shown by ``relaxspec --version`` and cited
by CITATION.cff; a typed package; torch ranged, not pinned, in the package's own metadata."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import relaxspec

ROOT = Path(__file__).resolve().parents[2]


def test_version_in_one_place() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "relaxspec.__version__"}
    cited = re.search(r"^version: *(\S+)$", (ROOT / "CITATION.cff").read_text(), flags=re.M)
    assert cited and cited.group(1) == relaxspec.__version__


def test_version_option() -> None:
    out = subprocess.run([sys.executable, "-m", "relaxspec", "--version"], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == f"relaxspec {relaxspec.__version__}"


def test_typed_and_ranged() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert (ROOT / "relaxspec" / "py.typed").is_file()
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["relaxspec"]
    torch = [d for d in project["project"]["dependencies"] if d.startswith("torch")]
    assert torch and "==" not in torch[0], f"torch is pinned in the runtime dependencies: {torch}"
