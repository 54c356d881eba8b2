"""The specification lives in the repository (issue 26, item 18): docs/SPEC.md, every "SPEC ..."
citation in code, docs and notebooks resolves to one of its sections, and it is kept in step with the
steering copy (``../shared/SPEC.md``) wherever a checkout has one beside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "SPEC.md"
STEERING = ROOT.parent / "shared" / "SPEC.md"
# "SPEC 9.5", "SPEC section 8", "SPEC sections 2", "SPEC §7", "SPEC, section 3"
CITATION = re.compile(r"SPEC[ ,]*(?:sections?|§)? *(\d+(?:\.\d+)?)")
SOURCES = ("*.py", "*.md", "*.ipynb")
SKIP = {".venv", ".git", "build"}


def spec_sections() -> set[str]:
    """Section numbers of docs/SPEC.md's headings (``## 9. ...`` -> "9", ``### 9.5 ...`` -> "9.5")."""
    heads = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", SPEC.read_text(encoding="utf-8"), flags=re.M)
    return set(heads)


def citations() -> list[tuple[str, str]]:
    """(file, cited section) for every SPEC citation in the repository's code, docs and notebooks."""
    found = []
    for pattern in SOURCES:
        for f in ROOT.rglob(pattern):
            if SKIP & set(f.relative_to(ROOT).parts) or f == SPEC:
                continue
            for number in CITATION.findall(f.read_text(encoding="utf-8", errors="replace")):
                found.append((str(f.relative_to(ROOT)), number))
    return found


def test_every_spec_citation_resolves() -> None:
    sections = spec_sections()
    cited = citations()
    assert len(cited) > 100, "the citation pattern no longer finds the code's SPEC references"
    missing = sorted({(f, n) for f, n in cited if n not in sections})
    assert not missing, f"SPEC sections cited but absent from docs/SPEC.md: {missing}"


def test_readme_points_inside_the_repository() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "../shared" not in readme
    assert "docs/SPEC.md" in readme
    assert "source .venv/bin/activate" in readme  # the bare `relaxspec` commands need the venv


@pytest.mark.skipif(not STEERING.is_file(), reason="no steering copy beside this checkout")
def test_spec_kept_in_step_with_the_steering_copy() -> None:
    assert SPEC.read_bytes() == STEERING.read_bytes(), (
        "docs/SPEC.md differs from ../shared/SPEC.md: copy the steering spec in and update the layers")
