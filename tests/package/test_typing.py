"""mypy on the public API (issue 27 item 5), so CI runs it: ``[tool.mypy]`` of pyproject.toml names the
modules (the package root and the modules whose names it exports), checked on the package laid out as it
installs (``relaxspec.theory`` from ``theory/``, ...), and README's Python blocks as a user's script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_api import readme_python_blocks

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("theory", "core", "simulate", "reference", "mini")


def installed_layout(where: Path) -> Path:
    """``where/relaxspec``: the package as a wheel installs it, made of links into the checkout."""
    pkg = where / "relaxspec"
    pkg.mkdir()
    for entry in (ROOT / "relaxspec").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for layer in LAYERS:
        (pkg / layer).symlink_to(ROOT / layer)
    return pkg


def test_the_public_api_type_checks(tmp_path) -> None:
    installed_layout(tmp_path)
    user = tmp_path / "quickstart.py"
    user.write_text("\n\n".join(readme_python_blocks()))
    for args in ([], [str(user)]):  # the configured modules; then the user's script against them
        done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                               "--cache-dir", str(tmp_path / ".mypy_cache"), *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert "Success: no issues found" in done.stdout
