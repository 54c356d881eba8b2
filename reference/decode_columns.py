"""The reference decoder's loop for coupled Jacobi windows (SCD, SPEC 10.1) and SJD-PAC windows (SPEC
10.2): ``Decoder.generate`` for a ``jacobi:L,coupled=..`` or ``pac:..`` policy (no drafter).

Every step, the first included, is one target forward over the column product of the window's first
L' = min(L, tokens left - 1) columns (``theory.window_walk.column_tree``; root: the class token at the
first step, else the last committed token; the KV cache keeps the root and the accepted path). The walk
(``theory.window_walk.walk_columns`` on the host, ``DeviceVerifier.columns`` on the device: the same
decisions) emits accepted + 1 tokens; when every column passed, the bonus is drawn at the path's end
from its target row with that node's ``u_draw`` or, for the Gumbel coupling, by Gumbel-max with the noise
of its absolute position. The next window is formed on the host from the stored target rows at the
spine's nodes (:class:`reference.coupled.Columns`: the simulator oracle's rules).

Uniforms per forward, in order (``numpy.random.default_rng(SeedSequence([seed, sequence]))``; the Gumbel
coupling first draws the sequence's ``noise_key``): ``u_fresh`` (L), the (L, W) acceptance uniforms of
the columns' candidates, the (L + 1) draw uniforms of the columns, the (L + 1, W + 1) coupling uniforms
(``reference.coupled``). A node's ``u_accept`` is its column's candidate's uniform and its ``u_draw`` its
depth's (``theory.window_walk``); a trace records them with the columns and the coupling uniforms
(``core.trace_step``).
"""

from __future__ import annotations

import numpy as np
import torch

from relaxspec.core.trace import TraceStep, TraceWriter
from relaxspec.reference.coupled import Columns, column_array, gumbel_max, gumbel_uniforms
from relaxspec.reference.decode_stats import DecodeResult, StepStats
from relaxspec.reference.verify_ops import draw_token as device_draw
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.window_walk import column_tree, level_starts, walk_columns

NOISE_KEYS = 1 << 62
"""A sequence's Gumbel noise key is drawn in [0, 2^62)."""


