"""Replaying traces of SPEC 10's methods (``relaxspec replay``): coupled and SJD-PAC windows window by
window, VVS step by step, every decision taken again from the trace alone.

A coupled or PAC trace (tree ``jacobi:L,coupled=..`` or ``pac:..``): each window is rebuilt from the
previous step's stored target rows at its spine, its outcome and its coupling uniforms, and the step's
fresh uniforms (:class:`reference.coupled.Columns`), and must equal the recorded columns, tree and draft
logits; ``theory.window_walk.walk_columns`` with the recorded uniforms must return the recorded path and
token (the bonus: the end node's ``u_draw``, or Gumbel-max with the sequence's noise); where no column
repeats a candidate the walk is R2 on the tree, and ``theory``'s and ``simulate``'s tree step must return
them too (the bonus checked unless a Gumbel bonus).

A VVS trace (tree ``vvs:..``): the schedule must skip exactly the recorded skip steps (``dynamic``: with
the code table the trace stores); a verify step is replayed as any tree step (rule r1); a skip step's
stale row must be the last verify step's row where it drew its last token, its Lbar the running mean
accepted length, its path ``theory.vvs.skip_path`` of its leaf uniform and its bonus the stale row's draw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from relaxspec.core.trace import Trace, TraceStep
from relaxspec.core.trees.skips import VvsTree
from relaxspec.core.trees.windows import CoupledWindow, PacWindow
from relaxspec.reference.coupled import Columns, WindowPlan, column_array, gumbel_max, gumbel_uniforms
from relaxspec.reference.frontier import schedule_skips
from relaxspec.theory.rule_step import step_neighbours
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.verification import Verification
from relaxspec.theory.vvs import skip_path, unit_rows
from relaxspec.theory.window_walk import column_tree, has_repeats, level_starts, walk_columns

R2 = Verification("r2")
"""A window's walk where no column repeats a candidate is R2 on its tree (what the engines replay)."""

Verifier = Callable[..., tuple]
Report = Any
"""A ``reference.replay.ReplayReport`` (not imported: replay imports this module)."""


def _outcome(name: str, where: str, step: TraceStep, path: list[int], bonus: int | None) -> str | None:
    if list(map(int, path)) != step.path.tolist() or (bonus is not None and int(bonus) != step.bonus):
        return (f"{name}: {where}: recorded path {step.path.tolist()} bonus {step.bonus}, got "
                f"{list(map(int, path))} bonus {bonus}")
    return None


def _window_problem(step: TraceStep, cands: list[tuple[int, ...]], q_logits: np.ndarray, plan: WindowPlan
                    ) -> str | None:
    """Why a recorded window is not the one the previous step leaves (None when it is)."""
    W, L = plan.width, plan.window
    if step.columns.size % W or step.u_couple.size != (L + 1) * (W + 1):
        return (f"{step.columns.size} column entries and {step.u_couple.size} coupling uniforms recorded, "
                f"the window needs L' x {W} and {(L + 1) * (W + 1)}")
    m = step.columns.size // W
    want = column_array(cands[:m], W)
    if not np.array_equal(step.columns.reshape(m, W), want):
        return (f"recorded columns {step.columns.reshape(m, W).tolist()} are not the ones the previous step "
                f"leaves, {want.tolist()}")
    tree = column_tree(int(step.tokens[0]), want)
    if not (np.array_equal(tree.parents, step.parents) and np.array_equal(tree.tokens, step.tokens)):
        return "the recorded tree is not the column product of the window's columns"
    inner = tree.depths < m
    if not np.array_equal(step.draft_logits[inner], q_logits[tree.depths[inner]]):
        return "the recorded q logits of the window are not the ones the previous step leaves"
    return None


