"""Shared fixtures of the reference-decoder tests: tiny configurations, random models,
checkpoints in LlamaGen's key layout and a plain static tree builder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from reference.model import GPTConfig, Transformer, gpt_config
from theory.sampler import draw_without_replacement
from theory.tree import Tree, choices_to_parents

torch.set_num_threads(1)


def tiny_config(**overrides: object) -> GPTConfig:
    """V = 8, a 2 x 2 grid (4 tokens), 3 classes + the null class, 2 layers of width 32."""
    base = {"vocab_size": 8, "block_size": 4, "num_classes": 3, "multiple_of": 8}
    base.update(overrides)
    return gpt_config("GPT-tiny", **base)


def random_model(cfg: GPTConfig, seed: int, std: float = 0.3) -> Transformer:
    """A model with N(0, std) weights (large enough for peaked distributions), norms at 1."""
    torch.manual_seed(seed)
    model = Transformer(cfg)
    model.init_weights(std)
    return model.eval()


def official_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """LlamaGen c2i state-dict layout, written from its gpt.py (not from our module)."""
    hidden = int(2 * 4 * cfg.dim / 3)
    if cfg.ffn_dim_multiplier is not None:
        hidden = int(cfg.ffn_dim_multiplier * hidden)
    hidden = -(-hidden // cfg.multiple_of) * cfg.multiple_of
    kv = (cfg.n_kv_head or cfg.n_head) * (cfg.dim // cfg.n_head)
    out = {
        "cls_embedding.embedding_table.weight": (cfg.num_classes + (cfg.class_dropout_prob > 0), cfg.dim),
        "tok_embeddings.weight": (cfg.vocab_size, cfg.dim),
    }
    for i in range(cfg.n_layer):
        out[f"layers.{i}.attention.wqkv.weight"] = (cfg.dim + 2 * kv, cfg.dim)
        out[f"layers.{i}.attention.wo.weight"] = (cfg.dim, cfg.dim)
        out[f"layers.{i}.feed_forward.w1.weight"] = (hidden, cfg.dim)
        out[f"layers.{i}.feed_forward.w3.weight"] = (hidden, cfg.dim)
        out[f"layers.{i}.feed_forward.w2.weight"] = (cfg.dim, hidden)
        out[f"layers.{i}.attention_norm.weight"] = (cfg.dim,)
        out[f"layers.{i}.ffn_norm.weight"] = (cfg.dim,)
    out["norm.weight"] = (cfg.dim,)
    out["output.weight"] = (cfg.vocab_size, cfg.dim)
    return out


def official_state(cfg: GPTConfig, seed: int, std: float = 0.3) -> dict[str, torch.Tensor]:
    """Random tensors in the official layout (norm weights near 1)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k, shape in official_shapes(cfg).items():
        if k.endswith("norm.weight"):
            state[k] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            state[k] = std * torch.randn(shape, generator=g)
    return state


@dataclass
class Built:
    tree: Tree
    draft_calls: int


class StaticRankTree:
    """Test builder for a static tree of rank paths: rank i = i-th largest q (R1/R3), or the
    i-th draw without replacement from q (R2, one uniform per draw). One draft call per depth."""

    def __init__(self, choices: list[list[int]], sampled: bool) -> None:
        self.parents, self.ranks = choices_to_parents(choices)
        self.sampled = sampled
        self.depths = Tree(self.parents, np.arange(self.parents.size)).depths

    @property
    def uniforms(self) -> int:
        return int(self.parents.size)

    def build(self, q_root, draft, u) -> Built:
        n = self.parents.size
        tokens = np.zeros(n, dtype=np.int64)
        q = {0: q_root}
        calls = 0
        picks: dict[int, np.ndarray] = {}
        for d in range(1, int(self.depths.max()) + 1):
            level = np.flatnonzero(self.depths == d)
            for v in level:
                par = int(self.parents[v])
                if par not in picks:
                    m = int(self.ranks[self.parents == par].max()) + 1
                    if self.sampled:
                        picks[par] = draw_without_replacement(q[par], u[v : v + m])
                    else:
                        picks[par] = np.lexsort((np.arange(q[par].size), -q[par]))[:m]
                tokens[v] = picks[par][self.ranks[v]]
            inner = np.array([v for v in level if np.any(self.parents == v)], dtype=np.int64)
            if inner.size:
                end = int(level.max()) + 1
                rows = draft(self.parents[:end], tokens[:end], inner)
                calls += 1
                for i, v in enumerate(inner):
                    q[int(v)] = rows[i]
        return Built(Tree(self.parents, tokens), calls)
