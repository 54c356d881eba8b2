"""The reference decoder with traversal verification (R4, SPEC 9.6) and the budgeted relaxation (SPEC 9.5)
(issue 15): its decisions are theory's oracles' given the recorded rows and uniforms, traces record the rule
and the boost and replay bit for bit, a budget of 0 is R2 / R4 bit for bit, exact R4 samples the target's
law, the mini model's configurations and scorer, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from reference_helpers import random_model, tiny_config
from test_reference_decode import CFG, SAMPLING, chi_square_ok, exact_sequence_probs
from test_reference_frontier import ckpts, generate  # noqa: F401 (ckpts: a fixture)

from relaxspec.cli import main
from relaxspec.core.trace import Sampling, TraceHeader, TraceWriter, read_trace
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.policies import Eagle2Tree, StaticTree
from relaxspec.mini.decoding import DecodeConfig, StepScorer, make_decoder
from relaxspec.mini.shipped import load_mini
from relaxspec.reference.capture import capture_trace, decoder_header
from relaxspec.reference.decode import Decoder, DecodeSettings
from relaxspec.reference.drafter import GPTDraftSession
from relaxspec.reference.replay import replay, rescore
from relaxspec.theory.boost import Boost
from relaxspec.theory.budget import budget_r2_step_ends, sample_budget_r2_step
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.relax import Relax
from relaxspec.theory.rule_step import sample_rule_step, sample_window_step
from relaxspec.theory.sampled_trees import expected_tokens
from relaxspec.theory.traversal import sample_traversal_step, traversal_ends
from relaxspec.theory.tree import Tree, sample_step
from relaxspec.theory.verification import Oracle, Verification

CHOICES = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]  # depth 3: R4 backtracks through inner nodes
NB = neighbour_table(np.random.default_rng(0).normal(size=(8, 3)), None)  # (8, 7)
EMB = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32).astype(np.float64)
LABELS = [0, 1, 2, 1, 0, 2, 0, 1]


@pytest.fixture(scope="module")
def models():
    """Target and drafter (4-token sequences), and a 16-token target for Jacobi windows (their drafts are
    kept tokens often enough that R4 and R2 part)."""
    return (random_model(tiny_config(), 0, std=0.5), random_model(tiny_config(), 1, std=0.5),
            random_model(tiny_config(block_size=16), 4, std=0.5))


def decoder(models, rule: str, boost: str = "none", source: str = "static", dtype: str = "float16"
            ) -> Decoder:
    b = Boost.parse(boost)
    st = DecodeSettings(Verification(rule, boost=b), cfg_scale=CFG, target_sampling=SAMPLING,
                        draft_sampling=SAMPLING, logits_dtype=dtype)
    nb = NB if b.kind == "budget" else None
    emb = EMB if b.kind == "group" else None
    if source == "jacobi":
        return Decoder(models[2], st, policy=JacobiWindow(3), neighbours=nb, embedding=emb)
    return Decoder(models[0], st, drafter=GPTDraftSession(models[1]), policy=StaticTree(CHOICES),
                   neighbours=nb, embedding=emb)


class Steps(list):
    """A trace sink keeping the steps in memory."""

    def add(self, step) -> None:
        self.append(step)

    def end_sequence(self) -> None:
        pass


def set_header(trace_dir: Path, **fields: object) -> None:
    head = trace_dir / "header.json"
    d = json.loads(head.read_text())
    d.update(fields)
    head.write_text(json.dumps(d))


def emitted(trace_dir: Path, sequence: int) -> np.ndarray:
    steps = [s for s in read_trace(trace_dir).steps() if s.sequence == sequence]
    return np.concatenate([np.append(s.tokens[s.path[1:]], s.bonus) for s in steps])


def rows(step, sampling: Sampling = SAMPLING) -> tuple[np.ndarray, np.ndarray]:
    return (sampling.probs(step.target_logits.astype(np.float64)),
            sampling.probs(step.draft_logits.astype(np.float64)))


# ------------------------------------------------------------------ traces record and replay bit for bit
R4_STATIC = ("r4", "none", "static")
R4_BUDGET_STATIC = ("r4", "budget:tv=0.1,k=3", "static")
R2_BUDGET_STATIC = ("r2", "budget:tv=0.1,k=3", "static")
R4_JACOBI = ("r4", "none", "jacobi")
R4_BUDGET_JACOBI = ("r4", "budget:tv=0.2,k=2", "jacobi")
CASES = [R4_STATIC, R4_BUDGET_STATIC, R2_BUDGET_STATIC, ("r4", "cool:omega=2/1.5", "static"), R4_JACOBI,
         R4_BUDGET_JACOBI, ("r2", "budget:tv=0.2,k=2", "jacobi"),
         ("r4", "gsd:G=3,tau=0.5,dist=4", "jacobi")]


@pytest.mark.parametrize("rule, boost, source", CASES)
def test_traversal_and_budget_decodes_replay_bit_for_bit(tmp_path, models, rule, boost, source) -> None:
    b = Boost.parse(boost)
    dec = decoder(models, rule, boost, source)
    nb = NB if b.kind == "budget" else None
    results = capture_trace(dec, tmp_path / "t", LABELS, seed=5, neighbours=nb)
    trace = read_trace(tmp_path / "t")
    assert trace.header.verification == Verification(rule, boost=b)
    assert trace.header.tree == (str(JacobiWindow(3)) if source == "jacobi" else str(StaticTree(CHOICES)))
    if b.kind == "budget":
        assert np.array_equal(trace.neighbours, NB) and trace.header.neighbour_columns == b.k
    for i, r in enumerate(results):
        assert np.array_equal(emitted(tmp_path / "t", i), r.tokens) and r.tokens.size in (4, 16)
    report = replay(tmp_path / "t", require_simulate=True)
    assert report.engines == ["theory", "simulate"]
    assert report.ok and report.steps == sum(len(r.steps) for r in results), report.mismatches[:3]
    # the rule and the boost decided something: replayed as R2, or without the boost, some step differs
    set_header(tmp_path / "t", verification=rule if not b.is_none else "r2")
    assert not replay(tmp_path / "t").ok


def test_rescore_with_r4_is_traversal_ends_on_the_recorded_draws(tmp_path, models) -> None:
    capture_trace(decoder(models, "r2"), tmp_path / "t", LABELS[:4], seed=1)
    trace = read_trace(tmp_path / "t")
    want = []
    for step in trace.steps():
        if step.parents.size > 1:
            p, q = rows(step)
            want.append(traversal_ends(step.tree, p, q).tokens)
    got = rescore(tmp_path / "t", "r4")
    assert got["steps"] == len(want)
    assert got["exact_tokens_per_step"] == pytest.approx(np.mean(want), rel=1e-12)


# ------------------------------------------------------------------ decisions are theory's oracles'
@pytest.mark.parametrize("rule, boost, source", [R4_STATIC, R4_BUDGET_STATIC, R2_BUDGET_STATIC, R4_JACOBI,
                                                 R4_BUDGET_JACOBI])
def test_decisions_equal_the_theory_oracle(models, rule, boost, source) -> None:
    """Every step's outcome is ``sample_traversal_step`` (or ``sample_budget_r2_step``) on the step's p and q
    rows with its uniforms; and the rule matters: on the same rows and uniforms, the unrelaxed R2 oracle
    differs at some step (R4 backtracks; the budget accepts more)."""
    b = Boost.parse(boost)
    dec = decoder(models, rule, boost, source)
    steps = Steps()
    for i, label in enumerate(LABELS * 2):
        dec.generate(label, seed=2, sequence=i, trace=steps)
    differs = 0
    for step in steps:
        p, q = rows(step)
        if rule == "r4":
            got = sample_traversal_step(step.tree, p, q, step.u_accept, step.u_draw, boost=b, neighbours=NB)
        else:
            got = sample_budget_r2_step(step.tree, p, q, step.u_accept, step.u_draw, boost=b, neighbours=NB)
        assert (got[0], got[1]) == (step.path.tolist(), step.bonus)
        r2 = sample_step(step.tree, p, step.u_accept, step.u_draw, "r2", neighbours=None, q_dists=q)
        differs += (list(r2[0]), r2[1]) != (got[0], got[1])
    assert differs > 0


@pytest.mark.parametrize("rule, source", [("r2", "static"), ("r4", "static"), ("r2", "jacobi"),
                                          ("r4", "jacobi")])
def test_budget_zero_is_the_unrelaxed_rule_bit_for_bit(models, rule, source) -> None:
    zero, plain = decoder(models, rule, "budget:tv=0,k=3", source), decoder(models, rule, "none", source)
    for i, label in enumerate(LABELS):
        a, b = Steps(), Steps()
        ra = zero.generate(label, seed=4, sequence=i, trace=a)
        rb = plain.generate(label, seed=4, sequence=i, trace=b)
        assert np.array_equal(ra.tokens, rb.tokens)
        assert [(s.nodes, s.accepted) for s in ra.steps] == [(s.nodes, s.accepted) for s in rb.steps]
        for x, y in zip(a, b, strict=True):
            assert x.path.tolist() == y.path.tolist() and x.bonus == y.bonus
            assert np.array_equal(x.u_accept, y.u_accept) and np.array_equal(x.target_logits, y.target_logits)


def test_exact_traversal_samples_the_target_law(models) -> None:
    """Chi-square of 1200 R4 sequences (static depth-3 tree, float32 logits) against the exact law of all
    8^4 sequences (false failure < 1e-6; the check's power: test_reference_decode)."""
    seqs, probs = exact_sequence_probs(models[0], label=1)
    dec = decoder(models, "r4", dtype="float32")
    samples = np.array([dec.generate(1, seed=11, sequence=i).tokens for i in range(1200)])
    ok, stat, limit = chi_square_ok(samples, seqs, probs)
    assert ok, f"chi-square {stat:.1f} >= {limit:.1f}"


# ------------------------------------------------------------------ the mini model
def test_mini_configs_and_scorer_with_traversal_and_budget() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mini = load_mini()
        configs = (DecodeConfig("R4", tree="static:[[0],[1],[0,0],[0,1],[0,0,0]]", verification="r4"),
                   DecodeConfig("R4 budget SJD", tree="jacobi:3", verification="r4+budget:tv=0.05,k=8"),
                   DecodeConfig("R2 budget", tree="chain:3", verification="r2+budget:tv=0.05,k=8"))
        for config in configs:
            b = config.verification.boost
            steps = Steps()
            scorer = StepScorer(mini, config, steps)
            result = make_decoder(mini, config).generate(3, seed=0, sequence=0, trace=scorer)
            assert len(result.tokens) == mini.target.cfg.block_size
            assert (sum(scorer.tv) > 0) == (b.kind == "budget")
            nb = mini.neighbours() if b.kind == "budget" else None
            spec = [s for s in steps if s.parents.size > 1]
            assert len(spec) == len(scorer.expected) > 0
            for s, e, tv in zip(spec, scorer.expected, scorer.tv, strict=True):
                p, q = rows(s, Sampling())
                if config.verification.oracle is Oracle.TRAVERSAL:
                    want = traversal_ends(s.tree, p, q, boost=b, neighbours=nb)
                    assert (e, tv) == (want.tokens, want.tv_bound)
                else:
                    ends, bound = budget_r2_step_ends(s.tree, p, q, boost=b, neighbours=nb)
                    assert (e, tv) == (expected_tokens(s.tree, ends), bound)
        assert configs[1].describe() == "jacobi:3 r4+budget:tv=0.05,k=8"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("kwargs, message", [
    ({"verification": "r4"}, "AR sampling has none"),
    ({"verification": "r4", "tree": "eagle2:3,2,8"},
     "rule r4 verifies children drawn from q without replacement"),
    ({"verification": "r2+budget:tv=0.1,k=4", "tree": "eagle2:3,2,8"}, "ranks its children"),
    ({"verification": "r1+budget:tv=0.1,k=4", "tree": "chain:3"}, "needs rule r2 or r4, got rule 'r1'"),
    ({"verification": "r4+lantern:k=4,delta=0.1", "tree": "chain:3"}, "r4 .* takes no LANTERN relaxation"),
    ({"verification": "r1", "tree": "jacobi:3"}, "needs rule r2 or r4"),
    ({"verification": "r4+budget:tv=1.5,k=4", "tree": "chain:3"}, "budget tv must be in"),
    ({"verification": "r4+budget:delta=0.1,k=4", "tree": "chain:3"},
     r"budget takes \(.tv., .k.\)"),
])
def test_decode_config_errors(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        DecodeConfig("x", **kwargs)


# ------------------------------------------------------------------ errors of the decoder and the trace
def test_bad_traversal_and_budget_settings_are_named(tmp_path, models) -> None:
    target = models[0]

    def settings(rule: str, boost: str = "none", relax: Relax = Relax.none()) -> DecodeSettings:
        return DecodeSettings(Verification(rule, relax, boost=Boost.parse(boost)), cfg_scale=CFG,
                              target_sampling=SAMPLING, draft_sampling=SAMPLING)

    with pytest.raises(ValueError, match="takes no LANTERN relaxation"):
        settings("r4", relax=Relax.additive(3, 0.1))
    with pytest.raises(ValueError, match="r2\\+lantern:k=3': relaxation 'additive:k=3' needs delta"):
        DecodeSettings("r2+lantern:k=3")  # a spec string is parsed (and checked) when the settings are built
    with pytest.raises(ValueError, match="needs rule r2 or r4, got rule 'r3'"):
        settings("r3", "budget:tv=0.1,k=3")
    with pytest.raises(ValueError, match="AR sampling has none"):
        Decoder(target, settings("r4"))
    with pytest.raises(ValueError, match="rule r4 verifies children drawn from q without replacement"):
        Decoder(target, settings("r4"), drafter=GPTDraftSession(models[1]), policy=Eagle2Tree(3, 2, 8))
    with pytest.raises(ValueError, match="it needs a neighbour table"):
        Decoder(target, settings("r4", "budget:tv=0.1,k=3"), policy=JacobiWindow(2))
    with pytest.raises(ValueError, match="reads k=8 neighbours but the table has only 7 columns"):
        Decoder(target, settings("r2", "budget:tv=0.1,k=8"), policy=JacobiWindow(2), neighbours=NB)
    dec = Decoder(target, settings("r4", "budget:tv=0.1,k=3"), policy=JacobiWindow(2), neighbours=NB)
    with pytest.raises(ValueError, match="needs its neighbour table in the trace"):
        TraceWriter(tmp_path / "t", decoder_header(dec))
    with pytest.raises(ValueError, match="reads k=3 neighbours but the table has only 2 columns"):
        TraceWriter(tmp_path / "u", decoder_header(dec), NB[:, :2])
    p = np.full((3, 8), 1 / 8)
    with pytest.raises(ValueError, match="rule r4 verifies sampled drafts: it needs q_dists"):
        sample_rule_step(Tree(np.array([-1, 0, 1]), np.array([0, 1, 2])), p, np.zeros(3), np.zeros(3), "r4",
                         neighbours=None)
    with pytest.raises(ValueError, match="needs rule r2 or r4, got rule 'r1'"):
        sample_window_step(p, np.array([1, 2]), p[:2], np.zeros(2), np.zeros(3), "r1")
    with pytest.raises(ValueError, match="u_accept must have shape"):
        sample_window_step(p, np.array([1, 2]), p[:2], np.zeros(3), np.zeros(3), "r4")
    capture_trace(dec, tmp_path / "v", [0], neighbours=NB)
    (tmp_path / "v" / "neighbours.npy").unlink()
    with pytest.raises(ValueError, match="verifies with r4\\+budget:tv=0.1,k=3 but has no neighbours.npy"):
        read_trace(tmp_path / "v")


# ------------------------------------------------------------------ relaxspec generate / replay / rescore
@pytest.mark.parametrize("extra", [
    ["--tree", "static:[[0],[1],[0,0]]", "--verification", "r4"],
    ["--tree", "static:[[0],[1],[0,0]]", "--verification", "r2+budget:tv=0.1,k=3"],
    ["--tree", "jacobi:3", "--verification", "r4+budget:tv=0.1,k=3"],
])
def test_generate_records_and_replays(tmp_path, ckpts, capsys, extra) -> None:  # noqa: F811
    out = tmp_path / "run"
    assert main(generate(ckpts, out, "--trace", *extra)) == 0
    h: TraceHeader = read_trace(out / "trace").header
    assert str(h.verification) == extra[extra.index("--verification") + 1]
    capsys.readouterr()
    assert main(["replay", str(out / "trace"), "--require-simulate"]) == 0
    assert "0 mismatches" in capsys.readouterr().out
    if "static:[[0],[1],[0,0]]" in extra:
        assert main(["rescore", str(out / "trace"), "--verification", "r4"]) == 0
        assert "verification r4:" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--tree", "ar", "--verification", "r4"],
     "--tree ar: rule r4 verifies sampled drafts by traversal: AR sampling has none"),
    (["--tree", "static:[[0]]", "--verification", "r4+lantern:k=3,delta=0.1"],
     "takes no LANTERN relaxation"),
    (["--tree", "static:[[0]]", "--verification", "r1+budget:tv=0.1,k=3"],
     "needs rule r2 or r4, got rule 'r1'"),
    (["--tree", "static:[[0]]", "--verification", "r4+budget:tv=0.1"], "needs k"),
    (["--tree", "eagle2:3,2,8", "--verification", "r4"],
     "rule r4 verifies children drawn from q without replacement"),
    (["--tree", "static:[[0]]", "--verification", "r4+budget:tv=0.1,k=9"],
     "reads k=9 neighbours but the table has only 7 columns"),
])
def test_generate_errors_are_one_line(tmp_path, ckpts, capsys, extra, message) -> None:  # noqa: F811
    assert main(generate(ckpts, tmp_path / "x", *extra)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxspec: error: ") and message in err, err


def test_rescore_r4_needs_drawn_children(tmp_path, models, capsys) -> None:
    st = DecodeSettings("r1", cfg_scale=CFG, target_sampling=SAMPLING, draft_sampling=SAMPLING)
    dec = Decoder(models[0], st, drafter=GPTDraftSession(models[1]), policy=Eagle2Tree(3, 2, 8))
    capture_trace(dec, tmp_path / "t", [0])
    assert main(["rescore", str(tmp_path / "t"), "--verification", "r4"]) == 2
    assert "rule r4 verifies drafts sampled from q without replacement" in capsys.readouterr().err
