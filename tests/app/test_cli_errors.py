"""Ordinary mistakes through ``relaxspec``: one line ``relaxspec: error: ...`` naming the path, key or
value and exit code 2 (130 after Ctrl-C), ``--debug`` for the traceback (issue 12, item 5)."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from relaxspec.cli import error_message, main
from relaxspec.theory import cli as theory_cli
from relaxspec.theory.relax import Relax

# these tests read a simulate command's stderr line by line: no cold-cache compile notice
pytestmark = pytest.mark.usefixtures("simulator_kernels")

ROOT = Path(__file__).resolve().parents[2]
BAD_RELAX = "additive:k=10,delta=0.1,lam=2"
BAD_VERIFICATION = "r1+lantern:k=10,delta=0.1,lam=2"  # BAD_RELAX as a verification spec


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """Exit code and the one stderr line of ``relaxspec argv`` run in-process."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return code, lines[0]


def tiny_config(path: Path, verifications: str = '["r1"]') -> Path:
    """A sweep config that runs in well under a second once compiled."""
    path.write_text(f'worlds = ["confident"]\ntrees = ["chain:2"]\n'
                    f"verifications = {verifications}\nn_sequences = 1\nseq_len = 4\n"
                    "[world_overrides]\nvocab_size = 64\n")
    return path


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux' /proc")
@pytest.mark.parametrize("where", ["proc", "directory", "under_a_file"])
def test_unwritable_out_is_one_line_naming_the_path(tmp_path, capsys, where: str) -> None:
    cfg = tiny_config(tmp_path / "c.toml")
    (tmp_path / "afile").write_text("x")
    out, named = {"proc": ("/proc/x.csv", "/proc/x.csv"), "directory": (tmp_path, str(tmp_path)),
                  "under_a_file": (tmp_path / "afile" / "x.csv", str(tmp_path / "afile"))}[where]
    code, line = run_cli(capsys, "simulate", cfg, "--results", out, "--no-progress")
    assert code == 2
    assert line.startswith("relaxspec: error: ") and named in line
    assert not (tmp_path / "afile").is_dir()


def test_weights_folder_missing_or_lacking_a_card(tmp_path, capsys) -> None:
    code, line = run_cli(capsys, "mini", "--weights", "/nonexistent", "--out", tmp_path / "o", "report")
    assert code == 2 and line == "relaxspec: error: weights folder /nonexistent does not exist"
    code, line = run_cli(capsys, "mini", "--weights", tmp_path / "none", "--out", tmp_path, "ambiguity")
    assert code == 2 and "does not exist" in line
    weights = tmp_path / "w"
    weights.mkdir()
    for f in (ROOT / "weights").iterdir():
        if f.name != "target.json":
            (weights / f.name).symlink_to(f)
    code, line = run_cli(capsys, "mini", "--weights", weights, "--out", tmp_path / "o", "report")
    assert code == 2 and f"card {weights / 'target.json'}" in line and "missing" in line


@pytest.mark.parametrize("argv", [
    ["rescore", "/nonexistent", "--verification", BAD_VERIFICATION],
    ["trace-acceptance", "/nonexistent", "--verification", BAD_VERIFICATION],
])
def test_bad_relaxation_keys_on_the_command_line(capsys, argv) -> None:
    code, line = run_cli(capsys, *argv)
    assert code == 2
    assert f"{BAD_VERIFICATION!r}: relaxation {BAD_RELAX!r}: additive does not take 'lam'" in line
    assert "additive: k, delta" in line and "multiplicative: k, lam" in line


