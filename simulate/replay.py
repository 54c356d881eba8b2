"""Re-verify the steps of a captured trace (``run`` on a :class:`TraceWorld`).

Each recorded step keeps its tree, logits and uniforms; the verification may
differ from the one the trace was captured with. With the capture's own
verification the outcomes are reproduced exactly.
"""

from __future__ import annotations

import time

import numpy as np

from relaxspec.simulate.results import SimResult
from relaxspec.simulate.verify import step_expectation, verify_step
from relaxspec.simulate.worlds import TraceWorld
from relaxspec.theory.verification import Verification


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
    for step in world.trace.steps():
        tree = step.tree
        p = h.target_sampling.probs(step.target_logits.astype(np.float64))
        q = (h.draft_sampling.probs(step.draft_logits.astype(np.float64)) if verification.samples_drafts
             else None)
        path, bonus, tv = verify_step(tree, p, step.u_accept, step.u_draw, verification, neighbours=nb,
                                      q_dists=q, with_tv=True, emb=emb)
        if check and (path != step.path.tolist() or bonus != step.bonus):
            raise ValueError(f"trace step (sequence {step.sequence}, position {step.position}) replays to "
                             f"path {path}, bonus {bonus}; recorded {step.path.tolist()}, {step.bonus}")
        e = step_expectation(tree, p, verification, neighbours=nb, q_dists=q, emb=emb)
        kids = tree.children(0)
        rec["tokens"].append(len(path))
        rec["tree_size"].append(tree.size - 1)
        rec["tree_depth"].append(tree.depth)
        rec["accepted_depth"].append(len(path) - 1)
        rec["draft_calls"].append(int(h.extra.get("draft_calls_per_step", 0)))
        rec["root_choice"].append(int(np.flatnonzero(kids == path[1])[0]) if len(path) > 1 else -1)
        rec["token_tv"].append(tv)
        rec["expected_tokens"].append(e.tokens)
        rec["expected_tv"].append(e.tv)
        rec["sequence"].append(seqs.setdefault(step.sequence, len(seqs)))
    if not rec["tokens"]:
        raise ValueError(f"trace {world.trace.path} holds no steps")
    arrays = {k: np.array(v, dtype=np.float64 if k.startswith("expected") or k == "token_tv" else np.int64)
              for k, v in rec.items()}
    return SimResult(world=world.name, tree=h.tree, verification=verification,
                     temperature=h.target_sampling.temperature, n_sequences=len(seqs), seq_len=0, seed=0,
                     exact_expectations=True, seconds=time.perf_counter() - t0, **arrays)
