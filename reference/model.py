"""LlamaGen's class-conditional GPT (c2i) in the style of gpt-fast, with a static KV cache
and a forward over a draft tree.

Architecture (FoundationVision/LlamaGen ``autoregressive/models/gpt.py``): a class
token (``cls_embedding.embedding_table``, ``num_classes + 1`` rows when the
model was trained with class dropout: the last row is the classifier-free
guidance null class) followed by the image tokens (``tok_embeddings``); pre-norm
blocks with RMSNorm, fused ``wqkv`` attention with 2-D rotary embeddings over
the token grid, SwiGLU ``feed_forward.w1/w2/w3`` of width
``find_multiple(int(2 * 4 * dim / 3 * ffn_dim_multiplier), multiple_of)``;
final ``norm`` and ``output`` head. The rotary table has ``cls_token_num``
all-zero rows in front of the grid rows (as in LlamaGen), so the class
token's queries and keys are zero vectors.

Sequence layout: position ``t < cls_token_num`` is the class token, image
token ``i`` sits at position ``cls_token_num + i``; the output at position
``t`` predicts the token at ``t + 1``.

Tree decoding (the cache's layout, static shapes for CUDA graphs and ``torch.compile``):
:mod:`reference.tree_attention`. The shape and the table of named configurations:
:mod:`reference.model_config`.

Precision: ``model.to(torch.bfloat16)`` (or float16) puts the weights, the KV
cache (:meth:`Transformer.setup_cache` takes the weights' dtype) and the
activations in that dtype; the rotary table stays float32 (LlamaGen keeps
``freqs_cis`` in float32 and rotates in float32) and :meth:`Transformer.logits`
returns float32 (the head's output cast, as LlamaGen's ``self.output(h).float()``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from relaxspec.reference.checkpoint import load_state, read_state_dict
from relaxspec.reference.cuda_graph import CUDAGraphRunner
from relaxspec.reference.model_config import GPTConfig, find_multiple, gpt_config
from relaxspec.reference.tree_attention import (
    EAGER,
    TreeExecution,
    move_accepted,
    run_layers,
    run_tree,
    tree_inputs,
)


def rope_table_2d(grid_size: int, head_dim: int, base: float, cls_token_num: int) -> torch.Tensor:
    """LlamaGen's 2-D rotary table, shape ``(cls_token_num + grid^2, head_dim // 2, 2)`` (cos, sin).

    The first half of each head's rotation pairs encodes the row, the second
    half the column; the class rows are all zero.
    """
    half = head_dim // 2
    freqs = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    angles = torch.outer(torch.arange(grid_size).float(), freqs)  # (grid, half // 2)
    grid = torch.cat(
        [angles[:, None, :].expand(-1, grid_size, -1), angles[None, :, :].expand(grid_size, -1, -1)], dim=-1
    )
    table = torch.stack([torch.cos(grid), torch.sin(grid)], dim=-1).flatten(0, 1)
    return torch.cat([torch.zeros(cls_token_num, half, 2), table])


def apply_rope(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, T, H, D) by ``table`` (T, D // 2, 2), in float32."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    t = table.view(1, xs.size(1), 1, xs.size(3), 2)
    out = torch.stack(
        [xs[..., 0] * t[..., 0] - xs[..., 1] * t[..., 1], xs[..., 1] * t[..., 0] + xs[..., 0] * t[..., 1]],
        dim=-1,
    )
    return out.flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class KVCache(nn.Module):
    """Static keys and values, shape (batch, n_kv_head, length, head_dim)."""

    def __init__(self, batch: int, length: int, n_kv_head: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str | None) -> None:
        super().__init__()
        shape = (batch, n_kv_head, length, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def write(self, slots: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k[:, :, slots] = k
        self.v[:, :, slots] = v
        return self.k, self.v

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy slots ``src`` to slots ``dst`` (gathered first, so overlaps are safe)."""
        self.k[:, :, dst] = self.k[:, :, src].clone()
        self.v[:, :, dst] = self.v[:, :, src].clone()


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        kv = cfg.kv_heads * cfg.head_dim
        self.wqkv = nn.Linear(cfg.dim, cfg.dim + 2 * kv, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: torch.Tensor, rope: torch.Tensor, slots: torch.Tensor | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        """``slots``/``mask`` (T, cache length) for the cached path; ``None`` for a causal full pass."""
        cfg = self.cfg
        B, T, _ = x.shape
        kv = cfg.kv_heads * cfg.head_dim
        q, k, v = self.wqkv(x).split([cfg.dim, kv, kv], dim=-1)
        q = apply_rope(q.view(B, T, cfg.n_head, cfg.head_dim), rope).transpose(1, 2)
        k = apply_rope(k.view(B, T, cfg.kv_heads, cfg.head_dim), rope).transpose(1, 2)
        v = v.view(B, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        if slots is not None:
            if self.kv_cache is None:
                raise RuntimeError("no KV cache: call setup_cache first")
            k, v = self.kv_cache.write(slots, k, v)
        rep = cfg.n_head // cfg.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.wo(y.transpose(1, 2).reshape(B, T, cfg.dim))


class Block(nn.Module):
    """Pre-norm transformer block; ``input_norm=False`` drops the attention norm (EAGLE's first layer)."""

    def __init__(self, cfg: GPTConfig, input_norm: bool = True) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps) if input_norm else nn.Identity()
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, slots: torch.Tensor | None,
                mask: torch.Tensor | None) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope, slots, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class RotaryModule(nn.Module):
    """A module whose ``rope`` buffer stays float32 when ``.to()`` (or ``.half()``, ...) casts its
    weights: the rotary table is a derived constant that ``apply_rope`` reads in float32."""

    rope: torch.Tensor

    def _apply(self, fn: Callable, recurse: bool = True) -> RotaryModule:
        rope = self.rope
        super()._apply(fn, recurse)
        if self.rope.dtype != torch.float32:
            self.rope = rope.to(self.rope.device)
        return self


