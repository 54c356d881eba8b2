"""Worlds: presets, prefix-keyed consistency, kernel rows vs NumPy twins, trace replay."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from relaxspec.core.trace import Sampling, TraceHeader, TraceStep, TraceWriter
from relaxspec.mini.calibration import FITTED_PRESETS
from relaxspec.simulate.engine import run
from relaxspec.simulate.rng import combine, normals, stream_key
from relaxspec.simulate.world_kernels import (
    NCH,
    draft_row,
    pad_bias,
    pad_codebook,
    row_exp,
    row_scratch,
    rows_exp,
    target_row,
)
from relaxspec.simulate.worlds import (
    PRESETS,
    LatentParams,
    LatentWorld,
    StationaryWorld,
    TraceWorld,
    ambiguity,
    sampled_nodes,
    world_stats,
)
from relaxspec.theory import Relax, Tree, neighbour_table, sample_step
from relaxspec.theory.verification import Verification

# Rows are float32 exps shifted by a bound at most 19.4 nats above the row's max, so a token
# more than 87.3 - 19.4 = 67.9 nats below the max may flush to 0: exp(-67.9) < 3.5e-30.
UNDERFLOW = 3.5e-30


def test_presets_are_llamagen_sized_and_calibrated():
    fitted = {name for by_drafter in FITTED_PRESETS.values() for name in by_drafter.values()}
    assert fitted <= set(PRESETS)
    for name in PRESETS:
        w = LatentWorld.preset(name)
        # the generic presets are LlamaGen-sized; a world fitted to a shipped model has its vocabulary
        model = name.replace("-draft-gpt", "").replace("-greedy", "").replace("-grid", "")
        assert w.vocab_size == {"mini-fit": 512, "mini-ambiguous": 8192}.get(model, 16384)
        assert w.params.dim == 8
        np.testing.assert_allclose(np.linalg.norm(w.codebook, axis=1), 1.0)
    conf = world_stats(LatentWorld.preset("confident"), n_sequences=2, seq_len=32)
    amb = world_stats(LatentWorld.preset("ambiguous"), n_sequences=2, seq_len=32)
    assert conf.mean_top1 >= 0.7
    assert 0.05 <= amb.mean_top1 <= 0.25  # LlamaGen-like
    assert amb.mean_entropy > conf.mean_entropy
    mini = world_stats(LatentWorld.preset("mini"), n_sequences=2, seq_len=32)
    assert amb.mean_top1 < mini.mean_top1 < conf.mean_top1  # the shipped model is less ambiguous


def test_prefix_keyed_states_and_rows():
    w = LatentWorld.preset("ambiguous", vocab_size=1000, n_clusters=40)
    z0, h0 = w.initial(np.uint64(stream_key(np.int64(0), np.int64(3))))
    a = w.advance(*w.advance(z0, h0, 5), 7)
    b = w.advance(*w.advance(z0, h0, 5), 7)
    c = w.advance(*w.advance(z0, h0, 7), 5)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1] and a[1] != c[1]
    np.testing.assert_allclose(np.linalg.norm(a[0]), 1.0)
    for T in (1.0, 0.5):
        W = w.kernel_world(T)
        p = np.empty(w.vocab_size)
        es, cmaxs = row_scratch(W, 1)
        psum = target_row(W, a[0], p, es[0], cmaxs[0])
        np.testing.assert_array_equal(p, w.target_probs(a[0], T))  # one implementation
        assert psum == pytest.approx(1.0, abs=1e-12) and p.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(p, softmax64(w.prior + w.params.beta * (w.codebook @ a[0]), T), rtol=1e-4,
                                   atol=UNDERFLOW)
        q = np.empty(w.vocab_size)
        draft_row(W, a[0], np.uint64(a[1]), 0, q, es[0], cmaxs[0])
        np.testing.assert_array_equal(q, w.draft_probs(a[0], a[1], T))
        xi = np.empty(w.params.dim)
        normals(np.uint64(combine(w.keys[1], np.int64(np.uint64(a[1]) & np.uint64(0x7FFFFFFFFFFFFFFF)))), xi)
        zq = a[0] + w.params.draft_sigma * xi
        zq /= np.linalg.norm(zq)
        np.testing.assert_allclose(q, softmax64(w.draft_prior + w.params.draft_beta * (w.codebook @ zq), T),
                                   rtol=1e-4, atol=UNDERFLOW)


def test_beta_spread_scales_each_states_inverse_temperature():
    """beta_spread s: p at z has inverse temperature beta exp(s <a, z>), q at the drafter's view z_q
    beta_q exp(s <a, z_q>); s = 0 leaves the rows bit for bit as they were; the spread makes
    ambiguity vary from state to state."""
    plain = LatentWorld.preset("ambiguous", vocab_size=1000, n_clusters=40)
    spread = LatentWorld.preset("ambiguous", vocab_size=1000, n_clusters=40, beta_spread=1.5)
    np.testing.assert_array_equal(plain.codebook, spread.codebook)
    np.testing.assert_allclose(np.linalg.norm(spread.difficulty_axis), 1.0)
    z, h = spread.advance(*spread.initial(np.uint64(11)), 3)
    a = spread.difficulty_axis
    p = spread.target_probs(z)
    beta = spread.params.beta * np.exp(1.5 * a @ z)
    np.testing.assert_allclose(p, softmax64(spread.prior + beta * (spread.codebook @ z), 1.0), rtol=1e-4,
                               atol=UNDERFLOW)
    xi = np.empty(spread.params.dim)
    normals(np.uint64(combine(spread.keys[1], np.int64(np.uint64(h) & np.uint64(0x7FFFFFFFFFFFFFFF)))), xi)
    zq = z + spread.params.draft_sigma * xi
    zq /= np.linalg.norm(zq)
    beta_q = spread.params.draft_beta * np.exp(1.5 * a @ zq)
    q_formula = softmax64(spread.draft_prior + beta_q * (spread.codebook @ zq), 1.0)
    np.testing.assert_allclose(spread.draft_probs(z, h), q_formula, rtol=1e-4, atol=UNDERFLOW)
    # s = 0 is the old world: the kernel multiplies by nothing
    np.testing.assert_array_equal(plain.target_probs(z),
                                  LatentWorld(replace(plain.params, beta_spread=0.0)).target_probs(z))
    sd = [np.std([r[0] for r in map(ambiguity, (p for p, _ in sampled_nodes(w, n_sequences=4, seq_len=32)))])
          for w in (plain, spread)]
    assert sd[1] > 1.3 * sd[0]
    with pytest.raises(ValueError, match="beta_spread"):
        LatentParams(beta_spread=-1.0)


def test_draft_drift_adds_noise_below_the_root():
    """draft_drift: the drafter's view at depth d >= 1 has noise sqrt(sigma_q^2 + drift^2); at the root
    (and with drift 0 at any depth) it is the old drafter bit for bit; the oracle's builders pass the
    depth, so a policy's NumPy and Numba trees agree with drift."""
    plain = LatentWorld.preset("ambiguous", vocab_size=1000, n_clusters=40)
    drift = LatentWorld.preset("ambiguous", vocab_size=1000, n_clusters=40, draft_drift=0.3)
    z, h = drift.advance(*drift.initial(np.uint64(5)), 9)
    np.testing.assert_array_equal(drift.draft_probs(z, h), plain.draft_probs(z, h))
    np.testing.assert_array_equal(plain.draft_probs(z, h, depth=3), plain.draft_probs(z, h))
    xi = np.empty(drift.params.dim)
    normals(np.uint64(combine(drift.keys[1], np.int64(np.uint64(h) & np.uint64(0x7FFFFFFFFFFFFFFF)))), xi)
    zq = z + np.sqrt(drift.params.draft_sigma**2 + 0.3**2) * xi
    zq /= np.linalg.norm(zq)
    q_formula = softmax64(drift.draft_prior + drift.params.draft_beta * (drift.codebook @ zq), 1.0)
    np.testing.assert_allclose(drift.draft_probs(z, h, depth=2), q_formula, rtol=1e-4, atol=UNDERFLOW)
    np.testing.assert_array_equal(drift.draft_probs(z, h, depth=5), drift.draft_probs(z, h, depth=1))
    from relaxspec.core.trees.spec import parse_tree
    from relaxspec.simulate.policy_kernels import kernel_build, kernel_draft

    for spec in ("static:naive_extend_57", "eagle2:4,3,12"):
        policy = parse_tree(spec)
        parents, tokens, q, _ = kernel_build(policy, drift, z, h)
        built = policy.build(drift.draft_probs(z, h), kernel_draft(drift, z, h))
        np.testing.assert_array_equal(parents, built.tree.parents)
        np.testing.assert_array_equal(tokens, built.tree.tokens)
        np.testing.assert_array_equal(q, built.q)
        deeper = np.nonzero(built.tree.depths >= 1)[0]
        assert not np.array_equal(q[deeper], kernel_build(policy, plain, z, h)[2][deeper])


