"""The device verifier's node-by-node rules (R1, R2 plain, relaxed or boosted by GSD / Cool-SD, R3
greedy): the walk down a drawn tree and the stages each node tests, in torch (``reference.verify``'s
:class:`~reference.verify.DeviceVerifier` inherits them; R4 and the budget go to
``reference.verify_traversal``). The arithmetic is theory's (``theory.stages``, ``theory.boost_law``):
see ``reference.verify``'s docstring for what is bit for bit and what is within a few ulps.
"""

from __future__ import annotations

import numpy as np
import torch

from relaxspec.reference.verify_ops import draw_token, normalise_residual, seqsum
from relaxspec.theory.boost import OFFICIAL_BELOW
from relaxspec.theory.boost_law import window_extent
from relaxspec.theory.relax import Relax, Variant
from relaxspec.theory.rules import Rule
from relaxspec.theory.stages import EXHAUSTION_CHECK
from relaxspec.theory.tree import Tree


def merge_counts(r: torch.Tensor, total: torch.Tensor | None, x: torch.Tensor, rows: torch.Tensor,
                 relax: Relax) -> tuple[torch.Tensor, torch.Tensor]:
    """``theory.relax.merge_count`` for a batch: J (long) and C_J of candidate ``x[i]`` on row ``r[i]``.

    ``total`` is each row's mass (None: 1.0), ``rows`` the candidates' neighbour rows (at least k
    columns). C_j is a running sum (cumsum) and J the first j whose C_j exceeds the bound, else k.
    """
    m = x.shape[0]
    if relax.is_exact:
        return x.new_zeros(m), r.new_zeros(m)
    k = relax.k
    cum = torch.cumsum(r.gather(1, rows[:, :k]), dim=1)
    if relax.is_additive:
        bound = relax.delta * (total if total is not None else r.new_ones(m))
    else:
        bound = (relax.lam - 1.0) * r.gather(1, x[:, None])[:, 0]
    over = cum > bound[:, None]
    J = torch.where(over.any(dim=1), torch.argmax(over.to(torch.uint8), dim=1), torch.full_like(x, k))
    c = cum.gather(1, (J - 1).clamp(min=0)[:, None])[:, 0]
    return J, torch.where(J > 0, c, torch.zeros_like(c))


