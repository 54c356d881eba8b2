"""Re-verify a captured trace (``relaxspec replay``) and score other rules on its logits
(``relaxspec rescore``) without the model.

Replay recomputes p and q from the stored logits exactly as the decoder did
(``Sampling.probs`` on the stored float16/float32 values) and feeds the
recorded uniforms to ``theory.sample_step`` and to ``simulate.verify_step``
(the Numba twin with the same signature); every recorded outcome must come back.
Rescoring computes, per step, the exact expected tokens per step of another
rule on the recorded tree with ``theory.step_expectation`` (for R2
conditionally on the recorded draw order of each node's children, since exact
R2 averaging over draws enumerates only tiny vocabularies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.trace import Trace, TraceStep, read_trace, trace_neighbours
from theory.relax import Relax
from theory.rules import check_rule, neighbour_rows
from theory.tree import sample_step, step_expectation

Verifier = Callable[..., tuple]


@dataclass
class ReplayReport:
    """Steps replayed per engine and the steps whose outcome differed."""

    steps: int = 0
    engines: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    missing_engines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def step_distributions(trace: Trace, step: TraceStep) -> tuple[np.ndarray, np.ndarray]:
    """p and q (float64, one row per node) from a step's stored logits."""
    h = trace.header
    p = h.target_sampling.probs(step.target_logits.astype(np.float64))
    q = h.draft_sampling.probs(step.draft_logits.astype(np.float64))
    return p, q


def verifiers() -> tuple[dict[str, Verifier], list[str]]:
    """The verification engines available: theory always, simulate's Numba twin when present."""
    engines: dict[str, Verifier] = {"theory": sample_step}
    missing = []
    try:
        from simulate import verify_step  # type: ignore[attr-defined]

        engines["simulate"] = verify_step
    except ImportError:
        missing.append("simulate")
    return engines, missing


def replay(path: str | Path, *, require_simulate: bool = False) -> ReplayReport:
    """Re-verify every step of the trace at ``path`` with every engine."""
    trace = read_trace(path)
    h = trace.header
    relax = h.relaxation
    engines, missing = verifiers()
    if require_simulate and missing:
        raise ValueError("simulate.verify_step is not available in this installation")
    nb = neighbour_rows(trace.neighbours, h.vocab_size, relax, h.variant)
    report = ReplayReport(engines=list(engines), missing_engines=missing)
    for step in trace.steps():
        p, q = step_distributions(trace, step)
        tree = step.tree
        for name, verify in engines.items():
            got_path, got_bonus = verify(tree, p, step.u_accept, step.u_draw, rule=h.rule, relax=relax,
                                         neighbours=nb, q_dists=q, variant=h.variant)
            if list(np.asarray(got_path)) != step.path.tolist() or int(got_bonus) != step.bonus:
                report.mismatches.append(
                    f"{name}: sequence {step.sequence} position {step.position}: recorded path "
                    f"{step.path.tolist()} bonus {step.bonus}, got {list(map(int, got_path))} "
                    f"bonus {got_bonus}")
        report.steps += 1
    return report


def rescore_steps(trace: Trace, rule: str, relax: Relax, variant: str = "principled",
                  neighbours: np.ndarray | str | Path | None = None) -> Iterator[tuple[TraceStep, float]]:
    """Exact E[tokens per step] of (rule, relax, variant) on every recorded step.

    ``neighbours`` is a table or a ``.npy`` file of one (default: the trace's own;
    :func:`core.trace.trace_neighbours`).

    Raises
    ------
    ValueError
        For rule r2 on a trace whose children were not drawn from q (see
        :func:`check_rescore_r2`), or a relaxation with no neighbour table
        (neither ``neighbours`` nor the trace's own).
    """
    check_rule(rule, variant)
    h = trace.header
    if rule == "r2":
        check_rescore_r2(trace)
    nb = neighbour_rows(trace_neighbours(trace, relax, neighbours), h.vocab_size, relax, variant)
    for step in trace.steps():
        p, q = step_distributions(trace, step)
        yield step, step_expectation(step.tree, p, rule=rule, relax=relax, neighbours=nb, q_dists=q,
                                     variant=variant).tokens


def check_rescore_r2(trace: Trace) -> None:
    """Refuse rule r2 on a trace whose tree children were not drawn from q without replacement.

    R2 verifies drafts sampled from q without replacement; the decoder draws a
    node's children only when it verifies with r2 (which it allows only on
    trees that support draws: static trees ranked by q, ``TreePolicy.supports_draws``),
    and otherwise ranks them (top-k of q, or a latent-aware order). Whether a
    trace's children were drawn is therefore its header's rule.
    """
    h = trace.header
    if h.rule != "r2":
        raise ValueError(
            f"rule r2 verifies drafts sampled from q without replacement, but trace {trace.path} was "
            f"recorded with rule {h.rule} on tree {h.tree!r}: its children were ranked (top-k), not sampled, "
            "so r2 cannot score them. Rescore it with r1 or r3, or record a static-tree trace with --rule r2 "
            "(relaxspec generate --tree static:naive_extend_57 --rule r2 --trace)")


def rescore(path: str | Path, rule: str, relax: Relax, variant: str = "principled",
            neighbours: np.ndarray | str | Path | None = None) -> dict[str, float]:
    """Mean recorded and exact rescored tokens per step over a trace's speculative steps.

    Steps whose tree is only the root (prefill, last token) are left out of both means.
    """
    trace = read_trace(path)
    recorded, exact = [], []
    for step, e in rescore_steps(trace, rule, relax, variant, neighbours):
        if step.parents.size > 1:
            recorded.append(step.tokens_emitted)
            exact.append(e)
    if not exact:
        raise ValueError(f"trace {path} has no speculative steps (every tree is a lone root)")
    return {"steps": len(exact), "recorded_tokens_per_step": float(np.mean(recorded)),
            "exact_tokens_per_step": float(np.mean(exact))}
