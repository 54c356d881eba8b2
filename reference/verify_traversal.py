"""Traversal verification (R4, SPEC 9.6) and budgeted R2 (SPEC 9.5) on torch tensors: the device twins of
``theory.traversal.sample_traversal_step`` and ``theory.budget.sample_budget_r2_step``.

Both take one drawn tree, its (n, V) target and draft rows and the suite's per-node uniforms
(``theory.sampler``), and return the accepted path from the root and the emitted token. In float64 on CPU
every decision is theory's, operation for operation (sequential sums, theory's order of multiplications
and divisions, its exhaustion branches); in float32 on a device a decision may differ where a uniform lies
within rounding of its threshold.

No loop runs over the vocabulary. What a step does between its reads depends only on the tree, never on
the uniforms, so the host plans it beforehand and the device runs it without waiting:

- budgeted R2: a node's stages (children tested in draw order, each after its earlier siblings were
  rejected) do not depend on the uniforms, so every internal node's stages run batched over nodes, one
  pass per draw index; each node's first accepted child and its residual draw are picked on the device.
  One host read per step.
- R4: the loop is one sequence of tests whatever the uniforms (``theory.traversal.TraversalWalk.tests``);
  the device runs it, rejecting every tested node, and the host reads whether some test so far accepted
  after tests 1, 2, 4, 8, ... and after the last (the root's). So a step that ends at test j costs about
  log2(j) + 1 reads and at most twice the tests it needed. A tested node's alpha and law never change
  after its test (only live nodes are updated), so the decision and the bonus draw of any earlier test
  can be made at a later read.

Every device-to-host read goes through the caller's ``reference.verify_ops.HostLink``. Index tensors are
built on the host once per step and copied to the device in one transfer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from relaxspec.reference.verify_budget import budget_stages
from relaxspec.reference.verify_ops import HostLink, draw_token, normalise_residual, seqsum
from relaxspec.theory.boost import OFFICIAL_BELOW, Boost
from relaxspec.theory.boost_law import window_extent
from relaxspec.theory.tree import Tree


# ------------------------------------------------------------------ input checks
def _check_step(tree: Tree, p: torch.Tensor, q: torch.Tensor, u_accept: torch.Tensor, u_draw: torch.Tensor,
                boost: Boost, neighbours: torch.Tensor | None, emb: torch.Tensor | None
                ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Shapes, dtypes and devices of a step's inputs (values are the caller's: ``reference.verify``).
    Returns the first k columns of the budget's neighbour table and GSD's embedding (None when unused)."""
    if not isinstance(tree, Tree):
        raise ValueError(f"tree must be a relaxspec.theory.tree.Tree, got {type(tree).__name__}")
    if not isinstance(boost, Boost):
        raise ValueError(f"boost must be a relaxspec.theory.boost.Boost, got {type(boost).__name__}")
    for name, t in (("p", p), ("q", q), ("u_accept", u_accept), ("u_draw", u_draw)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    n = tree.size
    if p.ndim != 2 or p.shape[0] != n or p.shape[1] < 1:
        raise ValueError(f"p must have shape (n_nodes={n}, V), got {tuple(p.shape)}")
    if q.shape != p.shape:
        raise ValueError(f"q must have p's shape {tuple(p.shape)}, got {tuple(q.shape)}")
    if not p.is_floating_point() or q.dtype != p.dtype:
        raise ValueError(f"p and q must share one floating dtype, got {p.dtype} and {q.dtype}")
    for name, u in (("u_accept", u_accept), ("u_draw", u_draw)):
        if u.shape != (n,) or not u.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor with one uniform per node ({n},), got "
                             f"{u.dtype} of shape {tuple(u.shape)}")
    V = p.shape[1]
    tree.check_vocab(V)
    device = p.device
    for name, t in (("q", q), ("u_accept", u_accept), ("u_draw", u_draw)):
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, but p is on {device}: every input must be on one "
                             "device")
    nb = None
    if boost.uses_budget:
        if neighbours is None:
            raise ValueError(f"boost {boost} merges the mass of latent neighbours: it needs a neighbour "
                             "table")
        if not isinstance(neighbours, torch.Tensor) or neighbours.dtype != torch.long:
            raise ValueError("the neighbour table must be a torch.long tensor")
        if neighbours.ndim != 2 or neighbours.shape[0] != V or neighbours.shape[1] < boost.k:
            raise ValueError(f"the neighbour table has shape {tuple(neighbours.shape)}, expected ({V}, >= "
                             f"{boost.k}): a table of another vocabulary, or narrower than k")
        if neighbours.device != device:
            raise ValueError(f"the neighbour table is on {neighbours.device}, but p is on {device}")
        nb = neighbours[:, : boost.k]
    e = None
    if boost.reads_embedding:
        if emb is None:
            raise ValueError(f"boost {boost} (group acceptance) needs an embedding table of the {V} tokens")
        if (not isinstance(emb, torch.Tensor) or emb.ndim != 2 or emb.shape[0] != V
                or not emb.is_floating_point()):
            raise ValueError(f"the embedding table must be a floating tensor of shape ({V}, dim), got "
                             f"{getattr(emb, 'dtype', type(emb).__name__)} of shape "
                             f"{tuple(getattr(emb, 'shape', ()))}")
        if emb.device != device:
            raise ValueError(f"the embedding table is on {emb.device}, but p is on {device}")
        e = emb.to(p.dtype)  # theory's distances are in float64: the rows' dtype, not the table's
    return nb, e


