"""How often sibling drafts' proximity sets overlap (issue 7), measured in a latent world."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.core.trees.selection import ChildSelector, top_ranked
from relaxspec.theory.relax import Relax


@dataclass(frozen=True)
class OverlapStats:
    """How often plain top-k siblings' proximity sets overlap (issue 7), over sampled tree nodes.

    Sets are formed independently per sibling with the relaxation, on q (what
    a drafter-side policy sees) and on p (the verifier's first-stage sets).
    ``*_nodes``: fraction of nodes where some sibling's set meets an earlier
    sibling's; ``*_siblings``: mean number of such siblings per node;
    ``absorbed_*``: mean number of siblings whose token lies in an earlier
    sibling's set (under R1 such a sibling has no residual mass of its own).
    """

    nodes: int
    top_k: int
    overlap_nodes_q: float
    overlap_siblings_q: float
    absorbed_q: float
    overlap_nodes_p: float
    overlap_siblings_p: float
    absorbed_p: float


def _overlaps(sel: ChildSelector, r: np.ndarray, kids: np.ndarray) -> tuple[int, int]:
    """(siblings whose set meets an earlier one's, siblings whose token lies in an earlier set), on r."""
    taken: set[int] = set()
    overlap = absorbed = 0
    for x in kids.tolist():
        members = set(sel.proximity_set(r, x).tolist())
        overlap += bool(members & taken)
        absorbed += x in taken
        taken |= members
    return overlap, absorbed


def sibling_overlap(world, relax: Relax, *, top_k: int = 10, n_sequences: int = 8, seq_len: int = 64,
                    seed: int = 0, temperature: float = 1.0) -> OverlapStats:
    """:class:`OverlapStats` of the top-``top_k`` children of q at the positions of sequences sampled from
    a world's target (``simulate.worlds.world_stats``'s sampling)."""
    from relaxspec.simulate.rng import stream_key, uniform
    from relaxspec.simulate.worlds import LatentWorld

    if not isinstance(world, LatentWorld):
        raise ValueError("sibling_overlap samples sequences of a LatentWorld")
    if relax.is_exact:
        raise ValueError("with a relaxation that merges nothing proximity sets are single tokens")
    for name, v in (("top_k", top_k), ("n_sequences", n_sequences), ("seq_len", seq_len)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    sel = ChildSelector("latent", relax, world.neighbours(relax.k))
    counts = np.zeros((0, 4))
    for s in range(int(n_sequences)):
        key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
        z, h = world.initial(key)
        for t in range(int(seq_len)):
            p = world.target_probs(z, temperature)
            q = world.draft_probs(z, h, temperature)
            kids = top_ranked(q, int(top_k))
            counts = np.vstack([counts, [*_overlaps(sel, q, kids), *_overlaps(sel, p, kids)]])
            x = min(int(np.searchsorted(np.cumsum(p), uniform(key, t) * p.sum(), side="right")), p.size - 1)
            z, h = world.advance(z, h, x)
    share = np.mean(counts > 0, axis=0)
    mean = counts.mean(axis=0)
    return OverlapStats(counts.shape[0], int(top_k), float(share[0]), float(mean[0]), float(mean[1]),
                        float(share[2]), float(mean[2]), float(mean[3]))
