"""Sequoia's optimal static tree (SPEC section 5) and its positional acceptance vector.

Given a positional acceptance vector a (a[i] = probability that the rank-i
child is the accepted one, given its parent was reached), the tree of at most
``n_nodes`` draft nodes and depth at most ``max_depth`` maximising
E[accepted drafts] = sum over nodes v of prod of a along v's path is found by
dynamic programming over (nodes, ranks, depth): with f[d][n] the best value
below a node with n nodes and depth budget d,

    g[d][i][n] = max(0, max_{1 <= s <= n} a[i] (1 + f[d-1][s-1]) + g[d][i+1][n-s]),
    f[d][n]    = g[d][0][n],

children ranks forming a prefix 0..m-1 (the rank-i child is only drafted with
ranks 0..i-1). Ties go to the smaller subtree for the earlier rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulate.latent import ChildSelector
from simulate.policies import StaticTree


@dataclass(frozen=True)
class SequoiaTable:
    """The dynamic program's tables for every node budget <= n and depth <= D (see the module docstring)."""

    acceptance: np.ndarray
    f: np.ndarray  # f[d][m]: best E[accepted drafts] with at most m nodes, depth at most d
    choice: np.ndarray  # choice[d][i][m]: subtree size given to rank i (0 = stop)

    def choices(self, n_nodes: int, max_depth: int) -> tuple[list[list[int]], float]:
        """Rank paths of the optimal tree with at most ``n_nodes`` nodes and depth at most ``max_depth``,
        and its value."""
        D, n = self.f.shape[0] - 1, self.f.shape[1] - 1
        if not (1 <= n_nodes <= n and 1 <= max_depth <= D):
            raise ValueError(f"the table covers n_nodes <= {n} and max_depth <= {D}")
        L = self.acceptance.size
        paths: list[list[int]] = []

        def emit(prefix: list[int], d: int, m: int) -> None:
            i = 0
            while m > 0 and i < L:
                s = int(self.choice[d][i][m])
                if s == 0:
                    break
                paths.append(prefix + [i])
                emit(prefix + [i], d - 1, s - 1)
                m -= s
                i += 1

        emit([], max_depth, n_nodes)
        return paths, float(self.f[max_depth][n_nodes])


