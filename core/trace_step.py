"""One step of a decoding trace (``core.trace``): the record and its validation.

Every step records the draft tree (parents, tokens), the target and draft logits at every node, the two
uniforms of every node and the outcome (accepted node path, bonus token). Steps of the 2026 frontier's
methods (SPEC 10) record more, in fields that are empty elsewhere:

- a coupled Jacobi window or an SJD-PAC window (tree spec ``jacobi:L,coupled=..`` or ``pac:..``,
  ``reference.coupled``): the tree is the column product of its columns' distinct candidates
  (``theory.window_walk.column_tree``), ``draft_logits[v]`` the stored law of v's children (its column's),
  ``columns`` the columns' candidates in order, (L', W) flattened and padded with -1 (W: the window's
  width, 1 for SCD), ``u_fresh`` the L uniforms that refilled the window, ``u_couple`` the (L + 1) x (W + 1)
  uniforms (flattened) this forward spent forming the next window, and ``noise_key`` the sequence's Gumbel
  noise key (``gumbel`` only);
- a VVS skip step (tree spec ``vvs:..``; SPEC 10.3): ``stale_logits`` holds the one stored row its bonus
  was drawn from (the stale target row; no other step holds one: :attr:`TraceStep.skipped`),
  ``mean_accepted`` the running mean accepted length Lbar it cut the path with, ``path`` the emitted
  drafts' nodes from the root, ``u_accept[0]`` the uniform that picked the leaf and ``u_draw[0]`` the
  bonus's; its ``target_logits`` at the path's nodes are the target's rows after each emitted prefix,
  computed by the next target forward (which feeds the skipped tokens to fill its cache), zero rows
  elsewhere (no forward ran there). ``reference.vvs.skip_token_tvs`` turns them into each skipped token's
  exact TV.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from relaxspec.theory.tree import Tree


def _empty() -> np.ndarray:
    return np.zeros(0)


@dataclass(frozen=True)
class TraceStep:
    """One decoding step: the tree, logits at every node, uniforms and outcome (module docstring for the
    fields of windows and skip steps)."""

    sequence: int
    position: int
    parents: np.ndarray
    tokens: np.ndarray
    target_logits: np.ndarray
    draft_logits: np.ndarray
    u_accept: np.ndarray
    u_draw: np.ndarray
    path: np.ndarray
    bonus: int
    u_fresh: np.ndarray = field(default_factory=_empty)
    u_couple: np.ndarray = field(default_factory=_empty)
    columns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    noise_key: int = 0
    stale_logits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    mean_accepted: float = float("nan")

    @property
    def tree(self) -> Tree:
        """The validated draft tree of this step."""
        return Tree(self.parents, self.tokens)

    @property
    def tokens_emitted(self) -> int:
        """Accepted (or, on a skip step, emitted) drafts + the bonus token."""
        return int(self.path.size)

    @property
    def skipped(self) -> bool:
        """Whether this is a VVS skip step (no target forward; it records its stale row)."""
        return self.stale_logits.shape[0] > 0


def check_step(step: TraceStep, vocab_size: int, source: str = "trace") -> None:
    """Raise ``ValueError`` naming ``source`` and the step (sequence, position) when ``step`` is invalid."""
    where = f"{source}: step (sequence {step.sequence}, position {step.position})"
    n = step.parents.shape[0]
    shapes = {
        "tokens": (step.tokens.shape, (n,)),
        "target_logits": (step.target_logits.shape, (n, vocab_size)),
        "draft_logits": (step.draft_logits.shape, (n, vocab_size)),
        "u_accept": (step.u_accept.shape, (n,)),
        "u_draw": (step.u_draw.shape, (n,)),
    }
    if step.skipped:
        shapes["stale_logits"] = (step.stale_logits.shape, (1, vocab_size))
    for name, (got, want) in shapes.items():
        if got != want:
            raise ValueError(f"{where}: {name} has shape {got}, expected {want}")
    for name in ("target_logits", "draft_logits", "stale_logits"):
        if getattr(step, name).size:
            check_logits(getattr(step, name), f"{where}: {name}")
    for name in ("u_accept", "u_draw", "u_fresh", "u_couple"):
        u = getattr(step, name)
        if u.ndim != 1 and name in ("u_fresh", "u_couple"):
            raise ValueError(f"{where}: {name} has shape {u.shape}, expected one dimension")
        ok = (u >= 0) & (u < 1)  # False for NaN
        if not ok.all():
            node = int(np.flatnonzero(~ok)[0])
            what = "node" if name in ("u_accept", "u_draw") else "slot"
            raise ValueError(f"{where}: {name} of {what} {node} is not a uniform in [0, 1)")
    cols = step.columns
    if cols.ndim != 1 or (cols.size and (cols.min() < -1 or cols.max() >= vocab_size)):
        raise ValueError(f"{where}: columns must be a flat array of tokens in [0, {vocab_size}) padded "
                         "with -1")
    if step.skipped and not (np.isfinite(step.mean_accepted) and step.mean_accepted >= 0):
        raise ValueError(f"{where}: a skip step's mean_accepted must be a finite number >= 0, got "
                         f"{step.mean_accepted!r}")
    try:
        step.tree.check_vocab(vocab_size)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from err
    path = step.path
    if path.size == 0 or path[0] != 0 or path.min() < 0 or path.max() >= n:
        raise ValueError(f"{where}: path {path.tolist()} must start at the root (node 0) and name nodes of "
                         f"the tree (0 to {n - 1})")
    if not np.array_equal(step.parents[path[1:]], path[:-1]):  # what replay and rescore both rely on
        raise ValueError(f"{where}: path {path.tolist()} is not a chain of the tree (each node's parent must "
                         f"be the node before it; parents {step.parents.tolist()})")
    if not 0 <= step.bonus < vocab_size:
        raise ValueError(f"{where}: bonus token {step.bonus} is out of range")


def check_logits(logits: np.ndarray, what: str) -> None:
    """Raise naming the first node whose stored logits hold NaN or +inf, or are -inf everywhere.

    -inf entries are allowed (masked tokens); the check runs on the stored dtype, without a copy to float64.
    """
    if np.isfinite(logits).all():
        return
    for bad, kind in ((np.isnan(logits), "NaN"), (np.isposinf(logits), "+inf")):
        rows = np.flatnonzero(bad.any(axis=1))
        if rows.size:
            col = int(np.flatnonzero(bad[rows[0]])[0])
            raise ValueError(f"{what} of node {rows[0]} hold {kind} (at token {col}; {int(bad.sum())} {kind} "
                             "entries in this step)")
    dead = np.flatnonzero(np.isneginf(logits).all(axis=1))
    if dead.size:
        raise ValueError(f"{what} of node {dead[0]} are -inf everywhere: no token has mass")


__all__ = ["TraceStep", "check_logits", "check_step"]
