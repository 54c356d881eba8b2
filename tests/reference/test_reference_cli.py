"""``relaxspec generate / replay / rescore`` end to end on tiny checkpoints the test writes,
resume, and drafter training."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from reference_helpers import official_state, tiny_config

from relaxspec.cli import main
from relaxspec.core.trace import TraceHeader, TraceStep, TraceWriter, read_trace
from relaxspec.reference.train_drafter import main as train_main
from relaxspec.reference.vq import VQModel, vq_config
from relaxspec.theory.neighbours import neighbour_table, save_neighbours
from relaxspec.theory.relax import Relax
from relaxspec.theory.rules import neighbour_rows
from relaxspec.theory.tree import Tree, sample_step
from relaxspec.theory.verification import Verification

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
    args = gen_args(ckpts, out, "--classes", "0,2", "--per-class", "2", "--tree", "eagle2:3,2,8",
                    "--verification", "r1+lantern:k=3,delta=0.1", "--trace", "--draft-ckpt",
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
    assert str(trace.header.verification) == "r1+lantern:k=3,delta=0.1" and trace.sequences() == {0, 1, 2, 3}
    assert main(["replay", str(out / "trace"), "--require-simulate"]) == 0
    assert "0 mismatches" in capsys.readouterr().out
    for rule in ("r1", "r3"):
        assert main(["rescore", str(out / "trace"), "--verification", f"{rule}+lantern++:k=2,lam=2"]) == 0
    assert "exact" in capsys.readouterr().out
    # EAGLE-2 ranks children by top-k: R2 (drafts sampled from q) is refused, as generate refuses it
    assert main(["rescore", str(out / "trace"), "--verification", "r2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rule r2 verifies drafts sampled from q without replacement" in err
    assert "recorded with r1+lantern:k=3,delta=0.1 on tree 'eagle2:3,2,8'" in err
    # an interrupted run: the last image and its rows gone -> only it is redone, identically
    tokens = np.load(out / "tokens" / "000003.npy")
    (out / "images" / "000003_class2.png").unlink()
    assert main(args) == 0
    assert np.array_equal(np.load(out / "tokens" / "000003.npy"), tokens)
    with open(out / "steps.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert len(read_trace(out / "trace").chunk_files) == 4


def test_generate_ar_and_static_self_drafting(tmp_path, ckpts, capsys) -> None:
    assert main(gen_args(ckpts, tmp_path / "ar", "--classes", "1", "--tree", "ar", "--cfg-scale", "1")) == 0
    assert main(gen_args(ckpts, tmp_path / "st", "--classes", "1", "--tree", "static:[[0],[1],[0,0]]",
                         "--verification", "r2", "--temperature", "0.9",
                         "--top-k", "5", "--trace")) == 0
    assert len(list((tmp_path / "st" / "images").iterdir())) == 1
    header = read_trace(tmp_path / "st" / "trace").header  # the header's tree parses back to its policy
    assert header.tree == "static:[[0],[1],[0,0]]" and str(header.tree_policy()) == header.tree
    # a static tree drafted by sampling (recorded with r2) rescores under r2
    capsys.readouterr()
    assert main(["rescore", str(tmp_path / "st" / "trace"), "--verification", "r2"]) == 0
    assert "verification r2:" in capsys.readouterr().out


def write_trace(path: Path, *, rule: str = "r1", relax: Relax = Relax.none(), table: np.ndarray | None = None,
                V: int = 12, steps: int = 3) -> None:
    """A small trace written without a model (random logits, outcomes from theory.sample_step)."""
    rng = np.random.default_rng(0)
    header = TraceHeader(model="toy", checkpoint_sha256="0" * 64, vocab_size=V, codebook_sha256="1" * 64,
                         verification=Verification(rule, relax), tree="eagle2:2,2,6",
                         logits_dtype="float32")
    parents, tokens = np.array([-1, 0, 0, 1]), np.array([0, 1, 2, 3])
    with TraceWriter(path, header, table) as tw:
        for t in range(steps):
            tl, dl = (rng.standard_normal((4, V)).astype(np.float32) for _ in range(2))
            ua, ud = rng.random(4), rng.random(4)
            p = header.target_sampling.probs(tl.astype(np.float64))
            acc, bonus = sample_step(Tree(parents, tokens), p, ua, ud, Verification(rule, relax),
                                     neighbours=neighbour_rows(table, V, relax))
            tw.add(TraceStep(0, t, parents, tokens, tl, dl, ua, ud, np.array(acc), bonus))


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxspec: error: "), err
    return err.strip()


def test_rescore_with_a_relaxation_names_the_neighbours_option(tmp_path, capsys) -> None:
    write_trace(tmp_path / "t")
    argv = ["rescore", str(tmp_path / "t"), "--verification", "r1+lantern:k=3,delta=0.1"]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert "trace " + str(tmp_path / "t") + " holds none" in line and "--neighbours TABLE.npy" in line
    codebook = np.random.default_rng(1).standard_normal((20, 3))
    save_neighbours(tmp_path / "nb20.npy", neighbour_table(codebook, 11))
    assert main(argv + ["--neighbours", str(tmp_path / "nb20.npy")]) == 2
    assert "neighbour table has 20 rows, the vocabulary has 12 tokens" in one_error_line(capsys)
    save_neighbours(tmp_path / "nb12.npy", neighbour_table(codebook[:12], 11))
    assert main(argv + ["--neighbours", str(tmp_path / "nb12.npy")]) == 0
    assert "exact" in capsys.readouterr().out
    # trace-acceptance takes the same option
    argv = ["trace-acceptance", str(tmp_path / "t"), "--verification", "lantern:k=3,delta=0.1", "--width",
            "2"]
    assert main(argv) == 2 and "--neighbours TABLE.npy" in one_error_line(capsys)
    assert main(argv + ["--neighbours", str(tmp_path / "nb12.npy")]) == 0


@pytest.mark.parametrize("array, node", [("target_logits", 0), ("draft_logits", 2)])
def test_nan_in_a_trace_names_the_step_and_the_array(tmp_path, capsys, array: str, node: int) -> None:
    write_trace(tmp_path / "t")
    chunk = tmp_path / "t" / "chunk-000000.npz"
    with np.load(chunk) as z:
        data = {k: z[k] for k in z.files}
    data[array][4 + node, 5] = np.nan  # step 1 (position 1) starts at node row 4
    np.savez(chunk, **data)
    for argv in (["replay", str(tmp_path / "t")], ["rescore", str(tmp_path / "t"), "--verification", "r1"],
                 ["trace-acceptance", str(tmp_path / "t")]):
        assert main(argv) == 2
        line = one_error_line(capsys)
        assert f"{chunk}: step (sequence 0, position 1): {array} of node {node} hold NaN (at token 5" in line
    # and the writer refuses it before it reaches the disk
    header = read_trace(tmp_path / "t").header
    step = next(read_trace(tmp_path / "t").steps())
    bad = step.target_logits.copy()
    bad[1, 0] = np.inf
    with TraceWriter(tmp_path / "w", header) as tw, pytest.raises(ValueError, match=(
            r"step \(sequence 0, position 0\): target_logits of node 1 hold \+inf")):
        tw.add(TraceStep(0, 0, step.parents, step.tokens, bad, step.draft_logits, step.u_accept, step.u_draw,
                         step.path, step.bonus))


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
    assert main(gen_args(ckpts, tmp_path / "z", "--classes", "1", "--tree", "eagle2:3,2")) == 2
    err = capsys.readouterr().err
    assert "bad tree spec 'eagle2:3,2': needs 3 comma-separated values (eagle2:K,D,M)" in err


def test_trained_eagle_head_drives_generation(tmp_path, ckpts) -> None:
    head = tmp_path / "head.pt"
    assert train_main(["--gpt-ckpt", str(ckpts / "c2i_tiny.pt"), "--gpt-model", "GPT-tiny",
                       "--codebook-size", "8", "--grid", "2", "--num-classes", "3", "--sequences", "16",
                       "--steps", "20", "--device", "cpu", "--save", str(head)]) == 0
    assert main(gen_args(ckpts, tmp_path / "e", "--classes", "0", "--tree", "ddd:2,3,2,-0.3,5",
                         "--eagle-ckpt", str(head), "--trace")) == 0
    assert main(["replay", str(tmp_path / "e" / "trace")]) == 0


def test_benchmark_without_cuda_says_so(capsys) -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "decoder_bench.py"
    spec = importlib.util.spec_from_file_location("decoder_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark measures instead")
    assert bench.main(["--no-cpu"]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def _chunk_arrays(chunk: Path) -> dict[str, np.ndarray]:
    with np.load(chunk) as z:
        return {k: z[k] for k in z.files}


def test_an_empty_chunk_is_named(tmp_path, capsys) -> None:
    """Issue 26 item 11: a chunk holding no steps gave an IndexError traceback."""
    write_trace(tmp_path / "t")
    data = _chunk_arrays(tmp_path / "t" / "chunk-000000.npz")
    empty = {k: v[:0] for k, v in data.items()}
    np.savez(tmp_path / "t" / "chunk-000001.npz", **empty)
    for argv in (["replay", str(tmp_path / "t")], ["rescore", str(tmp_path / "t"), "--verification", "r1"]):
        assert main(argv) == 2
        assert f"trace chunk {tmp_path / 't' / 'chunk-000001.npz'} holds no steps" in one_error_line(capsys)


def test_a_trace_without_chunks_fails_replay(tmp_path, capsys) -> None:
    """Issue 26 item 11: "0 steps replayed, 0 mismatches" and exit 0."""
    write_trace(tmp_path / "t", steps=0)
    assert not list((tmp_path / "t").glob("chunk-*"))
    for argv in (["replay", str(tmp_path / "t"), "--require-simulate"], ["replay", str(tmp_path / "t")],
                 ["rescore", str(tmp_path / "t"), "--verification", "r1"]):
        assert main(argv) == 2
        assert f"trace {tmp_path / 't'} holds no steps" in one_error_line(capsys)


def test_a_path_that_is_not_a_parent_chain_is_refused_by_replay_and_rescore(tmp_path, capsys) -> None:
    """Issue 26 item 11: rescore accepted a recorded path that replay rejects; one shared check now."""
    write_trace(tmp_path / "t")
    chunk = tmp_path / "t" / "chunk-000000.npz"
    data = _chunk_arrays(chunk)
    # step 1's path becomes 0 -> 2 -> 3, but node 3's parent is node 1 (parents -1, 0, 0, 1)
    ends = np.cumsum(data["path_len"])
    paths = [data["path"][e - n:e] for e, n in zip(ends, data["path_len"], strict=True)]
    paths[1] = np.array([0, 2, 3], dtype=data["path"].dtype)
    data["path"], data["path_len"] = np.concatenate(paths), np.array([p.size for p in paths])
    np.savez(chunk, **data)
    for argv in (["replay", str(tmp_path / "t")], ["rescore", str(tmp_path / "t"), "--verification", "r1"]):
        assert main(argv) == 2
        line = one_error_line(capsys)
        assert f"{chunk}: step (sequence 0, position 1): path [0, 2, 3] is not a chain" in line, line


@pytest.mark.parametrize("field, value", [("vocab_size", "512"), ("vocab_size", 12.0), ("verification", 1),
                                          ("verification", None), ("verification", "r9"), ("extra", []),
                                          ("logits_dtype", 16), ("checkpoint_sha256", 0), ("version", "1")])
def test_header_field_types_are_checked(tmp_path, capsys, field: str, value) -> None:
    """Issue 26 item 13: ``"vocab_size": "512"`` gave "'<' not supported between ..."."""
    import json

    write_trace(tmp_path / "t")
    head = tmp_path / "t" / "header.json"
    d = json.loads(head.read_text())
    d[field] = value
    head.write_text(json.dumps(d))
    for argv in (["replay", str(tmp_path / "t")], ["rescore", str(tmp_path / "t"), "--verification", "r1"]):
        assert main(argv) == 2
        line = one_error_line(capsys)
        assert f"{head}: " in line and field in line, line
