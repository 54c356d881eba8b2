"""The device verifier's walk of a coupled or SJD-PAC window (``theory.window_walk.walk_columns`` in
torch): one read per column the path visits.

At the path's node of depth c the candidates of column c are tested in order, each after every earlier
one was rejected; those tests do not depend on the uniforms, so every candidate's acceptance and the
residual after all of them are computed on the device first (a loop over the column's candidates, never
over the vocabulary), then the first candidate whose uniform falls below its acceptance is picked and,
when none does, the residual's token is drawn, both read in one transfer. The arithmetic is
``theory.window_walk``'s operation for operation (sequential sums: ``reference.verify_ops``), so in
float64 on a CPU every decision is theory's given the same uniforms.
"""

from __future__ import annotations

import numpy as np
import torch

from relaxspec.reference.verify_ops import HostLink, draw_token, seqsum
from relaxspec.theory.window_walk import child_node, column_candidates, distinct, level_starts


def _column_stage(r: torch.Tensor, qp: torch.Tensor, xs: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The acceptance of each candidate ``xs[i]`` after ``xs[:i]`` were rejected, and the residual after
    all of them (``theory.window_walk.walk_columns``' loop body; ``alive``: q' still has mass)."""
    V = r.shape[0]
    alive = torch.ones((), dtype=torch.bool, device=r.device)
    accs = []
    for x in xs:
        qx = torch.where(alive, qp[x], torch.zeros_like(qp[x]))
        rx = r[x]
        ratio = torch.clamp(rx / torch.where(qx > 0.0, qx, torch.ones_like(qx)), max=1.0)
        accs.append(torch.where(qx > 0.0, ratio, (rx > 0.0).to(r.dtype)))
        res = torch.clamp(r - qp, min=0.0)
        s = seqsum(res)
        r = torch.where(alive, torch.where(s > 0.0, res / torch.where(s > 0.0, s, 1.0), 1.0 / V), r)
        qp = qp.clone()
        qp[x] = 0.0
        sq = seqsum(qp)
        qp = torch.where(sq > 0.0, qp / torch.where(sq > 0.0, sq, 1.0), qp)
        alive = alive & (sq > 0.0)
    return torch.stack(accs), r


def walk_columns_device(P: torch.Tensor, Q: torch.Tensor, columns: np.ndarray, ua: torch.Tensor,
                        ud: torch.Tensor, link: HostLink) -> tuple[list[int], int]:
    """``theory.window_walk.walk_columns`` on the device: ``P`` (n, V) and ``Q`` (L', V) rows, ``ua``,
    ``ud`` (n,) float64 uniforms on the rows' device; ``(path, token)`` with token -1 when every column
    passed. Host traffic: one read per column visited."""
    cands = column_candidates(columns)
    widths = [len(distinct(c)) for c in cands]
    starts = level_starts(columns)
    node, path = 0, [0]
    for c, xs in enumerate(cands):
        order = distinct(xs)
        kids = [child_node(starts, widths, node, c, order.index(x)) for x in xs]
        accs, r = _column_stage(P[node], Q[c], xs)
        hits = ua[torch.as_tensor(kids, device=ua.device)] < accs.to(torch.float64)
        any_hit, first = hits.any(), torch.argmax(hits.to(torch.uint8))
        token = draw_token(r, ud[node])
        got = link.read(torch.stack([any_hit.long(), first.long(), token.long()]))
        if not got[0]:
            return path, int(got[2])
        node = kids[int(got[1])]
        path.append(node)
    return path, -1


__all__ = ["walk_columns_device"]
