"""Re-verify a captured trace (``relaxspec replay``) and score other rules on its logits
(``relaxspec rescore``) without the model.

Replay recomputes p and q from the stored logits exactly as the decoder did
(``Sampling.probs`` on the stored float16/float32 values) and feeds the
recorded uniforms to theory (``theory.rule_step.sample_rule_step``:
``theory.sample_step``, R4's ``theory.traversal`` or the budget's
``theory.budget``) and to ``simulate.verify_step`` (the Numba twin with the
same signature); every recorded outcome must come back. A budget trace is
verified with the neighbour table stored in it.
A boosted trace (its header's ``verification``: GSD, Cool-SD) is verified with its boost and,
for GSD, the embedding table stored in the trace. A Jacobi trace (tree
``jacobi:L[,fresh]``) is replayed window by window: each window is rebuilt from
the previous step's stored target logits, its uniforms and the step's
``u_fresh`` (``reference.jacobi.Kept``) and must equal the recorded drafts and
q logits, and ``theory.jacobi_sampler.verify_window`` must return the recorded
outcome (``theory.rule_step.sample_window_step`` for R4 or the budget), as
must ``simulate.verify_step`` on the window's chain (a window is rule R2 or R4
on a chain: ``theory.jacobi_sampler``).
Traces of coupled and SJD-PAC windows and of VVS (SPEC 10) replay through
``reference.replay_frontier``.
Rescoring computes, per step, the exact expected tokens per step of another
rule on the recorded tree with ``theory.rule_step.rule_step_expectation`` (for
R2 and R4 conditionally on the recorded draw order of each node's children,
since exact R2 averaging over draws enumerates only tiny vocabularies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from relaxspec.core.trace import Trace, TraceStep, read_trace, trace_neighbours
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.skips import VvsTree
from relaxspec.core.trees.windows import CoupledWindow, PacWindow, parse_jacobi, parse_pac
from relaxspec.reference.jacobi import Kept
from relaxspec.reference.replay_frontier import replay_columns, replay_vvs
from relaxspec.theory.rule_step import (
    rule_step_expectation,
    sample_rule_step,
    sample_window_step,
    step_neighbours,
)
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.verification import Verification

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
    engines: dict[str, Verifier] = {"theory": sample_rule_step}
    missing = []
    try:
        from relaxspec.simulate import verify_step  # type: ignore[attr-defined]

        engines["simulate"] = verify_step
    except ImportError:
        missing.append("simulate")
    return engines, missing


def trace_window(trace: Trace) -> JacobiWindow | None:
    """The window a trace was decoded with (its header's tree ``jacobi:L[,fresh]``, a coupled
    ``jacobi:..,coupled=..`` or ``pac:..``), else None."""
    spec = trace.header.tree
    kind, _, args = spec.partition(":")
    try:
        return parse_jacobi(args) if kind == "jacobi" else parse_pac(args) if kind == "pac" else None
    except ValueError as err:
        raise ValueError(f"trace {trace.path}: bad Jacobi window {spec!r}: {err}") from None


def trace_vvs(trace: Trace) -> VvsTree | None:
    """The VVS tree a trace was decoded with (its header's tree ``vvs:..``), else None."""
    spec = trace.header.tree
    if spec.partition(":")[0] != "vvs":
        return None
    try:
        return VvsTree.parse(spec.partition(":")[2])
    except ValueError as err:
        raise ValueError(f"trace {trace.path}: bad VVS tree {spec!r}: {err}") from None


def replay(path: str | Path, *, require_simulate: bool = False) -> ReplayReport:
    """Re-verify every step of the trace at ``path`` with every engine."""
    trace = read_trace(path)
    trace.check_has_steps()
    h = trace.header
    engines, missing = verifiers()
    if require_simulate and missing:
        raise ValueError("relaxspec.simulate.verify_step is not available in this installation")
    window, skips = trace_window(trace), trace_vvs(trace)
    if isinstance(window, CoupledWindow | PacWindow) or skips is not None:  # SPEC 10: replay_frontier
        report = ReplayReport(engines=list(engines), missing_engines=missing)
        if skips is not None:
            replay_vvs(trace, skips, engines, report)
        else:
            replay_columns(trace, window, engines, report)
        return report
    if window is not None:
        return replay_windows(trace, window, engines, missing)
    v = h.verification
    nb = step_neighbours(trace.neighbours, h.vocab_size, v)
    report = ReplayReport(engines=list(engines), missing_engines=missing)
    for step in trace.steps():
        p, q = step_distributions(trace, step)
        tree = step.tree
        for name, verify in engines.items():
            got_path, got_bonus = verify(tree, p, step.u_accept, step.u_draw, v, neighbours=nb, q_dists=q,
                                         emb=trace.embedding)
            if list(np.asarray(got_path)) != step.path.tolist() or int(got_bonus) != step.bonus:
                report.mismatches.append(
                    f"{name}: sequence {step.sequence} position {step.position}: recorded path "
                    f"{step.path.tolist()} bonus {step.bonus}, got {list(map(int, got_path))} "
                    f"bonus {got_bonus}")
        report.steps += 1
    return report


def replay_windows(trace: Trace, window: JacobiWindow, engines: dict[str, Verifier] | None = None,
                   missing: list[str] | None = None) -> ReplayReport:
    """Replay a Jacobi trace: rebuild every window from the trace and verify it again with theory's
    ``verify_window`` and the tree ``engines`` other than theory's (module docstring)."""
    h, v = trace.header, trace.header.verification  # a window's verification is unrelaxed (SPEC 9.1)
    others = {k: e for k, e in (engines or {}).items() if k != "theory"}
    report = ReplayReport(engines=["theory", *others], missing_engines=list(missing or []))
    nb = step_neighbours(trace.neighbours, h.vocab_size, v)
    kept, sequence = Kept.nothing(h.vocab_size, h.logits_dtype), None
    for step in trace.steps():
        if step.sequence != sequence:
            kept, sequence = Kept.nothing(h.vocab_size, h.logits_dtype), step.sequence
        where = f"sequence {step.sequence} position {step.position}"
        p, q = step_distributions(trace, step)
        for problem in (_window_problem(step, kept, window), _outcome_problem(trace, step, p, q, nb)):
            if problem:
                report.mismatches.append(f"theory: {where}: {problem}")
        for name, verify in others.items():
            got_path, got_bonus = verify(step.tree, p, step.u_accept, step.u_draw, v, neighbours=nb,
                                         q_dists=q, emb=trace.embedding)
            if list(np.asarray(got_path)) != step.path.tolist() or int(got_bonus) != step.bonus:
                report.mismatches.append(f"{name}: {where}: recorded path {step.path.tolist()} bonus "
                                         f"{step.bonus}, got {list(map(int, got_path))} bonus {got_bonus}")
        kept = Kept.after(p, step.target_logits, step.path.size - 1, step.u_draw, step.bonus)
        report.steps += 1
    return report


def _window_problem(step: TraceStep, kept: Kept, window: JacobiWindow) -> str | None:
    """Why a recorded window is not the one the previous step leaves (None when it is)."""
    m = step.parents.size - 1
    if not np.array_equal(step.parents, np.arange(-1, m)):
        return f"a Jacobi step is a chain, got parents {step.parents.tolist()}"
    if step.u_fresh.size != window.window:
        return f"{step.u_fresh.size} fresh uniforms recorded, the window {window} needs {window.window}"
    drafts, q_logits = kept.window(window.window, window.fresh, step.u_fresh)
    if not np.array_equal(step.tokens[1:], drafts[:m]):
        return (f"recorded window {step.tokens[1:].tolist()} is not the one the previous step leaves, "
                f"{drafts[:m].tolist()}")
    if not np.array_equal(step.draft_logits[:m], q_logits[:m]):
        return "the recorded q logits of the window are not the ones the previous step leaves"
    return None


def _outcome_problem(trace: Trace, step: TraceStep, p: np.ndarray, q: np.ndarray, nb: np.ndarray
                     ) -> str | None:
    """Why theory's window verifier (``theory.rule_step.sample_window_step``) does not return a step's
    recorded outcome (or None)."""
    m = step.parents.size - 1
    h = trace.header
    try:
        if m:
            accepted, bonus = sample_window_step(p, step.tokens[1:], q[:m], step.u_accept[1:], step.u_draw,
                                                 h.verification, neighbours=nb, emb=trace.embedding)
        else:  # the last token: a lone root, as sample_step draws it
            accepted, bonus = 0, draw_token(p[0], float(step.u_draw[0]))
    except ValueError as err:
        return f"the recorded window cannot be verified: {err}"
    if accepted != step.path.size - 1 or bonus != step.bonus:
        return (f"recorded path {step.path.tolist()} bonus {step.bonus}, got {list(range(accepted + 1))} "
                f"bonus {bonus}")
    return None


def rescore_steps(trace: Trace, verification: Verification | str,
                  neighbours: np.ndarray | str | Path | None = None) -> Iterator[tuple[TraceStep, float]]:
    """Exact E[tokens per step] of an unboosted ``verification`` (a value or its spec) on every recorded
    step (R2 and R4 given the recorded draw orders).

    ``neighbours`` is a table or a ``.npy`` file of one (default: the trace's own;
    :func:`core.trace.trace_neighbours`).

    Raises
    ------
    ValueError
        For a boost, rule r2 or r4 on a trace whose children were not drawn from q (see
        :func:`check_rescore_r2`), or a relaxation with no neighbour table
        (neither ``neighbours`` nor the trace's own).
    """
    verification = Verification.parse(verification)
    if not verification.boost.is_none:
        raise ValueError(f"rescore scores unboosted rules, got {verification}")
    rule, relax = verification.rule, verification.relax
    h = trace.header
    if verification.samples_drafts:
        check_rescore_r2(trace, rule)
    nb = step_neighbours(trace_neighbours(trace, relax, neighbours), h.vocab_size, verification)
    for step in trace.steps():
        if step.skipped:  # a VVS skip step verified nothing (and holds no target rows off its path)
            continue
        p, q = step_distributions(trace, step)
        yield step, rule_step_expectation(step.tree, p, verification, neighbours=nb, q_dists=q).tokens


def check_rescore_r2(trace: Trace, rule: str = "r2") -> None:
    """Refuse rule r2 (or r4) on a trace whose tree children were not drawn from q without replacement.

    R2 and R4 verify drafts sampled from q without replacement; the decoder draws a
    node's children only when it verifies with r2 or r4 (which it allows only on
    trees that support draws: static trees ranked by q, ``TreePolicy.supports_draws``),
    and otherwise ranks them (top-k of q, or a latent-aware order). Whether a
    trace's children were drawn is therefore its header's rule.
    """
    h = trace.header
    if not h.verification.samples_drafts:
        raise ValueError(
            f"rule {rule} verifies drafts sampled from q without replacement, but trace {trace.path} was "
            f"recorded with {h.verification} on tree {h.tree!r}: its children were ranked (top-k), not "
            f"sampled, so {rule} cannot score them. Rescore it with r1 or r3, or record a static-tree trace "
            "with rule r2 (relaxspec generate --tree static:naive_extend_57 --verification r2 --trace)")


def rescore(path: str | Path, verification: Verification | str,
            neighbours: np.ndarray | str | Path | None = None) -> dict[str, float]:
    """Mean recorded and exact rescored tokens per step over a trace's speculative steps, under an
    unboosted ``verification`` (a value or its spec string).

    Steps whose tree is only the root (prefill, last token) are left out of both means.
    """
    trace = read_trace(path)
    trace.check_has_steps()
    recorded, exact = [], []
    for step, e in rescore_steps(trace, verification, neighbours):
        if step.parents.size > 1:
            recorded.append(step.tokens_emitted)
            exact.append(e)
    if not exact:
        raise ValueError(f"trace {path} has no speculative steps (every tree is a lone root)")
    return {"steps": len(exact), "recorded_tokens_per_step": float(np.mean(recorded)),
            "exact_tokens_per_step": float(np.mean(exact))}
