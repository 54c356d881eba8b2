"""The GPT's shape and its named configurations, in the style of gpt-fast's ``ModelArgs`` and
``transformer_configs``: :class:`GPTConfig` (one frozen value, validated when built), :data:`SHAPES` (the
table of named shapes: LlamaGen's c2i models and small ones) and :func:`gpt_config` (a named shape with
LlamaGen's defaults); the weights' dtypes by name (:data:`DTYPES`). :mod:`reference.model` builds the
network from a config.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch


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
