"""Shared fixtures of the reference-decoder tests: tiny configurations, random models and
checkpoints in LlamaGen's key layout."""

from __future__ import annotations

import torch

from relaxspec.reference.model import Transformer
from relaxspec.reference.model_config import GPTConfig, gpt_config

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
