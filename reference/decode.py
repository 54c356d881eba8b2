"""Autoregressive and speculative decoding of one image (batch 1; CFG doubles it internally).

Every step is a draft tree verified by ``theory.sample_step``: the root is the
last committed token (at the first step, the class token, with no drafts: the
prefill), the target runs the whole tree in one forward, and its guided logits
at every node (uncond + s (cond - uncond), LlamaGen's formula) are cast to the
trace dtype and back before ``theory.logits_to_probs`` turns them into p, so
a trace replays bit for bit. Drafts come from a tree policy (``simulate``'s
builders) calling a :class:`~reference.drafter.DraftSession` through a
callback that does the same for q. Autoregressive sampling is the same loop
with one-node trees.

Uniforms come from ``numpy.random.default_rng(SeedSequence([seed, sequence]))``,
per step in this order: the policy's uniforms (R2's draws without
replacement: one per template node of the static tree), then ``u_accept`` and
``u_draw`` (one per tree node).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from core.trace import LOGIT_DTYPES, Sampling, TraceStep, TraceWriter
from core.trees.policies import TreePolicy
from reference.drafter import DraftSession
from reference.model import Transformer
from theory.relax import Relax
from theory.rules import check_rule, neighbour_rows
from theory.tree import Tree, parent_depths, sample_step


def guide(raw: torch.Tensor, cfg_scale: float) -> torch.Tensor:
    """Classifier-free guidance on a CFG batch (cond, uncond) of logits; batch 1 passes through."""
    if raw.shape[0] == 1:
        return raw[0]
    cond, uncond = raw[0], raw[1]
    return uncond + (cond - uncond) * cfg_scale


@dataclass(frozen=True)
class DecodeSettings:
    """Verification rule, relaxation, sampling, guidance and trace precision."""

    rule: str = "r1"
    relax: Relax = field(default_factory=Relax.none)
    variant: str = "principled"
    target_sampling: Sampling = field(default_factory=Sampling)
    draft_sampling: Sampling = field(default_factory=Sampling)
    cfg_scale: float = 1.0
    logits_dtype: str = "float32"
    max_tree_nodes: int = 128

    def __post_init__(self) -> None:
        check_rule(self.rule, self.variant)
        if not np.isfinite(self.cfg_scale) or self.cfg_scale < 1.0:
            raise ValueError(f"cfg_scale must be >= 1 (1 = no guidance), got {self.cfg_scale!r}")
        if self.logits_dtype not in LOGIT_DTYPES:
            raise ValueError(f"logits_dtype must be one of {LOGIT_DTYPES}, got {self.logits_dtype!r}")
        if self.max_tree_nodes < 1:
            raise ValueError("max_tree_nodes must be >= 1")

    @property
    def guided(self) -> bool:
        return self.cfg_scale > 1.0


@dataclass(frozen=True)
class StepStats:
    """One decoding step."""

    sequence: int
    step: int
    position: int
    nodes: int
    depth: int
    draft_calls: int
    accepted: int
    tokens: int
    t_draft_s: float
    t_target_s: float
    t_verify_s: float


@dataclass
class DecodeResult:
    """Generated image tokens (grid^2,) and per-step statistics."""

    tokens: np.ndarray
    steps: list[StepStats]

    @property
    def tokens_per_step(self) -> float:
        return float(np.mean([s.tokens for s in self.steps]))


class Decoder:
    """Generate images token by token (``drafter=None``) or speculatively with ``policy``."""

    def __init__(self, target: Transformer, settings: DecodeSettings, *, drafter: DraftSession | None = None,
                 policy: TreePolicy | None = None, neighbours: np.ndarray | None = None) -> None:
        if (drafter is None) != (policy is None):
            raise ValueError("speculative decoding needs both a drafter and a tree policy")
        if drafter is not None and getattr(drafter, "vocab_size", None) != target.cfg.vocab_size:
            raise ValueError(f"drafter vocabulary {getattr(drafter, 'vocab_size', None)} differs from the "
                             f"target's {target.cfg.vocab_size}")
        self.target, self.settings, self.drafter, self.policy = target, settings, drafter, policy
        self.vocab = target.cfg.vocab_size
        self.neighbours = neighbour_rows(neighbours, self.vocab, settings.relax, settings.variant)
        if policy is not None and settings.rule == "r2" and not policy.supports_draws:
            raise ValueError(f"rule r2 drafts children by draws without replacement: tree policy {policy} "
                             "ranks by top-k only; use a static tree")
        self.device = next(target.parameters()).device
        batch = 2 if settings.guided else 1
        target.setup_cache(batch, settings.max_tree_nodes)
        if drafter is not None:
            drafter.setup(batch, settings.max_tree_nodes)

    # -- logits -> probabilities through the trace dtype --------------------------------------
    def _stored(self, raw: torch.Tensor) -> np.ndarray:
        """Guided logits (n, V) as the trace stores them."""
        g = guide(raw, self.settings.cfg_scale)
        return g.float().cpu().numpy().astype(self.settings.logits_dtype)

    def _probs(self, stored: np.ndarray, sampling: Sampling, what: str) -> np.ndarray:
        try:
            return sampling.probs(stored.astype(np.float64))
        except ValueError as err:
            raise ValueError(f"{what} logits are invalid: {err}") from err

    def _labels(self, label: int) -> torch.Tensor:
        cfg = self.target.cfg
        if not 0 <= label < cfg.class_rows:  # label num_classes (the null class): unconditional
            raise ValueError(f"class label {label} is out of range [0, {cfg.class_rows})")
        labels = [label, cfg.null_class] if self.settings.guided else [label]
        return torch.tensor(labels, device=self.device)

    def _sync(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    # -- one sequence -------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, label: int, seed: int, sequence: int = 0, trace: TraceWriter | None = None
                 ) -> DecodeResult:
        """Generate the grid^2 image tokens of class ``label``; ``sequence`` keys the uniforms."""
        st, tgt = self.settings, self.target
        N, V = tgt.cfg.block_size, self.vocab
        rng = np.random.default_rng(np.random.SeedSequence([seed, sequence]))
        labels = self._labels(label)
        B = labels.shape[0]
        stats: list[StepStats] = []
        tokens: list[int] = []
        prefix = 0
        chain: list[int] = []
        chain_features: torch.Tensor | None = None
        if self.drafter is not None:
            self.drafter.reset(labels)
        while len(tokens) < N:
            t0 = self._sync()
            first = not tokens
            max_depth = 0 if first else N - len(tokens) - 1
            root = label if first else tokens[-1]
            draft_rows: dict[int, np.ndarray] = {}
            if self.drafter is None or max_depth == 0:  # prefill, plain AR, or the last token
                tree, draft_calls, located = Tree(np.array([-1]), np.array([root])), 0, None
            else:
                tree, draft_calls, located, draft_rows = self._draft_tree(root, chain, chain_features,
                                                                          max_depth, rng)
            t1 = self._sync()
            n = tree.size
            if first:
                x = tgt.embed_class(labels)
            else:
                tok = torch.as_tensor(np.array(tree.tokens), device=self.device)
                x = tgt.embed_tokens(tok)[None].expand(B, -1, -1)
            position = prefix
            hidden = tgt.forward_tree(x, tree.parents, np.arange(n), prefix)
            target_stored = self._stored(tgt.logits(hidden))
            t2 = self._sync()
            p = self._probs(target_stored, st.target_sampling, f"target (step {len(stats)})")
            draft_stored = np.zeros((n, V), dtype=st.logits_dtype)
            for v, row in draft_rows.items():
                draft_stored[v] = row
            q = None
            if st.rule == "r2" and draft_rows:
                q = np.zeros((n, V))
                for v in draft_rows:
                    q[v] = self._probs(draft_stored[v], st.draft_sampling, "draft")
            u_accept, u_draw = rng.random(n), rng.random(n)
            path, bonus = sample_step(tree, p, u_accept, u_draw, rule=st.rule, relax=st.relax,
                                      neighbours=self.neighbours, q_dists=q, variant=st.variant)
            path = np.asarray(path, dtype=np.int64)
            t3 = self._sync()
            prefix = tgt.accept_path(prefix, path)
            new = [int(t) for t in tree.tokens[path[1:]]] + [int(bonus)]
            if trace is not None:
                trace.add(TraceStep(sequence=sequence, position=position, parents=tree.parents,
                                    tokens=tree.tokens, target_logits=target_stored,
                                    draft_logits=draft_stored, u_accept=u_accept, u_draw=u_draw,
                                    path=path, bonus=int(bonus)))
            if located is not None:
                self.drafter.accept(located(path))
            chain = new
            chain_features = hidden[:, torch.as_tensor(path, device=self.device)]
            tokens.extend(new)
            stats.append(StepStats(sequence, len(stats), position, n, tree.depth, draft_calls,
                                   len(path) - 1, len(new), t1 - t0, t2 - t1, t3 - t2))
        if trace is not None:
            trace.end_sequence()
        return DecodeResult(np.array(tokens[:N], dtype=np.int64), stats)

    def _draft_tree(self, root: int, chain: list[int], chain_features: torch.Tensor, max_depth: int,
                    rng: np.random.Generator) -> tuple[Tree, int, Callable, dict[int, np.ndarray]]:
        """Run the policy with the drafter; prune to ``max_depth``; map the result back to drafter nodes."""
        st, drafter = self.settings, self.drafter
        rows: dict[tuple[int, ...], np.ndarray] = {}  # token path below the root -> stored draft logits
        seen = {"parents": np.array([-1]), "tokens": np.array([root]), "calls": 0}
        rows[()] = self._stored(drafter.root(np.array(chain), chain_features)[:, None])[0]
        q_root = self._probs(rows[()], st.draft_sampling, "draft")

        def draft(parents: np.ndarray, tokens: np.ndarray, nodes: np.ndarray) -> np.ndarray:
            parents = np.asarray(parents, dtype=np.int64)
            nodes = np.asarray(nodes, dtype=np.int64)
            seen.update(parents=parents, tokens=np.asarray(tokens, dtype=np.int64))
            seen["calls"] += 1
            idx = np.flatnonzero(parent_depths(parents)[nodes] < max_depth)  # deeper: pruned
            out = np.full((nodes.size, self.vocab), 1.0 / self.vocab)
            if idx.size:
                stored = self._stored(drafter.draft(parents, tokens, nodes[idx]))
                keys = _token_paths(parents, tokens)
                for i, j in enumerate(idx.tolist()):
                    rows[keys[nodes[j]]] = stored[i]
                    out[j] = self._probs(stored[i], st.draft_sampling, "draft")
            return out

        u = rng.random(self.policy.n_nodes) if st.rule == "r2" else None
        built = self.policy.build(q_root, draft, u)
        tree = _prune(built.tree, max_depth, root)
        final_keys = _token_paths(tree.parents, tree.tokens)
        draft_rows = {v: rows[k] for v, k in enumerate(final_keys) if k in rows}
        partial_index = {k: v for v, k in enumerate(_token_paths(seen["parents"], seen["tokens"]))}

        def located(path: np.ndarray) -> np.ndarray:
            """Drafter node ids of an accepted path (-1 for nodes the drafter never saw)."""
            return np.array([partial_index.get(final_keys[v], -1) for v in path], dtype=np.int64)

        return tree, int(getattr(built, "draft_calls", seen["calls"])), located, draft_rows


def _token_paths(parents: np.ndarray, tokens: np.ndarray) -> list[tuple[int, ...]]:
    """Token path below the root of every node (siblings have distinct tokens, so it names the node)."""
    keys: list[tuple[int, ...]] = [()]
    for v in range(1, len(parents)):
        keys.append(keys[int(parents[v])] + (int(tokens[v]),))
    return keys


def _prune(tree: Tree, max_depth: int, root: int) -> Tree:
    """The tree with root token ``root`` (builders do not know it) and no node deeper than
    ``max_depth`` (order kept)."""
    keep = np.flatnonzero(tree.depths <= max_depth)
    new_id = -np.ones(tree.size, dtype=np.int64)
    new_id[keep] = np.arange(keep.size)
    parents = np.array([-1] + [new_id[tree.parents[v]] for v in keep[1:]], dtype=np.int64)
    tokens = tree.tokens[keep].copy()
    tokens[0] = root
    return Tree(parents, tokens)
