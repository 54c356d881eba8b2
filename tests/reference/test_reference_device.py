"""The decoder ready for CUDA: bf16 weights with float32 logits, the padded (static-shape) tree forward that
CUDA graphs and torch.compile need, and the ``relaxspec generate`` device flags. The CUDA tests run when
``torch.cuda.is_available()``."""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import test_reference_cli
import torch
from reference_helpers import random_model, tiny_config
from test_reference_cli import gen_args

from relaxspec.cli import main
from relaxspec.core.trace import Sampling, read_trace
from relaxspec.core.trees.policies import Eagle2Tree
from relaxspec.reference.decode import Decoder, DecodeSettings
from relaxspec.reference.drafter import GPTDraftSession
from relaxspec.reference.model import Transformer, rope_table_2d
from relaxspec.reference.tree_attention import TreeExecution, tree_inputs
from relaxspec.theory.verification import Verification

CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="needs a CUDA device (torch.cuda.is_available() is False): the CUDA-graph, "
                                 "compiled and bf16-on-GPU paths are checked on a GPU machine")
PARENTS = np.array([-1, 0, 0, 1, 1, 2, 3, 5, 0, 8])  # 10 nodes, depth 3
MAX_NODES = 12


def prefilled(model: Transformer, labels: torch.Tensor, tokens: list[int]) -> int:
    """Decode the class token and ``tokens`` one by one (eager); return the prefix length."""
    model.setup_cache(labels.shape[0], MAX_NODES)
    model.forward_tree(model.embed_class(labels), [-1], [0], 0)
    prefix = model.accept_path(0, [0])
    for t in tokens:
        model.forward_tree(model.embed_tokens(torch.tensor([[t]])).expand(labels.shape[0], -1, -1), [-1], [0],
                           prefix)
        prefix = model.accept_path(prefix, [0])
    return prefix


def caches(model: Transformer) -> list[torch.Tensor]:
    return [torch.stack([la.attention.kv_cache.k, la.attention.kv_cache.v]).clone() for la in model.layers]


def restore(model: Transformer, saved: list[torch.Tensor]) -> None:
    for la, kv in zip(model.layers, saved, strict=True):
        la.attention.kv_cache.k.copy_(kv[0])
        la.attention.kv_cache.v.copy_(kv[1])


def tree_step(model: Transformer, tokens: np.ndarray, parents: np.ndarray, prefix: int,
              batch: int) -> torch.Tensor:
    x = model.embed_tokens(torch.as_tensor(tokens))[None].expand(batch, -1, -1)
    return model.logits(model.forward_tree(x, parents, np.arange(len(parents)), prefix))


ckpts = test_reference_cli.ckpts  # the CLI tests' checkpoint files (a module fixture)


@torch.no_grad()
@pytest.mark.parametrize("n", [1, 3, 10])
def test_padded_tree_forward_gives_the_real_nodes_the_exact_shape_outputs(n: int) -> None:
    model = random_model(tiny_config(block_size=16, n_kv_head=1), seed=1)
    labels = torch.tensor([2, model.cfg.null_class])
    prefix = prefilled(model, labels, [5, 1, 7])
    before = caches(model)
    tokens = np.array([4, 0, 3, 6, 2, 3, 1, 5, 7, 2])[:n]
    parents = PARENTS[:n]
    exact = tree_step(model, tokens, parents, prefix, 2)
    exact_cache = caches(model)
    restore(model, before)
    model.set_execution(TreeExecution(static=True))
    padded = tree_step(model, tokens, parents, prefix, 2)
    padded_cache = caches(model)
    real = slice(prefix, prefix + n)
    if n >= 8:
        # torch's CPU matmul and attention kernels treat each row alike from 8 rows on (below that they pick
        # their blocking by row count, a float32 rounding apart): equal bit for bit
        assert torch.equal(padded, exact)
        for got, want in zip(padded_cache, exact_cache, strict=True):
            assert torch.equal(got[..., real, :], want[..., real, :])
    torch.testing.assert_close(padded, exact, rtol=0, atol=2e-5)
    last = model.cache_len - 1
    for got, want, old in zip(padded_cache, exact_cache, before, strict=True):
        torch.testing.assert_close(got[..., real, :], want[..., real, :], rtol=0, atol=2e-5)
        # padded rows wrote zeros to the pad slot only; no other slot changed
        assert torch.equal(got[..., : prefix, :], old[..., : prefix, :])
        assert torch.equal(got[..., prefix + n : last, :], old[..., prefix + n : last, :])
        assert not got[..., last, :].any()


