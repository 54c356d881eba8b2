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

Cache layout: a cache of ``prefix_len`` committed positions, then scratch
slots. A tree step writes node ``v``'s keys and values to slot
``prefix_len + v``, gives it the rotary position ``prefix_len + depth(v)``
and lets it attend to the prefix, its ancestors and itself (SPEC section 5);
:meth:`Transformer.accept_path` moves the accepted nodes' keys and values to
slots ``prefix_len, prefix_len + 1, ...``. A plain decoding step is a
one-node tree.

Precision: ``model.to(torch.bfloat16)`` (or float16) puts the weights, the KV
cache (:meth:`Transformer.setup_cache` takes the weights' dtype) and the
activations in that dtype; the rotary table stays float32 (LlamaGen keeps
``freqs_cis`` in float32 and rotates in float32) and :meth:`Transformer.logits`
returns float32 (the head's output cast, as LlamaGen's ``self.output(h).float()``).

Static shapes (:class:`TreeExecution`): with ``static`` the tree forward pads
every call to ``max_tree_nodes`` rows (the size given to ``setup_cache``), so
every step has the same tensor shapes (embeddings (B, M, dim), rotary rows
(M, head_dim // 2, 2), slots (M,), mask (M, cache_len)). A padded row has zero
input, attends only to the cache's last slot (the pad slot, which no tree node
uses) and writes its keys and values there; its input being zero, every
layer's keys, values and outputs for it stay zero. The same shapes let
:class:`reference.cuda_graph.CUDAGraphRunner` replay the layer stack as a CUDA
graph and ``torch.compile`` compile it once.

Over 400 lines: LlamaGen's GPT with its KV cache, tree attention and strict checkpoint loading is one
concept (the model) in the style of gpt-fast's single model file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from relaxspec.reference.checkpoint import load_state, read_state_dict
from relaxspec.reference.cuda_graph import CUDAGraphRunner
from relaxspec.theory.tree import parent_depths


def find_multiple(n: int, k: int) -> int:
    """Smallest multiple of ``k`` that is >= ``n``."""
    return n if n % k == 0 else n + k - n % k


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a LlamaGen c2i GPT. ``block_size`` is the number of image tokens (grid^2)."""

    dim: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int | None = None
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    num_classes: int = 1000
    class_dropout_prob: float = 0.1
    vocab_size: int = 16384
    cls_token_num: int = 1
    block_size: int = 256

    def __post_init__(self) -> None:
        if self.dim % self.n_head:
            raise ValueError(f"dim {self.dim} is not a multiple of n_head {self.n_head}")
        if self.head_dim % 4:
            raise ValueError(f"head_dim {self.head_dim} must be a multiple of 4 for the 2-D rotary embedding")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head {self.n_head} is not a multiple of n_kv_head {self.kv_heads}")
        if self.grid_size**2 != self.block_size:
            raise ValueError(f"block_size {self.block_size} is not a square number of grid tokens")
        if self.vocab_size < 2 or self.num_classes < 1 or self.cls_token_num < 1:
            raise ValueError("vocab_size must be >= 2, num_classes and cls_token_num >= 1")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def grid_size(self) -> int:
        return math.isqrt(self.block_size)

    @property
    def ffn_dim(self) -> int:
        hidden = int(2 * (4 * self.dim) / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return find_multiple(hidden, self.multiple_of)

    @property
    def class_rows(self) -> int:
        """Rows of the class embedding: the null class is row ``num_classes`` when dropout > 0."""
        return self.num_classes + int(self.class_dropout_prob > 0)

    @property
    def null_class(self) -> int:
        """Label of the unconditional (CFG) class."""
        if self.class_dropout_prob <= 0:
            raise ValueError("this model was configured without class dropout: it has no null class")
        return self.num_classes

    @property
    def seq_len(self) -> int:
        """Class tokens + image tokens."""
        return self.cls_token_num + self.block_size

    def to_dict(self) -> dict:
        return asdict(self)


# name -> (n_layer, n_head, dim); LlamaGen's c2i shapes plus small ones for tests and toy data.
SHAPES: dict[str, tuple[int, int, int]] = {
    "GPT-B": (12, 12, 768),
    "GPT-L": (24, 16, 1024),
    "GPT-XL": (36, 20, 1280),
    "GPT-XXL": (48, 24, 1536),
    "GPT-3B": (24, 32, 3200),
    "GPT-S": (8, 6, 384),
    "GPT-XS": (6, 4, 256),
    "GPT-tiny": (2, 2, 32),
}


def gpt_config(name: str, **overrides: object) -> GPTConfig:
    """The named shape with LlamaGen's defaults, then ``overrides`` (e.g. ``block_size=576``)."""
    if name not in SHAPES:
        raise ValueError(f"unknown GPT model {name!r}; expected one of {sorted(SHAPES)}")
    n_layer, n_head, dim = SHAPES[name]
    cfg = GPTConfig(dim=dim, n_layer=n_layer, n_head=n_head, multiple_of=8 if dim < 64 else 256)
    return replace(cfg, **overrides)  # type: ignore[arg-type]


DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                                  "float16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    """The weights/activations dtype called ``name`` (a key of :data:`DTYPES`)."""
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}")
    return DTYPES[name]


@dataclass(frozen=True)
class TreeExecution:
    """How :meth:`Transformer.forward_tree` runs the layer stack.

    ``static`` pads every call to ``max_tree_nodes`` rows (module docstring); ``cuda_graphs`` replays
    the padded stack from a CUDA graph per batch size (the model must be on a CUDA device);
    ``compile`` runs it through ``torch.compile``. Both need fixed shapes, so either one pads.
    """

    static: bool = False
    cuda_graphs: bool = False
    compile: bool = False

    @property
    def padded(self) -> bool:
        return self.static or self.cuda_graphs or self.compile


EAGER = TreeExecution()


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


def run_tree(layers: nn.ModuleList, norm: nn.Module, rope: torch.Tensor, cache_len: int, x: torch.Tensor,
             parents: np.ndarray, nodes: np.ndarray, prefix_len: int, slots: dict[int, int],
             pos_offset: int = 0) -> torch.Tensor:
    """Tree forward shared by the GPT and the EAGLE head (see :meth:`Transformer.forward_tree`)."""
    table, slot_idx, mask = tree_inputs(rope, cache_len, parents, nodes, prefix_len, slots, pos_offset,
                                        x.device)
    return run_layers(layers, norm, x, table, slot_idx, mask)


def tree_inputs(rope: torch.Tensor, cache_len: int, parents: np.ndarray, nodes: np.ndarray, prefix_len: int,
                slots: dict[int, int], pos_offset: int = 0, device: torch.device | str | None = None,
                pad_to: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotary rows, cache slots and attention mask of ``nodes``; assigns their slots.

    Rotary position = pos_offset + prefix_len + depth (the EAGLE head's slot j
    holds image token j, at position cls_token_num + j). With ``pad_to`` every
    output has ``pad_to`` rows: rows past the nodes take rotary row 0, the pad
    slot ``cache_len - 1`` (then closed to tree nodes) and a mask that sees only
    that slot.
    """
    if cache_len == 0:
        raise RuntimeError("no KV cache: call setup_cache first")
    parents = np.asarray(parents, dtype=np.int64)
    nodes = np.asarray(nodes, dtype=np.int64)
    if pad_to is not None and nodes.size > pad_to:
        raise ValueError(f"a padded tree forward takes at most max_tree_nodes = {pad_to} nodes (the size "
                         f"given to setup_cache), got {nodes.size}")
    for v in nodes.tolist():
        if v in slots:
            raise ValueError(f"tree node {v} was already processed in this step")
        slots[v] = len(slots)
    usable = cache_len if pad_to is None else cache_len - 1
    if prefix_len + len(slots) > usable:
        raise ValueError(f"prefix {prefix_len} + {len(slots)} tree slots exceed the cache length {usable}")
    positions = pos_offset + prefix_len + parent_depths(parents)[nodes]
    if positions.max() >= rope.shape[0]:
        raise ValueError(f"position {positions.max()} is past the last grid position {rope.shape[0] - 1}")
    rows = nodes.size if pad_to is None else pad_to
    mask = np.zeros((rows, cache_len), dtype=bool)
    mask[: nodes.size, :prefix_len] = True
    for i, v in enumerate(nodes.tolist()):
        while v >= 0:
            if v not in slots:
                raise ValueError(f"ancestor {v} of a tree node has not been processed")
            mask[i, prefix_len + slots[v]] = True
            v = int(parents[v])
    mask[nodes.size :, cache_len - 1] = True
    pad = rows - nodes.size
    slot_idx = torch.as_tensor([prefix_len + slots[v] for v in nodes.tolist()] + [cache_len - 1] * pad,
                               device=device)
    positions = np.concatenate([positions, np.zeros(pad, dtype=np.int64)])
    table = rope[torch.as_tensor(positions, device=rope.device)].to(device)
    return table, slot_idx, torch.from_numpy(mask).to(device)


def run_layers(layers: nn.ModuleList, norm: nn.Module, x: torch.Tensor, table: torch.Tensor,
               slot_idx: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The transformer stack over prepared tree inputs (device work only: what CUDA graphs capture)."""
    h = x
    for layer in layers:
        h = layer(h, table, slot_idx, mask)
    return norm(h)


def move_accepted(layers: nn.ModuleList, prefix_len: int, path_slots: np.ndarray | list[int]) -> int:
    """Copy cache slots ``prefix_len + path_slots`` to ``prefix_len + 0, 1, ...`` in every layer."""
    rel = np.asarray(path_slots, dtype=np.int64)
    if rel.size == 0 or rel[0] != 0:
        raise ValueError(f"accepted path slots {rel.tolist()} must start with the root's slot 0")
    if np.any(rel != np.arange(rel.size)):
        dev = layers[0].attention.kv_cache.k.device
        src = torch.as_tensor(prefix_len + rel, device=dev)
        dst = torch.arange(prefix_len, prefix_len + rel.size, device=dev)
        for layer in layers:
            layer.attention.kv_cache.move(src, dst)
    return prefix_len + int(rel.size)


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