def sequoia_table(acceptance: Sequence[float], n_nodes: int, max_depth: int) -> SequoiaTable:
    """Run the dynamic program for budgets up to ``n_nodes`` nodes and depth ``max_depth``."""
    a = np.asarray(acceptance, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise ValueError("acceptance_vector must be a non-empty 1-D array of probabilities in [0, 1]")
    if int(n_nodes) != n_nodes or n_nodes < 1:
        raise ValueError(f"n_nodes must be a positive integer, got {n_nodes!r}")
    if int(max_depth) != max_depth or max_depth < 1:
        raise ValueError(f"max_depth must be a positive integer, got {max_depth!r}")
    n, D, L = int(n_nodes), int(max_depth), a.size
    f = np.zeros((D + 1, n + 1))
    choice = np.zeros((D + 1, L + 1, n + 1), dtype=np.int64)
    for d in range(1, D + 1):
        g = np.zeros((L + 1, n + 1))
        for i in range(L - 1, -1, -1):
            for m in range(1, n + 1):
                s = np.arange(1, m + 1)
                vals = a[i] * (1.0 + f[d - 1][s - 1]) + g[i + 1][m - s]
                best = int(np.argmax(vals))
                if vals[best] > 0.0:
                    g[i][m] = vals[best]
                    choice[d][i][m] = best + 1
        f[d] = g[0]
    return SequoiaTable(a, f, choice)


def sequoia_choices(acceptance: Sequence[float], n_nodes: int,
                    max_depth: int) -> tuple[list[list[int]], float]:
    """Rank paths of the optimal tree and its value E[accepted drafts]."""
    return sequoia_table(acceptance, n_nodes, max_depth).choices(int(n_nodes), int(max_depth))


class SequoiaTree(StaticTree):
    """Sequoia's optimal static tree for a positional acceptance vector.

    ``selector`` ranks each node's children (default: by q, as Sequoia
    does); the acceptance vector should be measured with the same ranking
    (:func:`measure_positional_acceptance`)."""

    def __init__(self, acceptance_vector: Sequence[float], n_nodes: int, max_depth: int,
                 selector: ChildSelector | None = None) -> None:
        choices, value = sequoia_choices(acceptance_vector, n_nodes, max_depth)
        if not choices:
            raise ValueError("the acceptance vector is all zero: the optimal tree is empty")
        super().__init__(choices, name=f"sequoia-{n_nodes}-{max_depth}", selector=selector)
        self.acceptance_vector = np.asarray(acceptance_vector, dtype=np.float64)
        self.value = value


def measure_positional_acceptance(world, *, width: int = 16, rule: str = "r1", relax=None,
                                  variant: str = "principled", n_sequences: int = 16, seq_len: int = 64,
                                  temperature: float = 1.0, seed: int = 0, threads: int | None = None,
                                  selector: ChildSelector | None = None) -> np.ndarray:
    """Sequoia's measurement: decode with a one-level tree of ``width`` children and return, per rank i,
    the fraction of steps in which the rank-i child was accepted.

    ``selector`` ranks the children (default: by q); with a latent-aware one
    the vector is the relaxation-aware tree's (issue 7)."""
    from simulate.engine import run
    from theory.relax import Relax

    if int(width) != width or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    star = StaticTree([[i] for i in range(int(width))], name=f"star{int(width)}", selector=selector)
    res = run(world, star, rule=rule, relax=relax or Relax.none(), variant=variant, n_sequences=n_sequences,
              seq_len=seq_len, temperature=temperature, seed=seed, threads=threads)
    counts = np.bincount(res.root_choice[res.root_choice >= 0], minlength=int(width))
    return counts / res.n_steps


def trace_positional_acceptance(trace, *, width: int = 16, rule: str = "r1", relax=None,
                                variant: str = "principled", selector: ChildSelector | None = None
                                ) -> np.ndarray:
    """Sequoia's positional acceptance measured on a captured trace (a ``TraceWorld``), exactly.

    On every recorded speculative step (trees with drafts; the prefill and
    autoregressive steps are skipped) the root's children are the
    ``width`` children the selector picks from the recorded draft
    distribution (default: the top-``width`` of q), and P(rank i accepted)
    is theory's exact ``node_outcome`` on the recorded target distribution
    under ``rule`` (r1 or r3) and ``relax``; the vector is the mean over
    steps (ranks a step could not fill count 0)."""
    from simulate.worlds import TraceWorld
    from theory.relax import Relax
    from theory.verify import node_outcome

    if not isinstance(trace, TraceWorld):
        raise ValueError(f"trace must be a simulate.TraceWorld, got {type(trace).__name__}")
    if rule not in ("r1", "r3"):
        raise ValueError(f"the trace measurement is exact for rules r1 and r3, got {rule!r}")
    if int(width) != width or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    relax = relax or Relax.none()
    selector = selector or ChildSelector()
    nb = None if relax.is_exact else trace.neighbours(relax.k)
    h = trace.header
    total = np.zeros(int(width))
    steps = 0
    for step in trace.trace.steps():
        if step.tree.size < 2:
            continue
        p = h.target_sampling.probs(step.target_logits[:1].astype(np.float64))[0]
        q = h.draft_sampling.probs(step.draft_logits[:1].astype(np.float64))[0]
        kids, _ = selector.select(q, int(width))
        out = node_outcome(p, kids, rule=rule, relax=relax, neighbours=nb, variant=variant)
        total[:kids.size] += out.accept_probs
        steps += 1
    if steps == 0:
        raise ValueError("the trace holds no speculative steps")
    return total / steps