class _IndexPack:
    """Host index arrays gathered into one int64 buffer and copied to the device in one transfer
    (a copy per small index list would wait for the device's queue each time)."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._views: list[torch.Tensor] = []

    def add(self, values: Sequence[int] | np.ndarray) -> int:
        """Queue an index array; returns its handle for :meth:`get`."""
        self._parts.append(np.asarray(values, dtype=np.int64).reshape(-1))
        return len(self._parts) - 1

    def upload(self, device: torch.device) -> None:
        host = torch.from_numpy(np.concatenate(self._parts) if self._parts else np.zeros(0, dtype=np.int64))
        if device.type == "cuda":
            buf = host.pin_memory().to(device, non_blocking=True)
        else:
            buf = host.to(device)
        sizes = [a.size for a in self._parts]
        self._views = list(torch.split(buf, sizes)) if sizes else []

    def get(self, handle: int) -> torch.Tensor:
        return self._views[handle]


def _edge_validity(tree: Tree, pack: _IndexPack) -> tuple[int, int]:
    """Handles of (parent, token) of every edge: the device checks that each drafted token had mass."""
    return pack.add(tree.parents[1:]), pack.add(tree.tokens[1:])


def _drafts_drawable(q: torch.Tensor, parents: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """0-d bool: every child's token has positive draft probability at its parent."""
    if parents.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=q.device)
    return (q[parents, tokens] > 0).all()


def _raise_undrawable(tree: Tree, q_host: np.ndarray) -> None:
    bad = next(v for v in range(1, tree.size) if not q_host[v - 1] > 0)
    raise ValueError(f"node {bad}'s token {int(tree.tokens[bad])} has zero draft probability at its parent "
                     f"{int(tree.parents[bad])}: it cannot have been drawn")


def _group_ratios(P: torch.Tensor, Q: torch.Tensor, rows: torch.Tensor, toks: torch.Tensor, boost: Boost,
                  emb: torch.Tensor) -> torch.Tensor:
    """GSD's P(C)/Q(C) for the edges (``rows`` into P, Q; drafted ``toks``): ``theory.boost.group_members``
    over the rank window (``official``: x alone where the published code falls back), summed in rank
    order."""
    V = P.shape[1]
    order = torch.sort(-P, dim=-1, stable=True).indices  # rank 0 = most probable, ties by lower id
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(V, device=P.device).expand_as(order))
    before, after = window_extent(boost.group_size, boost.window)
    offsets = torch.arange(-before, after + 1, device=P.device)
    r = rank[rows, toks]
    pos = r.unsqueeze(-1) + offsets
    inside = (pos >= 0) & (pos < V)
    if boost.official_window:
        alone = (V - 1 - r) < OFFICIAL_BELOW
        inside &= ~alone.unsqueeze(-1) | (offsets == 0)
    y = order[rows.unsqueeze(-1), pos.clamp(0, V - 1)]
    py, qy = P[rows.unsqueeze(-1), y], Q[rows.unsqueeze(-1), y]
    close = torch.abs(py - P[rows, toks].unsqueeze(-1)) < boost.tau
    d = emb[y] - emb[toks].unsqueeze(1)
    d2 = torch.cumsum(d * d, dim=-1)[..., -1]  # sequential over dimensions, as theory sums
    member = inside & ((close & (d2 < boost.dist)) | (y == toks.unsqueeze(-1)))
    zero = torch.zeros((), dtype=P.dtype, device=P.device)
    return seqsum(torch.where(member, py, zero)) / seqsum(torch.where(member, qy, zero))


