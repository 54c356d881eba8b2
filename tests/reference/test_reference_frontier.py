"""The reference decoder on the 2025 frontier (issue 14, part 3): SJD's Jacobi windows, GSD and Cool-SD
boosts; traces that record them and replay bit for bit; the CLI and the mini model's configurations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from reference_helpers import official_state, random_model, tiny_config
from test_reference_decode import CFG, LOSSLESS_SAMPLES, SAMPLING, chi_square_ok, exact_sequence_probs

from relaxspec.cli import main
from relaxspec.core.trace import TRACE_VERSION, Sampling, TraceHeader, read_trace
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.policies import StaticTree
from relaxspec.mini.decoding import DecodeConfig, StepScorer, make_decoder
from relaxspec.mini.shipped import load_mini
from relaxspec.reference.capture import capture_trace
from relaxspec.reference.decode import Decoder, DecodeSettings, gsd_embedding
from relaxspec.reference.drafter import GPTDraftSession
from relaxspec.reference.generate import parse_verification
from relaxspec.reference.replay import replay
from relaxspec.reference.vq import VQModel, vq_config
from relaxspec.theory.boost import Boost
from relaxspec.theory.jacobi_sampler import verify_window, window_expectation
from relaxspec.theory.verification import Verification

CHOICES = [[0], [1], [0, 0], [0, 1], [1, 0]]
EMB = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32).astype(np.float64)


@pytest.fixture(scope="module")
def models():
    return random_model(tiny_config(), 0, std=0.5), random_model(tiny_config(), 1, std=0.5)


def settings(boost: str = "none", rule: str = "r2", dtype: str = "float16") -> DecodeSettings:
    return DecodeSettings(Verification(rule, boost=Boost.parse(boost)), cfg_scale=CFG,
                          target_sampling=SAMPLING, draft_sampling=SAMPLING, logits_dtype=dtype)


def jacobi_decoder(target, window: JacobiWindow, boost: str = "none", dtype: str = "float16") -> Decoder:
    b = Boost.parse(boost)
    return Decoder(target, settings(boost, dtype=dtype), policy=window,
                   embedding=EMB if b.kind == "group" else None)


def emitted(trace_dir: Path, sequence: int) -> np.ndarray:
    steps = [s for s in read_trace(trace_dir).steps() if s.sequence == sequence]
    return np.concatenate([np.append(s.tokens[s.path[1:]], s.bonus) for s in steps])


def set_header(trace_dir: Path, **fields: object) -> None:
    head = trace_dir / "header.json"
    d = json.loads(head.read_text())
    d.update(fields)
    head.write_text(json.dumps(d))


# ------------------------------------------------------------------ Jacobi windows: exact replay, lossless
@pytest.mark.parametrize("window, boost", [(JacobiWindow(2), "none"), (JacobiWindow(3, "copy"), "none"),
                                           (JacobiWindow(3), "gsd:G=3,tau=0.5,dist=4"),
                                           (JacobiWindow(2, "copy"), "cool:omega=3/2")])
def test_jacobi_decode_replays_bit_for_bit(tmp_path, models, window, boost) -> None:
    dec = jacobi_decoder(models[0], window, boost)
    results = capture_trace(dec, tmp_path / "t", [0, 1, 2, 1, 0, 2, 0, 1], seed=3)
    trace = read_trace(tmp_path / "t")
    assert trace.header.tree == str(window)
    assert trace.header.verification == Verification("r2", boost=Boost.parse(boost))
    for i, r in enumerate(results):
        assert np.array_equal(emitted(tmp_path / "t", i), r.tokens)
        assert sum(s.tokens for s in r.steps) == 4 and r.steps[0].nodes == min(window.window, 3) + 1
        assert all(s.tokens == s.accepted + 1 and s.draft_calls == 0 for s in r.steps)
    report = replay(tmp_path / "t", require_simulate=True)
    assert report.engines == ["theory", "simulate"]
    assert report.ok and report.steps == sum(len(r.steps) for r in results), report.mismatches[:3]
    if boost != "none":  # the boost decided something: replayed without it, some step differs
        set_header(tmp_path / "t", verification="r2")
        assert not replay(tmp_path / "t").ok


def test_replay_rebuilds_every_window(tmp_path, models) -> None:
    """A fresh uniform altered in the trace: the rebuilt window no longer matches the recorded one."""
    capture_trace(jacobi_decoder(models[0], JacobiWindow(3)), tmp_path / "t", [1, 2], seed=0)
    chunk = sorted((tmp_path / "t").glob("chunk-*.npz"))[0]
    with np.load(chunk) as z:
        data = dict(z)
    data["u_fresh"][:3] = (data["u_fresh"][:3] + 0.5) % 1.0  # the first window's fresh tokens change
    np.savez(chunk, **data)
    report = replay(tmp_path / "t")
    assert any("is not the one the previous step leaves" in m for m in report.mismatches), report.mismatches


def test_jacobi_rows_equal_a_sequential_forward_and_decisions_equal_the_oracle(tmp_path) -> None:
    """Every window's target rows are the guided logits of a teacher-forced forward over the committed
    prefix and the drafts (the KV cache keeps exactly the accepted entries), and verify_window with the
    recorded uniforms gives the recorded outcome."""
    target = random_model(tiny_config(block_size=16), 4, std=0.5)
    dec = Decoder(target, settings(dtype="float32"), policy=JacobiWindow(3))
    capture_trace(dec, tmp_path / "t", [0, 2], seed=1)
    trace = read_trace(tmp_path / "t")
    committed: dict[int, list[int]] = {0: [], 1: []}
    labels = {0: 0, 1: 2}
    windows = 0
    for step in trace.steps():
        prefix = committed[step.sequence]
        assert step.position == len(prefix)
        m = step.parents.size - 1
        seq = torch.tensor([prefix + step.tokens[1:].tolist()])[:, : len(prefix) + m]
        with torch.no_grad():
            cond = target(seq, torch.tensor([labels[step.sequence]]))[0]
            uncond = target(seq, torch.tensor([target.cfg.null_class]))[0]
        guided = (uncond + (cond - uncond) * CFG).numpy()[len(prefix): len(prefix) + m + 1]
        np.testing.assert_allclose(step.target_logits, guided, rtol=1e-4, atol=1e-4)
        if m:
            windows += 1
            p = SAMPLING.probs(step.target_logits.astype(np.float64))
            q = SAMPLING.probs(step.draft_logits[:m].astype(np.float64))
            assert verify_window(p, step.tokens[1:], q, Boost.none(), None, step.u_accept[1:],
                                 step.u_draw) == (step.path.size - 1, step.bonus)
        committed[step.sequence] = prefix + step.tokens[step.path[1:]].tolist() + [step.bonus]
    assert windows >= 4 and all(len(c) == 16 for c in committed.values())


@pytest.mark.parametrize("window", [JacobiWindow(2), JacobiWindow(3, "copy")])
def test_jacobi_without_boost_samples_the_target_law(models, window) -> None:
    """Chi-square of LOSSLESS_SAMPLES sequences against the exact law of all 8^4 sequences (false failure
    < 1e-6)."""
    seqs, probs = exact_sequence_probs(models[0], label=1)
    dec = jacobi_decoder(models[0], window, dtype="float32")
    samples = np.array([dec.generate(1, seed=7, sequence=i).tokens for i in range(LOSSLESS_SAMPLES)])
    ok, stat, limit = chi_square_ok(samples, seqs, probs)
    assert ok, f"chi-square {stat:.1f} >= {limit:.1f}"


def test_the_check_sees_a_lossy_window(models) -> None:
    """The same check fails a GSD window with wide groups (its law is far from the target's)."""
    seqs, probs = exact_sequence_probs(models[0], label=1)
    dec = jacobi_decoder(models[0], JacobiWindow(3), "gsd:G=8,tau=1,dist=100", dtype="float32")
    samples = np.array([dec.generate(1, seed=7, sequence=i).tokens for i in range(400)])
    ok, stat, limit = chi_square_ok(samples, seqs, probs)
    assert not ok and stat > 10 * limit, f"chi-square {stat:.1f} < {limit:.1f}"


# ------------------------------------------------------------------ boosts on the R2 static tree
@pytest.mark.parametrize("boost", ["gsd:G=3,tau=0.5,dist=4,embedding=codebook", "cool:omega=4/2"])
def test_boosted_static_tree_records_and_replays(tmp_path, models, boost) -> None:
    b = Boost.parse(boost)
    dec = Decoder(models[0], settings(boost), drafter=GPTDraftSession(models[1]), policy=StaticTree(CHOICES),
                  embedding=EMB if b.kind == "group" else None)
    capture_trace(dec, tmp_path / "t", [0, 1, 2] * 3, seed=5)
    trace = read_trace(tmp_path / "t")
    assert trace.header.verification.boost == b
    if b.kind == "group":
        assert "embedding=codebook" in str(trace.header.verification)
        assert np.array_equal(trace.embedding, EMB) and (tmp_path / "t" / "embedding.npy").exists()
        assert trace.header.extra["gsd_embedding_sha256"]
    report = replay(tmp_path / "t", require_simulate=True)
    assert report.ok and report.engines == ["theory", "simulate"], report.mismatches[:3]
    set_header(tmp_path / "t", verification="r2")
    assert not replay(tmp_path / "t").ok


def test_chunks_without_fresh_uniforms_read_and_replay(tmp_path, models) -> None:
    """Chunks without fresh uniforms (a tree trace needs none) read and replay."""
    dec = Decoder(models[0], settings(), drafter=GPTDraftSession(models[1]), policy=StaticTree(CHOICES))
    capture_trace(dec, tmp_path / "t", [0, 1], seed=2)
    for chunk in (tmp_path / "t").glob("chunk-*.npz"):
        with np.load(chunk) as z:
            data = {k: z[k] for k in z.files if k not in ("n_fresh", "u_fresh")}
        np.savez(chunk, **data)
    trace = read_trace(tmp_path / "t")
    assert trace.header.verification == Verification("r2") and trace.embedding is None
    assert all(s.u_fresh.size == 0 for s in trace.steps())
    assert replay(tmp_path / "t", require_simulate=True).ok


@pytest.mark.parametrize("version", [1, 2])
def test_a_trace_of_the_older_format_is_refused_in_one_line(tmp_path, models, version) -> None:
    """Version 1 stored rule, relax, variant and boost apart; version 2 had no record of SPEC 10's windows
    and skip steps; version 3 holds both (``core.trace_step``)."""
    dec = Decoder(models[0], settings(), drafter=GPTDraftSession(models[1]), policy=StaticTree(CHOICES))
    capture_trace(dec, tmp_path / "t", [0], seed=2)
    d = json.loads((tmp_path / "t" / "header.json").read_text())
    assert d["version"] == TRACE_VERSION == 3 and d["verification"] == "r2"
    if version == 1:
        del d["verification"]
        d.update(rule="r2", relax="none", variant="principled", boost="none")
    d["version"] = version
    (tmp_path / "t" / "header.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=rf"header.json: trace version {version} is not 3 \(written by an "
                                         r"older relaxspec: record the trace again\)$") as err:
        read_trace(tmp_path / "t")
    assert "\n" not in str(err.value)


def test_gsd_embedding_picks_the_table_and_names_a_mismatch(models) -> None:
    target = models[0]
    torch.manual_seed(0)
    vq = VQModel(vq_config("VQ-tiny"))
    token = gsd_embedding("token", target)
    assert np.array_equal(token, target.tok_embeddings.weight.detach().numpy().astype(np.float64))
    assert np.array_equal(gsd_embedding("codebook", target, vq.codebook()), vq.codebook().astype(np.float32))
    with pytest.raises(ValueError, match="another vocabulary size"):
        gsd_embedding("codebook", target, np.zeros((9, 4)))
    with pytest.raises(ValueError, match="must be one of"):
        gsd_embedding("pixels", target)
    with pytest.raises(ValueError, match="another vocabulary size"):
        Decoder(target, settings("gsd:G=3"), policy=JacobiWindow(2), embedding=np.zeros((9, 4)))
    with pytest.raises(ValueError, match="needs an embedding table"):
        Decoder(target, settings("gsd:G=3"), policy=JacobiWindow(2))


def test_bad_jacobi_and_boost_settings_are_named(models) -> None:
    target = models[0]
    with pytest.raises(ValueError, match="window L must be an integer in"):
        JacobiWindow(0)
    with pytest.raises(ValueError, match="needs rule r2"):
        settings("cool:omega=2", rule="r1")
    with pytest.raises(ValueError, match="verification 'r9': unknown rule or method"):
        DecodeSettings("r9")
    with pytest.raises(ValueError, match="needs rule r2"):
        Decoder(target, settings(rule="r1"), policy=JacobiWindow(2))
    with pytest.raises(ValueError, match="takes no drafter"):
        Decoder(target, settings(), drafter=GPTDraftSession(models[1]), policy=JacobiWindow(2))
    with pytest.raises(ValueError, match="AR sampling has none"):
        Decoder(target, settings("cool:omega=2"))
    with pytest.raises(ValueError, match="draft sampling"):
        Decoder(target, DecodeSettings("r2", target_sampling=SAMPLING), policy=JacobiWindow(2))


# ------------------------------------------------------------------ relaxspec generate
MODEL_ARGS = ["--gpt-model", "GPT-tiny", "--vq-model", "VQ-tiny", "--codebook-size", "8",
              "--codebook-embed-dim", "4", "--image-size", "4", "--num-classes", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    torch.save({"model": official_state(tiny_config(), seed=0, std=0.5)}, d / "c2i_tiny.pt")
    torch.save({"model": official_state(tiny_config(vocab_size=16), seed=0, std=0.5)}, d / "c2i_v16.pt")
    torch.manual_seed(0)
    torch.save({"model": VQModel(vq_config("VQ-tiny")).state_dict()}, d / "vq_tiny.pt")
    return d


def generate(ckpts: Path, out: Path, *extra: str, gpt: str = "c2i_tiny.pt") -> list[str]:
    return ["generate", "--gpt-ckpt", str(ckpts / gpt), "--vq-ckpt", str(ckpts / "vq_tiny.pt"), *MODEL_ARGS,
            "--out", str(out), "--classes", "0,2", *extra]


@pytest.mark.parametrize("extra, embedding", [
    (["--tree", "jacobi:2"], None),
    (["--tree", "jacobi:3,copy", "--verification", "r2+gsd:G=3,tau=0.5,dist=4",
      "--gsd-embedding", "codebook"], "codebook"),
    (["--tree", "static:[[0],[1],[0,0]]", "--verification", "r2+gsd:G=3", "--gsd-embedding", "token"],
     "token"),
    (["--tree", "static:[[0],[1],[0,0]]", "--verification", "r2+cool:omega=2/1.5"], None),
])
def test_generate_records_and_replays(tmp_path, ckpts, capsys, extra, embedding) -> None:
    out = tmp_path / "run"
    assert main(generate(ckpts, out, "--trace", *extra)) == 0
    trace = read_trace(out / "trace")
    h: TraceHeader = trace.header
    tree = extra[extra.index("--tree") + 1]
    if tree.startswith("jacobi:"):
        assert h.tree == tree and h.verification.rule == "r2"
        assert h.extra["drafter"] == "jacobi"
    spec = extra[extra.index("--verification") + 1] if "--verification" in extra else "r2"
    assert h.verification == parse_verification(spec, embedding)
    if embedding is not None:
        assert h.verification.boost.embedding == embedding
        state = torch.load(ckpts / "c2i_tiny.pt")["model"]
        vq = VQModel.load(vq_config("VQ-tiny", codebook_size=8, codebook_embed_dim=4), ckpts / "vq_tiny.pt")
        table = state["tok_embeddings.weight"].numpy() if embedding == "token" else vq.codebook()
        assert np.array_equal(trace.embedding, table.astype(np.float32).astype(np.float64))
    with open(out / "steps.csv") as f:
        rows = f.read().splitlines()
    assert rows[0].startswith("sequence,step,position,nodes") and len(rows) > 2
    capsys.readouterr()
    assert main(["replay", str(out / "trace"), "--require-simulate"]) == 0
    assert "0 mismatches" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--tree", "jacobi:0"], "bad tree spec 'jacobi:0': the Jacobi window L must be an integer in [1, 64]"),
    (["--tree", "jacobi:2,zigzag"], "fresh must be one of"),
    (["--tree", "static:[[0],[1]]", "--verification", "r1+gsd:G=3"], "needs rule r2 or r4, got rule 'r1'"),
    (["--tree", "jacobi:2", "--verification", "r1"], "needs rule r2 or r4, got rule 'r1'"),
    (["--tree", "ar", "--verification", "r2+cool:omega=2"],
     "--tree ar: boost cool:omega=2 raises the acceptance of drafts: AR sampling has none"),
    (["--tree", "static:[[0]]", "--verification", "r2+gsd:G=0"], "group size G must be an integer"),
    (["--tree", "static:[[0]]", "--verification", "r2+cool:omega=2", "--gsd-embedding", "token"],
     "--gsd-embedding chooses GSD's embedding"),
    (["--tree", "static:[[0]]", "--verification", "r2+gsd:G=3", "--gsd-embedding", "pixels"],
     "--gsd-embedding must be one of"),
    (["--tree", "static:[[0]]", "--verification", "r2+gsd:G=3,embedding=token", "--gsd-embedding",
      "codebook"], "contradicts"),
])
def test_generate_errors_are_one_line(tmp_path, ckpts, capsys, extra, message) -> None:
    assert main(generate(ckpts, tmp_path / "x", *extra)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxspec: error: ") and message in err, err


def test_one_jacobi_spelling(tmp_path, ckpts, capsys) -> None:
    """A window is the tree spec jacobi:L[,copy]; the retired --draft jacobi --window L is refused."""
    with pytest.raises(SystemExit) as exit_:
        main(generate(ckpts, tmp_path / "x", "--draft", "jacobi", "--window", "2"))
    assert exit_.value.code == 2 and "--draft" in capsys.readouterr().err


def test_a_token_embedding_of_another_vocabulary_is_one_line(tmp_path, ckpts, capsys) -> None:
    args = generate(ckpts, tmp_path / "x", "--tree", "jacobi:2", "--verification", "r2+gsd:G=3",
                    gpt="c2i_v16.pt")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vocabulary mismatch" in err and "has 16 image tokens" in err


# ------------------------------------------------------------------ the mini model's configurations
SAMPLING_MINI = Sampling()


class Steps(list):
    """A trace sink keeping the steps in memory."""

    def add(self, step) -> None:
        self.append(step)

    def end_sequence(self) -> None:
        pass


def test_mini_decode_configs_with_jacobi_and_boosts(tmp_path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mini = load_mini(drafters=False)
        configs = (DecodeConfig("SJD", tree="jacobi:4", verification="r2"),
                   DecodeConfig("Cool-SD SJD", tree="jacobi:4,copy", verification="r2+cool:omega=2/1.5"))
        for config in configs:
            dec = make_decoder(mini, config)
            steps = Steps()
            scorer = StepScorer(mini, config, steps)
            result = dec.generate(3, seed=0, sequence=0, trace=scorer)
            assert len(result.tokens) == mini.target.cfg.block_size
            assert sum(scorer.emitted) + (len(result.steps) - len(scorer.emitted)) == len(result.tokens)
            assert (sum(scorer.tv) > 0) == (not config.verification.boost.is_none)
            windows = [s for s in steps if s.parents.size > 1]
            for s, e, tv in zip(windows, scorer.expected, scorer.tv, strict=True):  # theory's window law
                p = SAMPLING_MINI.probs(s.target_logits.astype(np.float64))
                q = SAMPLING_MINI.probs(s.draft_logits[:-1].astype(np.float64))
                want = window_expectation(p, s.tokens[1:], q, config.verification.boost, None)
                assert (e, tv) == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert DecodeConfig("x", tree="eagle2:10,4,59").describe() == "eagle2:10,4,59 eagle r1"
        assert DecodeConfig("x", tree="jacobi:4", verification="r2+gsd:G=10").describe() == \
            "jacobi:4 r2+gsd:G=10,tau=0.15,dist=0.5"
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="needs rule r2"):
        DecodeConfig("x", tree="jacobi:4")
    with pytest.raises(ValueError, match="needs rule r2"):
        DecodeConfig("x", tree="static:naive_extend_57", verification="r1+cool:omega=2")
    with pytest.raises(ValueError, match="AR sampling has none"):
        DecodeConfig("x", verification="r2+cool:omega=2")


# ------------------------------------------------------------------ the optimal bound at trace nodes
def test_optimality_at_every_trace_node(tmp_path, models) -> None:
    from relaxspec.studies.optimality import trace_optimality_rows

    dec = Decoder(models[0], settings(), drafter=GPTDraftSession(models[1]), policy=StaticTree(CHOICES))
    capture_trace(dec, tmp_path / "t", [0, 1, 2], seed=2)
    counts: dict[int, int] = {}
    for s in read_trace(tmp_path / "t").steps():
        kids = np.bincount(s.parents[1:], minlength=s.parents.size)
        for k in kids[kids > 0]:
            counts[int(k)] = counts.get(int(k), 0) + 1
    rows = trace_optimality_rows(tmp_path / "t", "tiny", emb=EMB, group=3)
    assert {r["drafts"]: r["nodes"] for r in rows} == counts and counts
    for r in rows:
        assert r["r1"] == pytest.approx(r["optimal_deterministic"], abs=1e-12)  # R1 attains p(top-k)
        assert r["optimal_wor"] >= r["optimal_iid"] - 1e-12
        assert np.isfinite(r["gsd"]) and 0 <= r["gsd_tv"] <= 1
        if r["drafts"] == 1:
            assert r["optimal_wor"] == pytest.approx(r["optimal_iid"], abs=1e-12)  # both 1 - TV(p, q)
    assert all(np.isnan(r["gsd"]) for r in trace_optimality_rows(tmp_path / "t", "tiny"))
    set_header(tmp_path / "t", verification="r1")
    with pytest.raises(ValueError, match="rule r1: its children are not draws"):
        trace_optimality_rows(tmp_path / "t", "tiny")
