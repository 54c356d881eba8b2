"""The reference decoder's loop for VVS's skipped verification (SPEC 10.3): ``Decoder.generate`` for a
``vvs:K,D,M,uniform=I|dynamic`` policy with a drafter.

Every speculative step (a drafted tree: not the prefill, not the last token) drafts EAGLE-2's tree as
``eagle2:K,D,M`` does and, unless it skips, is verified as that tree's steps are (rule r1, LANTERN's
relaxation or none; the same uniforms in the same order). Speculative step s (0-based, skip steps
counted) skips when a verify step came before, the step before was not a skip, and the schedule says so
(``reference.frontier.schedule_skips``: ``uniform=I``: s % I == 1; ``dynamic``: the tree's path
similarity of the codebook's unit vectors >= S). A skip step makes no target forward: the leaf
``floor(u_accept[0] n_leaves)`` (``theory.vvs.skip_path``), the first gamma = min(L_s, Lbar // 1) drafts
of its path (Lbar: accepted drafts per verify step so far, integer division) and a bonus drawn from the
stale row (the stored target row where the last verify step drew its last token) with ``u_draw[0]``.
The drafter is handed its own features along the path (``DraftSession.features``: no target features
exist for skipped tokens; VVS's feature cache is not modelled). The next forward runs the skipped
tokens (the last committed one, then the drafts) as a chain before its tree's root (the stale bonus),
fills the cache with them and never rejects them; its rows at the chain are the target's laws of the
skipped tokens, which the skip step's trace record stores (``core.trace_step``; the TVs:
``reference.vvs.skip_token_tvs``). A sequence whose last step skipped makes, when a trace records it,
one more forward over the skipped tokens, which emits nothing and counts as no decoding forward.

Trace positions are the number of tokens committed before the step (the cache may lag behind them
after a skip).
"""

from __future__ import annotations

import numpy as np
import torch

from relaxspec.core.trace import TraceStep, TraceWriter
from relaxspec.reference.decode_stats import DecodeResult, StepStats
from relaxspec.reference.drafter import chain_parents
from relaxspec.reference.frontier import schedule_skips
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.tree import Tree
from relaxspec.theory.vvs import skip_path