def node_uniforms(tree_depths: np.ndarray, tokens: np.ndarray, cands: list[tuple[int, ...]],
                  u_columns: np.ndarray, u_draw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-node ``u_accept`` and ``u_draw`` of a column tree: node v of depth d >= 1 holds the uniform of
    its token's first place in column d - 1 (``u_columns[d - 1, i]``), every node of depth d holds
    ``u_draw[d]``; the root's ``u_accept`` is unused (0)."""
    ua = np.zeros(tree_depths.size)
    for v in range(1, tree_depths.size):
        c = int(tree_depths[v]) - 1
        ua[v] = u_columns[c, cands[c].index(int(tokens[v]))]
    return ua, u_draw[tree_depths].copy()


class ColumnsDecoding:
    """The loop of coupled and PAC windows (a mixin of ``reference.decode.Decoder``: it reads the decoder's
    settings, target, verifier and helpers)."""

    def _generate_columns(self, label: int, seed: int, sequence: int, trace: TraceWriter | None
                          ) -> DecodeResult:
        """``Decoder.generate`` for a coupled or PAC window (module docstring)."""
        dec = self
        st, tgt, plan = dec.settings, dec.target, dec.columns_plan
        N, V, L, W = tgt.cfg.block_size, dec.vocab, plan.window, plan.width
        rng = np.random.default_rng(np.random.SeedSequence([seed, sequence]))
        noise_key = int(rng.integers(NOISE_KEYS)) if plan.gumbel else 0
        labels = dec._labels(label)
        stats: list[StepStats] = []
        tokens: list[int] = []
        prefix = 0
        state = Columns.nothing(V, st.logits_dtype)
        with torch.no_grad():
            while len(tokens) < N:
                t0 = dec._sync()
                first, pos = not tokens, len(tokens)
                root = label if first else tokens[-1]
                u_fresh, u_cols = rng.random(L), rng.random((L, W))
                ud_cols, u_couple = rng.random(L + 1), rng.random((L + 1, W + 1))
                cands, q_logits = state.window(plan, u_fresh)
                m = min(L, N - pos - 1)
                cols = column_array(cands[:m], W)
                tree = column_tree(root, cols)
                n, depths = tree.size, tree.depths
                u_accept, u_draw = node_uniforms(depths, tree.tokens, cands, u_cols, ud_cols)
                draft_stored = np.zeros((n, V), dtype=st.logits_dtype)
                inner = depths < m
                draft_stored[inner] = q_logits[depths[inner]]
                spine = level_starts(cols)[:-1]
                t1 = dec._sync()
                _, guided = dec._forward(labels, tree.parents, tree.tokens, first, prefix)
                t2 = dec._sync()
                what = f"target (step {len(stats)})"
                if dec.verifier is None:
                    target_stored = guided.cpu().numpy()
                    host_bytes = target_stored.nbytes
                    p = dec._probs(target_stored, st.target_sampling, what)
                    q = dec._probs(q_logits[:m], st.draft_sampling, "draft") if m else np.zeros((0, V))
                    path, token = walk_columns(p, q, cols, u_accept, u_draw) if m else ([0], -1)
                    if token < 0 and not plan.gumbel:
                        token = draw_token(p[path[-1]], float(u_draw[path[-1]]))
                else:
                    ver = dec.verifier
                    ver.link.reset()
                    P = dec._device_probs(guided, st.target_sampling, what)
                    q_rows = torch.from_numpy(q_logits[:m]).to(dec.device)
                    Q = dec._device_probs(q_rows, st.draft_sampling, "draft") if m else P[:0]
                    path, token = (ver.columns(P, Q, cols, u_accept, u_draw) if m else ([0], -1))
                    if token < 0 and not plan.gumbel:
                        end = path[-1]
                        u_end = torch.tensor(u_draw[end], device=dec.device)
                        token = int(ver.link.item(device_draw(P[end], u_end)))
                    host_bytes = ver.link.bytes
                    need = np.unique(np.append(spine, path[-1]))  # the next window's rows, a Gumbel bonus's
                    target_stored = np.zeros((n, V), dtype=st.logits_dtype)
                    rows = guided if trace is not None else guided[torch.as_tensor(need, device=dec.device)]
                    host = rows.cpu().numpy()
                    target_stored[np.arange(n) if trace is not None else need] = host
                    host_bytes += host.nbytes
                rejected = m if token < 0 else len(path) - 1
                if token < 0:  # every column passed: the Gumbel coupling's bonus at the path's end
                    row = dec._probs(target_stored[path[-1]][None], st.target_sampling, what)[0]
                    token = gumbel_max(row, gumbel_uniforms(noise_key, pos + m, V))
                t3 = dec._sync()
                path_arr = np.asarray(path, dtype=np.int64)
                prefix = tgt.accept_path(prefix, path_arr)
                new = [int(t) for t in tree.tokens[path_arr[1:]]] + [int(token)]
                if trace is not None:
                    trace.add(TraceStep(sequence=sequence, position=pos, parents=tree.parents,
                                        tokens=tree.tokens, target_logits=target_stored,
                                        draft_logits=draft_stored,
                                        u_accept=u_accept, u_draw=u_draw, path=path_arr, bonus=int(token),
                                        u_fresh=u_fresh, u_couple=u_couple.ravel(), columns=cols.ravel(),
                                        noise_key=noise_key))
                state = Columns.after(plan, cands, q_logits, target_stored[spine], rejected, int(token), pos,
                                      u_couple, ud_cols, noise_key, st.target_sampling)
                tokens.extend(new)
                stats.append(StepStats(sequence, len(stats), pos, n, tree.depth, 0, len(path) - 1, len(new),
                                       t1 - t0, t2 - t1, t3 - t2, int(host_bytes)))
        if trace is not None:
            trace.end_sequence()
        return DecodeResult(np.array(tokens[:N], dtype=np.int64), stats)


__all__ = ["ColumnsDecoding", "node_uniforms"]