def test_bad_relaxation_keys_in_a_config(tmp_path, capsys) -> None:
    cfg = tiny_config(tmp_path / "c.toml", f'["{BAD_VERIFICATION}"]')
    code, line = run_cli(capsys, "simulate", cfg, "--results", tmp_path / "r.csv")
    assert code == 2 and str(cfg) in line and "does not take 'lam'" in line
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize("text, match", [
    (BAD_RELAX, "additive does not take 'lam'"),
    ("multiplicative:k=10,delta=0.1,lam=2", "multiplicative does not take 'delta'"),
    ("none:k=3", "none does not take 'k'"),
    ("additive:k=10,k=20,delta=0.1", "gives k twice"),
    ("additive:k=10", "needs delta"),
    ("multiplicative:lam=2", "needs k"),
    ("additive:k=10,delta=x", "delta='x' is not a number"),
    ("additive:k,delta=0.1", "k needs a value"),
    ("additive:k=inf,delta=0.1", "k must be an integer"),
    ("additive:k=10,delta=2", "delta must be in"),
    ("lantern", "cannot parse"),
    (3, "must be a string"),
])
def test_relax_parse_names_the_key(text, match) -> None:
    with pytest.raises(ValueError, match=match):
        Relax.parse(text)


def test_relax_parse_accepts_spaces_and_round_trips() -> None:
    assert Relax.parse(" additive: k = 10 , delta = 0.1 ") == Relax.additive(10, 0.1)
    assert Relax.parse("none") == Relax.parse("none:") == Relax.none()


def test_world_stats_lists_the_presets(capsys) -> None:
    code, line = run_cli(capsys, "world-stats", "foggy")
    assert code == 2 and "'foggy'" in line and "confident, ambiguous, mini" in line
    with pytest.raises(SystemExit):
        main(["world-stats", "--help"])
    assert "confident, ambiguous, mini" in capsys.readouterr().out


@pytest.mark.parametrize("argv, named", [
    (["theory", "demo", "--seed", "-1"], "--seed must be >= 0"),
    (["demo", "--threads", "0"], "--threads must be in [1,"),
    (["demo", "--model", "llamagen"], "--model must be one of mini, ambiguous"),
    (["mini", "--seed", "-1", "ambiguity"], "--seed must be >= 0"),
    (["mini", "quality", "--n-images", "1"], "--n-images must be >= 2"),
    (["mini", "validate", "--n-sequences", "1"], "--n-sequences must be >= 2"),
])
def test_bad_option_values_are_named(capsys, argv, named) -> None:
    code, line = run_cli(capsys, *argv)
    assert code == 2 and named in line


def test_ctrl_c_exits_130_with_one_line(monkeypatch, capsys) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(theory_cli, "_demo", interrupted)
    assert run_cli(capsys, "theory", "demo") == (130, "relaxspec: interrupted")


def test_internal_errors_are_not_swallowed(monkeypatch) -> None:
    def bug(args):
        raise TypeError("an internal bug")

    monkeypatch.setattr(theory_cli, "_demo", bug)
    with pytest.raises(TypeError, match="an internal bug"):
        main(["theory", "demo"])


