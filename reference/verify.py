"""The device verifier (issue 19): one verification step of any rule as batched torch operations.

:class:`DeviceVerifier` takes the guided target rows p (and the draft rows q) of a drawn tree as tensors
on the decoder's device and returns what ``theory.rule_step.sample_rule_step`` returns (the accepted path
and the emitted token); a Jacobi window what ``theory.rule_step.sample_window_step`` returns; a batch of
independent nodes what ``theory.sampler.sample_node`` returns for each. Rules r1, r2 (with GSD's group and
Cool-SD's depth boosts) and r3 are verified here; rule r4 and the budget boost go to
``reference.verify_traversal``.

How a step runs (R1, R2), in the ``device`` mode (the default off a CPU): a node's stages (its children
tested in rank order, each after every earlier sibling was rejected) do not depend on the uniforms, so
stage i of every internal node is computed in one batched pass (a loop over the child index, never over
the vocabulary), giving each child's acceptance probability and each node's final residual. The first
accepted child of every node is picked on the device (``u_accept < a``), the path is followed on the
device (a loop over depth with gathers), and the node where it ends draws the emitted token from its
residual (or, at a leaf, its target row). Host traffic per step: one read (``self.link`` counts it) of
the path, the emitted token and the validity flags of the inputs. In the ``host`` mode (the default on a
CPU, where reads cross no bus) the same stages run node by node along the path, one read per node
visited, and :meth:`DeviceVerifier.probs` is theory's own NumPy function on the tensors' memory. R3
marks every acceptable node at once and takes the deepest acceptable chain; a window verified by r4 or
the budget boost reads its validity flags once before ``reference.verify_traversal`` runs. The small
host -> device copies of a step (the tree's layout, the uniforms) are made before its kernels are
queued.

Arithmetic: theory's, operation for operation (``theory.stages``, ``theory.relax.merge_count``,
``theory.boost``), with the sums that decide anything sequential (``torch.cumsum``, left to right on
CPU), so in float64 on CPU every decision is theory's given the same uniforms, whatever the neighbour
table holds (repeats included). On a GPU, or in float32, a decision may differ where a comparison lies
within rounding of its threshold; in float32, R1 re-sums its residual's mass after every rejection
rather than tracking it by subtraction (which in float32 leaves ~1e-8 of an emptied residual).

Deviations from theory, all on bad input: a neighbour table with ids outside [0, V) is refused when the
verifier is built (theory would index with them), and non-finite or negative rows and uniforms outside
[0, 1) raise ``ValueError`` (theory's ``sample_step`` reads them as they are). ``probs`` computes the
same laws as ``theory.distributions.logits_to_probs`` (the same kept tokens), its values within a few
ulps in the ``device`` mode (NumPy's SIMD ``exp`` and torch's are not rounded alike), exactly in the
``host`` mode.
"""

from __future__ import annotations

import numpy as np
import torch

from relaxspec.core.trace import Sampling
from relaxspec.reference.verify_ops import HostLink
from relaxspec.reference.verify_walk import NodeWalk, _first_problem, _first_true, _row_problems
from relaxspec.theory.distributions import SUM_ATOL, TOP_P_TOL, logits_to_probs
from relaxspec.theory.jacobi_sampler import check_window_size, window_tree
from relaxspec.theory.relax import NO_RELAX
from relaxspec.theory.rule_step import step_neighbours
from relaxspec.theory.rules import SAMPLED_DRAFT_RULES, Rule, boost_embedding
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import Verification, parse

DTYPES = (torch.float32, torch.float64)
"""The dtypes a verifier computes in: float64 (theory's decisions on CPU) or float32."""
ROW_PROBLEMS = ("", "has a NaN or infinite entry", "has a negative probability", "does not sum to 1")
"""What a row check reports, by code (0: the row is fine)."""


