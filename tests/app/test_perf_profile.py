"""benchmarks/perf_profile.py: its reading of ``perf report`` (perf itself is not needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "perf_profile.py"


@pytest.fixture(scope="module")
def profile():
    spec = importlib.util.spec_from_file_location("perf_profile", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernel_names_from_numba_symbols(profile) -> None:
    sym = ("_ZN9relaxspec8simulate13world_kernels9_exp_passB3v53B44c8tJTIeFIjxB2IKSgI4CrvQCk0Z4yRYcWsBAK4JIag"
           "IAE5ArrayIfLi2E1C7mutable7alignedE")
    assert profile.kernel_name(sym) == "world_kernels._exp_pass"
    assert profile.kernel_name("_PyEval_EvalFrameDefault") is None


def test_shares_count_jit_samples_only(profile) -> None:
    report = "\n".join([
        "# Overhead  Symbol",
        "    30.00%  [.] _PyEval_EvalFrameDefault",
        "    15.00%  [.] _ZN9relaxspec8simulate14verify_kernels13seqsum_kernelB4v10E",
        "     5.00%  [.] _ZN9relaxspec8simulate13world_kernels9_exp_passB3v53E",
        "     5.00%  [.] _ZN9relaxspec8simulate13world_kernels9_exp_passB3v54E",
        "    45.00%  [k] clear_page_erms",
    ])
    jit, rows = profile.shares(report)
    assert jit == pytest.approx(25.0)
    assert rows == [("verify_kernels.seqsum_kernel", pytest.approx(60.0)),
                    ("world_kernels._exp_pass", pytest.approx(40.0))]
    assert profile.shares("# nothing sampled") == (0.0, [])


def test_a_missing_perf_is_one_line(profile, monkeypatch, capsys) -> None:
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    assert profile.main(["jacobi:15", "r4"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "perf_profile: perf is not installed (Linux perf: apt-get install linux-perf)"]