def _first_true(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: whether ``mask`` has a True, and the first True's column (0 when none)."""
    return mask.any(dim=-1), torch.argmax(mask.to(torch.uint8), dim=-1)


def _row_problems(rows: torch.Tensor, check_sum: bool, atol: float) -> torch.Tensor:
    """Per row: 0 when fine, else the code of its first problem (:data:`ROW_PROBLEMS`), in
    ``theory.distributions.validate_distribution``'s order."""
    finite = torch.isfinite(rows).all(dim=-1)
    negative = (rows < 0).any(dim=-1)
    code = torch.where(~finite, 1, torch.where(negative, 2, 0))
    if check_sum:
        off = (rows.sum(dim=-1) - 1.0).abs() > atol
        code = torch.where(code == 0, torch.where(off, 3, 0), code)
    return code


def _first_problem(code: torch.Tensor) -> torch.Tensor:
    """``[row, code]`` of the first row with a problem, ``[-1, 0]`` when none (long, on the device)."""
    bad, row = _first_true(code > 0)
    return torch.stack([torch.where(bad, row, -1), code.index_select(0, row.view(1))[0]]).long()


class NodeWalk:
    """R1-R3 step by step on the device (a mixin of ``reference.verify.DeviceVerifier``: it reads the
    verifier's rule, relaxation, variant, boost, tables and helpers)."""

    def _greedy_nodes(self, P: torch.Tensor, kt: torch.Tensor, listed: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """R3 of independent nodes (``theory.sampler.sample_node``): the first acceptable child, else
        the argmax of p."""
        m, K = kt.shape
        best = torch.argmax(P, dim=1)
        if K == 0:
            return torch.full((m,), -1, dtype=torch.long, device=P.device), best
        ok = self._greedy_acceptable(P.repeat_interleave(K, dim=0), kt.flatten()).view(m, K) & listed
        hit, first = _first_true(ok)
        return torch.where(hit, first, -1), torch.where(hit, kt.gather(1, first[:, None])[:, 0], best)

    def _greedy_step(self, tree: Tree, P: torch.Tensor, flags: list[torch.Tensor]) -> tuple[np.ndarray, int]:
        """R3 (``theory.tree.greedy_path``): the deepest chain of acceptable nodes (first in node order),
        then argmax p at its end."""
        n, D, dev = tree.size, tree.depth, self.device
        # host -> device copies first: a copy from pageable memory waits for the work queued before it
        parents = torch.as_tensor(np.maximum(tree.parents, 0), device=dev)
        x = torch.tensor(tree.tokens[1:], device=dev)
        depths = torch.tensor(tree.depths, device=dev)
        ok = torch.ones(n, dtype=torch.bool, device=dev)
        if n > 1:
            ok[1:] = self._greedy_acceptable(P[parents[1:]], x)
        acceptable = ok.clone()
        for _ in range(D):
            ok = acceptable & ok[parents]
        idx = torch.arange(n, device=dev)
        best = torch.argmax(torch.where(ok, depths * (n + 1) + (n - idx), -1))[None]
        up = [best]
        for _ in range(D):
            up.append(parents[up[-1]])
        bonus = torch.argmax(P.index_select(0, best), dim=1)
        no_q = torch.full((2,), -1, dtype=torch.long, device=dev)
        checks = [_first_problem(_row_problems(P, False, 0.0)), no_q, *flags]
        out = self.link.read(torch.cat(up + [bonus] + checks))
        self._raise_flags(out[D + 2:])
        chain = out[D::-1]
        path = chain[int(np.flatnonzero(chain == 0)[-1]):]
        return path.astype(np.int64), int(out[D + 1])

    def _greedy_acceptable(self, p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``theory.stages.greedy_acceptable`` for candidate ``x[i]`` on row ``p[i]``."""
        J, c = merge_counts(p, None, x, self._rows_of(x), self.relax)
        mx = p.gather(1, x[:, None])[:, 0] + c
        best = torch.argmax(p, dim=1)
        others = p.scatter(1, x[:, None], -1.0)
        top = torch.argmax(others, dim=1)
        other = others.gather(1, top[:, None])[:, 0]
        return (best == x) | (mx > other) | ((mx == other) & (x < top))

    def _rows_of(self, x: torch.Tensor) -> torch.Tensor:
        """The neighbour rows of tokens ``x`` (no columns when the rule reads none)."""
        if self.table is None:
            return x.new_zeros((x.shape[0], 0))
        return self.table[x]

    def _walk_step(self, tree: Tree, P: torch.Tensor, Q: torch.Tensor | None, ua: torch.Tensor,
                   ud: torch.Tensor, relax: Relax, variant: str, flags: list[torch.Tensor],
                   drafts: np.ndarray | None = None, checked: bool = False) -> tuple[np.ndarray, int]:
        """R1 or R2 (``theory.tree.sample_step`` with ``theory.sampler.sample_node``): every node decided
        at once (:meth:`_stages`), then the path followed on the device and its end node's draw; one
        read. ``drafts``: the window's (its flags' layout). In the ``host`` mode: :meth:`_walk_on_host`."""
        if self.mode == "host":
            return self._walk_on_host(tree, P, Q, ua, ud, relax, variant, flags, drafts, checked)
        dev, n = self.device, tree.size
        counts = np.bincount(tree.parents[1:], minlength=n)
        kid_node = np.zeros((n, int(counts.max(initial=0))), dtype=np.int64)
        for u in np.flatnonzero(counts):
            ks = tree.children(u)
            kid_node[u, : ks.size] = ks
        kid_token = np.where(np.arange(kid_node.shape[1]) < counts[:, None], tree.tokens[kid_node], 0)
        # host -> device copies first: a copy from pageable memory waits for the work queued before it
        kn = torch.as_tensor(kid_node, device=dev)
        kt = torch.as_tensor(kid_token, device=dev)
        omega = torch.tensor([self.boost.omega_at(int(d) + 1) for d in tree.depths], dtype=self.dtype,
                             device=dev)
        index, _, rows, slot = self._stages(P, Q, kt, counts, ua[kn], omega, relax, variant)
        if kn.shape[1]:
            index = torch.where(index >= 0, kn.gather(1, index.clamp(min=0)[:, None])[:, 0], index)
        choice = index  # the accepted child's node, or a negative code
        flags = self._step_flags(P, Q, counts, flags, drafts, checked)
        D = tree.depth
        cur = torch.zeros(1, dtype=torch.long, device=dev)
        entries = [cur]
        for _ in range(D):
            c = choice.index_select(0, cur)
            cur = torch.where(c >= 0, c, cur)
            entries.append(torch.where(c >= 0, c, -1))
        # the end node emits: a draw from its residual (or p at a leaf); only that one row is drawn from
        drawn = draw_token(self._end_rows(P, rows, slot, cur), ud.index_select(0, cur))
        out = self.link.read(torch.cat(entries + [drawn, choice.index_select(0, cur)] + flags))
        self._raise_flags(out[D + 3:], drafts, window=drafts is not None)
        status = int(out[D + 2])
        path = out[: D + 1]
        path = path[path >= 0].astype(np.int64)
        if status <= -2:
            child = tree.children(int(path[-1]))[-2 - status]
            raise ValueError(f"drafted token {int(tree.tokens[child])} has zero draft probability")
        return path, int(out[D + 1])

    def _walk_on_host(self, tree: Tree, P: torch.Tensor, Q: torch.Tensor | None, ua: torch.Tensor,
                      ud: torch.Tensor, relax: Relax, variant: str, flags: list[torch.Tensor],
                      drafts: np.ndarray | None, checked: bool) -> tuple[np.ndarray, int]:
        """:meth:`_walk_step` in the ``host`` mode, node by node in theory's order: only the nodes the
        path visits are verified (the batched walk verifies every node with children: on a GPU that
        costs no more time, on a CPU it costs the nodes' work). One read of the flags, then one per node
        visited; the reads cross no bus here."""
        dev = self.device
        counts = np.bincount(tree.parents[1:], minlength=tree.size)
        self._raise_flags(self.link.read(torch.cat(self._step_flags(P, Q, counts, flags, drafts, checked))),
                          drafts, window=drafts is not None)
        u, path, row = 0, [0], None
        while counts[u]:
            kids = tree.children(u)
            omega = torch.tensor([self.boost.omega_at(int(tree.depths[u]) + 1)], dtype=self.dtype, device=dev)
            index, _, rows, _ = self._stages(P[u:u + 1], None if Q is None else Q[u:u + 1],
                                             torch.as_tensor(tree.tokens[kids][None], device=dev),
                                             counts[u:u + 1], ua[torch.as_tensor(kids, device=dev)][None],
                                             omega, relax, variant)
            i = int(self.link.item(index))
            if i <= -2:
                raise ValueError(f"drafted token {int(tree.tokens[kids[-2 - i]])} has zero draft probability")
            if i < 0:
                row = rows
                break
            u = int(kids[i])
            path.append(u)
        row = P[u:u + 1] if row is None else row
        return np.array(path, dtype=np.int64), int(self.link.item(draw_token(row, ud[u:u + 1])))

    def _step_flags(self, P: torch.Tensor, Q: torch.Tensor | None, counts: np.ndarray,
                    flags: list[torch.Tensor], drafts: np.ndarray | None, checked: bool
                    ) -> list[torch.Tensor]:
        """The flags a step reads (layout: :meth:`_raise_flags`): a window's as given; a tree's p rows and
        the q rows of its nodes with children (skipped when ``checked``), then ``flags``."""
        if drafts is not None:
            return flags
        dev, n = self.device, counts.size
        if checked:
            fine = torch.tensor([-1, 0], dtype=torch.long, device=dev)
            return [fine, fine, *flags]
        q_code = (torch.where(torch.as_tensor(counts > 0, device=dev), _row_problems(Q, False, 0.0), 0)
                  if Q is not None else torch.zeros(n, dtype=torch.long, device=dev))
        return [_first_problem(_row_problems(P, False, 0.0)), _first_problem(q_code), *flags]

    def _decide(self, P: torch.Tensor, Q: torch.Tensor | None, kt: torch.Tensor, counts: np.ndarray,
                uk: torch.Tensor, ud: torch.Tensor, omega: torch.Tensor, relax: Relax, variant: str
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``theory.sampler.sample_node`` (R1, R2) of m independent nodes, on the device: :meth:`_stages`,
        then every node's draw. Returns ``(index, token)``: the accepted child's column (-1: none, then
        the token is the residual draw; -2 - i: draw i has zero draft probability, which theory
        refuses) and the token the node emits."""
        index, token, rows, slot = self._stages(P, Q, kt, counts, uk, omega, relax, variant)
        drawn = draw_token(self._end_rows(P, rows, slot, torch.arange(P.shape[0], device=P.device)), ud)
        return index, torch.where(index >= 0, token, drawn)

    @staticmethod
    def _end_rows(P: torch.Tensor, rows: torch.Tensor, slot: torch.Tensor, nodes: torch.Tensor
                  ) -> torch.Tensor:
        """The rows ``nodes`` draw from when they emit: the residual left by their rejected children
        (``rows[slot]``), or p for a node without children (``slot`` -1)."""
        at = slot.index_select(0, nodes)
        if rows.shape[0] == 0:
            return P.index_select(0, nodes)
        own = rows.index_select(0, at.clamp(min=0))
        return torch.where((at >= 0)[:, None], own, P.index_select(0, nodes))

    def _stages(self, P: torch.Tensor, Q: torch.Tensor | None, kt: torch.Tensor, counts: np.ndarray,
                uk: torch.Tensor, omega: torch.Tensor, relax: Relax, variant: str
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The stages of the m nodes' children (R1 or R2), without the draws.

        ``kt`` (m, K): each node's children's tokens (its first ``counts`` columns), ``uk`` (m, K) their
        uniforms, ``omega`` (m,) Cool-SD's factor. Returns ``(index, token, rows, slot)``: per node the
        accepted child's column (as :meth:`_decide`) and token (meaningful where index >= 0), the
        residual rows of the nodes with children (a rejection of all of them leaves it) and each node's
        row in them (-1 without children). The stages run in order of the child index over the nodes
        with that many children (rows sorted by their number of children, so those are a prefix); only
        the nodes with children are copied."""
        m, K = kt.shape
        dev = P.device
        inner = int(np.count_nonzero(counts))
        if K == 0 or inner == 0:
            none = torch.full((m,), -1, dtype=torch.long, device=dev)
            return none, none.clone(), P[:0], none.clone()
        order = np.argsort(-counts, kind="stable")[:inner]
        active = [int(np.count_nonzero(counts > i)) for i in range(K)]
        o = torch.as_tensor(order, device=dev)
        kt_o, uk_o = kt[o], uk[o]
        if self.rule == Rule.R1:
            event, bad, r = self._r1_stages(P[o], kt_o, active, uk_o, relax, variant)
        else:
            event, bad, r = self._r2_stages(P[o], Q[o], kt_o, active, uk_o, relax, variant, omega[o])
        hit, first = _first_true(event)
        at = first[:, None]
        index_o = torch.where(hit, torch.where(bad.gather(1, at)[:, 0], -2 - first, first), -1)
        index = torch.full((m,), -1, dtype=torch.long, device=dev).index_copy_(0, o, index_o)
        token = torch.zeros(m, dtype=torch.long, device=dev).index_copy_(0, o, kt_o.gather(1, at)[:, 0])
        slot = torch.full((m,), -1, dtype=torch.long, device=dev).index_copy_(
            0, o, torch.arange(inner, device=dev))
        return index, token, r, slot

    def _r1_stages(self, r: torch.Tensor, kt: torch.Tensor, active: list[int], uk: torch.Tensor,
                   relax: Relax, variant: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every R1 stage (``theory.stages.r1_stage`` / ``r1_reject``) of every node, stage by stage:
        (accepted events, bad draws (none for R1), final residuals). In float32 the residual's mass is
        re-summed after every rejection instead of tracked by subtraction."""
        m, K = kt.shape
        V = r.shape[1]
        Z = r.new_ones(m)
        event = torch.zeros((m, K), dtype=torch.bool, device=r.device)
        for i, a_rows in enumerate(active):
            x = kt[:a_rows, i]
            ri, Zi = r[:a_rows], Z[:a_rows]
            rows = self._rows_of(x)
            J, c = merge_counts(ri, Zi, x, rows, relax)
            a = torch.where(Zi > 0, torch.clamp((ri.gather(1, x[:, None])[:, 0] + c) / Zi, max=1.0), 1.0)
            event[:a_rows, i] = uk[:a_rows, i] < a.to(torch.float64)
            # the tokens a rejection zeroes: x, then its first J neighbours (official: its first k + 1
            # whenever J >= 1), in order; unused slots point at x, zeroed already
            if relax.is_exact:
                nb = rows[:, :0]
                valid = torch.ones((a_rows, 0), dtype=torch.bool, device=r.device)
            elif variant == Variant.OFFICIAL:
                nb = rows
                valid = (J >= 1)[:, None].expand(-1, nb.shape[1])
            else:
                nb = rows[:, : relax.k]
                valid = torch.arange(nb.shape[1], device=r.device)[None] < J[:, None]
            zeroed = torch.cat([x[:, None], torch.where(valid, nb, x[:, None])], dim=1)
            valid = torch.cat([valid.new_ones((a_rows, 1)), valid], dim=1)
            slot = torch.arange(zeroed.shape[1], device=r.device).expand(a_rows, -1)
            seen = torch.full((a_rows, V), zeroed.shape[1], dtype=torch.long, device=r.device)
            seen.scatter_reduce_(1, zeroed, slot, reduce="amin")
            first = seen.gather(1, zeroed) == slot  # a repeated token adds 0: theory zeroed it already
            removed = seqsum(torch.where(valid & first, ri.gather(1, zeroed), 0.0))
            ri = ri.scatter(1, zeroed, 0.0)
            if r.dtype == torch.float64:
                Zi = Zi - removed
                Zi = torch.where(Zi <= EXHAUSTION_CHECK, seqsum(ri), Zi)
            else:  # float32 subtraction can leave ~1e-8 of an empty residual: always re-sum
                Zi = seqsum(ri)
            empty = Zi <= 0.0
            r[:a_rows] = torch.where(empty[:, None], 1.0, ri)
            Z[:a_rows] = torch.where(empty, float(V), Zi)
        return event, torch.zeros_like(event), r

    def _r2_stages(self, r: torch.Tensor, q: torch.Tensor, kt: torch.Tensor, active: list[int],
                   uk: torch.Tensor, relax: Relax, variant: str, omega: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every R2 stage (``theory.boost.sampled_draft_stage`` on ``theory.stages.draft_residual``) of
        every node, stage by stage: (tested-and-accepted or zero-q events, zero-q draws, final
        residuals). A node stops testing when its draft residual has no mass left."""
        m, K = kt.shape  # r and q are the caller's copies (P[o], Q[o]): updated in place
        alive = torch.ones(m, dtype=torch.bool, device=r.device)
        event = torch.zeros((m, K), dtype=torch.bool, device=r.device)
        bad = torch.zeros((m, K), dtype=torch.bool, device=r.device)
        for i, a_rows in enumerate(active):
            x = kt[:a_rows, i]
            if i:
                q[:a_rows] = q[:a_rows].scatter(1, kt[:a_rows, i - 1 : i], 0.0)
            s = seqsum(q[:a_rows])
            alive[:a_rows] &= s > 0.0
            qp = q[:a_rows] / s[:, None]
            ri = r[:a_rows]
            rx = ri.gather(1, x[:, None])[:, 0]
            qx = qp.gather(1, x[:, None])[:, 0]
            if self.boost.reads_embedding:
                a = torch.clamp(self._group_ratio(ri, qp, x), max=1.0)
                res = torch.clamp(ri - qp, min=0.0)
            elif self.boost.scales_by_depth:
                a = torch.clamp(omega[:a_rows] * rx / qx, max=1.0)
                res = torch.clamp(ri - qp, min=0.0)
            else:
                a, res = self._r2_relaxed(ri, qp, x, rx, qx, relax, variant)
            r_next = normalise_residual(res)
            live = alive[:a_rows]
            bad[:a_rows, i] = live & (qx <= 0.0)
            event[:a_rows, i] = live & (bad[:a_rows, i] | (uk[:a_rows, i] < a.to(torch.float64)))
            r[:a_rows] = torch.where(live[:, None], r_next, ri)
        return event, bad, r

    def _r2_relaxed(self, r: torch.Tensor, qp: torch.Tensor, x: torch.Tensor, rx: torch.Tensor,
                    qx: torch.Tensor, relax: Relax, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``theory.stages.r2_stage``: the acceptance and the unnormalised residual after a rejection."""
        m, V = r.shape
        rows = self._rows_of(x)
        J, c = merge_counts(r, None, x, rows, relax)
        a = torch.clamp((rx + c) / qx, max=1.0)
        if relax.is_exact:
            return a, torch.clamp(r.scatter(1, x[:, None], (rx + c)[:, None]) - qp, min=0.0)
        pad = torch.full_like(rows, V)  # column V of the mask: a write that zeroes nothing
        mask = torch.zeros((m, V + 1), dtype=torch.bool, device=r.device)
        if variant == Variant.OFFICIAL:
            mask.scatter_(1, torch.where((J >= 1)[:, None], rows, pad), True)
            return a, torch.clamp(r - torch.where(mask[:, :V], 0.0, qp), min=0.0)
        nb = rows[:, : relax.k]
        valid = torch.arange(nb.shape[1], device=r.device)[None] < J[:, None]
        mask.scatter_(1, torch.where(valid, nb, pad[:, : relax.k]), True)
        rt = torch.where(mask[:, :V], 0.0, r).scatter(1, x[:, None], (rx + c)[:, None])
        return a, torch.clamp(rt - qp, min=0.0)

    def _group_ratio(self, r: torch.Tensor, qp: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """GSD's p(C)/q(C) for draft ``x[i]`` on residual ``r[i]`` (``theory.boost.group_members``: the
        window of ranks around x in r, ties by lower id; |r(y) - r(x)| < tau and squared embedding
        distance < dist; official window: x alone when fewer than 7 tokens rank below it), the sums
        sequential in rank order."""
        m, V = r.shape
        boost, dev = self.boost, r.device
        order = torch.sort(r + 0.0, dim=1, descending=True, stable=True).indices  # + 0.0: no -0.0 keys
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(V, device=dev).expand(m, -1))
        rx_rank = rank.gather(1, x[:, None])
        before, after = window_extent(boost.group_size, boost.window)
        offset = torch.arange(-before, after + 1, device=dev)[None]
        at = rx_rank + offset
        inside = (at >= 0) & (at < V)
        if boost.official_window:
            alone = V - 1 - rx_rank < OFFICIAL_BELOW
            inside &= ~alone | (offset == 0)
        cand = order.gather(1, at.clamp(0, V - 1))
        rc = r.gather(1, cand)
        close = (rc - r.gather(1, x[:, None])).abs() < boost.tau
        diff = self.embedding[cand] - self.embedding[x][:, None, :]
        d2 = torch.cumsum(diff * diff, dim=2)[..., -1]
        keep = inside & ((close & (d2 < boost.dist)) | (cand == x[:, None]))
        return seqsum(torch.where(keep, rc, 0.0)) / seqsum(torch.where(keep, qp.gather(1, cand), 0.0))

__all__ = ["NodeWalk", "merge_counts"]