def _device(device: str | torch.device) -> torch.device:
    """``device`` as a torch.device with its index (``cuda`` -> ``cuda:<current>``)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}: {err}") from err
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asks for CUDA, which this machine does not have")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev



MODES = ("auto", "device", "host")


class DeviceVerifier(NodeWalk):
    """Verify draft trees and Jacobi windows on the device with theory's decisions (module docstring).

    Parameters
    ----------
    verification
        The rule (a ``theory.verification.Verification`` or its spec), validated when it was built.
    vocab_size
        V.
    neighbours
        The neighbour table (``theory.rule_step.step_neighbours``): (V, K) integers, NumPy or a tensor
        on ``device``; read only by a LANTERN relaxation or the budget boost.
    embedding
        GSD's (V, d) embedding table (``theory.rules.boost_embedding``), NumPy or a tensor on ``device``.
    device, dtype
        Where and in what precision (float64 or float32) the verifier computes.
    mode
        ``device``: R1 and R2 verify every node with children at once and follow the path on the
        device (one read per step), all in torch's kernels; ``host``: only the nodes the path visits are
        verified, one read each, and :meth:`probs` runs NumPy's kernels on the tensors' memory (theory's
        values exactly; on a CPU they are faster than torch's); ``auto`` (default): ``host`` on a CPU,
        where the reads cross no bus and the batched walk would cost every node's work, ``device``
        elsewhere. Decisions are the same.

    The constructor validates as theory does and holds the columns of the table the rule reads (long)
    and the embedding (``dtype``) on ``device``. A tensor table (the columns the rule reads) or embedding
    is copied once to the host for that validation (through ``self.link``).
    """

    def __init__(self, verification: Verification | str, *, vocab_size: int,
                 neighbours: np.ndarray | torch.Tensor | None = None,
                 embedding: np.ndarray | torch.Tensor | None = None,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64,
                 mode: str = "auto") -> None:
        self.verification = v = parse(verification)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if isinstance(vocab_size, bool) or int(vocab_size) != vocab_size or vocab_size < 1:
            raise ValueError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        if dtype not in DTYPES:
            raise ValueError(f"the verifier computes in float64 or float32, got dtype {dtype}")
        self.rule, self.relax, self.variant, self.boost = v.rule, v.relax, v.variant, v.boost
        relax, boost = v.relax, v.boost
        self.vocab_size = V = int(vocab_size)
        self.device, self.dtype = _device(device), dtype
        self.mode = mode if mode != "auto" else ("host" if self.device.type == "cpu" else "device")
        if self.mode == "host" and self.device.type != "cpu":
            raise ValueError(f"mode 'host' runs NumPy's kernels on the tensors: it needs a CPU device, not "
                             f"{self.device}")
        self.link = HostLink()
        reads_table = boost.uses_budget or not relax.is_exact
        needed = v.neighbour_columns
        if isinstance(neighbours, torch.Tensor) and neighbours.ndim == 2:
            neighbours = neighbours[:, :needed]  # the columns the rule reads, all a copy needs
        host = self._to_host(neighbours, "neighbour table", reads_table)
        table = step_neighbours(host, V, v)
        cols = np.asarray(table[:, :needed], dtype=np.int64)
        if cols.size and (cols.min() < 0 or cols.max() >= V):
            raise ValueError(f"the neighbour table holds token ids outside [0, {V}) (from {cols.min()} to "
                             f"{cols.max()}): it belongs to another codebook, or is corrupt")
        self.table = torch.as_tensor(cols, device=self.device) if reads_table else None
        emb = boost_embedding(boost, self._to_host(embedding, "embedding table", boost.reads_embedding), V)
        self.embedding = None if emb is None else torch.as_tensor(emb, dtype=dtype, device=self.device)

    def _to_host(self, table: np.ndarray | torch.Tensor | None, name: str, read: bool) -> np.ndarray | None:
        """A table as NumPy for theory's validators; a tensor must be on the verifier's device."""
        if not isinstance(table, torch.Tensor):
            return table
        if table.device != self.device:
            raise ValueError(f"the {name} is on {table.device} but the verifier runs on {self.device}: "
                             f"move it with .to({str(self.device)!r})")
        return self.link.read(table) if read else None

    # -- logits -> probabilities -------------------------------------------------------------------
    def probs(self, logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
        """Probabilities (n, V) in ``self.dtype`` from logits (n, V) on the device: the laws of
        ``theory.distributions.logits_to_probs`` (temperature; top-k keeping the ties at the k-th
        logit; top-p keeping each token whose preceding mass is at most top_p + TOP_P_TOL, ties by
        lowest id; temperature 0: the point mass on the argmax, lowest id).

        Raises
        ------
        ValueError
            For a NaN or +inf logit, a row that is -inf everywhere (one reduction and one read for all
            rows), a tensor of another shape or device, or invalid sampling parameters.
        """
        V = self.vocab_size
        z = self._tensor(logits, "logits")
        if z.ndim != 2 or z.shape[1] != V:
            raise ValueError(f"logits must have shape (n, V={V}), got {tuple(z.shape)}")
        temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
        if not np.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature!r}")
        if not 0 <= int(top_k) <= V or int(top_k) != top_k:
            raise ValueError(f"top_k must be an integer in [0, {V}], got {top_k!r}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        if self.mode == "host":  # theory's own function on the tensor's memory (its errors name the problem)
            host = (z.float() if z.dtype == torch.bfloat16 else z).detach().numpy().astype(np.float64)
            probs = logits_to_probs(host, temperature=temperature, top_k=top_k, top_p=top_p)
            return torch.from_numpy(probs).to(self.dtype)
        raw, z = z, z.to(self.dtype)
        top = torch.amax(z, dim=1)  # NaN if a row has one, +inf if one is +inf, -inf if all are -inf
        flags = self.link.read(torch.stack([torch.isnan(top).any(), torch.isposinf(top).any(),
                                            torch.isneginf(top).any()]))
        for bad, what in zip(flags, ("contain NaN", "contain +inf",
                                     "are -inf everywhere on some row: no token has mass"), strict=True):
            if bad:
                raise ValueError(f"logits {what}")
        if temperature == 0:
            return torch.zeros_like(z).scatter_(1, torch.argmax(z, dim=1, keepdim=True), 1.0)
        if temperature != 1.0:  # x / 1 is x: one pass over the rows saved
            z = z / float(temperature)
        if top_k and top_k < V:
            # the k-th largest; found on the stored logits when they are z itself (temperature 1): float32
            # holds them exactly and halves the pass
            src = raw.float() if temperature == 1.0 and raw.dtype in (torch.float16, torch.float32) else z
            kth = _kth_largest(src, int(top_k)).to(z.dtype)
            z = torch.where(z < kth, float("-inf"), z)
        probs = _softmax(z)
        if top_p < 1:
            order = torch.sort(probs, dim=1, descending=True, stable=True).indices
            cum = torch.cumsum(probs.gather(1, order), dim=1)
            before = torch.cat([torch.zeros_like(cum[:, :1]), cum[:, :-1]], dim=1)
            keep = torch.zeros_like(z, dtype=torch.bool).scatter_(1, order, before <= top_p + TOP_P_TOL)
            probs = _softmax(torch.where(keep, z, float("-inf")))
        return probs

    # -- one step ----------------------------------------------------------------------------------
    def step(self, tree: Tree, p: torch.Tensor, u_accept: np.ndarray | torch.Tensor,
             u_draw: np.ndarray | torch.Tensor, q: torch.Tensor | None = None, *, checked: bool = False
             ) -> tuple[np.ndarray, int]:
        """One step on a drawn tree: ``theory.rule_step.sample_rule_step(tree, p, u_accept, u_draw,
        self.verification, neighbours=..., q_dists=q, emb=...)``.

        ``p`` (and ``q``, needed by r2 and r4 when the tree has drafts) are (n, V) rows on the device,
        ``u_accept`` and ``u_draw`` n uniforms. Returns the accepted path from the root (int64) and the
        emitted token. Host traffic: one read (path, token and input flags) for r1-r3; r4 and the budget
        boost: ``reference.verify_traversal``'s. ``checked=True`` skips the row checks of p and q (two
        passes over the rows): for rows made by :meth:`probs` (q: zero rows where nothing was drafted).

        Raises
        ------
        ValueError
            For rows of another shape or device, uniforms of another length or outside [0, 1), a tree
            token outside the vocabulary, a missing q, non-finite or negative rows, and (as theory) a
            drafted child with zero draft probability that the walk reaches.
        """
        if not isinstance(tree, Tree):
            raise ValueError(f"tree must be a relaxspec.theory.tree.Tree, got {type(tree).__name__}")
        n = tree.size
        tree.check_vocab(self.vocab_size)
        P = self._rows(p, n, "p")
        ua = self._uniforms(u_accept, n, "u_accept")
        ud = self._uniforms(u_draw, n, "u_draw")
        if self.verification.walks_own_step:
            Q = self._sampled_rows(q, n)
            return self._own_oracle_step(tree, P, Q, ua, ud)
        if self.rule == Rule.R3:
            return self._greedy_step(tree, P, [*self._uniform_flags(ua, ud)])
        Q = None
        if self.rule == Rule.R2 and n > 1:
            if q is None:
                raise ValueError("rule r2 needs the draft distribution q (the draft row of every node with "
                                 "children)")
            Q = self._rows(q, n, "q")
        return self._walk_step(tree, P, Q, ua, ud, self.relax, self.variant, self._uniform_flags(ua, ud),
                               checked=checked)

    def window(self, p: torch.Tensor, drafts: np.ndarray, q: torch.Tensor,
               u_accept: np.ndarray | torch.Tensor, u_draw: np.ndarray | torch.Tensor) -> tuple[int, int]:
        """Verify one Jacobi window: ``theory.rule_step.sample_window_step(p, drafts, q, u_accept, u_draw,
        self.verification, neighbours=..., emb=...)``, the number of drafts accepted and the token
        emitted after them.

        ``p`` is (L + 1, V) (p_1..p_{L+1}), ``drafts`` (L,) the window's tokens, ``q`` (L, V) their draft
        rows, ``u_accept`` (L,) and ``u_draw`` (L + 1,). The window is rule r2 on its chain
        (``theory.jacobi_sampler``; no LANTERN relaxation) or, for r4 and the budget boost, that chain
        sent to ``reference.verify_traversal`` after one read of the inputs' validity flags.
        """
        if self.rule not in SAMPLED_DRAFT_RULES:
            raise ValueError(f"a Jacobi window verifies sampled drafts (SPEC 9.1): it needs rule r2 or r4, "
                             f"got rule {self.rule!r}")
        d = np.asarray(drafts)
        if d.ndim != 1 or d.size < 1 or d.dtype.kind not in "iu":
            raise ValueError(f"drafts must be a non-empty 1-D integer array, got {d.dtype} of shape "
                             f"{d.shape}")
        L = check_window_size(d.size)
        V = self.vocab_size
        P = self._rows(p, L + 1, "p_rows")
        Q = self._rows(q, L, "q_rows")
        d = d.astype(np.int64)
        if np.any((d < 0) | (d >= V)):
            raise ValueError(f"drafts must be tokens in [0, {V}), got {d.tolist()}")
        ua = self._uniforms(u_accept, L, "u_accept")
        ud = self._uniforms(u_draw, L + 1, "u_draw")
        tokens = torch.as_tensor(d, device=self.device)
        zero, first = _first_true(Q.gather(1, tokens[:, None])[:, 0] <= 0.0)
        flags = [_first_problem(_row_problems(P, True, self._atol)),
                 _first_problem(_row_problems(Q, True, self._atol)),
                 torch.where(zero, first, -1).long()[None]]
        tree = window_tree(d)
        Q = torch.cat([Q, torch.full((1, V), 1.0 / V, dtype=self.dtype, device=self.device)])
        ua = torch.cat([ua.new_zeros(1), ua])
        if self.verification.walks_own_step:
            self._raise_flags(self.link.read(torch.cat(flags)), d, window=True)
            path, token = self._own_oracle_step(tree, P, Q, ua, ud)
        else:
            flags += self._uniform_flags(ua[1:], ud)
            path, token = self._walk_step(tree, P, Q, ua, ud, NO_RELAX, "principled", flags, drafts=d)
        return len(path) - 1, int(token)

    def columns(self, p: torch.Tensor, q: torch.Tensor, columns: np.ndarray, u_accept: np.ndarray,
                u_draw: np.ndarray) -> tuple[list[int], int]:
        """Verify a coupled or SJD-PAC window (SPEC 10.1-10.2): ``theory.window_walk.walk_columns(p, q,
        columns, u_accept, u_draw)`` (``reference.verify_columns``), unboosted R2 as SCD and SJD-PAC
        verify. ``p`` (n, V) the rows of ``theory.window_walk.column_tree``'s nodes, ``q`` (L', V) the
        columns' laws, ``columns`` (L', W) their candidates padded with -1, uniforms (n,)."""
        from relaxspec.reference.verify_columns import walk_columns_device

        v = self.verification
        if self.rule != Rule.R2 or not self.relax.is_exact or not self.boost.is_none:
            raise ValueError(f"a coupled or pac window is verified by the unboosted sampled-draft test (rule "
                             f"r2, as SCD and SJD-PAC verify), got {v}")
        cols = np.asarray(columns)
        n, L = int(p.shape[0]), int(cols.shape[0]) if cols.ndim == 2 else -1
        P, Q = self._rows(p, n, "p"), self._rows(q, L, "q")
        if cols.size and (cols.max() >= self.vocab_size):
            raise ValueError(f"columns hold tokens outside [0, {self.vocab_size})")
        ua, ud = (np.asarray(u, dtype=np.float64) for u in (u_accept, u_draw))
        for name, u in (("u_accept", ua), ("u_draw", ud)):
            if u.shape != (n,) or not ((u >= 0.0) & (u < 1.0)).all():
                raise ValueError(f"{name} must hold {n} uniforms in [0, 1)")
        dev = self.device
        return walk_columns_device(P, Q, cols, torch.as_tensor(ua, device=dev),
                                   torch.as_tensor(ud, device=dev), self.link)

    def verify_nodes(self, p: torch.Tensor, children: np.ndarray, u_accept: np.ndarray | torch.Tensor,
                     u_draw: np.ndarray | torch.Tensor, q: torch.Tensor | None = None,
                     depth: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``theory.sampler.sample_node`` for m independent nodes at once (rules r1, r2, r3), one read.

        ``p`` (m, V) the targets, ``children`` (m, K) each node's children's tokens in rank order
        padded with -1 at the end, ``u_accept`` (m, K) their uniforms, ``u_draw`` (m,), ``q`` (m, V)
        the drafts (r2), ``depth`` (m,) the children's depth (Cool-SD's omega index; default 1).
        Returns ``(index, token)`` (int64): the accepted child's column (-1: none) and the token each
        node emits.
        """
        if self.verification.walks_own_step:
            raise ValueError(f"rule {self.rule} with boost {self.boost} verifies a whole step, not node by "
                             "node: use step")
        kids = np.asarray(children)
        if kids.ndim != 2 or kids.dtype.kind not in "iu":
            raise ValueError(f"children must be an (m, K) integer array, got {kids.dtype} of shape "
                             f"{kids.shape}")
        m, K = kids.shape
        V = self.vocab_size
        counts = np.count_nonzero(kids >= 0, axis=1)
        listed = np.arange(K) < counts[:, None]
        if np.any((kids >= 0) != listed) or np.any(kids >= V):
            raise ValueError(f"children must list token ids in [0, {V}) first, padded with -1 at the end")
        P = self._rows(p, m, "p")
        Q = self._rows(q, m, "q") if self.rule == Rule.R2 and K else None
        if self.rule == Rule.R2 and K and q is None:
            raise ValueError("rule r2 needs the draft distribution q")
        uk = self._uniforms(u_accept, (m, K), "u_accept")
        ud = self._uniforms(u_draw, m, "u_draw")
        d = np.ones(m, dtype=np.int64) if depth is None else np.asarray(depth)
        if d.shape != (m,) or d.dtype.kind not in "iu" or np.any(d < 1):
            raise ValueError(f"depth must hold m = {m} integers >= 1, got {d!r}")
        dev = self.device
        kt = torch.as_tensor(np.where(listed, kids, 0).astype(np.int64), device=dev)
        listed_t = torch.as_tensor(listed, device=dev)
        if self.rule == Rule.R3:
            index, token = self._greedy_nodes(P, kt, listed_t)
        else:
            omega = torch.tensor([self.boost.omega_at(int(t)) for t in d], dtype=self.dtype, device=dev)
            index, token = self._decide(P, Q, kt, counts, uk, ud, omega, self.relax, self.variant)
        q_code = (torch.where(listed_t.any(dim=1), _row_problems(Q, False, 0.0), 0) if Q is not None
                  else torch.zeros(m, dtype=torch.long, device=dev))
        flags = [_first_problem(_row_problems(P, False, 0.0)), _first_problem(q_code),
                 *self._uniform_flags(torch.where(listed_t, uk, 0.0).flatten(), ud)]
        out = self.link.read(torch.cat([index, token, *flags]))
        self._raise_flags(out[2 * m:])
        index, token = out[:m].astype(np.int64), out[m: 2 * m].astype(np.int64)
        bad = np.flatnonzero(index <= -2)
        if bad.size:
            v = bad[0]
            raise ValueError(f"drafted token {int(kids[v, -2 - index[v]])} has zero draft probability")
        return index, token


    # -- inputs --------------------------------------------------------------------------------------
    @property
    def _atol(self) -> float:
        """The row-sum tolerance of a window's rows: theory's in float64, float32 rounding otherwise."""
        return SUM_ATOL if self.dtype == torch.float64 else 1e-4

    def _tensor(self, t: torch.Tensor, name: str) -> torch.Tensor:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor on {self.device}, got {type(t).__name__}")
        if t.device != self.device:
            raise ValueError(f"{name} is on {t.device} but the verifier runs on {self.device}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
        return t

    def _rows(self, t: torch.Tensor, n: int, name: str) -> torch.Tensor:
        """(n, V) rows on the device, in ``self.dtype``."""
        t = self._tensor(t, name)
        if tuple(t.shape) != (n, self.vocab_size):
            raise ValueError(f"{name} must have shape (n_nodes={n}, V={self.vocab_size}), got "
                             f"{tuple(t.shape)}")
        return t.to(self.dtype)

    def _uniforms(self, u: np.ndarray | torch.Tensor, n: int | tuple[int, ...], name: str) -> torch.Tensor:
        """Uniforms of shape ``n`` as a float64 tensor on the device (their range is checked with the
        step's read)."""
        if isinstance(u, torch.Tensor):
            if u.device != self.device:
                raise ValueError(f"{name} is on {u.device} but the verifier runs on {self.device}")
            t = u.to(torch.float64)
        else:
            t = torch.as_tensor(np.asarray(u, dtype=np.float64), device=self.device)
        shape = (n,) if isinstance(n, int) else n
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
        return t

    @staticmethod
    def _uniform_flags(ua: torch.Tensor, ud: torch.Tensor) -> list[torch.Tensor]:
        """1 for uniforms outside [0, 1) (NaN included), per array."""
        return [(~((u >= 0.0) & (u < 1.0))).any().long()[None] for u in (ua, ud)]

    def _sampled_rows(self, q: torch.Tensor | None, n: int) -> torch.Tensor:
        """r4 / budget: the draft rows (a lone root reads none: zeros), as ``theory.rule_step``."""
        if q is None and n == 1:
            return torch.zeros((1, self.vocab_size), dtype=self.dtype, device=self.device)
        if q is None:
            raise ValueError(f"rule {self.rule} verifies sampled drafts: it needs q (the draft row of every "
                             "node with children)")
        return self._rows(q, n, "q")

    def _raise_flags(self, flags: np.ndarray, drafts: np.ndarray | None = None, window: bool = False) -> None:
        """Raise the first problem the device flagged (layout: :meth:`step`, :meth:`window`)."""
        i = 0
        if window:
            for name in ("p_rows", "q_rows"):
                row, code = int(flags[i]), int(flags[i + 1])
                if row >= 0:
                    raise ValueError(f"{name}[{row}] {ROW_PROBLEMS[code]}")
                i += 2
            if flags[i] >= 0:
                j = int(flags[i])
                raise ValueError(f"draft d_{j + 1} = {drafts[j]} has zero probability under its q")
            i += 1
        else:
            for name in ("p", "q"):
                row, code = int(flags[i]), int(flags[i + 1])
                if row >= 0:
                    raise ValueError(f"{name}[{row}] {ROW_PROBLEMS[code]}")
                i += 2
        for name in ("u_accept", "u_draw")[: flags.size - i]:
            if flags[i]:
                raise ValueError(f"{name} must hold uniforms in [0, 1)")
            i += 1

    # -- r4 and the budget boost ---------------------------------------------------------------------
    def _own_oracle_step(self, tree: Tree, P: torch.Tensor, Q: torch.Tensor, ua: torch.Tensor,
                         ud: torch.Tensor) -> tuple[np.ndarray, int]:
        from relaxspec.reference import verify_traversal  # written alongside; imported when first needed

        table = self.table if self.boost.uses_budget else None
        if self.rule == Rule.R4:
            path, token = verify_traversal.traversal_step(tree, P, Q, ua, ud, boost=self.boost,
                                                          neighbours=table, emb=self.embedding,
                                                          link=self.link)
        else:
            path, token = verify_traversal.budget_r2_step(tree, P, Q, ua, ud, boost=self.boost,
                                                          neighbours=table, link=self.link)
        return np.asarray(path, dtype=np.int64), int(token)

    # -- R3 --------------------------------------------------------------------------------------------


    # -- R1 and R2: stages batched over the internal nodes --------------------------------------------


def _kth_largest(z: torch.Tensor, k: int) -> torch.Tensor:
    """Each row's k-th largest value (n, 1): the smallest of its unsorted top k."""
    return torch.topk(z, k, dim=1, sorted=False).values.amin(dim=1, keepdim=True)


def _softmax(z: torch.Tensor) -> torch.Tensor:
    """``theory.distributions._softmax``, exp(z - max) / sum, as torch's fused kernel (one pass where the
    three operations take five; values within a few ulps of theory's, as any two exp implementations)."""
    return torch.softmax(z, dim=-1)


__all__ = ["DTYPES", "DeviceVerifier"]
