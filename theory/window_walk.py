"""One forward of a coupled Jacobi window (SCD, SPEC 10.1) or an SJD-PAC window (SPEC 10.2), given its
columns: the tree the target runs and the walk that verifies it (the NumPy step oracle).

A window is L' *columns*; column c holds its candidates in order (the spine draft first; SJD-PAC's
``official`` siblings may repeat a candidate) and the law q_c they were drawn from. The target runs the
column product (:func:`column_tree`: every node at depth c has column c's *distinct* candidates as
children, in first-occurrence order; levels in order, so the first node of each level is the spine's).
:func:`walk_columns` verifies it as ``simulate.coupled_oracle`` does, by R2 with children drawn without
replacement: at the path's node of depth c, candidate x passes when ``u < min(1, r(x) / q'(x))`` (with
``q'(x) = 0``: when ``r(x) > 0``; a repeated candidate's q' is 0 after the first was rejected), a
rejection sets ``r := norm((r - q')^+)`` (uniform when that has no mass) and ``q' := norm(q' without
x)`` (no q' once it has no mass); when every candidate fails, the residual r is drawn and the walk
ends. Without repeats this is ``theory.tree.sample_step``'s R2 on the tree (tested).

Uniforms are per node, as a tree step's: ``u_accept[v]`` tests node v (every node that is candidate i
of column c holds the same value, the decoder's uniform of (c, i): the walk visits one node per depth),
``u_draw[v]`` draws the residual at v (every node of a depth holds that depth's value). A repeated
candidate's test has acceptance 0 or 1 and reads no uniform.
"""

from __future__ import annotations

import numpy as np

from relaxspec.theory.sampler import draw_token
from relaxspec.theory.stages import seqsum
from relaxspec.theory.tree import Tree


def column_candidates(columns: np.ndarray) -> list[list[int]]:
    """The candidates of each column of an (L', W) array padded with -1 at the end of a row."""
    cols = np.asarray(columns)
    if cols.ndim != 2 or cols.shape[1] < 1 or cols.dtype.kind not in "iu":
        raise ValueError(f"columns must be an (L', W) integer array, got {cols.dtype} of shape {cols.shape}")
    out = []
    for c, row in enumerate(cols.tolist()):
        n = sum(1 for x in row if x >= 0)
        if n < 1 or any(x < 0 for x in row[:n]) or any(x >= 0 for x in row[n:]):
            raise ValueError(f"column {c} must list its candidates first (at least one), padded with -1: "
                             f"{row}")
        out.append(row[:n])
    return out


def distinct(cands: list[int]) -> list[int]:
    """A column's distinct candidates in first-occurrence order (the children of a node of its depth)."""
    return list(dict.fromkeys(cands))


def has_repeats(columns: np.ndarray) -> bool:
    """Whether a column lists a candidate twice (SJD-PAC's official siblings may; then the walk is not R2
    on the column tree)."""
    return any(len(distinct(c)) < len(c) for c in column_candidates(columns))


def column_tree(root: int, columns: np.ndarray) -> Tree:
    """The column product the target runs: root ``root``, then level c + 1 = every node of level c
    times column c's distinct candidates (parents in order)."""
    parents, tokens, level = [-1], [int(root)], [0]
    for cands in column_candidates(columns):
        new = []
        for w in level:
            for x in distinct(cands):
                parents.append(w)
                tokens.append(x)
                new.append(len(tokens) - 1)
        level = new
    return Tree(np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64))


def level_starts(columns: np.ndarray) -> np.ndarray:
    """The first node of each level of :func:`column_tree` (level 0: the root; ``[L' + 1]``: its size):
    the spine's nodes are ``level_starts(...)[:-1]``."""
    widths = [len(distinct(c)) for c in column_candidates(columns)]
    starts, size = [0], 1
    for w in widths:
        starts.append(starts[-1] + size)
        size *= w
    starts.append(starts[-1] + size)
    return np.array(starts, dtype=np.int64)


def child_node(starts: np.ndarray, widths: list[int], node: int, depth: int, index: int) -> int:
    """Node id of distinct candidate ``index`` below ``node`` (at ``depth``) in :func:`column_tree`."""
    return int(starts[depth + 1] + (node - starts[depth]) * widths[depth] + index)


def walk_columns(p: np.ndarray, q: np.ndarray, columns: np.ndarray, u_accept: np.ndarray,
                 u_draw: np.ndarray) -> tuple[list[int], int]:
    """Verify one window (module docstring): ``(path, token)``, the accepted nodes of
    :func:`column_tree` from the root and the residual token drawn where every candidate failed, or -1
    when all L' columns passed (the caller draws the bonus at ``path[-1]``: from ``p[path[-1]]`` with
    ``u_draw[path[-1]]``, or by the Gumbel coupling's noise).

    ``p`` (n, V) the target rows of the tree's nodes, ``q`` (L', V) the columns' laws, ``columns``
    (L', W) their candidates padded with -1, ``u_accept`` and ``u_draw`` (n,) uniforms.
    """
    cands = column_candidates(columns)
    P = np.asarray(p, dtype=np.float64)
    Q = np.asarray(q, dtype=np.float64)
    widths = [len(distinct(c)) for c in cands]
    starts = level_starts(columns)
    n = int(starts[-1])
    if P.ndim != 2 or P.shape[0] != n or Q.shape != (len(cands), P.shape[1]):
        raise ValueError(f"p must have shape (n={n}, V) and q (L'={len(cands)}, V), got {P.shape} and "
                         f"{Q.shape}")
    ua, ud = np.asarray(u_accept, dtype=np.float64), np.asarray(u_draw, dtype=np.float64)
    if ua.shape != (n,) or ud.shape != (n,):
        raise ValueError(f"u_accept and u_draw must have shape ({n},), got {ua.shape} and {ud.shape}")
    node, path = 0, [0]
    for c, xs in enumerate(cands):
        r: np.ndarray = P[node]
        qp: np.ndarray | None = Q[c].copy()
        order = distinct(xs)
        hit = -1
        for x in xs:
            child = child_node(starts, widths, node, c, order.index(x))
            qx = qp[x] if qp is not None else 0.0
            a = min(1.0, r[x] / qx) if qx > 0.0 else (1.0 if r[x] > 0.0 else 0.0)
            if ua[child] < a:
                hit = child
                break
            if qp is not None:
                res = np.maximum(r - qp, 0.0)
                s = seqsum(res)
                r = res / s if s > 0.0 else np.full(r.size, 1.0 / r.size)
                qp = qp.copy()
                qp[x] = 0.0
                sq = seqsum(qp)
                qp = qp / sq if sq > 0.0 else None
        if hit < 0:
            return path, draw_token(r, float(ud[node]))
        path.append(hit)
        node = hit
    return path, -1


__all__ = ["child_node", "column_candidates", "column_tree", "distinct", "has_repeats", "level_starts",
           "walk_columns"]
