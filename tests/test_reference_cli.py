"""``relaxspec generate / replay / rescore`` end to end on tiny checkpoints the test writes,
resume, and drafter training."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from reference_helpers import official_state, tiny_config

from reference.train_drafter import main as train_main
from reference.vq import VQModel, vq_config
from relaxspec.cli import main
from simulate.trace import read_trace

MODEL_ARGS = ["--gpt-model", "GPT-tiny", "--vq-model", "VQ-tiny", "--codebook-size", "8",
              "--codebook-embed-dim", "4", "--image-size", "4", "--num-classes", "3"]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    torch.save({"model": official_state(tiny_config(), seed=0, std=0.5)}, d / "c2i_tiny.pt")
    torch.save({"model": official_state(tiny_config(), seed=1, std=0.5)}, d / "c2i_tiny_draft.pt")
    torch.manual_seed(0)
    torch.save({"model": VQModel(vq_config("VQ-tiny")).state_dict()}, d / "vq_tiny.pt")
    return d


def gen_args(ckpts, out, *extra: str) -> list[str]:
    return ["generate", "--gpt-ckpt", str(ckpts / "c2i_tiny.pt"), "--vq-ckpt", str(ckpts / "vq_tiny.pt"),
            *MODEL_ARGS, "--out", str(out), "--device", "cpu", *extra]


def test_generate_trace_replay_rescore_and_resume(tmp_path, ckpts, capsys) -> None:
    out = tmp_path / "run"
    args = gen_args(ckpts, out, "--classes", "0,2", "--per-class", "2", "--tree", "eagle2",
                    "--tree-args", "top_k=3,depth=2,total_tokens=8", "--rule", "r1",
                    "--relax", "additive:k=3,delta=0.1", "--trace", "--draft-ckpt",
                    str(ckpts / "c2i_tiny_draft.pt"), "--draft-model", "GPT-tiny")
    assert main(args) == 0
    pngs = sorted(p.name for p in (out / "images").iterdir())
    assert pngs == ["000000_class0.png", "000001_class0.png", "000002_class2.png", "000003_class2.png"]
    with open(out / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    assert {int(r["sequence"]) for r in rows} == {0, 1, 2, 3}
    for i in range(4):
        assert sum(int(r["tokens"]) for r in rows if int(r["sequence"]) == i) == 4
    trace = read_trace(out / "trace")
    assert trace.header.relax == "additive:k=3,delta=0.1" and trace.sequences() == {0, 1, 2, 3}
    assert main(["replay", str(out / "trace"), "--require-simulate"]) == 0
    assert "0 mismatches" in capsys.readouterr().out
    for rule in ("r1", "r2", "r3"):
        relax = "multiplicative:k=2,lam=2"
        assert main(["rescore", str(out / "trace"), "--rule", rule, "--relax", relax]) == 0
    assert "exact" in capsys.readouterr().out
    # an interrupted run: the last image and its rows gone -> only it is redone, identically
    tokens = np.load(out / "tokens" / "000003.npy")
    (out / "images" / "000003_class2.png").unlink()
    assert main(args) == 0
    assert np.array_equal(np.load(out / "tokens" / "000003.npy"), tokens)
    with open(out / "steps.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert len(read_trace(out / "trace").chunk_files) == 4


def test_generate_ar_and_static_self_drafting(tmp_path, ckpts) -> None:
    assert main(gen_args(ckpts, tmp_path / "ar", "--classes", "1", "--tree", "ar", "--cfg-scale", "1")) == 0
    assert main(gen_args(ckpts, tmp_path / "st", "--classes", "1", "--tree", "static", "--rule", "r2",
                         "--tree-args", "choices=[[0],[1],[0,0]]", "--temperature", "0.9",
                         "--top-k", "5")) == 0
    assert len(list((tmp_path / "st" / "images").iterdir())) == 1


def test_generate_errors_name_the_problem(tmp_path, ckpts, capsys) -> None:
    bad = gen_args(ckpts, tmp_path / "x", "--classes", "1", "--tree", "ar")
    bad[bad.index("--codebook-size") + 1] = "16"
    assert main(bad) == 2
    assert "mis-shaped tensors [quantize.embedding.weight: (8, 4) in the file" in capsys.readouterr().err
    torch.save({"model": official_state(tiny_config(vocab_size=9), seed=0)}, tmp_path / "v9.pt")
    bad = gen_args(ckpts, tmp_path / "x", "--classes", "1", "--tree", "ar")
    bad[bad.index("--gpt-ckpt") + 1] = str(tmp_path / "v9.pt")
    assert main(bad) == 2
    assert "vocabulary mismatch" in capsys.readouterr().err
    assert main(gen_args(ckpts, tmp_path / "y", "--classes", "7", "--tree", "ar")) == 2
    assert "class label 7" in capsys.readouterr().err
    assert main(gen_args(ckpts, tmp_path / "z", "--classes", "1", "--tree", "eagle2",
                         "--tree-args", "widths=3")) == 2
    assert "bad arguments for tree policy" in capsys.readouterr().err


def test_trained_eagle_head_drives_generation(tmp_path, ckpts) -> None:
    head = tmp_path / "head.pt"
    assert train_main(["--gpt-ckpt", str(ckpts / "c2i_tiny.pt"), "--gpt-model", "GPT-tiny",
                       "--codebook-size", "8", "--grid", "2", "--num-classes", "3", "--sequences", "16",
                       "--steps", "20", "--device", "cpu", "--out", str(head)]) == 0
    assert main(gen_args(ckpts, tmp_path / "e", "--classes", "0", "--tree", "ddd",
                         "--tree-args", "top_k=2,max_calls=3,check_steps=[2],total_tokens=5",
                         "--eagle-ckpt", str(head), "--trace")) == 0
    assert main(["replay", str(tmp_path / "e" / "trace")]) == 0


def test_benchmark_without_cuda_says_so(capsys) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "decoder_bench.py"
    spec = importlib.util.spec_from_file_location("decoder_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark measures instead")
    assert bench.main(["--no-cpu"]) == 0
    assert "no CUDA device" in capsys.readouterr().out
