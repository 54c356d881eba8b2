"""Context sensitivity kappa_m of a model (mini.context_sensitivity, SPEC 11): closed forms, the world's
kernel as a model, the shipped model, input validation."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.mini.context_sensitivity import laws_context_sensitivity, model_context_sensitivity
from relaxspec.simulate.context import world_context_sensitivity
from relaxspec.simulate.rng import stream_key, uniform
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory.sampler import draw_token


def keyed_by_lag(m: int, a: float):
    """Laws over V = 2 keyed by the token m back only: (a, 1 - a) after a 0, (1 - a, a) after a 1, uniform
    where no token is m back."""
    table = np.array([[a, 1 - a], [1 - a, a]])

    def laws(seqs: np.ndarray, i: int) -> np.ndarray:
        out = np.full(seqs.shape + (2,), 0.5)
        out[:, m:] = table[seqs[:, :-m]]
        return out

    return laws


def sample(laws, n: int, T: int, seed: int) -> np.ndarray:
    """n sequences of T tokens drawn from ``laws`` token by token."""
    out = np.zeros((n, T), dtype=np.int64)
    for i in range(n):
        key = np.uint64(stream_key(np.int64(seed), np.int64(i)))
        for t in range(T):
            out[i, t] = draw_token(laws(out[i:i + 1], i)[0, t], uniform(key, t))
    return out


def test_a_model_keyed_by_the_token_m_back_has_its_closed_form():
    """kappa_j = 0 exactly for j != m; kappa_m = TV(L0, L1) P(x' != x) = (2a - 1) times 2a(1 - a) where the
    law is keyed (r >= m) and 1/2 where it is uniform (r < m), averaged over the T - m replaced positions."""
    m, a, T, n = 3, 0.8, 30, 200
    laws = keyed_by_lag(m, a)
    cs = laws_context_sensitivity(laws, sample(laws, n, T, seed=1), 5, seed=2, batch=7)
    others = [j for j in range(5) if j != m - 1]
    assert np.array_equal(cs.kappa[others], np.zeros(4))
    want = (2 * a - 1) * (m * 0.5 + (T - 2 * m) * 2 * a * (1 - a)) / (T - m)
    assert 0 < cs.stderr[m - 1] < 0.01
    assert abs(cs.kappa[m - 1] - want) < 5 * cs.stderr[m - 1]  # fixed seeds; 5 sd: chance < 1e-6
    assert cs.units == n and list(cs.positions) == [T - j for j in range(1, 6)]


def test_a_world_measured_as_a_model_gives_the_worlds_kappa():
    """The model-side measurement (laws of sequences, batched) of a world's laws along the world's own samples
    equals the world kernel's (same uniforms; the TV sums in another order)."""
    w = LatentWorld.preset("ambiguous", vocab_size=96, n_clusters=12, prefix_noise=0.4, grid_width=4,
                           grid_above=0.3)

    def laws(seqs: np.ndarray, i: int) -> np.ndarray:
        out = np.empty(seqs.shape + (w.vocab_size,))
        for b, seq in enumerate(seqs):
            state = w.initial(np.uint64(stream_key(np.int64(5), np.int64(i))))
            for t, x in enumerate(seq):
                out[b, t] = w.target_probs(state[0])
                state = w.advance(*state, int(x))
        return out

    tokens = sample(laws, 3, 12, seed=5)
    got = laws_context_sensitivity(laws, tokens, 4, seed=5, batch=5)
    want = world_context_sensitivity(w, 4, n_sequences=3, seq_len=12, seed=5)
    np.testing.assert_allclose(got.kappa, want.kappa, rtol=1e-12)
    np.testing.assert_allclose(got.stderr, want.stderr, rtol=1e-9)


@pytest.mark.parametrize("tokens,kw,match", [
    (np.zeros((3, 10, 1), dtype=np.int64), {}, r"tokens must be an \(N, T\) integer array"),
    (np.zeros((3, 10)), {}, r"tokens must be an \(N, T\) integer array, got float64"),
    (np.zeros((1, 10), dtype=np.int64), {}, "images must be an integer >= 2, got 1"),
    (np.zeros((3, 4), dtype=np.int64), {}, "seq_len must exceed n_lags"),
    (np.full((3, 10), -1), {}, "tokens must be >= 0"),
    (np.full((3, 10), 2), {}, r"tokens of image 0 must lie in \[0, 2\)"),
    (np.zeros((3, 10), dtype=np.int64), {"batch": 0}, "batch must be an integer >= 1, got 0"),
])
def test_laws_context_sensitivity_refuses_bad_input(tokens, kw, match):
    with pytest.raises(ValueError, match=match):
        laws_context_sensitivity(lambda seqs, i: np.full(seqs.shape + (2,), 0.5), tokens, 4, **kw)


@pytest.fixture(scope="module")
def shipped():
    from relaxspec.mini.shipped import load_mini

    return load_mini(drafters=False)


def test_the_shipped_model_batched_as_it_likes(shipped):
    """On the shipped model, teacher-forced: kappa in (0, 1), and the batch size changes nothing but the
    float rounding of the forwards."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, shipped.vocab_size, (2, 64))
    a = model_context_sensitivity(shipped, tokens, np.array([3, 7]), 2.0, 3, batch=63)
    b = model_context_sensitivity(shipped, tokens, np.array([3, 7]), 2.0, 3, batch=16)
    assert ((a.kappa > 0) & (a.kappa < 1)).all()
    np.testing.assert_allclose(a.kappa, b.kappa, atol=1e-5)
    with pytest.raises(ValueError, match=r"tokens must have shape \(N, 64\), got \(2, 10\)"):
        model_context_sensitivity(shipped, tokens[:, :10], np.array([3, 7]), 2.0, 3)
    with pytest.raises(ValueError, match=r"labels must have shape \(2,\)"):
        model_context_sensitivity(shipped, tokens, np.array([3]), 2.0, 3)
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 512\) \(the model's codebook\)"):
        model_context_sensitivity(shipped, tokens + 512, np.array([3, 7]), 2.0, 3)


@pytest.mark.parametrize("argv,named", [
    (["--kappa-images", "1"], "--kappa-images must be >= 2, got 1"),
    (["--n-images", "10", "--kappa-images", "20"], r"--kappa-images must be in [2, --n-images = 10], got 20"),
    (["--kappa-sequences", "1"], "--kappa-sequences must be >= 2, got 1"),
    (["--kappa-len", "9"], "--kappa-len must be >= 10, got 9"),
])
def test_compare_refuses_bad_kappa_options(capsys, tmp_path, argv, named):
    from relaxspec.cli import main

    code = main(["mini", "--out", str(tmp_path), "compare", *argv])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("relaxspec: error: ") and named in err[0]
    assert not (tmp_path / "compare").exists()  # refused before anything ran


def test_compare_renders_kappa_of_models_and_worlds_side_by_side():
    from relaxspec.mini.model_comparison import KAPPA_LAGS, context_table

    c = {"kappa": [0.25, 0.1], "stderr": [0.01, 0.005], "units": 40, "positions": [63, 62]}
    w = {"kappa": [0.8, 0.9], "stderr": [0.02, 0.01], "units": 16, "positions": [255, 254]}
    lines = context_table({"models": {"ambiguous": {"codebook_size": 8192, "context": c}},
                           "world_context": {"ambiguous": w}})
    assert KAPPA_LAGS == 9  # the 8 x 8 grid: the token before .. the token above-left
    assert lines[0] == "| model / world | kappa_1 | kappa_2 |"
    assert lines[2] == ("| `ambiguous` model (8,192 codes; 40 images x 64 tokens) | 0.250 ± 0.010 | "
                        "0.100 ± 0.005 |")
    assert lines[3] == "| `ambiguous` world (16 x 256 tokens) | 0.800 ± 0.020 | 0.900 ± 0.010 |"
