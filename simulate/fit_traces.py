"""The fit's figures (:mod:`simulate.fit`) measured on captured traces (SPEC 7): any model the decoder
ran, the shipped ones or a LlamaGen checkpoint.

A trace records, at every step, the target's logits at every tree node. Along a sequence the accepted
path's nodes are the committed positions (the root at the step's ``position``, the accepted drafts after
it), so the laws along the committed tokens are known at every position, as a teacher-forced pass along
the model's own sample would give them (for a lossless rule the committed tokens are a sample of the
model). The target's figures (``top1``, ``top1_sd``, ``top1_lag1``, entropy, top-10 mass) are measured
along them. The drafter's figures come from the nodes where the drafter ran (a stored draft row that is
not constant: the decoder stores zeros where it never ran): ``accept_ranked``, ``draft_entropy`` and
1 - TV(p, q) at each step's root, ``accept_ranked_deep`` at the accepted depth-1 node (the drafter one
level below a root, at a committed position). Roots are not every position (a step starts after its
last accepted token), so the drafter's figures average over the positions the decoder started steps at;
an AR trace or a Jacobi window (no drafter) gives the target's figures only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from relaxspec.core.trace import Trace, read_trace
from relaxspec.core.trees.spec import tree_kind
from relaxspec.simulate.fit import DEEP_FIGURE, ranked_mass, top1_figures
from relaxspec.simulate.worlds import ambiguity
from relaxspec.theory.distributions import total_variation

WINDOW_KINDS = ("jacobi", "pac")  # trees whose draft rows are laws of kept samples, not a drafter's


@dataclass(frozen=True)
class TraceFigures:
    """The fit's figures measured on traces, with what they were measured on.

    Attributes
    ----------
    figures : figure name -> value (the target's always; the drafter's when it ran at some root;
        ``accept_ranked_deep`` when an accepted depth-1 node had a drafter row).
    vocab_size : V of the traces.
    sequences : sequences measured along (each a unit: its positions are correlated).
    positions : committed positions per sequence (every sequence has the same: the shortest's, the
        rest cut to it).
    roots : steps whose root had a drafter row (the drafter's figures' sample).
    deep_nodes : accepted depth-1 nodes with a drafter row (``accept_ranked_deep``'s sample).
    greedy : the traces decoded greedily (rule r3): their sequences are greedy paths.
    grid : the token grid width the headers record (``extra["grid"]``, LlamaGen's ``generate``), else 0.
    sources : the trace folders.
    stderr : figure -> standard error over sequences (each sequence's own mean, for the means).
    """

    figures: dict[str, float]
    vocab_size: int
    sequences: int
    positions: int
    roots: int
    deep_nodes: int
    greedy: bool
    grid: int
    sources: list[str]
    stderr: dict[str, float] = field(default_factory=dict)


def _draft_row_ran(logits: np.ndarray) -> bool:
    """Whether a stored draft row is the drafter's (the decoder stores a constant row where it never ran)."""
    finite = logits[np.isfinite(logits)]
    return finite.size > 0 and bool(finite.max() > finite.min())


def _sequences(trace: Trace) -> dict[int, list]:
    steps: dict[int, list] = {}
    for step in trace.steps():
        steps.setdefault(step.sequence, []).append(step)
    return {s: sorted(v, key=lambda st: st.position) for s, v in steps.items()}


def trace_figures(paths: Sequence[str | Path]) -> TraceFigures:
    """The fit's figures on the traces in ``paths`` (module docstring); a ``ValueError`` in one line for
    traces that cannot be fitted together (different models or vocabularies, greedy and sampled paths
    mixed), hold no steps, or have a gap in a sequence."""
    if not paths:
        raise ValueError("give at least one trace folder to fit")
    traces = [read_trace(p) for p in paths]
    first = traces[0].header
    for t in traces:
        t.check_has_steps()
        h = t.header
        if h.vocab_size != first.vocab_size or h.checkpoint_sha256 != first.checkpoint_sha256:
            raise ValueError(f"traces {traces[0].path} and {t.path} were captured from different models "
                             f"(V {first.vocab_size} and {h.vocab_size}, checkpoints "
                             f"{first.checkpoint_sha256[:12]} and {h.checkpoint_sha256[:12]}): fit one model")
        if h.verification.rule.is_greedy != first.verification.rule.is_greedy:
            raise ValueError(f"traces {traces[0].path} and {t.path} mix greedy (rule r3) and sampled "
                             "decoding: their sequences visit different states; fit them apart")
    top1, seq_means, root_rows, deep_rows = [], [], [], []
    unit = 0  # the sequence's index over every trace (a unit of the standard errors)
    for t in traces:
        h = t.header
        drafter = tree_kind(h.tree) not in WINDOW_KINDS
        for s, steps in _sequences(t).items():
            unit += 1
            rows, expect = [], steps[0].position
            if expect != 0:
                raise ValueError(f"trace {t.path}: sequence {s} starts at position {expect}, not 0 (a "
                                 "truncated sequence)")
            for step in steps:
                if step.position != expect:
                    raise ValueError(f"trace {t.path}: sequence {s} has a gap: a step at position "
                                     f"{step.position} after committed positions up to {expect - 1}")
                for node in step.path:
                    rows.append(ambiguity(h.target_sampling.probs(step.target_logits[node].astype(np.float64))))
                expect += step.path.size
                if drafter and _draft_row_ran(step.draft_logits[0]):
                    p = h.target_sampling.probs(step.target_logits[0].astype(np.float64))
                    q = h.draft_sampling.probs(step.draft_logits[0].astype(np.float64))
                    root_rows.append((unit, ranked_mass(p, q), ambiguity(q)[1], 1.0 - total_variation(p, q)))
                if drafter and step.path.size > 1 and _draft_row_ran(step.draft_logits[step.path[1]]):
                    node = step.path[1]
                    p = h.target_sampling.probs(step.target_logits[node].astype(np.float64))
                    q = h.draft_sampling.probs(step.draft_logits[node].astype(np.float64))
                    deep_rows.append(ranked_mass(p, q))
            rows_arr = np.array(rows)
            top1.append(rows_arr[:, 0])
            seq_means.append(rows_arr.mean(axis=0))
    length = min(len(x) for x in top1)
    if length < 2:
        raise ValueError(f"the traces' sequences must hold at least 2 committed positions, got {length}")
    t1 = np.array([x[:length] for x in top1])
    means = np.array(seq_means)
    figures = {**top1_figures(t1), "entropy": float(means[:, 1].mean()),
               "top10_mass": float(means[:, 2].mean())}
    n = len(top1)
    stderr = {"top1": float(t1.mean(axis=1).std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")}
    if root_rows:
        r = np.array(root_rows)
        for name, col in (("accept_ranked", 1), ("draft_entropy", 2), ("accept_sampled", 3)):
            figures[name] = float(r[:, col].mean())
        per_seq = np.array([r[r[:, 0] == s, 1].mean() for s in np.unique(r[:, 0])])
        if per_seq.size > 1:
            stderr["accept_ranked"] = float(per_seq.std(ddof=1) / np.sqrt(per_seq.size))
    if deep_rows:
        figures[DEEP_FIGURE] = float(np.mean(deep_rows))
    grid = first.extra.get("grid", 0)
    return TraceFigures(figures, first.vocab_size, n, length, len(root_rows), len(deep_rows),
                        first.verification.rule.is_greedy, int(grid) if isinstance(grid, int) else 0,
                        [str(t.path) for t in traces], stderr)
