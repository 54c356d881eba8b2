"""Tree attention over the static KV cache: the inputs of one tree forward (rotary rows, cache slots,
the ancestor mask), the layer stack over them, and the accepted path's move behind the prefix. The GPT
(:meth:`reference.model.Transformer.forward_tree`) and the EAGLE head (:mod:`reference.drafter`) share them.

Cache layout: a cache of ``prefix_len`` committed positions, then scratch slots. A tree step writes node
``v``'s keys and values to slot ``prefix_len + v``, gives it the rotary position ``prefix_len + depth(v)``
and lets it attend to the prefix, its ancestors and itself (SPEC section 5); :func:`move_accepted` moves
the accepted nodes' keys and values to slots ``prefix_len, prefix_len + 1, ...``. A plain decoding step is
a one-node tree.

Static shapes (:class:`TreeExecution`): with ``static`` the tree forward pads every call to
``max_tree_nodes`` rows (the size given to ``setup_cache``), so every step has the same tensor shapes
(embeddings (B, M, dim), rotary rows (M, head_dim // 2, 2), slots (M,), mask (M, cache_len)). A padded row
has zero input, attends only to the cache's last slot (the pad slot, which no tree node uses) and writes
its keys and values there; its input being zero, every layer's keys, values and outputs for it stay zero.
The same shapes let :class:`reference.cuda_graph.CUDAGraphRunner` replay the layer stack as a CUDA graph
and ``torch.compile`` compile it once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from relaxspec.theory.tree import parent_depths


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