def test_padded_inputs_have_one_shape_for_every_tree() -> None:
    rope = rope_table_2d(4, 16, 10000.0, 1)
    shapes = set()
    for n in (1, 4, 10):
        table, slots, mask = tree_inputs(rope, 40, PARENTS[:n], np.arange(n), 5, {}, pad_to=MAX_NODES)
        shapes.add((table.shape, slots.shape, mask.shape))
        assert slots[n:].eq(39).all() and mask[n:, :39].sum() == 0 and mask[n:, 39].all()
        assert slots[:n].tolist() == list(range(5, 5 + n)) and not mask[:n, 39].any()
    assert shapes == {((MAX_NODES, 8, 2), (MAX_NODES,), (MAX_NODES, 40))}
    with pytest.raises(ValueError, match="at most max_tree_nodes = 12 nodes .* got 13"):
        tree_inputs(rope, 40, np.arange(-1, 12), np.arange(13), 5, {}, pad_to=MAX_NODES)
    with pytest.raises(ValueError, match="exceed the cache length 39"):  # the pad slot is not a tree slot
        tree_inputs(rope, 40, PARENTS, np.arange(10), 30, {}, pad_to=MAX_NODES)


@torch.no_grad()
def test_static_decoder_emits_the_same_tokens() -> None:
    cfg = tiny_config(block_size=16)
    settings = DecodeSettings(cfg_scale=2.0, target_sampling=Sampling(temperature=0.8),
                              draft_sampling=Sampling(temperature=0.8), max_tree_nodes=9)
    results = []
    for execution in (TreeExecution(), TreeExecution(static=True)):
        target = random_model(cfg, seed=0, std=0.5)
        target.set_execution(execution)
        decoder = Decoder(target, settings, drafter=GPTDraftSession(random_model(cfg, seed=1, std=0.5)),
                          policy=Eagle2Tree(top_k=3, depth=2, total_tokens=8))
        results.append([decoder.generate(label, seed=4, sequence=s) for label, s in ((1, 0), (2, 1))])
    for eager, static in zip(*results, strict=True):
        assert np.array_equal(eager.tokens, static.tokens)
        assert [s.accepted for s in eager.steps] == [s.accepted for s in static.steps]
    assert max(s.nodes for r in results[1] for s in r.steps) > 1  # trees, not only AR steps


@torch.no_grad()
def test_compiled_stack_traces_and_matches(monkeypatch) -> None:
    # Dynamo's eager backend: the padded stack traces in full (cache writes included) without the minute
    # inductor's C++ code generation takes on this CPU; inductor itself runs in the CUDA test
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    model = random_model(tiny_config(block_size=16), seed=2)
    labels = torch.tensor([0, model.cfg.null_class])
    outs = []
    for execution in (TreeExecution(static=True), TreeExecution(compile=True)):
        model.set_execution(execution)
        prefix = prefilled(model, labels, [3, 3])
        outs.append(tree_step(model, np.arange(10) % 8, PARENTS, prefix, 2))
    assert torch.equal(outs[0], outs[1])


@torch.no_grad()
def test_a_copy_of_a_used_padded_model_runs_on_its_own_cache() -> None:
    model = random_model(tiny_config(block_size=16), seed=3)
    model.set_execution(TreeExecution(static=True))
    labels = torch.tensor([1])
    prefix = prefilled(model, labels, [2])
    twin = copy.deepcopy(model)
    saved = caches(model)
    got = tree_step(twin, np.arange(10) % 8, PARENTS, prefix, 1)
    assert all(torch.equal(a, b) for a, b in zip(caches(model), saved, strict=True))
    torch.testing.assert_close(got, tree_step(model, np.arange(10) % 8, PARENTS, prefix, 1), rtol=0, atol=0)


def test_cuda_graphs_need_a_cuda_model() -> None:
    with pytest.raises(ValueError, match="CUDA graphs replay device work on a GPU: the model is on cpu"):
        random_model(tiny_config(), seed=0).set_execution(TreeExecution(cuda_graphs=True))


@torch.no_grad()
def test_bf16_weights_give_float32_logits_close_to_float32() -> None:
    cfg = tiny_config(block_size=16)
    full = random_model(cfg, seed=4)
    half = copy.deepcopy(full).to(torch.bfloat16)
    assert half.output.weight.dtype == torch.bfloat16 and half.rope.dtype == torch.float32
    assert torch.equal(half.rope, full.rope)  # the rotary table is not rounded to bf16
    labels = torch.tensor([1, cfg.null_class])
    logits = []
    for model in (full, half):
        prefix = prefilled(model, labels, [4, 0, 6])
        assert model.layers[0].attention.kv_cache.k.dtype == model.output.weight.dtype
        logits.append(tree_step(model, np.arange(10) % 8, PARENTS, prefix, 2))
    assert logits[1].dtype == torch.float32
    scale = logits[0].abs().max()
    assert (logits[1] - logits[0]).abs().max() < 0.08 * scale  # measured 0.018 (bf16: 8 bits of mantissa)
    p, q = torch.softmax(logits[0], -1), torch.softmax(logits[1], -1)
    assert 0.5 * (p - q).abs().sum(-1).max() < 0.05  # total variation, measured 0.015