def softmax64(logits, T):
    """The world's rows as a float64 formula (the kernels evaluate logits and exp in float32)."""
    e = np.exp(logits / T - (logits / T).max())
    return e / e.sum()


def test_row_exp_shift_and_chunks():
    """A loose shift (the bound far above the largest logit) is redone with the max; chunk maxima
    are the rows' maxima over x = c mod NCH; any V and d (padded tokens and dimensions)."""
    rng = np.random.default_rng(1)
    for V, d in ((7, 3), (300, 8), (1000, 11)):
        ET = rng.standard_normal((d, V)).astype(np.float32)
        b = rng.standard_normal(V).astype(np.float32)
        zb = 4.0 * rng.standard_normal(d) / np.sqrt(d)
        logits = b.astype(np.float64) + ET.astype(np.float64).T @ zb
        T, bias = pad_codebook(ET), pad_bias(b)
        for bmax in (float(b.max()), float(b.max()) + 60.0):  # the second bound is 60 nats loose
            e, cmax = np.empty(bias.size, dtype=np.float32), np.empty(NCH)
            s = row_exp(T, bias, bmax, zb, e, cmax)
            assert e.max() >= 2.0**-28 and np.all(e[V:] == 0)
            assert s == pytest.approx(e.astype(np.float64).sum(), rel=1e-12)
            np.testing.assert_allclose(e[:V] / s, softmax64(logits, 1.0), rtol=1e-5, atol=1e-30)
            want = [e[c::NCH].max() if c < e.size else 0.0 for c in range(NCH)]
            np.testing.assert_array_equal(cmax, want)
            # several states in one codebook pass: each row as if computed alone
            zbs = np.vstack([zb, 4.0 * rng.standard_normal((2, d)) / np.sqrt(d)])
            es, cmaxs, sums = np.empty((3, bias.size), dtype=np.float32), np.empty((3, NCH)), np.empty(3)
            rows_exp(T, bias, bmax, zbs, es, cmaxs, sums)
            for i in range(3):
                assert sums[i] == row_exp(T, bias, bmax, zbs[i], e, cmax)
                np.testing.assert_array_equal(es[i], e)
                np.testing.assert_array_equal(cmaxs[i], cmax)


