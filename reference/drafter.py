"""Drafters and their per-sequence draft sessions.

Two drafters share one session interface (:class:`DraftSession`):

- :class:`GPTDraftSession`: an independent, smaller LlamaGen GPT with the same
  tokenizer (e.g. GPT-B drafting for GPT-XL), with its own KV cache.
- :class:`EagleHead` / :class:`EagleDraftSession`: EAGLE's draft head, one
  transformer layer (no input norm, as EAGLE's first layer) over
  ``fc([token embedding; feature])``, reusing the target's token embedding and
  output head. Feature = the target's final normed hidden state. The pair for
  image token x_t is (feature at the position before x_t, x_t), at x_t's
  rotary position; the head predicts the feature at x_t's position. In a tree a
  node's feature input is the head's own output at its parent (EAGLE), the
  root's is the target's real feature; accepted nodes are re-run with the
  target's real features at the next step.

Both drafters run on the classifier-free-guidance batch (cond, uncond) and
return raw logits; the decoder guides them. A session's cache mirrors the
target's: the committed prefix, then tree slots (slot = prefix + node).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from relaxspec.reference.checkpoint import load_strict
from relaxspec.reference.model import Block, KVCache, RotaryModule, Transformer, rope_table_2d
from relaxspec.reference.model_config import GPTConfig, find_multiple
from relaxspec.reference.tree_attention import move_accepted, run_tree


def chain_parents(n: int) -> np.ndarray:
    """Parent array of a chain of ``n`` nodes."""
    return np.arange(-1, n - 1, dtype=np.int64)


class DraftSession(ABC):
    """One sequence's drafting state. Call order per step: :meth:`root`, :meth:`draft` (any
    number of times, by the tree policy), then :meth:`accept` after verification."""

    @abstractmethod
    def setup(self, batch: int, max_tree_nodes: int) -> None:
        """Allocate caches for the CFG batch and the largest tree."""

    @abstractmethod
    def reset(self, labels: torch.Tensor) -> None:
        """Start a new sequence for class ``labels`` (the CFG batch, e.g. [label, null])."""

    @abstractmethod
    def root(self, chain: np.ndarray, features: torch.Tensor) -> torch.Tensor:
        """Feed the tokens committed since the last step (``chain``, ending with the new root) and
        the target's features before each of them (B, len, dim); return raw root logits (B, V)."""

    @abstractmethod
    def draft(self, parents: np.ndarray, tokens: np.ndarray, nodes: np.ndarray) -> torch.Tensor:
        """Raw logits (B, len(nodes), V) at ``nodes`` of the partial tree (ancestors already drafted)."""

    @abstractmethod
    def accept(self, path: np.ndarray) -> None:
        """The verifier accepted tree nodes ``path`` (root first)."""

    def features(self, parents: np.ndarray, tokens: np.ndarray, nodes: np.ndarray
                 ) -> tuple[torch.Tensor | None, int]:
        """The drafter's own features at ``nodes`` (a root-first path) of its partial tree ``parents`` /
        ``tokens``, and the drafter calls made to compute those it had not: what a VVS skip step hands
        the next step's :meth:`root` in place of the target's features (it made no target forward).
        None, with no call, for a drafter that reads no features."""
        return None, 0


class GPTDraftSession(DraftSession):
    """An independent LlamaGen GPT as drafter."""

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.vocab_size = model.cfg.vocab_size

    def setup(self, batch: int, max_tree_nodes: int) -> None:
        self.model.setup_cache(batch, max_tree_nodes)

    def reset(self, labels: torch.Tensor) -> None:
        self.labels = labels
        self.prefix = 0
        self.skip = 0
        self.class_pending = True
        self.slots: dict[int, int] = {}

    def root(self, chain: np.ndarray, features: torch.Tensor) -> torch.Tensor:
        m = self.model
        B = self.labels.shape[0]
        parts = [m.embed_class(self.labels)] if self.class_pending else []
        todo = torch.as_tensor(np.asarray(chain[self.skip :], dtype=np.int64), device=self.labels.device)
        parts.append(m.embed_tokens(todo)[None].expand(B, -1, -1))
        x = torch.cat(parts, dim=1)
        n = x.shape[1]
        h = m.forward_tree(x, chain_parents(n), np.arange(n), self.prefix)
        self.prefix += n - 1  # the chain is committed; its last node (the root) is tree node 0
        self.class_pending = False
        self.slots = {0: 0}
        return m.logits(h[:, -1])

    def draft(self, parents: np.ndarray, tokens: np.ndarray, nodes: np.ndarray) -> torch.Tensor:
        nodes = np.asarray(nodes, dtype=np.int64)
        B = self.labels.shape[0]
        tok = torch.as_tensor(np.asarray(tokens, dtype=np.int64)[nodes], device=self.labels.device)
        h = self.model.forward_tree(self.model.embed_tokens(tok)[None].expand(B, -1, -1), parents, nodes,
                                    self.prefix, self.slots)
        return self.model.logits(h)

    def accept(self, path: np.ndarray) -> None:
        k = 0
        while k < len(path) and int(path[k]) in self.slots:
            k += 1
        self.prefix = self.model.accept_path(self.prefix, [self.slots[int(v)] for v in path[:k]])
        self.skip = k - 1  # accepted nodes already in the cache, not fed again