class Transformer(RotaryModule):
    """LlamaGen c2i GPT. :meth:`forward` is the teacher-forced pass; decoding uses the cache."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.cls_embedding = nn.Module()
        self.cls_embedding.embedding_table = nn.Embedding(cfg.class_rows, cfg.dim)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.register_buffer(
            "rope", rope_table_2d(cfg.grid_size, cfg.head_dim, cfg.rope_base, cfg.cls_token_num),
            persistent=False,
        )
        self.cache_len = 0
        self.max_tree_nodes = 0
        self.execution = EAGER
        self._padded_stack: Callable[..., torch.Tensor] | None = None
        self.init_weights()

    def _apply(self, fn: Callable, recurse: bool = True) -> Transformer:
        super()._apply(fn, recurse)
        self._padded_stack = None  # captured graphs read the old tensors
        return self

    def __getstate__(self) -> dict:
        # a copy (copy.deepcopy: a self-drafting target) must not share the compiled or captured stack
        state = super().__getstate__()
        state["_padded_stack"] = None
        return state

    def init_weights(self, std: float = 0.02) -> None:
        """LlamaGen's initialisation: N(0, std) linears and embeddings, norms at 1."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=std)

    # -- embeddings and heads -------------------------------------------------------------
    def embed_class(self, labels: torch.Tensor) -> torch.Tensor:
        """Class-token embeddings (B, cls_token_num, dim); LlamaGen's c2i embedder yields one token."""
        if labels.min() < 0 or labels.max() >= self.cfg.class_rows:
            raise ValueError(f"class label out of range [0, {self.cfg.class_rows})")
        return self.cls_embedding.embedding_table(labels).unsqueeze(1)[:, : self.cfg.cls_token_num]

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok_embeddings(tokens)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits from final (normed) hidden states (the head runs in the weights' dtype)."""
        return self.output(hidden).float()

    # -- teacher-forced pass --------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, labels: torch.Tensor, *, drop_labels: torch.Tensor | None = None,
                return_hidden: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Causal pass over class token(s) + ``tokens`` (B, T) without the cache.

        Returns logits (B, T + 1, V) float32: row t predicts image token t. With
        ``drop_labels`` (bool, B) those labels are replaced by the null class
        (classifier-free guidance training). ``return_hidden`` also returns the
        normed hidden states (B, T + 1, dim) at the same rows.
        """
        if drop_labels is not None:
            labels = torch.where(drop_labels, torch.full_like(labels, self.cfg.null_class), labels)
        h = torch.cat([self.embed_class(labels), self.embed_tokens(tokens)], dim=1)
        T = h.shape[1]
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence of {T} positions exceeds the model's {self.cfg.seq_len}")
        rope = self.rope[:T]
        for layer in self.layers:
            h = layer(h, rope, None, None)
        hidden = self.norm(h)[:, self.cfg.cls_token_num - 1 :]
        logits = self.logits(hidden)
        return (logits, hidden) if return_hidden else logits

    # -- cached decoding ------------------------------------------------------------------
    def setup_cache(self, batch: int, max_tree_nodes: int = 128, dtype: torch.dtype | None = None) -> None:
        """Allocate a static cache for ``batch`` rows: every position + ``max_tree_nodes`` scratch slots
        (in the weights' dtype unless ``dtype`` is given)."""
        if max_tree_nodes < 1:
            raise ValueError(f"max_tree_nodes must be >= 1, got {max_tree_nodes}")
        p = next(self.parameters())
        self.cache_len = find_multiple(self.cfg.seq_len + max_tree_nodes, 8)
        self.max_tree_nodes = max_tree_nodes
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(batch, self.cache_len, self.cfg.kv_heads, self.cfg.head_dim,
                                               dtype or p.dtype, p.device)
        self._padded_stack = None

    def set_execution(self, execution: TreeExecution) -> None:
        """Run later tree forwards as ``execution`` says (:class:`TreeExecution`); the default is eager
        with each call's own shapes.

        Raises
        ------
        ValueError
            For CUDA graphs on a model that is not on a CUDA device.
        """
        device = self.rope.device
        if execution.cuda_graphs and device.type != "cuda":
            raise ValueError(f"CUDA graphs replay device work on a GPU: the model is on {device}")
        self.execution = execution
        self._padded_stack = None

    def forward_tree(self, x: torch.Tensor, parents: np.ndarray, nodes: np.ndarray, prefix_len: int,
                     slots: dict[int, int] | None = None) -> torch.Tensor:
        """Run tree nodes ``nodes`` (inputs ``x``: embeddings (B, n, dim)) over a cached prefix.

        ``parents`` is the (partial) tree's parent array, root 0. ``slots`` maps
        processed nodes to cache slots relative to ``prefix_len`` and is
        extended in place: new nodes take the next free slots in order (with a
        fresh dict and ``nodes = 0..n-1``, node v sits in slot v). Every ancestor
        of a node must be in ``nodes`` or already in ``slots``. Returns normed
        hidden states (B, n, dim). Padded (:meth:`set_execution`), a call takes
        at most ``max_tree_nodes`` nodes and gives the same states.
        """
        slots = {} if slots is None else slots
        if not self.execution.padded:
            return run_tree(self.layers, self.norm, self.rope, self.cache_len, x, parents, nodes, prefix_len,
                            slots)
        n, rows = x.shape[1], self.max_tree_nodes
        table, slot_idx, mask = tree_inputs(self.rope, self.cache_len, parents, nodes, prefix_len, slots, 0,
                                            x.device, pad_to=rows)
        padded = torch.cat([x, x.new_zeros(x.shape[0], rows - n, x.shape[2])], dim=1)
        return self._stack()(padded, table, slot_idx, mask)[:, :n]

    def _stack(self) -> Callable[..., torch.Tensor]:
        """The padded layer stack as :attr:`execution` asks (compiled, graphed), built on first use (a
        graph runner refuses inputs off the GPU)."""
        if self._padded_stack is None:
            layers, norm = self.layers, self.norm

            def stack(x: torch.Tensor, table: torch.Tensor, slot_idx: torch.Tensor,
                      mask: torch.Tensor) -> torch.Tensor:
                return run_layers(layers, norm, x, table, slot_idx, mask)

            fn = torch.compile(stack, dynamic=False) if self.execution.compile else stack
            self._padded_stack = CUDAGraphRunner(fn) if self.execution.cuda_graphs else fn
        return self._padded_stack

    def accept_path(self, prefix_len: int, path_slots: np.ndarray | list[int]) -> int:
        """Move the keys/values in slots ``path_slots`` (the accepted nodes, root first) behind the
        prefix. Returns the new prefix length ``prefix_len + len(path_slots)``.
        """
        return move_accepted(self.layers, prefix_len, path_slots)


def load_gpt(path: str | Path, name: str, **overrides: object) -> Transformer:
    """Build ``gpt_config(name, **overrides)`` and load an official LlamaGen c2i checkpoint strictly.

    A ``freqs_cis`` tensor (stored by some LlamaGen versions) is accepted when its
    shape matches this grid and head size; it is recomputed, not loaded.
    """
    cfg = gpt_config(name, **overrides)
    state = read_state_dict(path)
    emb = state.get("tok_embeddings.weight")
    if emb is not None and emb.ndim == 2 and emb.shape[0] != cfg.vocab_size:
        raise ValueError(f"vocabulary mismatch: checkpoint {path} has {emb.shape[0]} image tokens, the "
                         f"codebook (--codebook-size) has {cfg.vocab_size}")
    model = Transformer(cfg)
    rope_shape = (cfg.seq_len, cfg.head_dim // 2, 2)
    load_state(model, state, optional={"freqs_cis": rope_shape}, source=f"checkpoint {path}")
    return model.eval()
