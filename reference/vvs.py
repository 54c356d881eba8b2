"""The distortion of VVS's skip steps (SPEC 10.3) measured on a trace, after the fact.

A skip step emits tokens no target forward tested: its drafts d_1..d_gamma from a uniformly drawn path
of its tree and a bonus drawn from the stale row. Given the tree, the law of its i-th token after the
tokens h it emitted before it is the mixture ``theory.vvs.skip_laws`` gives; the target's law after h is
what the next target forward computes at the skipped tokens (it runs them to fill its cache), stored in
the skip step's record at its path's nodes (``core.trace_step``). :func:`skip_token_tvs` is the TV of
each emitted token's law to the target's: ``theory.vvs.skip_step_tv``'s value at the emitted prefixes
(``theory.vvs.skip_token_tvs``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from relaxspec.core.trace import Sampling, Trace, TraceStep
from relaxspec.theory import vvs


def skip_token_tvs(step: TraceStep, sampling: Sampling) -> np.ndarray:
    """The exact TV of each token a skip step emitted (its drafts, then the bonus), from its record:
    ``sampling`` turns the stored rows (the stale row, the target rows at the path's nodes) into laws,
    as the decoder did."""
    if not step.skipped:
        raise ValueError(f"step (sequence {step.sequence}, position {step.position}) is not a skip step")
    stale = sampling.probs(step.stale_logits.astype(np.float64))[0]
    rows = sampling.probs(step.target_logits[step.path].astype(np.float64))
    emitted = np.append(step.tokens[step.path[1:]], step.bonus)
    return vvs.skip_token_tvs(step.parents, step.tokens, stale, step.mean_accepted, emitted, rows)


def trace_skip_tvs(trace: Trace) -> Iterator[tuple[TraceStep, np.ndarray]]:
    """Every skip step of a trace with its tokens' TVs (:func:`skip_token_tvs`)."""
    for step in trace.steps():
        if step.skipped:
            yield step, skip_token_tvs(step, trace.header.target_sampling)


__all__ = ["skip_token_tvs", "trace_skip_tvs"]
