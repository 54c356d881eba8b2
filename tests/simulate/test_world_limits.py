"""Bad world settings and a damaged neighbour-table cache are refused (or repaired) before anything runs
(issue 26, items 5, 7, 8, 9, 10): world sizes, relaxation widths, temperatures and seeds are checked when
a config is validated, each with one line naming it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from relaxspec.cli import main
from relaxspec.core.trees.spec import parse_tree
from relaxspec.simulate.engine import run
from relaxspec.simulate.worlds import LatentParams, LatentWorld, StationaryWorld
from relaxspec.sweep import SweepConfig
from relaxspec.theory.neighbours import neighbour_table

V = 64  # small worlds: building one takes milliseconds


def config(**extra) -> dict:
    """A valid sweep config dict at V = 64, with ``extra`` keys replaced."""
    d = {"worlds": ["confident"], "trees": ["chain:2"], "n_sequences": 1, "seq_len": 4,
         "world_overrides": {"vocab_size": V}}
    d.update(extra)
    return d


# ---- item 5: the on-disk neighbour-table cache
def _rewrite_table(path: Path, change) -> None:
    """Replace the table in a cache file by ``change(table)``, keeping the file's format."""
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        data["table"] = change(data["table"])
        with open(path, "wb") as f:
            np.savez(f, **data)
    else:
        np.save(path, change(np.load(path)), allow_pickle=False)


DAMAGE = {
    "out_of_range": lambda t: np.full_like(t, 60000),  # segfaulted the kernels (exit 139)
    "negative": lambda t: (t.astype(np.int32) - 100),
    "all_zero": np.zeros_like,
    "column_reversed": lambda t: np.ascontiguousarray(t[:, ::-1]),
    "rows_swapped": lambda t: np.ascontiguousarray(t[::-1]),
    "one_row_shuffled": lambda t: np.concatenate([t[:1, [1, 0, *range(2, t.shape[1])]], t[1:]]),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cached_table_is_rebuilt_with_a_warning(tmp_path, monkeypatch, damage: str) -> None:
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path))
    world = LatentWorld.preset("confident", vocab_size=V)
    good = world.neighbours(8)
    np.testing.assert_array_equal(good, neighbour_table(world.codebook, k_max=V - 1)[:, :good.shape[1]])
    [path] = [p for p in tmp_path.iterdir() if p.name.startswith("neighbours-")]
    _rewrite_table(path, DAMAGE[damage])
    match = f"neighbour-table cache {re.escape(str(path))} is not usable.*rebuilt"
    with pytest.warns(UserWarning, match=match):
        table = LatentWorld.preset("confident", vocab_size=V).neighbours(8)
    np.testing.assert_array_equal(table, good)
    # the file was repaired: the next world reads it without a word
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(LatentWorld.preset("confident", vocab_size=V).neighbours(8), good)


def test_a_cached_table_of_another_codebook_is_never_used(tmp_path, monkeypatch) -> None:
    """Same V, same width, valid rows, but built from another codebook: the file's codebook hash
    differs, so it is rebuilt."""
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path / "a"))
    mine = LatentWorld.preset("confident", vocab_size=V)
    good = mine.neighbours(8)
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path / "b"))
    LatentWorld.preset("confident", vocab_size=V, seed=5).neighbours(8)
    [ours] = list((tmp_path / "a").iterdir())
    [theirs] = list((tmp_path / "b").iterdir())
    shutil.copyfile(theirs, ours)
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path / "a"))
    with pytest.warns(UserWarning, match="rebuilt"):
        table = LatentWorld.preset("confident", vocab_size=V).neighbours(8)
    np.testing.assert_array_equal(table, good)


def test_an_unreadable_cache_file_is_rebuilt(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path))
    good = LatentWorld.preset("confident", vocab_size=V).neighbours(8)
    [path] = list(tmp_path.iterdir())
    path.write_bytes(b"\x93NUMPY garbage")
    with pytest.warns(UserWarning, match="rebuilt"):
        np.testing.assert_array_equal(LatentWorld.preset("confident", vocab_size=V).neighbours(8), good)