def edge_ratios(P: torch.Tensor, Q: torch.Tensor, rows: torch.Tensor, toks: torch.Tensor, boost: Boost,
                omega: float, emb: torch.Tensor | None) -> torch.Tensor:
    """``theory.traversal.edge_ratio`` for edges to drafted ``toks`` from rows ``rows`` of P, Q (lossless,
    Cool-SD with factor ``omega``, or GSD)."""
    if boost.reads_embedding:
        return _group_ratios(P, Q, rows, toks, boost, emb)
    if boost.scales_by_depth:
        return omega * P[rows, toks] / Q[rows, toks]
    return P[rows, toks] / Q[rows, toks]


# ------------------------------------------------------------------ R4
@dataclass(frozen=True)
class _Level:
    """One level of a live subtree: ``nodes`` (with live children) and their live children ``edges``;
    ``rows`` the row of each edge's parent among ``nodes``; handles into the step's index pack."""

    nodes: int
    edges: int
    rows: int
    parents: int
    tokens: int
    depth: int  # of the edges (Cool-SD's omega index)


@dataclass(frozen=True)
class _Rejection:
    """Test ``node`` rejected: its parent's update and the recomputation of the parent's live subtree."""

    node: int
    parent: int
    levels: list[_Level]


@dataclass(frozen=True)
class _TraversalPlan:
    """The R4 loop of a tree, every test rejected: the tested nodes in order (the root last), the
    rejection after each non-root test, and the levels of the first alpha computation."""

    tests: list[int]
    tests_handle: int
    rejections: list[_Rejection]
    start: list[_Level]


def _live_levels(tree: Tree, kids: list[np.ndarray], deleted: np.ndarray, u: int, pack: _IndexPack
                 ) -> list[_Level]:
    """u's live subtree level by level (``theory.traversal.TraversalWalk._recompute``'s order is
    irrelevant: a node's alpha depends only on its parent's)."""
    levels, frontier = [], [u]
    while True:
        nodes: list[int] = []
        edges: list[int] = []
        rows: list[int] = []
        for w in frontier:
            live = kids[w][deleted[w]:]
            if live.size:
                rows.extend([len(nodes)] * live.size)
                nodes.append(w)
                edges.extend(int(c) for c in live)
        if not nodes:
            return levels
        e = np.array(edges, dtype=np.int64)
        levels.append(_Level(pack.add(nodes), pack.add(e), pack.add(rows), pack.add(tree.parents[e]),
                             pack.add(tree.tokens[e]), int(tree.depths[e[0]])))
        frontier = edges


def _traversal_plan(tree: Tree, pack: _IndexPack) -> _TraversalPlan:
    """Follow ``theory.traversal.TraversalWalk.next_test`` / ``reject`` on the tree's structure alone."""
    n = tree.size
    kids = [tree.children(u) for u in range(n)]
    deleted = np.zeros(n, dtype=np.int64)
    start = _live_levels(tree, kids, deleted, 0, pack)
    tests: list[int] = []
    rejections: list[_Rejection] = []
    while True:
        v = 0
        while deleted[v] < kids[v].size:
            v = int(kids[v][deleted[v]])
        tests.append(v)
        if v == 0:
            return _TraversalPlan(tests, pack.add(tests), rejections, start)
        u = int(tree.parents[v])
        deleted[u] += 1
        rejections.append(_Rejection(v, u, _live_levels(tree, kids, deleted, u, pack)))