def replay_columns(trace: Trace, policy: CoupledWindow | PacWindow, engines: dict[str, Verifier],
                   report: Report) -> None:
    """Replay a coupled or PAC trace into ``report`` (``reference.replay.ReplayReport``: its ``steps``,
    ``mismatches`` and ``engines``; module docstring)."""
    h = trace.header
    plan, V = WindowPlan.of(policy), h.vocab_size
    others = {k: e for k, e in engines.items() if k != "theory"}
    nb = step_neighbours(None, V, h.verification)
    state, sequence = Columns.nothing(V, h.logits_dtype), None
    for step in trace.steps():
        if step.sequence != sequence:
            state, sequence = Columns.nothing(V, h.logits_dtype), step.sequence
        where = f"sequence {step.sequence} position {step.position}"
        report.steps += 1
        if step.u_fresh.size != plan.window:
            report.mismatches.append(f"theory: {where}: {step.u_fresh.size} fresh uniforms recorded, the "
                                     f"window {policy} needs {plan.window}")
            continue
        cands, q_logits = state.window(plan, step.u_fresh)
        problem = _window_problem(step, cands, q_logits, plan)
        if problem:
            report.mismatches.append(f"theory: {where}: {problem}")
            continue
        cols = step.columns.reshape(-1, plan.width)
        m = cols.shape[0]
        spine = level_starts(cols)[:-1]
        p = h.target_sampling.probs(step.target_logits.astype(np.float64))
        q = h.draft_sampling.probs(step.draft_logits.astype(np.float64))
        path, token = walk_columns(p, q[spine[:m]], cols, step.u_accept, step.u_draw) if m else ([0], -1)
        rejected = m if token < 0 else len(path) - 1
        gumbel_bonus = token < 0 and plan.gumbel
        if token < 0:
            end = path[-1]
            token = (gumbel_max(p[end], gumbel_uniforms(step.noise_key, step.position + m, V)) if plan.gumbel
                     else draw_token(p[end], float(step.u_draw[end])))
        problems = [_outcome("theory", where, step, path, token)]
        if not (m and has_repeats(cols)):  # the walk is R2 on the tree
            tree = step.tree
            for name, verify in engines.items():
                got_path, got_bonus = verify(tree, p, step.u_accept, step.u_draw, R2, neighbours=nb,
                                             q_dists=q)
                problems.append(_outcome(name, where, step, list(got_path),
                                         None if gumbel_bonus else int(got_bonus)))
        report.mismatches += [x for x in problems if x]
        ud = np.zeros(plan.window + 1)
        ud[:m + 1] = step.u_draw[spine]
        state = Columns.after(plan, cands, q_logits, step.target_logits[spine], rejected, step.bonus,
                              step.position, step.u_couple.reshape(plan.window + 1, plan.width + 1), ud,
                              step.noise_key, h.target_sampling)
    report.engines = ["theory", *others]


def replay_vvs(trace: Trace, policy: VvsTree, engines: dict[str, Verifier], report: Report) -> None:
    """Replay a VVS trace into ``report`` (as :func:`replay_columns`; module docstring)."""
    h = trace.header
    v, schedule = h.verification, policy.schedule
    nb = step_neighbours(trace.neighbours, h.vocab_size, v)
    codes = None
    if schedule.kind.reads_similarity:
        if trace.codes is None:
            raise ValueError(f"trace {trace.path} of {policy} has no codes.npy: the dynamic schedule's code "
                             "vectors")
        codes = unit_rows(trace.codes)
    sequence = None
    for step in trace.steps():
        if step.sequence != sequence:
            sequence, verified, accepted, spec, last_skipped, stale = step.sequence, 0, 0, 0, False, None
        where = f"sequence {step.sequence} position {step.position}"
        report.steps += 1
        speculative = step.parents.size > 1
        expect = (speculative and verified > 0 and not last_skipped
                  and schedule_skips(schedule, spec, step.tree, codes))
        spec += int(speculative)
        if expect != step.skipped:
            said = "skips" if expect else "verifies"
            did = "skipped" if step.skipped else "verified"
            report.mismatches.append(f"theory: {where}: the schedule {schedule} {said} this step, the trace "
                                     f"{did} it")
            continue
        if step.skipped:
            last_skipped = True
            if not np.array_equal(step.stale_logits[0], stale):
                report.mismatches.append(f"theory: {where}: the recorded stale row is not the last verify "
                                         "step's row where it drew its last token")
                continue
            if step.mean_accepted != accepted / verified:
                report.mismatches.append(f"theory: {where}: recorded Lbar {step.mean_accepted}, the steps "
                                         f"before give {accepted / verified}")
            path = skip_path(step.parents, float(step.u_accept[0]), accepted // verified)
            stale_p = h.target_sampling.probs(stale[None].astype(np.float64))[0]
            problem = _outcome("theory", where, step, path, draw_token(stale_p, float(step.u_draw[0])))
            report.mismatches += [problem] if problem else []
            continue
        p = h.target_sampling.probs(step.target_logits.astype(np.float64))
        q = h.draft_sampling.probs(step.draft_logits.astype(np.float64))
        for name, verify in engines.items():
            got_path, got_bonus = verify(step.tree, p, step.u_accept, step.u_draw, v, neighbours=nb,
                                         q_dists=q)
            problem = _outcome(name, where, step, list(got_path), int(got_bonus))
            report.mismatches += [problem] if problem else []
        stale = step.target_logits[step.path[-1]]
        if speculative:
            verified, accepted = verified + 1, accepted + step.path.size - 1
        last_skipped = False
    report.engines = list(engines)


__all__ = ["replay_columns", "replay_vvs"]
