"""Re-verify the steps of a captured trace (``run`` on a :class:`TraceWorld`).

Each recorded step keeps its tree, logits and uniforms; the verification may
differ from the one the trace was captured with. With the capture's own
verification the outcomes are reproduced exactly.

A VVS skip step (SPEC 10.3, ``TraceStep.skipped``) verified nothing and made no target forward: it is
replayed as the skip it was, not as a tree step (its tree's rows off the emitted path were never
computed). Its recorded outcome is its path and bonus (``check``: ``theory.vvs.skip_path`` with the
recorded uniform and floor(Lbar), the bonus drawn from the stale row); ``expected_tokens`` is its exact
E[gamma + 1] given the tree and the recorded Lbar (``theory.vvs.skip_expected_tokens``), ``token_tv`` the
exact TVs of the tokens it emitted, summed (``theory.vvs.skip_token_tvs``, the target's rows after the
emitted prefixes: the next forward's), ``expected_tv`` NaN (the target's rows off the emitted path are
not recorded). The skip does not depend on the verification, and Lbar is the recorded one (the verify
steps' accepted lengths under the capture's verification). ``SimResult.target_forwards`` is then 0 on a
skip step and 1 elsewhere (``tokens_per_forward``); a trace without skip steps leaves it ``None``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from relaxspec.core.trace import Sampling, TraceStep
from relaxspec.simulate.results import SimResult
from relaxspec.simulate.verify import step_expectation, verify_step
from relaxspec.simulate.worlds import TraceWorld
from relaxspec.theory import vvs
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.verification import Verification


def replay_skip(step: TraceStep, sampling: Sampling, *, check: bool = False
                ) -> tuple[list[int], int, float, float]:
    """A VVS skip step replayed (module docstring): its path, bonus, summed token TV and exact E[tokens]
    given its tree. ``sampling`` turns the stored rows into laws (the trace's target sampling); ``check``
    raises when the skip's rule does not give the recorded path and bonus."""
    stale = sampling.probs(step.stale_logits.astype(np.float64))[0]
    path, bonus = step.path.tolist(), step.bonus
    if check:
        got = vvs.skip_path(step.parents, float(step.u_accept[0]), math.floor(step.mean_accepted))
        drawn = draw_token(stale, float(step.u_draw[0]))
        if got != path or drawn != bonus:
            raise ValueError(f"trace step (sequence {step.sequence}, position {step.position}) is a skip "
                             f"step that replays to path {got}, bonus {drawn}; recorded {path}, {bonus}")
    rows = sampling.probs(step.target_logits[step.path].astype(np.float64))
    emitted = np.append(step.tokens[step.path[1:]], bonus)
    tv = float(vvs.skip_token_tvs(step.parents, step.tokens, stale, step.mean_accepted, emitted, rows).sum())
    return path, int(bonus), tv, vvs.skip_expected_tokens(step.parents, step.mean_accepted)


def replay_trace(world: TraceWorld, verification: Verification | str, *, check: bool = False) -> SimResult:
    """Verify every step of the trace with ``verification`` (a value or its spec string); ``check=True``
    raises if an outcome differs from the recorded one. A boost raises R2's and R4's tests (GSD reads the
    trace's stored embedding table, the budget its neighbour table)."""
    verification = Verification.parse(verification)
    h = world.header
    emb = world.embedding() if verification.reads_embedding else None
    t0 = time.perf_counter()
    rec: dict[str, list] = {k: [] for k in ("tokens", "tree_size", "tree_depth", "accepted_depth",
                                            "draft_calls", "root_choice", "token_tv", "expected_tokens",
                                            "expected_tv", "sequence")}
    nb = world.neighbours(verification.neighbour_k)
    seqs: dict[int, int] = {}
    skipped: list[bool] = []
    for step in world.trace.steps():
        tree = step.tree
        skipped.append(step.skipped)
        if step.skipped:  # no forward: the skip's own rule, not a tree step (module docstring)
            path, bonus, tv, e_tokens = replay_skip(step, h.target_sampling, check=check)
            e_tv = math.nan
        else:
            p = h.target_sampling.probs(step.target_logits.astype(np.float64))
            q = (h.draft_sampling.probs(step.draft_logits.astype(np.float64)) if verification.samples_drafts
                 else None)
            path, bonus, tv = verify_step(tree, p, step.u_accept, step.u_draw, verification, neighbours=nb,
                                          q_dists=q, with_tv=True, emb=emb)
            recorded = step.path.tolist()
            if check and (path != recorded or bonus != step.bonus):
                raise ValueError(f"trace step (sequence {step.sequence}, position {step.position}) replays "
                                 f"to path {path}, bonus {bonus}; recorded {recorded}, {step.bonus}")
            e = step_expectation(tree, p, verification, neighbours=nb, q_dists=q, emb=emb)
            e_tokens, e_tv = e.tokens, e.tv
        kids = tree.children(0)
        rec["tokens"].append(len(path))
        rec["tree_size"].append(tree.size - 1)
        rec["tree_depth"].append(tree.depth)
        rec["accepted_depth"].append(len(path) - 1)
        rec["draft_calls"].append(int(h.extra.get("draft_calls_per_step", 0)))
        rec["root_choice"].append(int(np.flatnonzero(kids == path[1])[0]) if len(path) > 1 else -1)
        rec["token_tv"].append(tv)
        rec["expected_tokens"].append(e_tokens)
        rec["expected_tv"].append(e_tv)
        rec["sequence"].append(seqs.setdefault(step.sequence, len(seqs)))
    if not rec["tokens"]:
        raise ValueError(f"trace {world.trace.path} holds no steps")
    arrays = {k: np.array(v, dtype=np.float64 if k.startswith("expected") or k == "token_tv" else np.int64)
              for k, v in rec.items()}
    forwards = (~np.array(skipped)).astype(np.int64) if any(skipped) else None
    return SimResult(world=world.name, tree=h.tree, verification=verification,
                     temperature=h.target_sampling.temperature, n_sequences=len(seqs), seq_len=0, seed=0,
                     exact_expectations=True, seconds=time.perf_counter() - t0, target_forwards=forwards,
                     **arrays)