class _TraversalState:
    """The R4 state of one step on the device: targets P, draft residuals Q (from the drafts with the
    deleted children's tokens zeroed, ``Qz``), path weights alpha, each edge's current ratio b (indexed by
    the child), and for the budget each node's remaining budget and current stage's Delta."""

    def __init__(self, p: torch.Tensor, q: torch.Tensor, boost: Boost, nb: torch.Tensor | None,
                 emb: torch.Tensor | None, pack: _IndexPack) -> None:
        self.boost, self.nb, self.emb, self.pack = boost, nb, emb, pack
        n, self.V = p.shape
        self.P = p.clone()
        self.Qz = q.clone()
        self.Q = self.Qz / seqsum(self.Qz).unsqueeze(-1)  # rows of leaves are never read
        self.alpha = torch.ones(n, dtype=p.dtype, device=p.device)
        self.b = torch.zeros(n, dtype=p.dtype, device=p.device)
        self.left = torch.full((n,), boost.tv if boost.uses_budget else 0.0, dtype=p.dtype,
                               device=p.device)
        self.excess = torch.zeros(n, dtype=p.dtype, device=p.device)

    def _stage(self, lv: _Level) -> None:
        """The stages of ``lv.nodes``: the ratios of their live children (and the budget's Deltas)."""
        nodes, rows, toks = self.pack.get(lv.nodes), self.pack.get(lv.rows), self.pack.get(lv.tokens)
        if self.boost.uses_budget:
            st = budget_stages(self.P[nodes], self.Q[nodes], self.alpha[nodes], self.left[nodes], self.nb)
            self.b[self.pack.get(lv.edges)] = st.ratio[rows, toks]
            self.excess[nodes] = st.charge
            return
        self.b[self.pack.get(lv.edges)] = edge_ratios(self.P[nodes], self.Q[nodes], rows, toks, self.boost,
                                                      self.boost.omega_at(lv.depth), self.emb)

    def _propagate(self, lv: _Level) -> None:
        edges = self.pack.get(lv.edges)
        self.alpha[edges] = torch.clamp(self.alpha[self.pack.get(lv.parents)] * self.b[edges], max=1.0)

    def recompute(self, levels: list[_Level], *, all_stages: bool) -> None:
        """alpha over a live subtree, top-down. A node's stage changes with its P and Q (only the subtree's
        root's: ``all_stages`` False) or, for the budget, with its alpha (every node's)."""
        for i, lv in enumerate(levels):
            if i == 0 or all_stages or self.boost.uses_budget:
                self._stage(lv)
            self._propagate(lv)

    def reject(self, rej: _Rejection, token: int) -> None:
        """``theory.traversal.TraversalWalk.reject`` of node ``rej.node`` (drafted ``token``)."""
        u = rej.parent
        a = self.alpha[u].clone()
        res = torch.clamp(a * self.P[u] - self.Q[u], min=0.0)
        S = seqsum(res)
        self.P[u] = torch.where(S > 0.0, res / S, torch.full_like(res, 1.0 / self.V))
        if self.boost.uses_budget:
            self.left[u] = self.left[u] - self.excess[u]
        if rej.levels:  # u keeps live children: its draft residual is read again
            self.Qz[u, token] = 0.0
            self.Q[u] = self.Qz[u] / seqsum(self.Qz[u])
        denom = S + (1.0 - a)  # exactly S when a = 1 (the root), so that alpha(root) stays 1.0
        one, zero = torch.ones_like(a), torch.zeros_like(a)
        self.alpha[u] = torch.where(S > 0.0, S / denom, torch.where(denom <= 0.0, one, zero))
        self.recompute(rej.levels, all_stages=False)


def _is_checkpoint(count: int, last: bool) -> bool:
    """Read after tests 1, 2, 4, 8, ... and after the last."""
    return last or (count & (count - 1)) == 0


def traversal_step(tree: Tree, p: torch.Tensor, q: torch.Tensor, u_accept: torch.Tensor, u_draw: torch.Tensor,
                   *, boost: Boost, neighbours: torch.Tensor | None, emb: torch.Tensor | None, link: HostLink
                   ) -> tuple[np.ndarray, int]:
    """One R4 step (relaxed by ``boost``: none, GSD, Cool-SD or the budget): decision for decision
    ``theory.traversal.sample_traversal_step`` with the same uniforms.

    Parameters
    ----------
    tree : the drawn tree (children of a node drawn from its q without replacement, in draw order).
    p, q : (n, V) target and draft rows on one device (float64 for theory's decisions bit for bit).
    u_accept, u_draw : (n,) uniforms on that device: node v's eta and its bonus draw.
    boost : ``theory.boost.Boost``; ``neighbours`` (V, >= k) long tensor for the budget, ``emb`` (V, dim)
        for GSD (None when unused).
    link : counts the host reads (module docstring: about log2(tests) + 1).

    Returns
    -------
    (path, token): the accepted nodes from the root (int64) and the emitted token.
    """
    nb, e = _check_step(tree, p, q, u_accept, u_draw, boost, neighbours, emb)
    pack = _IndexPack()
    edge_parents, edge_tokens = _edge_validity(tree, pack)
    plan = _traversal_plan(tree, pack)
    pack.upload(p.device)
    drawable = _drafts_drawable(q, pack.get(edge_parents), pack.get(edge_tokens))
    state = _TraversalState(p, q, boost, nb, e, pack)
    state.recompute(plan.start, all_stages=True)
    tests = pack.get(plan.tests_handle)
    for j, v in enumerate(plan.tests, start=1):
        if _is_checkpoint(j, v == 0):
            nodes = tests[:j]
            accepted = (u_accept[nodes] < state.alpha[nodes]) | (nodes == 0)
            first = torch.argmax(accepted.to(torch.uint8))
            node = nodes[first]
            token = draw_token(state.P[node], u_draw[node])
            hit, end, tok, ok = (int(x) for x in link.read(torch.stack(
                (accepted.any().long(), node, token, drawable.long()))))
            if not ok:
                _raise_undrawable(tree, link.read(q[pack.get(edge_parents), pack.get(edge_tokens)]))
            if hit:
                return _path(tree, end), tok
        if v != 0:
            state.reject(plan.rejections[j - 1], int(tree.tokens[v]))
    raise AssertionError("the R4 loop ends with the root's test, which always accepts")