def test_generate_device_flags(tmp_path, ckpts, capsys) -> None:
    out = tmp_path / "bf16"
    assert main(gen_args(ckpts, out, "--classes", "1", "--tree", "static:[[0],[1],[0,0]]", "--dtype",
                         "bfloat16", "--trace")) == 0
    trace = read_trace(out / "trace")
    assert trace.header.extra["dtype"] == "bfloat16"
    assert main(["replay", str(out / "trace")]) == 0
    assert "0 mismatches" in capsys.readouterr().out
    assert main(gen_args(ckpts, tmp_path / "g", "--classes", "1", "--cuda-graphs")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("relaxspec: error: --cuda-graphs replays the forward on a GPU: it needs --device "
                          "cuda, got --device cpu")
    assert not (tmp_path / "g").exists()  # refused before anything was loaded or written
    with pytest.raises(SystemExit) as exc:
        main(gen_args(ckpts, tmp_path / "d", "--classes", "1", "--dtype", "float64"))
    assert exc.value.code == 2 and "argument --dtype: invalid choice: 'float64'" in capsys.readouterr().err


def test_generate_verifies_on_the_device_or_with_the_oracle_alike(tmp_path, ckpts) -> None:
    """`relaxspec generate` verifies with the device verifier by default and with theory's oracle under
    --verifier theory: the same tokens; steps.csv says what crossed to the host; the header names it."""
    import csv

    args = ("--classes", "0,2", "--tree", "static:[[0],[1],[0,0]]", "--verification", "r2", "--trace")
    assert main(gen_args(ckpts, tmp_path / "dev", *args)) == 0
    assert main(gen_args(ckpts, tmp_path / "theory", *args, "--verifier", "theory")) == 0
    for i in range(2):
        a, b = (np.load(next((tmp_path / d / "tokens").glob(f"{i:06d}*.npy"))) for d in ("dev", "theory"))
        assert np.array_equal(a, b)
    assert read_trace(tmp_path / "dev" / "trace").header.extra["verifier"] == "device"
    assert read_trace(tmp_path / "theory" / "trace").header.extra["verifier"] == "theory"
    with open(tmp_path / "theory" / "steps.csv", newline="") as f:
        theory_bytes = [int(r["host_bytes"]) for r in csv.DictReader(f)]
    assert all(b > 0 for b in theory_bytes)  # every node's logits


# -- on a GPU ------------------------------------------------------------------------------------------------
def cuda_model(seed: int, dtype: torch.dtype) -> Transformer:
    return random_model(tiny_config(block_size=16, n_kv_head=1), seed=seed).to("cuda", dtype)


@CUDA
@torch.no_grad()
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cuda_graph_replays_the_padded_forward(dtype: torch.dtype) -> None:
    labels = torch.tensor([2, 3], device="cuda")
    runs = []
    for execution in (TreeExecution(), TreeExecution(static=True), TreeExecution(cuda_graphs=True)):
        model = cuda_model(5, dtype)
        model.set_execution(execution)
        model.setup_cache(2, MAX_NODES)
        rows = [model.logits(model.forward_tree(model.embed_class(labels), [-1], [0], 0))]
        prefix = model.accept_path(0, [0])
        for n, path in ((10, [0, 2, 5, 7]), (1, [0]), (4, [0, 1]), (10, [0, 8, 9])):  # shapes recur: replays
            tokens = torch.arange(n, device="cuda") % 8
            x = model.embed_tokens(tokens)[None].expand(2, -1, -1)
            rows.append(model.logits(model.forward_tree(x, PARENTS[:n], np.arange(n), prefix)))
            prefix = model.accept_path(prefix, path)
        runs.append(rows)
    eager, static, graphed = runs
    for e, s, g in zip(eager, static, graphed, strict=True):
        assert g.dtype == torch.float32
        assert torch.equal(g, s)  # a replay runs the padded forward's kernels on the same inputs
        tol = 0.1 * e.abs().max().item() if dtype == torch.bfloat16 else 1e-4
        torch.testing.assert_close(g, e, rtol=0, atol=tol)


@CUDA
@torch.no_grad()
def test_cuda_bf16_decoder_with_graphs_and_compile_matches_padded_eager() -> None:
    cfg = tiny_config(block_size=16)
    settings = DecodeSettings(cfg_scale=2.0, max_tree_nodes=9)
    results = {}
    executions = {"static": TreeExecution(static=True), "graphs": TreeExecution(cuda_graphs=True),
                  "compiled": TreeExecution(compile=True, cuda_graphs=True)}
    for name, execution in executions.items():
        target = random_model(cfg, seed=0, std=0.5).to("cuda", torch.bfloat16)
        target.set_execution(execution)
        drafter = GPTDraftSession(random_model(cfg, seed=1, std=0.5).to("cuda", torch.bfloat16))
        decoder = Decoder(target, settings, drafter=drafter,
                          policy=Eagle2Tree(top_k=3, depth=2, total_tokens=8))
        results[name] = decoder.generate(1, seed=3)
    assert np.array_equal(results["graphs"].tokens, results["static"].tokens)
    assert results["compiled"].tokens.shape == (16,) and results["compiled"].tokens.max() < 8


def test_eagle_head_keeps_its_rotary_table_in_float32() -> None:
    from relaxspec.reference.drafter import EagleHead

    head = EagleHead(tiny_config()).to(torch.bfloat16)
    assert head.rope.dtype == torch.float32 and next(head.parameters()).dtype == torch.bfloat16


# ------------------------------------------------------------------ the decoder's verifier (issue 19)
VERIFY_CASES = [  # rule, relaxation, variant, boost, tree ("jacobi": a window of 3)
    ("r1", "additive:k=3,delta=0.3", "official", "none", "static"),
    ("r1", "multiplicative:k=2,lam=3", "principled", "none", "static"),
    ("r2", "additive:k=2,delta=0.2", "principled", "none", "static"),
    ("r2", "none", "principled", "gsd:G=3,tau=0.5,dist=4", "static"),
    ("r2", "none", "principled", "cool:omega=4/2", "static"),
    ("r3", "additive:k=2,delta=0.2", "principled", "none", "static"),
    ("r4", "none", "principled", "none", "static"),
    ("r2", "none", "principled", "budget:tv=0.1,k=3", "static"),
    ("r4", "none", "principled", "budget:tv=0.1,k=3", "static"),
    ("r2", "none", "principled", "none", "jacobi"),
    ("r4", "none", "principled", "cool:omega=4/2", "jacobi"),
]


@pytest.mark.parametrize(("rule", "relax", "variant", "boost", "tree"), VERIFY_CASES)
def test_the_device_verifier_decodes_what_the_oracle_decodes(rule, relax, variant, boost, tree) -> None:
    from relaxspec.core.trees.jacobi import JacobiWindow
    from relaxspec.core.trees.policies import StaticTree
    from relaxspec.theory.boost import Boost
    from relaxspec.theory.relax import Relax

    cfg = tiny_config()
    target, draft = random_model(cfg, 0, std=0.5), random_model(cfg, 1, std=0.5)
    V = cfg.vocab_size
    rng = np.random.default_rng(0)
    table = np.array([np.concatenate([rng.permutation(np.delete(np.arange(V), t))]) for t in range(V)])
    emb = rng.normal(size=(V, 4)).astype(np.float32).astype(np.float64)
    b = Boost.parse(boost)
    out = {}
    for verifier in ("device", "theory"):
        st = DecodeSettings(Verification(rule, Relax.parse(relax), variant, b), cfg_scale=2.0,
                            verifier=verifier, target_sampling=Sampling(1.0, 0, 1.0),
                            draft_sampling=Sampling(1.0, 0, 1.0))
        if tree == "jacobi":
            dec = Decoder(target, st, policy=JacobiWindow(3), embedding=emb if b.kind == "group" else None,
                          neighbours=table)
        else:
            dec = Decoder(target, st, drafter=GPTDraftSession(draft),
                          policy=StaticTree([[0], [1], [0, 0], [0, 1], [1, 0]]), neighbours=table,
                          embedding=emb if b.kind == "group" else None)
        results = [dec.generate(label, seed=3, sequence=label) for label in (0, 1)]
        out[verifier] = (np.concatenate([r.tokens for r in results]),
                         [s.accepted for r in results for s in r.steps],
                         [(s.host_bytes, s.nodes) for r in results for s in r.steps if s.nodes > 1])
    assert np.array_equal(out["device"][0], out["theory"][0]) and out["device"][1] == out["theory"][1]
    if tree == "static":  # a few hundred bytes (path, bonus, flags) whatever V; theory: every node's logits
        assert max(b for b, _ in out["device"][2]) <= 512
        assert all(b == 4 * V * n for b, n in out["theory"][2])
