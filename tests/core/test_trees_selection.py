"""Child selection (issue 7): NumPy oracle = Numba kernel on fixed rows, q~ is theory's proximity mass,
k = 0 is EAGLE-2's ranking, diverse siblings never overlap, the walk scores R1's acceptance on q,
bad input is named."""

from __future__ import annotations

import numpy as np
import pytest

from relaxspec.core.trees.selection import SELECTION_MODES, ChildSelector, top_ranked
from relaxspec.simulate.latent_kernels import select_children
from relaxspec.simulate.world_kernels import NCH, chunk_maxima
from relaxspec.simulate.worlds import StationaryWorld
from relaxspec.theory import Relax, neighbour_table, node_outcome, proximity_set
from relaxspec.theory.verification import Verification

V = 60
RELAXES = [Relax.additive(12, 0.1), Relax.additive(40, 0.3), Relax.multiplicative(12, 3.0),
           Relax.multiplicative(40, 1.5)]


@pytest.fixture(scope="module")
def table():
    rng = np.random.default_rng(11)
    return neighbour_table(rng.standard_normal((V, 2)), k_max=V - 1)


def rows(n: int = 12) -> list[np.ndarray]:
    """Random draft rows, flat and peaked, plus rows with ties (ranked by lowest id)."""
    rng = np.random.default_rng(3)
    out = [rng.dirichlet(np.full(V, a)) for a in (0.1, 0.5, 3.0) for _ in range(n // 3)]
    tied = np.repeat(rng.dirichlet(np.ones(6)), 10)
    out += [tied / tied.sum(), np.full(V, 1.0 / V)]
    return out


def kernel_select(sel: ChildSelector, q: np.ndarray, m: int, mark: np.ndarray | None = None):
    """The Numba selection on row q (a stationary world's row, as the builders read it)."""
    W = StationaryWorld(q, q).kernel_world(1.0)
    cmaxs = np.empty((1, NCH))
    chunk_maxima(W[7], cmaxs[0])
    mark = np.zeros(q.size + 1, dtype=np.int64) if mark is None else mark
    out, vals = np.empty(m, dtype=np.int64), np.empty(m)
    got = select_children(W, np.zeros((1, 1), dtype=np.float32), cmaxs, np.ones(1), 0, m, sel.kernel_args(),
                          mark, out, vals)
    return out[:got], vals[:got]


@pytest.mark.parametrize("mode", SELECTION_MODES)
def test_kernel_selection_equals_numpy_oracle(table, mode):
    mark = np.zeros(V + 1, dtype=np.int64)  # reused across calls, as the engine does (epochs)
    for relax in RELAXES + [Relax.none()]:
        for pool in (1, 5, 40, 200):
            sel = ChildSelector(mode, relax, table, pool)
            for q in rows():
                for m in (1, 4, 10):
                    kids, vals = sel.select(q, m)
                    got_kids, got_vals = kernel_select(sel, q, m, mark)
                    np.testing.assert_array_equal(kids, got_kids)
                    np.testing.assert_array_equal(vals, got_vals)


def test_latent_value_is_theory_proximity_mass(table):
    for relax in RELAXES:
        sel = ChildSelector("latent", relax, table, pool=V)
        for q in rows():
            kids, vals = sel.select(q, 10)
            for x, v in zip(kids, vals, strict=True):
                members, mass = proximity_set(q, int(x), table, relax)
                assert v == mass
                np.testing.assert_array_equal(sel.proximity_set(q, int(x)), members)
            # the m largest q~ of the pool (ties by pool order: higher q, then lower id)
            cand = top_ranked(q, V)
            qt = np.array([proximity_set(q, int(x), table, relax)[1] for x in cand])
            np.testing.assert_array_equal(kids, cand[np.argsort(-qt, kind="stable")[:10]])


@pytest.mark.parametrize("mode", SELECTION_MODES)
def test_no_merging_is_eagle2_ranking(table, mode):
    """k = 0 or Relax.none(): q~ = q bit for bit, so every mode picks the top-m of q with values q."""
    for relax in (Relax.none(), Relax.additive(0, 0.2), Relax.multiplicative(0, 4.0)):
        sel = ChildSelector(mode, relax, table, pool=7)
        for q in rows():
            for m in (1, 3, 10):
                kids, vals = sel.select(q, m)
                np.testing.assert_array_equal(kids, top_ranked(q, m))
                np.testing.assert_array_equal(vals, q[top_ranked(q, m)])
                got_kids, got_vals = kernel_select(sel, q, m)
                np.testing.assert_array_equal(got_kids, kids)
                np.testing.assert_array_equal(got_vals, vals)


def test_diverse_siblings_never_overlap(table):
    seen_overlap = 0
    for relax in RELAXES:
        plain = ChildSelector("latent", relax, table, pool=V)
        diverse = ChildSelector("diverse", relax, table, pool=V)
        for q in rows():
            kids, vals = diverse.select(q, 10)
            sets = [set(diverse.proximity_set(q, int(x)).tolist()) for x in kids]
            for i in range(len(sets)):
                for j in range(i):
                    assert not sets[i] & sets[j]
            assert diverse.overlapping(q, kids) == 0
            assert np.all(np.diff(vals) <= 0)  # greedy in q~ order
            seen_overlap += plain.overlapping(q, plain.select(q, 10)[0])
    assert seen_overlap > 0  # plain top-k does overlap on these rows: the test has teeth


def test_walk_values_are_r1_acceptance_on_q(table):
    """The walk's value of child i is P(c_i accepted) of theory's exact R1 with target q; no child lies in
    an earlier child's proximity set (formed on the walk's residual)."""
    for relax in RELAXES:
        sel = ChildSelector("walk", relax, table, pool=30)
        for q in rows():
            kids, vals = sel.select(q, 8)
            out = node_outcome(q, kids, Verification("r1", relax), neighbours=table)
            np.testing.assert_allclose(vals, out.accept_probs, rtol=1e-12, atol=1e-15)
            assert np.all(q[kids] > 0)


def test_overlap_example():
    """Tokens at 0, 1, 2.5, 4.5 on a line, q = (0.4, 0.3, 0.2, 0.1), additive k = 1, delta = 0.35.
    Nearest neighbours: 0 -> 1, 1 -> 0, 2 -> 1, 3 -> 2. q~ = (0.7, 0.3, 0.5, 0.3): plain top-2 is
    (0, 2), whose sets {0, 1} and {2, 1} overlap; diverse skips 2 and 1 and takes 3 ({3, 2}); the walk
    keeps 2 (its token is not absorbed by A(0) = {0, 1}) at value r(2) = 0.2: its neighbour 1 is gone."""
    nb = neighbour_table(np.array([[0.0], [1.0], [2.5], [4.5]]), k_max=3)
    q = np.array([0.4, 0.3, 0.2, 0.1])
    relax = Relax.additive(1, 0.35)
    plain = ChildSelector("latent", relax, nb)
    kids, vals = plain.select(q, 2)
    assert kids.tolist() == [0, 2] and vals.tolist() == [0.4 + 0.3, 0.2 + 0.3]
    assert plain.overlapping(q, kids) == 1
    div, dv = ChildSelector("diverse", relax, nb).select(q, 2)
    assert div.tolist() == [0, 3] and dv.tolist() == [0.4 + 0.3, 0.1 + 0.2]
    walk, wv = ChildSelector("walk", relax, nb).select(q, 2)
    assert walk.tolist() == [0, 2] and wv.tolist() == [0.4 + 0.3, 0.2]


def test_bad_selection_input(table):
    relax = Relax.additive(5, 0.1)
    with pytest.raises(ValueError, match="selection mode"):
        ChildSelector("best", relax, table)
    with pytest.raises(ValueError, match="pool"):
        ChildSelector("latent", relax, table, pool=0)
    with pytest.raises(ValueError, match="relaxspec.theory.Relax"):
        ChildSelector("latent", "additive", table)
    with pytest.raises(ValueError, match="needs the neighbour table"):
        ChildSelector("latent", relax, None)
    with pytest.raises(ValueError, match="integer array"):
        ChildSelector("diverse", relax, table.astype(np.float64))
    with pytest.raises(ValueError, match="columns"):
        ChildSelector("walk", Relax.additive(80, 0.1), table)
    bad = table.astype(np.int64)
    bad[3, 2] = V
    with pytest.raises(ValueError, match="outside"):
        ChildSelector("latent", relax, bad)
    with pytest.raises(ValueError, match="V = 10"):
        ChildSelector("latent", relax, table).select(np.full(10, 0.1), 3)
    ChildSelector("q", relax, None)  # ranking by q needs no table
    ChildSelector("latent", Relax.none(), None)