def _path(tree: Tree, v: int) -> np.ndarray:
    """Nodes root..v."""
    out = [v]
    while out[-1] != 0:
        out.append(int(tree.parents[out[-1]]))
    return np.array(out[::-1], dtype=np.int64)


# ------------------------------------------------------------------ budgeted R2
def _standard_residual(r: torch.Tensor, qp: torch.Tensor) -> torch.Tensor:
    """``theory.boost.standard_residual`` of each row."""
    return normalise_residual(torch.clamp(r - qp, min=0.0))


def budget_r2_step(tree: Tree, p: torch.Tensor, q: torch.Tensor, u_accept: torch.Tensor, u_draw: torch.Tensor,
                   *, boost: Boost, neighbours: torch.Tensor, link: HostLink) -> tuple[np.ndarray, int]:
    """One budgeted-R2 step (SPEC 9.5): decision for decision ``theory.budget.sample_budget_r2_step`` with
    the same uniforms; every node has its own budget ``boost.tv``.

    Parameters as :func:`traversal_step` (``neighbours``: the (V, >= k) long table on p's device). Every
    internal node's stages run batched (one pass per draw index) and the step costs one host read.

    Returns
    -------
    (path, token): the accepted nodes from the root (int64) and the emitted token.
    """
    if not isinstance(boost, Boost) or not boost.uses_budget:
        raise ValueError(f"budget_r2_step needs a budget boost (Boost.budget(tv, k)), got {boost!r}")
    nb, _ = _check_step(tree, p, q, u_accept, u_draw, boost, neighbours, None)
    n = tree.size
    kids = [tree.children(u) for u in range(n)]
    internal = np.array([u for u in range(n) if kids[u].size], dtype=np.int64)
    leaves = np.array([u for u in range(n) if not kids[u].size], dtype=np.int64)
    width = max((k.size for k in kids), default=0)
    pack = _IndexPack()
    edge_parents, edge_tokens = _edge_validity(tree, pack)
    h_internal, h_leaves = pack.add(internal), pack.add(leaves)
    stages = []  # draw i: (rows among internal nodes with more than i children, child nodes, their tokens)
    for i in range(width):
        rows = np.array([j for j, u in enumerate(internal) if kids[u].size > i], dtype=np.int64)
        child = np.array([kids[internal[j]][i] for j in rows], dtype=np.int64)
        stages.append((pack.add(rows), pack.add(child), pack.add(tree.tokens[child])))
    pack.upload(p.device)
    drawable = _drafts_drawable(q, pack.get(edge_parents), pack.get(edge_tokens))
    I = pack.get(h_internal)
    m = internal.size
    choice = torch.full((n,), -1, dtype=torch.long, device=p.device)
    token = torch.zeros(n, dtype=torch.long, device=p.device)
    if m:
        r, qz = p[I].clone(), q[I].clone()
        left = torch.full((m,), boost.tv, dtype=p.dtype, device=p.device)
        chosen = torch.full((m,), -1, dtype=torch.long, device=p.device)
        for hr, hc, ht in stages:
            rows, child, toks = pack.get(hr), pack.get(hc), pack.get(ht)
            zr = qz[rows]
            qp = zr / seqsum(zr).unsqueeze(-1)
            rr = r[rows]
            st = budget_stages(rr, qp, torch.ones_like(left[rows]), left[rows], nb)
            accept = u_accept[child] < st.accept[torch.arange(rows.numel(), device=p.device), toks]
            first = accept & (chosen[rows] < 0)
            chosen[rows] = torch.where(first, child, chosen[rows])
            r[rows] = _standard_residual(rr, qp)
            left[rows] = left[rows] - st.charge
            qz[rows, toks] = 0.0
        choice[I] = chosen
        token[I] = draw_token(r, u_draw[I])
    L = pack.get(h_leaves)
    token[L] = draw_token(p[L], u_draw[L])
    out = link.read(torch.cat((choice, token, drawable.long().reshape(1))))
    if not out[-1]:
        _raise_undrawable(tree, link.read(q[pack.get(edge_parents), pack.get(edge_tokens)]))
    path = [0]
    while True:
        u = path[-1]
        if out[u] < 0:
            return np.array(path, dtype=np.int64), int(out[n + u])
        path.append(int(out[u]))


__all__ = ["budget_r2_step", "edge_ratios", "traversal_step"]
