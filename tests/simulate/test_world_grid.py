"""Worlds that move like models (SPEC 11): position-keyed noise, grid worlds, context sensitivity kappa_m."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from relaxspec.simulate.context import ContextSensitivity, world_context_sensitivity
from relaxspec.simulate.rng import stream_key, uniform
from relaxspec.simulate.world_kernels import STATE_AUX
from relaxspec.simulate.worlds import PRESETS, LatentParams, LatentWorld, StationaryWorld
from relaxspec.sweep import SweepConfig

BEFORE = Path(__file__).parent / "data" / "world_rows_before.json"
SMALL = {"vocab_size": 96, "n_clusters": 12}
GRID_PRESETS = {"mini-ambiguous-grid"}  # added with the grid parameters


def _sha(rows) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.array(rows), dtype=np.float64).tobytes()).hexdigest()


def test_every_preset_keeps_its_states_and_rows_bit_for_bit():
    """data/world_rows_before.json (beside this file) holds SHA-256s of every preset's states,
    prefix hashes, target rows (T = 1 and 0.7) and draft rows (depth 0 and 1) along a sampled path,
    computed before the grid parameters existed; with them off (every preset) nothing moves."""
    before = json.loads(BEFORE.read_text())
    assert set(before) | GRID_PRESETS == set(PRESETS)
    for name in GRID_PRESETS:
        assert PRESETS[name].stateful
    for name in before:
        w = LatentWorld.preset(name)
        assert w.state_size == w.params.dim
        key = np.uint64(stream_key(np.int64(7), np.int64(1)))
        z, h = w.initial(key)
        zs, hs, ps, qs, qd, pt = [z.copy()], [int(h)], [], [], [], []
        for t in range(6):
            p = w.target_probs(z)
            ps.append(p)
            qs.append(w.draft_probs(z, h))
            qd.append(w.draft_probs(z, h, depth=1))
            pt.append(w.target_probs(z, 0.7))
            x = min(int(np.searchsorted(np.cumsum(p), uniform(key, t) * p.sum(), side="right")), p.size - 1)
            z, h = w.advance(z, h, x)
            zs.append(z.copy())
            hs.append(int(h))
        got = {"states": _sha(zs), "hashes": hs, "target": _sha(ps), "draft": _sha(qs),
               "draft_depth1": _sha(qd), "target_t0.7": _sha(pt)}
        assert got == before[name], name


@pytest.mark.parametrize("over,match", [
    ({"prefix_noise": -0.1}, r"prefix_noise must be in \[0, 1\], got -0.1"),
    ({"prefix_noise": 1.5}, r"prefix_noise must be in \[0, 1\], got 1.5"),
    ({"prefix_noise": math.nan}, r"prefix_noise must be in \[0, 1\], got nan"),
    ({"lag1_noise": 0.1}, r"lag1_noise must be in \[0, 1 - prefix_noise\] \(shares of one variance\), got "
                          r"0.1 with prefix_noise 1.0"),
    ({"prefix_noise": 0.5, "lag1_noise": 0.6}, r"lag1_noise must be in \[0, 1 - prefix_noise\]"),
    ({"prefix_noise": 0.0, "lag1_noise": -0.1}, r"lag1_noise must be in \[0, 1 - prefix_noise\]"),
    ({"prefix_noise": 0.0, "lag1_noise": math.nan}, r"lag1_noise must be in"),
    ({"grid_width": -1}, r"grid_width must be an integer in \[0, 256\] \(0: no grid\), got -1"),
    ({"grid_width": 257}, r"grid_width must be an integer in \[0, 256\]"),
    ({"grid_width": 2.5}, r"grid_width must be an integer in \[0, 256\]"),
    ({"grid_width": True}, r"grid_width must be an integer in \[0, 256\]"),
    ({"grid_above": 0.2}, r"grid_above and grid_diagonal need a grid \(grid_width >= 1\)"),
    ({"grid_diagonal": 0.2}, r"grid_above and grid_diagonal need a grid"),
    ({"grid_width": 8, "grid_above": -0.1}, "grid_above must be finite and >= 0, got -0.1"),
    ({"grid_width": 8, "grid_diagonal": math.inf}, "grid_diagonal must be finite and >= 0, got inf"),
    ({"vocab_size": 2**18, "dim": 60, "grid_width": 8},
     r"\(dim \+ 4 \+ grid_width\) \* vocab_size must be at most 16777216"),
    ({"vocab_size": 2**18, "dim": 61, "prefix_noise": 0.5}, r"\(dim \+ 4 \+ grid_width\) \* vocab_size"),
])
def test_grid_parameters_are_validated(over, match):
    with pytest.raises(ValueError, match=match):
        LatentParams(**over)


def test_the_sweep_toml_takes_the_grid_parameters():
    """``[world_overrides]`` holds the new fields like the old ones (types, then values, one line)."""
    cfg = SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:2"], "world_overrides": {
        **SMALL, "prefix_noise": 0.25, "grid_width": 8, "grid_above": 0.3, "grid_diagonal": 0.1}})
    assert cfg.world_overrides["grid_width"] == 8 and cfg.world_overrides["prefix_noise"] == 0.25
    with pytest.raises(ValueError, match="world_overrides.grid_width must be an integer"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:2"],
                               "world_overrides": {"grid_width": 2.5}})
    with pytest.raises(ValueError, match=r"world 'ambiguous': grid_above and grid_diagonal need a grid"):
        SweepConfig.from_dict({"worlds": ["ambiguous"], "trees": ["chain:2"],
                               "world_overrides": {"grid_above": 0.5}})


def test_a_grid_state_carries_its_position_key_and_tokens():
    w = LatentWorld.preset("ambiguous", **SMALL, grid_width=3, grid_above=0.4)
    d = w.params.dim
    assert w.state_size == d + STATE_AUX + 3 + 1
    z, h = w.initial(np.uint64(11))
    assert z[d] == 0 and list(z[d + STATE_AUX:]) == [-1.0] * 4
    assert int(z[d + 1]) | (int(z[d + 2]) << 32) == int(h)  # the sequence's key, both halves
    for t, x in enumerate([5, 9, 2, 7, 1]):
        z, h = w.advance(z, h, x)
        assert z[d] == t + 1
    assert list(z[d + STATE_AUX:]) == [1.0, 7.0, 2.0, 9.0]  # 1, 2, 3, 4 back
    np.testing.assert_allclose(np.linalg.norm(z[:d]), 1.0)


def test_the_grid_transition_adds_the_codes_above():
    """Without noise the transition into position t is normalise(rho z + (1 - rho) E_x + above E_{t-W}
    + diagonal (E_{t-W-1} + E_{t-W+1})), the diagonal terms where the grid has them (column > 0, < W-1)."""
    W, rho, above, diag = 3, 0.6, 0.5, 0.2
    w = LatentWorld.preset("ambiguous", **SMALL, rho=rho, sigma=0.0, grid_width=W, grid_above=above,
                           grid_diagonal=diag)
    E = w.codebook
    d = w.params.dim
    tokens = [4, 8, 15, 16, 23, 42, 7, 3]
    z, h = w.initial(np.uint64(3))
    for t, x in enumerate(tokens):
        pos = t + 1
        want = rho * z[:d] + (1 - rho) * E[x]
        seq = tokens[:pos]
        if pos >= W:
            want = want + above * E[seq[pos - W]]
            if pos % W > 0:
                want = want + diag * E[seq[pos - W - 1]]
            if pos % W < W - 1:
                want = want + diag * E[seq[pos - W + 1]]
        z, h = w.advance(z, h, x)
        np.testing.assert_allclose(z[:d], want / np.linalg.norm(want), rtol=0, atol=1e-14)


def test_position_keyed_noise_does_not_depend_on_the_tokens():
    """prefix_noise 0: the noise after position t is keyed by (sequence, position) only; with rho = 1 the
    state never reads a token, so two sequences of other tokens share every state; prefix_noise 1 keys it
    by the prefix (the SPEC 6 world) and they part."""
    keyed = LatentWorld.preset("ambiguous", **SMALL, rho=1.0, prefix_noise=0.0)
    spec6 = LatentWorld.preset("ambiguous", **SMALL, rho=1.0)
    for w, same in ((keyed, True), (spec6, False)):
        a = b = w.initial(np.uint64(9))
        for x, y in ((1, 2), (3, 3), (50, 7)):
            a, b = w.advance(*a, x), w.advance(*b, y)
        d = w.params.dim
        assert np.array_equal(a[0][:d], b[0][:d]) == same
    other = keyed.advance(*keyed.initial(np.uint64(10)), 1)  # another sequence: other position noise
    assert not np.array_equal(other[0][:8], keyed.advance(*keyed.initial(np.uint64(9)), 1)[0][:8])


def test_kernel_equals_its_numpy_oracle_bit_for_bit():
    w = LatentWorld.preset("ambiguous", **SMALL, prefix_noise=0.3, grid_width=4, grid_above=0.3,
                           grid_diagonal=0.1, beta_spread=0.5)
    lag1 = LatentWorld.preset("ambiguous", **SMALL, prefix_noise=0.2, lag1_noise=0.5)
    for world in (w, lag1, LatentWorld.preset("ambiguous", **SMALL)):
        a = world_context_sensitivity(world, 5, n_sequences=3, seq_len=14, seed=4, temperature=0.9)
        b = world_context_sensitivity(world, 5, n_sequences=3, seq_len=14, seed=4, temperature=0.9,
                                      backend="numpy")
        assert np.array_equal(a.kappa, b.kappa) and np.array_equal(a.stderr, b.stderr)
        assert a.units == 3 and list(a.positions) == [13, 12, 11, 10, 9]
        assert (a.kappa > 0).all() and (a.stderr > 0).all()


def test_a_world_whose_law_reads_no_token_has_kappa_zero():
    """rho = 1 and all noise keyed by position: the law at a position depends on no token, kappa = 0 at
    every lag, exactly."""
    w = LatentWorld.preset("ambiguous", **SMALL, rho=1.0, prefix_noise=0.0)
    cs = world_context_sensitivity(w, 6, n_sequences=3, seq_len=20)
    assert np.array_equal(cs.kappa, np.zeros(6)) and np.array_equal(cs.stderr, np.zeros(6))


def test_a_world_keyed_by_the_token_above_only():
    """rho = 1, no noise, a grid of width W with the token above only: a state reads the tokens W and more
    back, never the W - 1 before it, so kappa_1..kappa_{W-1} are exactly 0 and kappa_W is not."""
    W = 4
    w = LatentWorld.preset("ambiguous", **SMALL, rho=1.0, sigma=0.0, grid_width=W, grid_above=0.5)
    cs = world_context_sensitivity(w, W + 1, n_sequences=4, seq_len=24)
    assert np.array_equal(cs.kappa[:W - 1], np.zeros(W - 1))
    assert cs.kappa[W - 1] > 0.05 and cs.kappa[W] > 0


def test_position_keyed_noise_lowers_kappa_far_back():
    """SPEC 11's point: with the noise keyed by the prefix every change redraws every later state, so
    kappa stays high at every lag; keyed by position it decays with the lag (rho^m)."""
    spec6 = world_context_sensitivity(LatentWorld.preset("ambiguous", **SMALL), 6, n_sequences=8, seq_len=48)
    keyed = world_context_sensitivity(LatentWorld.preset("ambiguous", **SMALL, prefix_noise=0.0), 6,
                                      n_sequences=8, seq_len=48)
    assert keyed.kappa[0] > 0.1
    assert keyed.kappa[5] < keyed.kappa[0] / 4
    assert spec6.kappa[5] > 0.5 and spec6.kappa[5] > 3 * keyed.kappa[5]


def test_noise_keyed_by_the_token_before_raises_kappa_1():
    """lag1_noise (SPEC 11): the share of the noise keyed by (position, token before) is redrawn when the
    token just before a position changes, so kappa_1 rises; a token further back reaches the state only
    through rho, so the rise shrinks with the lag (the same position noise and sequences on both sides:
    only the share moves)."""
    base = LatentWorld.preset("ambiguous", **SMALL, prefix_noise=0.0)
    token = LatentWorld.preset("ambiguous", **SMALL, prefix_noise=0.0, lag1_noise=0.6)
    a, b = (world_context_sensitivity(w, 6, n_sequences=8, seq_len=48) for w in (base, token))
    rise = b.kappa - a.kappa
    assert rise[0] > 0.15 and (rise > 0).all()
    assert (np.diff(rise) < 0).all() and rise[5] < rise[0] / 5  # further back: only through rho^(m-1)
    # rho = 1: the state reads no token but through this share's key; the same token draws the same noise
    w = LatentWorld.preset("ambiguous", **SMALL, rho=1.0, prefix_noise=0.0, lag1_noise=0.5)
    start, d = w.initial(np.uint64(9)), w.params.dim
    one, again, two = (w.advance(*start, t)[0][:d] for t in (1, 1, 2))
    assert np.array_equal(one, again) and not np.array_equal(one, two)


def test_a_world_file_written_before_lag1_noise_keeps_its_identity():
    """params_sha256 leaves lag1_noise out at 0: the hashes taken before it existed (a resumed sweep of a
    world file does not rerun it); a world that uses it hashes apart."""
    from dataclasses import replace

    from relaxspec.simulate.world_file import params_sha256

    assert params_sha256(PRESETS["ambiguous"]).startswith("2b54c2a488ece497")
    assert params_sha256(PRESETS["mini-ambiguous-grid"]).startswith("68de1a0ad3f9b10d")
    moved = replace(PRESETS["mini-ambiguous-grid"], lag1_noise=0.3)
    assert params_sha256(moved) != params_sha256(PRESETS["mini-ambiguous-grid"])


@pytest.mark.parametrize("kw,match", [
    ({"n_lags": 0}, "n_lags must be an integer >= 1, got 0"),
    ({"n_lags": 2.0}, "n_lags must be an integer >= 1, got 2.0"),
    ({"n_lags": 258}, "n_lags must be at most 257, got 258"),
    ({"n_sequences": 1}, "n_sequences must be an integer >= 2, got 1"),
    ({"n_sequences": True}, "n_sequences must be an integer >= 2, got True"),
    ({"seq_len": 3}, "seq_len must exceed n_lags .* got seq_len 3 and n_lags 3"),
    ({"seed": -1}, r"seed must be an integer in \[0, "),
    ({"backend": "gpu"}, r"backend must be one of \('numba', 'numpy'\), got 'gpu'"),
    ({"temperature": 0.0}, "temperature must be finite and > 0"),
])
def test_world_context_sensitivity_refuses_bad_input(kw, match):
    w = LatentWorld.preset("ambiguous", **SMALL)
    args = {"n_lags": 3, "n_sequences": 2, "seq_len": 10, **kw}
    with pytest.raises(ValueError, match=match):
        world_context_sensitivity(w, args.pop("n_lags"), **args)


def test_only_latent_worlds_have_a_context_sensitivity():
    p = np.full(4, 0.25)
    with pytest.raises(ValueError, match="context sensitivity needs a LatentWorld, got StationaryWorld"):
        world_context_sensitivity(StationaryWorld(p, p), 2)


def test_context_sensitivity_round_trips_as_plain_data():
    cs = world_context_sensitivity(LatentWorld.preset("ambiguous", **SMALL), 2, n_sequences=2, seq_len=6)
    back = ContextSensitivity.from_dict(json.loads(json.dumps(cs.as_dict())))
    assert np.array_equal(back.kappa, cs.kappa) and np.array_equal(back.stderr, cs.stderr)
    assert back.units == 2 and list(back.lags) == [1, 2] and list(back.positions) == [5, 4]


def test_the_engine_decodes_a_grid_world_as_its_numpy_oracle_does():
    """Trees and Jacobi windows in a grid, position-keyed world: the Numba engine and its NumPy oracle
    agree step for step (the state's token memory travels through both)."""
    from relaxspec.core.trees.jacobi import JacobiWindow
    from relaxspec.core.trees.spec import parse_tree
    from relaxspec.simulate.engine import run

    w = LatentWorld.preset("mini-ambiguous-grid", vocab_size=256, n_clusters=32)
    for tree, rule in ((parse_tree("eagle2:4,3,16", neighbours=w.neighbours), "r1"), (JacobiWindow(8), "r2")):
        a, b = (run(w, tree, rule, n_sequences=2, seq_len=24, seed=3, threads=1, backend=backend)
                for backend in ("numba", "numpy"))
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.accepted_depth, b.accepted_depth)