def _drafter_path(located: np.ndarray, seen: dict, tree: Tree, path: list[int]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The skip path as drafter nodes, the drafter's partial tree extended by the path's nodes it never
    saw (a leaf made after its last call)."""
    ids = [int(i) for i in located(np.asarray(path))]
    parents, tokens = list(seen["parents"]), list(seen["tokens"])
    for i in range(1, len(ids)):
        if ids[i] < 0:
            parents.append(ids[i - 1])
            tokens.append(int(tree.tokens[path[i]]))
            ids[i] = len(parents) - 1
    return np.array(ids, dtype=np.int64), np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64)


class VvsDecoding:
    """VVS's loop (a mixin of ``reference.decode.Decoder``: it reads the decoder's settings, target,
    drafter, verifier and helpers)."""

    def _generate_vvs(self, label: int, seed: int, sequence: int, trace: TraceWriter | None) -> DecodeResult:
        """``Decoder.generate`` for a VVS tree (module docstring)."""
        dec = self
        st, tgt, schedule = dec.settings, dec.target, dec.vvs.schedule
        N, V = tgt.cfg.block_size, dec.vocab
        rng = np.random.default_rng(np.random.SeedSequence([seed, sequence]))
        labels = dec._labels(label)
        stats: list[StepStats] = []
        tokens: list[int] = []
        prefix, chain, chain_features = 0, [], None
        pending: list[int] = []  # committed tokens the target's cache lacks, before the root (after a skip)
        held: dict | None = None  # a skip step's record, waiting for the next forward's rows
        stale: np.ndarray | None = None  # the stored target row the last verify step drew its last token from
        verified = accepted = spec_steps = 0
        last_skipped = False
        dec.drafter.reset(labels)

        def release(rows: np.ndarray) -> None:
            """Write the held skip step with the target's rows after its emitted prefixes."""
            nonlocal held
            logits = np.zeros((held["parents"].size, V), dtype=st.logits_dtype)
            logits[held["path"]] = rows
            trace.add(TraceStep(**held, target_logits=logits))
            held = None

        with torch.no_grad():
            while len(tokens) < N:
                t0 = dec._sync()
                first, pos = not tokens, len(tokens)
                root = label if first else tokens[-1]
                speculative = not first and N - pos > 1
                draft_rows: dict[int, np.ndarray] = {}
                located, draft_calls = None, 0
                if speculative:
                    drafted = dec._draft(root, chain, chain_features, N - pos - 1, rng)
                    tree, draft_calls, located, draft_rows, seen = drafted
                else:  # prefill, last token
                    tree = Tree(np.array([-1]), np.array([root]))
                n = tree.size
                draft_stored = np.zeros((n, V), dtype=st.logits_dtype)
                for v, row in draft_rows.items():
                    draft_stored[v] = row
                u_accept, u_draw = rng.random(n), rng.random(n)
                skip = (speculative and verified > 0 and not last_skipped
                        and schedule_skips(schedule, spec_steps, tree, dec.codes))
                spec_steps += int(speculative)
                if skip:
                    path = skip_path(tree.parents, float(u_accept[0]), accepted // verified)
                    stale_p = dec._probs(stale[None], st.target_sampling, "stale target")[0]
                    bonus = draw_token(stale_p, float(u_draw[0]))
                    ids, par, tok = _drafter_path(located, seen, tree, path)
                    chain_features, calls = dec.drafter.features(par, tok, ids)
                    dec.drafter.accept(ids)
                    new = [int(t) for t in tree.tokens[path[1:]]] + [int(bonus)]
                    pending = [int(root)] + new[:-1]
                    if trace is not None:
                        held = dict(sequence=sequence, position=pos, parents=tree.parents, tokens=tree.tokens,
                                    draft_logits=draft_stored, u_accept=u_accept, u_draw=u_draw,
                                    path=np.asarray(path, dtype=np.int64), bonus=int(bonus),
                                    stale_logits=stale[None], mean_accepted=accepted / verified)
                    chain, last_skipped = new, True
                    tokens.extend(new)
                    t1 = dec._sync()
                    stats.append(StepStats(sequence, len(stats), pos, n, tree.depth, draft_calls + calls,
                                           len(path) - 1, len(new), t1 - t0, 0.0, 0.0, 0, skipped=True))
                    continue
                t1 = dec._sync()
                g = len(pending)
                below = np.where(tree.parents < 0, g - 1, tree.parents + g)  # the tree under the chain
                parents = np.concatenate([chain_parents(g), below])
                ext_tokens = np.concatenate([np.asarray(pending, dtype=np.int64), tree.tokens])
                hidden, guided = dec._forward(labels, parents, ext_tokens, first, prefix)
                t2 = dec._sync()
                if held is not None:
                    release(guided[:g].cpu().numpy())
                guided, hidden = guided[g:], hidden[:, g:]
                what = f"target (step {len(stats)})"
                path, bonus, target_stored, host_bytes, _ = dec._verify(
                    tree, guided, draft_stored, draft_rows, u_accept, u_draw, what,
                    keep_rows=trace is not None)
                t3 = dec._sync()
                stale = (target_stored[path[-1]] if target_stored is not None
                         else guided[int(path[-1])].cpu().numpy())
                host_bytes += 0 if target_stored is not None else stale.nbytes
                prefix = tgt.accept_path(prefix, np.concatenate([np.arange(g), g + np.asarray(path)]))
                new = [int(t) for t in tree.tokens[path[1:]]] + [int(bonus)]
                if trace is not None:
                    trace.add(TraceStep(sequence=sequence, position=pos, parents=tree.parents,
                                        tokens=tree.tokens, target_logits=target_stored,
                                        draft_logits=draft_stored,
                                        u_accept=u_accept, u_draw=u_draw, path=path, bonus=int(bonus)))
                if located is not None:
                    dec.drafter.accept(located(path))
                if speculative:
                    verified, accepted = verified + 1, accepted + len(path) - 1
                chain, chain_features = new, hidden[:, torch.as_tensor(path, device=dec.device)]
                pending, last_skipped = [], False
                tokens.extend(new)
                stats.append(StepStats(sequence, len(stats), pos, n, tree.depth, draft_calls, len(path) - 1,
                                       len(new), t1 - t0, t2 - t1, t3 - t2, int(host_bytes)))
            if held is not None:  # the image ended with a skip step: one forward measures its tokens' laws
                _, guided = dec._forward(labels, chain_parents(len(pending)), np.asarray(pending), False,
                                         prefix)
                release(guided.cpu().numpy())
        if trace is not None:
            trace.end_sequence()
        return DecodeResult(np.array(tokens[:N], dtype=np.int64), stats)


__all__ = ["VvsDecoding"]
