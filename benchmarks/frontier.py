"""The comparison of every method (issues 14 and 15): run it and write docs/frontier.md.

    python benchmarks/frontier.py                   # worlds + shipped model (resumable, tqdm)
    python benchmarks/frontier.py --skip-shipped    # the synthetic worlds only
    python benchmarks/frontier.py --threads 1       # one core (default: every core; the same numbers)
    python benchmarks/frontier.py --quick           # smoke run (2.5 min; 6.7 min with a cold Numba cache,
                                                    # BENCHMARKS.md); does not touch docs/frontier.md

The measurement lives in :mod:`relaxspec.studies.frontier` (methods, runs, table, claims, figure); this
script runs it with the given options and writes its report between the markers of docs/frontier.md,
with the exact command, so the prose around the table stays as written.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relaxspec.studies.frontier import main as run_study  # noqa: E402

DOC = ROOT / "docs" / "frontier.md"
BEGIN, END = "<!-- frontier table: begin -->", "<!-- frontier table: end -->"


def write_doc(report: list[str], out: Path, argv: list[str]) -> None:
    """Replace the text between the markers of docs/frontier.md by the report and its command."""
    command = "python benchmarks/frontier.py" + "".join(f" {shlex.quote(a)}" for a in argv)
    block = [BEGIN, "", f"Command: `{command}` (results in `{out}`).", "", *report, "", END]
    text = DOC.read_text() if DOC.exists() else f"# Frontier comparison\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC} lacks the markers {BEGIN} ... {END}")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(head + "\n".join(block) + tail)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    report, out = run_study(argv)  # a bad option: one line and exit code 2 (study_options.option_error)
    print("\n".join(report))
    if "--quick" not in argv:
        write_doc(report, out, argv)
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