def test_world_validation():
    with pytest.raises(ValueError, match="rho"):
        LatentParams(rho=1.5)
    with pytest.raises(ValueError, match="codebook"):
        LatentParams(codebook="cube")
    with pytest.raises(ValueError, match="unknown world preset"):
        LatentWorld.preset("foggy")
    with pytest.raises(ValueError, match="sum to 1"):
        StationaryWorld(np.array([0.5, 0.6]), np.array([0.5, 0.5]))


def _write_trace(path, rng, V=20, steps=6, relax=None):
    relax = relax or Relax.additive(4, 0.2)
    E = rng.standard_normal((V, 3))
    nb = neighbour_table(E, k_max=V - 1)
    header = TraceHeader(model="toy", checkpoint_sha256="0" * 64, vocab_size=V, codebook_sha256="1" * 64,
                         verification=Verification("r1", relax), tree="random",
                         logits_dtype="float32")
    recorded = []
    with TraceWriter(path, header, nb) as tw:
        for seq in range(2):
            for t in range(steps):
                n = int(rng.integers(2, 7))
                parents = np.array([-1] + [int(rng.integers(0, v)) for v in range(1, n)])
                tokens = np.zeros(n, dtype=np.int64)
                for v in range(1, n):
                    sib = {int(tokens[u]) for u in range(1, v) if parents[u] == parents[v]}
                    tokens[v] = rng.choice([x for x in range(V) if x not in sib])
                tl = rng.standard_normal((n, V)).astype(np.float32)
                dl = rng.standard_normal((n, V)).astype(np.float32)
                ua, ud = rng.random(n), rng.random(n)
                p = header.target_sampling.probs(tl.astype(np.float64))
                path, bonus = sample_step(Tree(parents, tokens), p, ua, ud, Verification("r1", relax),
                                          neighbours=nb.astype(np.int64))
                tw.add(TraceStep(seq, t, parents, tokens, tl, dl, ua, ud, np.array(path), bonus))
                recorded.append(len(path))
            tw.end_sequence()
    return recorded


def test_trace_world_replays_exactly_and_rescores(tmp_path):
    rng = np.random.default_rng(0)
    recorded = _write_trace(tmp_path / "run.trace", rng)
    world = TraceWorld(tmp_path / "run.trace")
    from relaxspec.simulate.replay import replay_trace

    res = replay_trace(world, Verification(rule="r1", relax=Relax.additive(4, 0.2)), check=True)
    np.testing.assert_array_equal(res.tokens, recorded)
    assert res.n_sequences == 2
    exact = run(world, None, "r1", n_sequences=1)
    assert exact.n_steps == len(recorded) and np.all(exact.expected_tv == 0)
    r2 = run(world, None, Verification(rule="r2", relax=Relax.multiplicative(4, 2.0)), n_sequences=1)
    assert r2.n_steps == len(recorded)
    with pytest.raises(ValueError, match="replays to"):
        replay_trace(world, "r3", check=True)
    with pytest.raises(ValueError, match="not a directory"):
        TraceWorld(tmp_path / "missing")
    assert Sampling().temperature == 1.0


def test_greedy_sampled_nodes_follow_the_argmax():
    w = LatentWorld.preset("ambiguous", vocab_size=500, n_clusters=20)
    rows = [p for p, _ in sampled_nodes(w, n_sequences=1, seq_len=6, seed=3, greedy=True)]
    z, h = w.initial(np.uint64(stream_key(np.int64(3), np.int64(0))))
    for p in rows:
        np.testing.assert_array_equal(p, w.target_probs(z))
        z, h = w.advance(z, h, int(np.argmax(p)))
    sampled = [p for p, _ in sampled_nodes(w, n_sequences=1, seq_len=6, seed=3)]
    assert not all(np.array_equal(a, b) for a, b in zip(rows, sampled, strict=True))