# ---- item 7: world sizes are bounded before anything is allocated
@pytest.mark.parametrize("over, named", [
    ({"dim": 100000}, "dim must be"),
    ({"vocab_size": 100000000000}, "vocab_size must be"),
    ({"vocab_size": 2**17, "dim": 512}, "vocab_size * dim"),
    ({"n_clusters": 10**9}, "n_clusters must be"),
])
def test_world_sizes_are_bounded(over: dict, named: str) -> None:
    with pytest.raises(ValueError, match="at most") as err:
        LatentParams(**over)
    assert named in str(err.value)
    with pytest.raises(ValueError, match="world_overrides for world 'confident'") as err:
        SweepConfig.from_dict(config(world_overrides=over), source="c.toml")
    assert named in str(err.value) and "\n" not in str(err.value)


# ---- item 8: a relaxation reading more neighbours than a token has
@pytest.mark.parametrize("spec", ["r1+lantern:k=100000,delta=0.1", "r1+lantern++:k=64,lam=2",
                                  "r2+budget:tv=0.05,k=64"])
def test_relaxation_width_over_the_vocabulary_is_refused_at_validation(spec: str) -> None:
    extra: dict = {"verifications": [spec]}
    if spec.startswith("r2"):
        extra["trees"] = ["static:naive_extend_57"]
    with pytest.raises(ValueError) as err:
        SweepConfig.from_dict(config(**extra), source="c.toml")
    line = str(err.value)
    assert line.startswith("c.toml: ") and "world 'confident'" in line and "k=" in line
    assert f"{V - 1} neighbours" in line
    # k = V - 1 is fine
    SweepConfig.from_dict(config(verifications=[f"r1+lantern:k={V - 1},delta=0.1"]))


# ---- item 9: temperatures whose logits overflow
def test_too_small_a_temperature_is_refused_by_the_config_and_the_kernel_world() -> None:
    with pytest.raises(ValueError, match=r"c.toml: world 'confident': temperature 1e-300 is too small"):
        SweepConfig.from_dict(config(temperatures=[1.0, 1e-300]), source="c.toml")
    w = LatentWorld.preset("confident", vocab_size=V)
    z, h = w.initial(np.uint64(5))
    for T in (1e-300, 1e-7):  # 1e-7 gave a NaN row (float32 logits of 1.5e9)
        with pytest.raises(ValueError, match="too small for world 'confident'"):
            w.target_probs(z, T)
        with pytest.raises(ValueError, match="too small"):
            w.kernel_world(T)
    T = w.min_temperature
    assert 1e-6 < T < 1e-2
    for row in (w.target_probs(z, T), w.draft_probs(z, h, T)):
        assert np.isfinite(row).all() and abs(row.sum() - 1) < 1e-9
    SweepConfig.from_dict(config(temperatures=[T * 1.01]))


def test_stationary_world_temperature_overflow_is_refused() -> None:
    w = StationaryWorld(np.array([0.5, 0.5]), np.array([0.25, 0.75]))
    with pytest.raises(ValueError, match="temperature 1e-310 is too small"):
        w.target_probs(temperature=1e-310)
    np.testing.assert_allclose(w.draft_probs(temperature=0.5), [0.1, 0.9])


# ---- item 10: one seed rule for configs, the CLI and the engine
@pytest.mark.parametrize("seed", [18446744073709551616, 2**63, -1])
def test_config_seed_out_of_range(seed: int) -> None:
    with pytest.raises(ValueError, match=r"c.toml: seed must be an integer in \[0, "):
        SweepConfig.from_dict(config(seed=seed), source="c.toml")


@pytest.mark.parametrize("seed", ["99999999999999999999999", "-1"])
def test_world_stats_seed_out_of_range(capsys, seed: str) -> None:
    assert main(["world-stats", "confident", "--seed", seed]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxspec: error: --seed must be an integer in [0, "), err


def test_engine_and_world_seed_out_of_range() -> None:
    w = StationaryWorld(np.array([0.5, 0.5]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, "):
        run(w, parse_tree("chain:2"), "r1", n_sequences=1, seed=2**64)
    for seed in (2**64, -1):
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, "):
            LatentParams(seed=seed)
