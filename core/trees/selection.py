"""How a tree policy picks a node's children: by q, by proximity mass q~, or by q~ with diverse siblings.

Under a relaxed test the chance that a draft x is accepted is close to the
target mass of its whole proximity set A(x) (docs/theory.md, Lemma 5), not
p(x). A :class:`ChildSelector` ranks a node's candidate children by what the
verifier rewards, estimated on the draft distribution q:

    q~(x) = q(A(x)) = q(x) + C_J(x),

with A(x) and C_J computed on q by ``theory.relax.merge_count`` (the
verifier's relaxation, same arithmetic, ``total = 1.0``: q is normalised).

Modes
-----
- ``"q"``: the m most probable tokens of q (ties by lowest id); value q(x).
  EAGLE-2's and the static trees' ranking.
- ``"latent"``: a candidate pool of the ``max(pool, m)`` most probable tokens
  of q; q~ computed exactly for each; the m largest q~, ties by pool order
  (higher q, then lower id); value q~(x). Restricting to a pool bounds the
  cost (``pool * k`` reads instead of ``V * k``) and keeps drafts where q
  has mass: outside it a token with tiny q next to a heavy one could score
  almost the heavy token's q~, a near duplicate of it. With ``Relax.none()``
  or k = 0, q~ = q + 0.0 = q bit for bit and the pool order is q's rank
  order, so the children and values are exactly mode ``"q"``'s.
- ``"diverse"``: as ``"latent"``, but greedy in q~ order, skipping a candidate
  whose proximity set shares a token with an already chosen sibling's
  (non-maximum suppression). Under R1 a rejected child removes its whole
  proximity set from the residual, so a later sibling inside it could only
  win through its own neighbours. May return fewer than m children.
- ``"walk"``: the R1 walk run on q itself (``theory.stages``, principled):
  candidates in q~ order; one whose residual draft mass is 0 (it lies in an
  earlier sibling's proximity set) is skipped; a taken child's value is
  min(Z, r(x) + C_J), its acceptance probability if the target were q
  (docs/theory.md, Lemma 5: P(c_i accepted) = p(B_i)), with A(x) formed on
  the residual as the verifier forms it; its proximity set is then removed.
  Stops when the residual runs out of mass. Only the sibling's own token
  must not be absorbed: neighbour sets may overlap (the verifier merges
  other neighbours instead). Without merging (``Relax.none()``, k = 0) the
  walk's values are q(x) exactly (Theorem 1), so the mode is ``"q"``.

``select`` is the NumPy oracle; :mod:`simulate.latent_kernels` is its Numba
twin (same children and values given the same q row, tested exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from relaxspec.theory.relax import Relax, merge_count
from relaxspec.theory.rules import relax_args
from relaxspec.theory.stages import r1_reject, zero_set

SELECTION_MODES = ("q", "latent", "diverse", "walk")
MODE_Q, MODE_LATENT, MODE_DIVERSE, MODE_WALK = 0, 1, 2, 3
"""The kernels' selection-mode codes (the mode's index in :data:`SELECTION_MODES`)."""
DEFAULT_POOL = 40


def top_ranked(q: np.ndarray, m: int) -> np.ndarray:
    """The m most probable tokens, ties by lowest id (rank order)."""
    return np.argsort(-q, kind="stable")[:m].astype(np.int64)


@dataclass(frozen=True, eq=False)
class ChildSelector:
    """A node's children from its draft row q (see the module docstring).

    Parameters
    ----------
    mode : ``"q"``, ``"latent"`` or ``"diverse"``.
    relax : the verifier's relaxation (proximity sets are formed with it).
    neighbours : the verifier's neighbour table (V, >= k), needed unless the
        mode is ``"q"`` or ``relax`` merges nothing.
    pool : candidates whose q~ is computed (the top ``max(pool, m)`` of q).
    """

    mode: str = "q"
    relax: Relax = field(default_factory=Relax.none)
    neighbours: np.ndarray | None = None
    pool: int = DEFAULT_POOL

    def __post_init__(self) -> None:
        if self.mode not in SELECTION_MODES:
            raise ValueError(f"selection mode must be one of {SELECTION_MODES}, got {self.mode!r}")
        if not isinstance(self.relax, Relax):
            raise ValueError(f"relax must be a relaxspec.theory.Relax, got {type(self.relax).__name__}")
        if isinstance(self.pool, bool) or int(self.pool) != self.pool or self.pool < 1:
            raise ValueError(f"pool must be a positive integer, got {self.pool!r}")
        object.__setattr__(self, "pool", int(self.pool))
        table = None
        if self.mode != "q" and not self.relax.is_exact:
            table = _check_table(self.neighbours, self.relax.k)
        object.__setattr__(self, "neighbours", table)

    @property
    def merges(self) -> bool:
        """Whether q~ can differ from q (a latent mode with a relaxation that merges)."""
        return self.neighbours is not None

    @property
    def vocab_size(self) -> int | None:
        """V of the neighbour table (None when no table is used)."""
        return None if self.neighbours is None else int(self.neighbours.shape[0])

    def proximity_mass(self, q: np.ndarray, x: int) -> tuple[int, float]:
        """(J, q~(x)) for token x: the merge count and q(x) + C_J on q."""
        if not self.merges:
            return 0, float(q[x]) + 0.0
        J, c = merge_count(q, 1.0, int(x), self.neighbours[x], self.relax)
        return J, float(q[x] + c)

    def proximity_set(self, q: np.ndarray, x: int) -> np.ndarray:
        """A(x) on q: x and its first J neighbours (int64)."""
        J, _ = self.proximity_mass(q, x)
        if J == 0:
            return np.array([x], dtype=np.int64)
        return np.concatenate(([x], self.neighbours[x, :J])).astype(np.int64)

    def check_row(self, q: np.ndarray) -> None:
        """Raise ``ValueError`` if the row's size does not match the neighbour table."""
        if self.neighbours is not None and q.shape[0] != self.neighbours.shape[0]:
            raise ValueError(f"draft row has V = {q.shape[0]} but the neighbour table has "
                             f"{self.neighbours.shape[0]} rows")

    def select(self, q: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """Children (int64, rank order) and their values (q or q~, float64) for a node with row q."""
        self.check_row(q)
        if self.mode == "q" or (self.mode == "walk" and not self.merges):
            kids = top_ranked(q, m)
            return kids, q[kids].astype(np.float64)
        cand = top_ranked(q, max(self.pool, m))
        masses = [self.proximity_mass(q, int(x)) for x in cand]
        qt = np.array([v for _, v in masses], dtype=np.float64)
        order = np.argsort(-qt, kind="stable")
        if self.mode == "latent":
            pick = order[:m]
            return cand[pick], qt[pick]
        if self.mode == "walk":
            return self._walk(q, cand[order], m)
        taken: set[int] = set()
        pick_list: list[int] = []
        for j in order.tolist():
            if len(pick_list) == m:
                break
            members = set(self.proximity_set(q, int(cand[j])).tolist())
            if members & taken:
                continue
            taken |= members
            pick_list.append(j)
        pick = np.array(pick_list, dtype=np.int64)
        return cand[pick], qt[pick]

    def _walk(self, q: np.ndarray, cands: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """Mode ``"walk"``: R1 (principled) on q over the candidates in order (see the module docstring)."""
        r, Z = q.astype(np.float64, copy=True), 1.0
        kids: list[int] = []
        vals: list[float] = []
        for x in cands.tolist():
            if len(kids) == m:
                break
            if r[x] == 0.0:
                continue
            J, c = merge_count(r, Z, x, self.neighbours[x], self.relax)
            kids.append(x)
            vals.append(min(Z, r[x] + c))
            Z_next = r1_reject(r, Z, zero_set(x, self.neighbours[x], J, self.relax, "principled"))
            if Z_next > Z:  # the residual ran out of mass and restarted uniform: nothing is left
                break
            Z = Z_next
        return np.array(kids, dtype=np.int64), np.array(vals, dtype=np.float64)

    def overlapping(self, q: np.ndarray, children: np.ndarray) -> int:
        """How many children's proximity sets (on q) share a token with an earlier child's."""
        self.check_row(q)
        taken: set[int] = set()
        count = 0
        for x in np.asarray(children, dtype=np.int64).tolist():
            members = set(self.proximity_set(q, x).tolist())
            count += bool(members & taken)
            taken |= members
        return count

    def kernel_args(self) -> tuple:
        """``(mode, pool, code, k, param, table)`` for :func:`simulate.latent_kernels.select_children`."""
        mode = SELECTION_MODES.index(self.mode)
        if self.merges:
            return (mode, self.pool, *relax_args(self.relax), self.neighbours)
        return (mode, self.pool, 0, 0, 0.0, np.zeros((1, 0), dtype=np.int32))

    def __str__(self) -> str:
        return self.mode if self.mode == "q" else f"{self.mode}(pool={self.pool}, {self.relax})"


def _check_table(table: np.ndarray | None, k: int) -> np.ndarray:
    """The first k columns of a neighbour table as C-contiguous int32, ids checked to lie in [0, V)."""
    if table is None:
        raise ValueError("a latent-aware selection with a merging relaxation needs the neighbour table")
    if not isinstance(table, np.ndarray) or table.ndim != 2 or table.dtype.kind not in "iu":
        raise ValueError("the neighbour table must be a 2-D integer array (V, K)")
    V = table.shape[0]
    if table.shape[1] < k:
        raise ValueError(f"the relaxation reads k = {k} neighbours but the table has {table.shape[1]} "
                         "columns")
    out = np.ascontiguousarray(table[:, :k], dtype=np.int32)
    if out.size and (int(out.min()) < 0 or int(out.max()) >= V):
        raise ValueError(f"the neighbour table has token ids outside [0, {V})")
    return out