def test_debug_shows_the_traceback() -> None:
    cmd = [sys.executable, "-m", "relaxspec.cli", "--debug", "world-stats", "foggy"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "Traceback (most recent call last)" in res.stderr
    assert "ValueError: unknown world preset 'foggy'" in res.stderr
    res = subprocess.run(cmd[:3] + cmd[4:], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("relaxspec: error: unknown world preset 'foggy'")


@pytest.mark.parametrize("err, line", [
    (FileNotFoundError(2, "No such file or directory", "/proc/x.csv"),
     "No such file or directory: '/proc/x.csv'"),
    (PermissionError(13, "Permission denied", "/root/x"), "Permission denied: '/root/x'"),
    (IsADirectoryError(21, "Is a directory", "/tmp"), "Is a directory: '/tmp'"),
    (NotADirectoryError(20, "Not a directory", "/etc/hostname/x"), "Not a directory: '/etc/hostname/x'"),
    (OSError(18, "Invalid cross-device link", "/a", None, "/b"), "Invalid cross-device link: '/a' -> '/b'"),
    (FileNotFoundError("card /w/target.json of component 'target' is missing"),
     "card /w/target.json of component 'target' is missing"),
    (ValueError("two\nlines"), "two lines"),
    (TypeError("a bug"), None),
    (KeyError("a bug"), None),
])
def test_error_message(err, line) -> None:
    assert error_message(err) == line


def test_file_in_the_way_of_a_folder(tmp_path) -> None:
    (tmp_path / "f").write_text("x")
    err = FileExistsError(17, "File exists", str(tmp_path / "f"))
    assert error_message(err) == f"{str(tmp_path / 'f')!r} is a file, not a directory"


# ------------------------------------------------------------------ issue 26: the results file and config
NOT_OURS = {"csv": b"a,b,c\r\n1,2,3\r\n", "unterminated_csv": b"a,b,c\r\n1,2,3",
            "binary": bytes(range(256)) * 4, "a_header_prefix_then_more": b"world,tree\r\n\x9e\xff\r\n"}


@pytest.mark.parametrize("kind", NOT_OURS)
def test_an_out_file_that_is_not_a_results_csv_is_refused_untouched(tmp_path, capsys, recwarn, kind) -> None:
    """Item 1: the header is checked before anything touches the file (no torn line cut off it)."""
    cfg = tiny_config(tmp_path / "c.toml")
    out = tmp_path / "x.csv"
    out.write_bytes(NOT_OURS[kind])
    code, line = run_cli(capsys, "simulate", cfg, "--results", out, "--no-progress")
    assert code == 2 and line.startswith("relaxspec: error: ")
    assert str(out) in line and "is not a results CSV" in line and "left as it is" in line
    assert out.read_bytes() == NOT_OURS[kind]
    assert not [w for w in recwarn if "torn" in str(w.message)]


def _limited_memory() -> None:
    """A regression must not take the machine's memory (reading /dev/full never ends)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_an_out_path_that_is_not_a_regular_file_is_refused(tmp_path, kind) -> None:
    """Item 6: a device, FIFO or folder as --results is refused before it is opened for reading (reading
    /dev/full never ends; opening a FIFO waits for a writer)."""
    out = {"device": Path("/dev/full"), "fifo": tmp_path / "fifo", "directory": tmp_path / "d"}[kind]
    if kind == "device" and not out.exists():
        pytest.skip("no /dev/full here")
    if kind == "fifo":
        os.mkfifo(out)
    if kind == "directory":
        out.mkdir()
    cfg = tiny_config(tmp_path / "c.toml")
    cmd = [sys.executable, "-m", "relaxspec.cli", "simulate", str(cfg), "--results", str(out),
           "--no-progress"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         preexec_fn=_limited_memory)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.count("\n") == 1 and str(out) in res.stderr and "not a regular file" in res.stderr


def test_a_second_writer_is_refused_at_once(tmp_path, capsys) -> None:
    """Item 2: a sweep locks its results file (flock); a second one writing it gets one line, no wait."""
    from relaxspec.results import csv_line

    cfg = tiny_config(tmp_path / "c.toml")
    out = tmp_path / "r.csv"
    out.write_bytes(csv_line(None).encode())
    with open(out, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running sweep holds
        code, line = run_cli(capsys, "simulate", cfg, "--results", out, "--no-progress")
    assert code == 2 and str(out) in line and "another sweep is writing it" in line
    assert out.read_bytes() == csv_line(None).encode()


def test_a_config_that_is_not_text_is_named(tmp_path, capsys) -> None:
    """Item 13: which config, and that it is not UTF-8 text (not the codec's bare message)."""
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b'worlds = ["\x9e"]\n')
    code, line = run_cli(capsys, "simulate", cfg, "--results", tmp_path / "r.csv")
    assert code == 2 and f"config {cfg} is not UTF-8 text" in line and "byte 0x9e" in line
    assert not (tmp_path / "r.csv").exists()


def test_a_full_disk_names_the_results_file(tmp_path, capsys, monkeypatch) -> None:
    """Item 13: ENOSPC while a row is written names the file and the reason."""
    import relaxspec.results as results_mod

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results_mod.os, "write", full)
    out = tmp_path / "r.csv"
    code, line = run_cli(capsys, "simulate", tiny_config(tmp_path / "c.toml"), "--results", out,
                         "--no-progress")
    assert code == 2 and str(out) in line and "no space left on device" in line.lower()