class EagleHead(RotaryModule):
    """EAGLE draft head for a target of shape ``target_cfg`` (state: ``fc`` and ``layers.0``)."""

    def __init__(self, target_cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = replace(target_cfg, n_layer=1)
        dim = self.cfg.dim
        self.fc = nn.Linear(2 * dim, dim, bias=True)
        self.layers = nn.ModuleList([Block(self.cfg, input_norm=False)])
        self.register_buffer(
            "rope", rope_table_2d(self.cfg.grid_size, self.cfg.head_dim, self.cfg.rope_base,
                                  self.cfg.cls_token_num), persistent=False)
        self.cache_len = 0
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                nn.init.normal_(mod.weight, std=0.02)

    def forward(self, emb: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Teacher-forced causal pass over pairs (B, T, dim) for image tokens 0..T-1; predicted features."""
        T = emb.shape[1]
        h = self.fc(torch.cat([emb, features], dim=-1))
        rope = self.rope[self.cfg.cls_token_num : self.cfg.cls_token_num + T]
        for layer in self.layers:
            h = layer(h, rope, None, None)
        return h

    def setup_cache(self, batch: int, max_tree_nodes: int) -> None:
        p = next(self.parameters())
        self.cache_len = find_multiple(self.cfg.block_size + max_tree_nodes, 8)
        self.layers[0].attention.kv_cache = KVCache(batch, self.cache_len, self.cfg.kv_heads,
                                                    self.cfg.head_dim, p.dtype, p.device)

    def forward_tree(self, emb: torch.Tensor, features: torch.Tensor, parents: np.ndarray, nodes: np.ndarray,
                     prefix_len: int, slots: dict[int, int]) -> torch.Tensor:
        """Tree forward over pairs; slot j holds image token j (rotary position cls_token_num + j)."""
        x = self.fc(torch.cat([emb, features], dim=-1))
        return run_tree(self.layers, nn.Identity(), self.rope, self.cache_len, x, parents, nodes, prefix_len,
                        slots, pos_offset=self.cfg.cls_token_num)

    @classmethod
    def load(cls, target_cfg: GPTConfig, path: str | Path) -> EagleHead:
        head = cls(target_cfg)
        load_strict(head, path)
        return head.eval()


class EagleDraftSession(DraftSession):
    """EAGLE head drafting for ``target`` (its embeddings and output head are reused)."""

    def __init__(self, head: EagleHead, target: Transformer) -> None:
        self.head, self.target = head, target
        self.vocab_size = target.cfg.vocab_size

    def setup(self, batch: int, max_tree_nodes: int) -> None:
        self.head.setup_cache(batch, max_tree_nodes)

    def reset(self, labels: torch.Tensor) -> None:
        self.labels = labels
        self.prefix = 0
        self.out: dict[int, torch.Tensor] = {}
        self.slots: dict[int, int] = {}

    def _embed(self, tokens: np.ndarray) -> torch.Tensor:
        tok = torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=self.labels.device)
        return self.target.embed_tokens(tok)[None].expand(self.labels.shape[0], -1, -1)

    def root(self, chain: np.ndarray, features: torch.Tensor) -> torch.Tensor:
        n = len(chain)
        h = self.head.forward_tree(self._embed(chain), features, chain_parents(n), np.arange(n),
                                   self.prefix, {})
        self.prefix += n - 1
        self.out = {0: h[:, -1]}
        self.slots = {0: 0}
        return self.target.logits(h[:, -1])

    def draft(self, parents: np.ndarray, tokens: np.ndarray, nodes: np.ndarray) -> torch.Tensor:
        nodes = np.asarray(nodes, dtype=np.int64)
        feats = torch.stack([self.out[int(parents[v])] for v in nodes], dim=1)
        h = self.head.forward_tree(self._embed(np.asarray(tokens)[nodes]), feats, parents, nodes, self.prefix,
                                   self.slots)
        for i, v in enumerate(nodes):
            self.out[int(v)] = h[:, i]
        return self.target.logits(h)

    def accept(self, path: np.ndarray) -> None:
        # keep the root (run on the target's real feature); re-run the rest with real features
        self.prefix = move_accepted(self.head.layers, self.prefix, [0])

    def features(self, parents: np.ndarray, tokens: np.ndarray, nodes: np.ndarray
                 ) -> tuple[torch.Tensor | None, int]:
        """The head's outputs at ``nodes`` (its predicted features), running it, one call per node in
        path order, at the nodes it has not run."""
        calls = 0
        for v in np.asarray(nodes, dtype=np.int64).tolist():
            if v not in self.out:
                self.draft(parents, tokens, np.array([v]))
                calls += 1
        return torch.stack([self.out[int(v)] for v in nodes], dim=1), calls


