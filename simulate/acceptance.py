"""Sequoia's positional acceptance vector, measured (SPEC section 5).

:func:`measure_positional_acceptance` decodes a world with a one-level tree,
as Sequoia measures it; :func:`trace_positional_acceptance` computes it
exactly on a captured trace. The trees built from the vector live in
:mod:`core.trees.sequoia`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from relaxspec.core.trees.policies import StaticTree
from relaxspec.core.trees.selection import ChildSelector
from relaxspec.theory.verification import Verification

SEQUOIA_MEASUREMENT: Mapping[str, int] = MappingProxyType({"width": 16, "n_sequences": 8, "seq_len": 64})
"""How a Sequoia-type tree's acceptance vector is measured unless told otherwise (a sweep's ``[sequoia]``
table, ``simulate.inputs.as_tree``): children ranked at the root, sequences, tokens per sequence."""


def measure_positional_acceptance(world, verification: Verification | str = "r1", *, width: int = 16,
                                  n_sequences: int = 16, seq_len: int = 64, temperature: float = 1.0,
                                  seed: int = 0, threads: int | None = None,
                                  selector: ChildSelector | None = None) -> np.ndarray:
    """Sequoia's measurement: decode with a one-level tree of ``width`` children, verified with
    ``verification`` (a value or its spec string), and return, per rank i, the fraction of steps in which
    the rank-i child was accepted.

    ``selector`` ranks the children (default: by q); with a latent-aware one
    the vector is the relaxation-aware tree's (issue 7)."""
    from relaxspec.simulate.engine import run

    if int(width) != width or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    star = StaticTree([[i] for i in range(int(width))], selector=selector)
    res = run(world, star, verification, n_sequences=n_sequences, seq_len=seq_len, temperature=temperature,
              seed=seed, threads=threads)
    counts = np.bincount(res.root_choice[res.root_choice >= 0], minlength=int(width))
    return counts / res.n_steps


def trace_positional_acceptance(trace, verification: Verification | str = "r1", *, width: int = 16,
                                selector: ChildSelector | None = None) -> np.ndarray:
    """Sequoia's positional acceptance measured on a captured trace (a ``TraceWorld``), exactly.

    On every recorded speculative step (trees with drafts; the prefill and
    autoregressive steps are skipped) the root's children are the
    ``width`` children the selector picks from the recorded draft
    distribution (default: the top-``width`` of q), and P(rank i accepted)
    is theory's exact ``node_outcome`` on the recorded target distribution
    under ``verification`` (rule r1 or r3, relaxed or not); the vector is the
    mean over steps (ranks a step could not fill count 0)."""
    from relaxspec.simulate.worlds import TraceWorld
    from relaxspec.theory.verify import node_outcome

    if not isinstance(trace, TraceWorld):
        raise ValueError(f"trace must be a relaxspec.simulate.TraceWorld, got {type(trace).__name__}")
    verification = Verification.parse(verification)
    if verification.samples_drafts:
        raise ValueError(f"the trace measurement is exact for rules r1 and r3, got {verification.rule!r}")
    if int(width) != width or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    relax = verification.relax
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
        out = node_outcome(p, kids, verification, neighbours=nb)
        total[:kids.size] += out.accept_probs
        steps += 1
    if steps == 0:
        raise ValueError("the trace holds no speculative steps")
    return total / steps
