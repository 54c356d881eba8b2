"""R1's residual exhaustion is decided on the residual itself (issue 19's deviation): the official
variant's k + 1-neighbour zeroing can remove every token with mass while the mass tracked by subtraction
stays ~1e-16; the walk must then reset to the uniform residual in theory and in the Numba kernel alike."""

from __future__ import annotations

import numpy as np

from relaxspec.simulate.verify import verify_step
from relaxspec.theory import Relax, Tree, node_outcome, sample_step
from relaxspec.theory.neighbours import neighbour_table
from relaxspec.theory.stages import EXHAUSTION_CHECK, r1_reject, r1_stage
from relaxspec.theory.verification import Verification


def random_nodes(n: int, seed: int = 7):
    """Random official-variant R1 nodes with V <= 40 (the issue's search space)."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        V = int(rng.integers(5, 41))
        p = rng.dirichlet(np.full(V, 0.3))
        k = int(rng.integers(1, V - 1))
        relax = Relax.additive(k, float(rng.uniform(0.05, 0.6)))
        nb = neighbour_table(rng.standard_normal((V, 3)), k_max=V - 1)
        kids = rng.choice(V, size=min(4, V), replace=False)
        yield p, relax, nb, kids


def walk_masses(p, kids, nb, relax):
    """(tracked Z, true residual sum) after each rejection of the official R1 walk."""
    r, Z, out = p.copy(), 1.0, []
    for c in kids:
        _, zeroed, _, _ = r1_stage(r, Z, int(c), nb[c], relax, "official")
        Z = r1_reject(r, Z, zeroed)
        out.append((Z, float(r.sum())))
    return out


def test_exhaustion_resets_to_uniform_on_random_nodes() -> None:
    hits = 0
    for p, relax, nb, kids in random_nodes(400):
        for Z, true in walk_masses(p, kids, nb, relax):
            assert Z > EXHAUSTION_CHECK or Z == true  # a small tracked mass is the residual's own sum
            assert Z > 0.0 and true > 0.0  # never an empty residual carried on
            hits += Z == p.size  # reset to uniform at least once somewhere
        out = node_outcome(p, kids, Verification("r1", relax, "official"), neighbours=nb)
        assert abs(out.emitted.sum() - 1.0) < 1e-9
    assert hits > 0  # the search does reach exhausted residuals


def test_kernel_takes_theorys_decisions_on_exhausted_residuals() -> None:
    rng = np.random.default_rng(1)
    checked = 0
    for p, relax, nb, kids in random_nodes(150, seed=11):
        m = kids.size
        tree = Tree(np.array([-1] + [0] * m), np.array([0, *kids]))
        dists = np.tile(p, (m + 1, 1))
        for _ in range(5):
            ua, ud = rng.random(m + 1), rng.random(m + 1)
            kw = dict(verification=Verification("r1", relax, "official"), neighbours=nb.astype(np.int64))
            assert sample_step(tree, dists, ua, ud, **kw) == verify_step(tree, dists, ua, ud, **kw)
            checked += 1
    assert checked == 750
