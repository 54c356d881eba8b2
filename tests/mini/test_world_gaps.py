"""``mini.world_gaps`` (issue 28: what a fitted world lacks, measured): the off-law sensitivity on a Markov
chain where every figure has a closed form, SPEC 11's kappa reproduced, a world's teacher-forced laws, and
the step figures of a VVS trace (after a skip / after a verify) against the trace's own records."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relaxspec.mini.context_sensitivity import laws_context_sensitivity
from relaxspec.mini.world_gaps import (
    entropy,
    off_law_sensitivity,
    position_acceptance,
    root_entropy,
    skip_effect,
    world_laws,
)
from relaxspec.simulate.context import world_context_sensitivity
from relaxspec.simulate.context_kernels import replace_key
from relaxspec.simulate.rng import uniform
from relaxspec.simulate.world_params import PRESETS
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory.distributions import logits_to_probs

V, T = 6, 12


def _markov():
    rng = np.random.default_rng(3)
    table = rng.dirichlet(np.full(V, 0.4), size=V + 1)  # row V: the first position's law

    def laws(seqs: np.ndarray, i: int) -> np.ndarray:
        prev = np.concatenate([np.full((seqs.shape[0], 1), V), seqs[:, :-1]], axis=1)
        return table[prev]

    tokens = rng.integers(0, V, size=(3, T))
    return table, laws, tokens


def test_off_law_sensitivity_of_a_markov_chain_is_its_closed_form() -> None:
    table, laws, tokens = _markov()
    off = off_law_sensitivity(laws, tokens, 2, seed=5)
    spec11 = laws_context_sensitivity(laws, tokens, 2, seed=5)
    assert np.array_equal(off.kappa["law"].kappa, spec11.kappa)  # SPEC 11's figure, the same uniforms
    assert np.array_equal(off.kappa["law"].stderr, spec11.stderr)
    tv, ent_u, ent_0 = [], [], []
    for i, x in enumerate(tokens):
        key = np.uint64(replace_key(np.int64(5), np.int64(i)))
        codes = [min(V - 1, int(V * uniform(key, T + r))) for r in range(T - 1)]
        tv.append(np.mean([0.5 * np.abs(table[y] - table[x[r]]).sum() for r, y in enumerate(codes)]))
        ent_u.append(np.mean([entropy(table[y]) for y in codes]))
        ent_0.append(np.mean([entropy(table[x[r]]) for r in range(T - 1)]))
    assert off.kappa["uniform"].kappa[0] == pytest.approx(np.mean(tv), rel=1e-12)
    assert off.kappa["uniform"].kappa[1] == 0.0 and off.kappa["law"].kappa[1] == 0.0  # first order: no lag 2
    assert off.entropy["uniform"].mean == pytest.approx(np.mean(ent_u), rel=1e-12)
    assert off.entropy["original"].mean == pytest.approx(np.mean(ent_0), rel=1e-12)
    assert off.entropy["uniform"].n == 3


def test_bad_tokens_are_named() -> None:
    _, laws, tokens = _markov()
    tokens[0, 0] = V - 1

    def fewer_codes(seqs: np.ndarray, i: int) -> np.ndarray:  # a model of V - 1 codes
        return laws(seqs, i)[..., :V - 1]

    with pytest.raises(ValueError, match=r"lie in \[0, 5\)"):
        off_law_sensitivity(fewer_codes, tokens, 1)
    with pytest.raises(ValueError, match="integers >= 0"):
        off_law_sensitivity(laws, tokens.astype(float), 1)


def test_a_worlds_teacher_forced_laws_give_its_spec11_kappa() -> None:
    world = LatentWorld(PRESETS["mini-fit"])
    tokens, laws = world_laws(world, 2, 16, seed=1)
    off = off_law_sensitivity(laws, tokens, 3, seed=1)
    kappa = world_context_sensitivity(world, 3, n_sequences=2, seq_len=16, seed=1)
    np.testing.assert_allclose(off.kappa["law"].kappa, kappa.kappa, rtol=1e-9)
    assert off.kappa["uniform"].kappa[0] > 0.0
    _, near = world_laws(world, 2, 16, seed=1, horizon=3)  # only the laws kappa_1..3 read
    short = off_law_sensitivity(near, tokens, 3, seed=1)
    for kind in ("law", "uniform"):
        assert np.array_equal(short.kappa[kind].kappa, off.kappa[kind].kappa)
    assert short.entropy["uniform"] == off.entropy["uniform"]
    assert np.array_equal(laws(tokens[:1], 0)[0], near(tokens[:1], 0)[0])  # its own sequence: every law
    with pytest.raises(ValueError, match="LatentWorld"):
        world_laws(object(), 2, 16)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def vvs_trace(tmp_path_factory):
    """2 images of the VVS every-2 row on the first shipped model (a few seconds)."""
    from relaxspec.mini.shipped import load_mini
    from relaxspec.mini.validation import VALIDATION_CONFIGS, capture

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    configs = {c.name: c for c in VALIDATION_CONFIGS}
    mini, out = load_mini(), tmp_path_factory.mktemp("gaps")
    config = configs["VVS every 2 + LANTERN delta=0.1"]
    plain = capture(mini, configs["EAGLE-2 r1 exact"], 2, out, progress=False)  # no skips
    yield config, capture(mini, config, 2, out, progress=False), plain
    torch.set_num_threads(threads)


def test_skip_figures_of_a_vvs_trace_are_its_records(vvs_trace) -> None:
    from relaxspec.core.trace import read_trace
    from relaxspec.simulate import run
    from relaxspec.simulate.worlds import TraceWorld

    config, path, plain = vvs_trace
    steps = sorted(read_trace(path).steps(), key=lambda st: (st.sequence, st.position))
    steps = [st for st in steps if st.skipped or st.tokens.size > 1]  # the prefill and last token: no draft
    after = {"skip": [], "verify": []}
    skips, ent = [], {"skip": [], "verify": []}
    for prev, st in zip(steps[:-1], steps[1:], strict=False):
        if st.sequence != prev.sequence:
            continue
        if st.skipped:
            skips.append(len(st.path) - 1)
            continue
        kind = "skip" if prev.skipped else "verify"
        after[kind].append(len(st.path) - 1)
        if st.tokens.size > 1:
            ent[kind].append(entropy(logits_to_probs(st.target_logits[0].astype(np.float64))))
    assert after["skip"] and skips  # every 2nd step skips
    effect = skip_effect(run(TraceWorld(path), None, config.verification, n_sequences=1, threads=1))
    assert effect.after_skip.mean == pytest.approx(np.mean(after["skip"]), rel=1e-12)
    assert effect.after_skip.n == len(after["skip"]) and effect.after_verify.n == len(after["verify"])
    assert effect.skip_drafts.mean == pytest.approx(np.mean(skips), rel=1e-12)
    roots = root_entropy(path)
    for kind in ("skip", "verify"):  # every 2nd step skips: nothing may follow a verify step
        assert roots[f"after {kind}"].n == len(ent[kind])
        if ent[kind]:
            assert roots[f"after {kind}"].mean == pytest.approx(np.mean(ent[kind]), rel=1e-12)
    if after["verify"]:
        assert effect.after_verify.mean == pytest.approx(np.mean(after["verify"]), rel=1e-12)
    spec = [st for st in sorted(read_trace(plain).steps(), key=lambda st: (st.sequence, st.position))
            if st.tokens.size > 1]
    want = [entropy(logits_to_probs(b.target_logits[0].astype(np.float64)))
            for a, b in zip(spec[:-1], spec[1:], strict=False) if a.sequence == b.sequence]
    got = root_entropy(plain)
    assert got["after skip"].n == 0 and got["after verify"].n == len(want) > 10
    assert got["after verify"].mean == pytest.approx(np.mean(want), rel=1e-12)


def test_skip_effect_groups_speculative_steps_by_the_one_before() -> None:
    """Sequence 0: prefill, verify 2, skip 1, verify 3, verify 0, skip 2; sequence 1: verify 1, skip 0,
    verify 4. Groups are read within a sequence, over the steps with a draft; errors over sequences."""
    from types import SimpleNamespace

    forwards = np.array([1, 1, 0, 1, 1, 0, 1, 0, 1])
    res = SimpleNamespace(n_steps=9, target_forwards=forwards, sequence=np.array([0] * 6 + [1] * 3),
                          tree_size=np.array([1, 5, 5, 5, 5, 5, 5, 5, 5]),
                          accepted_depth=np.array([0, 2, 1, 3, 0, 2, 1, 0, 4]))
    e = skip_effect(res)  # type: ignore[arg-type]
    assert (e.after_skip.mean, e.after_skip.n) == (3.5, 2)  # 3 (sequence 0) and 4 (sequence 1)
    assert (e.after_verify.mean, e.after_verify.n) == (0.0, 1)  # not the step after the prefill
    assert (e.skip_drafts.mean, e.skip_drafts.n) == (1.0, 3)
    assert e.after_skip.se == pytest.approx(0.5)  # two sequences, one value each: |3 - 4| / 2
    res.target_forwards = None  # every step a forward: nothing follows a skip
    assert skip_effect(res).after_skip.n == 0 and skip_effect(res).after_verify.n == 6  # type: ignore[arg-type]


def test_bad_batch_and_horizon_are_named() -> None:
    _, laws, tokens = _markov()
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        off_law_sensitivity(laws, tokens, 1, batch=0)
    with pytest.raises(ValueError, match="horizon must be None or an integer >= 1"):
        world_laws(LatentWorld(PRESETS["mini-fit"]), 2, 8, horizon=0)


def test_position_acceptance_is_the_conditional_chance_of_one_more_draft() -> None:
    class Steps:
        accepted_depth = np.array([0, 1, 2, 2, 3, 0, 1])
        tree_size = np.array([4, 4, 4, 4, 4, 1, 4])  # the step with one node is not speculative

    h = position_acceptance(Steps(), depth=3)  # type: ignore[arg-type]
    np.testing.assert_allclose(h, [5 / 6, 3 / 5, 1 / 3])


def test_explain_before_validate_is_one_line(tmp_path, capsys) -> None:
    from relaxspec.cli import main

    assert main(["mini", "--out", str(tmp_path), "explain"]) == 2
    err = capsys.readouterr().err.strip()
    assert "run relaxspec mini validate" in err and len(err.splitlines()) == 1
