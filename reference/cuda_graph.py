"""CUDA graph capture and replay: the one place the decoder and its benchmark capture device work.

A CUDA graph records the kernels of one call and replays them with a single launch, which removes the
per-kernel launch cost that dominates a small model's step. A graph reads and writes fixed memory: its
inputs are copied into static buffers before each replay, and its output buffer is overwritten by the
next replay. The captured function must therefore have fixed shapes (``Transformer.forward_tree`` pads
every tree to ``max_tree_nodes`` for this) and must not synchronise with the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def capture(fn: Callable[[], T]) -> tuple[torch.cuda.CUDAGraph, T]:
    """Capture one call of ``fn`` as a CUDA graph after two warm-up calls on a side stream.

    The warm-up calls really run (cuBLAS and the caching allocator need them before a capture), so
    ``fn`` must be safe to run more than once with the same inputs. Returns the graph and the captured
    call's output, static tensors that every ``graph.replay()`` overwrites.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def graphed(fn: Callable[[], object]) -> Callable[[], None]:
    """The replay of ``fn`` captured as a CUDA graph (for timing a fixed call)."""
    graph, _ = capture(fn)
    return graph.replay


class CUDAGraphRunner:
    """``fn(*tensors) -> tensor`` replayed from CUDA graphs, one graph per input signature.

    The first call with a new signature (shapes, dtypes, devices of the inputs) captures ``fn`` on
    copies of its inputs; later calls copy their inputs into those buffers and replay. Inference only
    (captured and replayed without autograd). The returned tensor is a copy, so it survives the next
    replay.
    """

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        self.fn = fn
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], torch.Tensor]] = {}

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        key = tuple((tuple(t.shape), t.dtype, t.device) for t in inputs)
        with torch.no_grad():
            if key not in self.graphs:
                off = [str(t.device) for t in inputs if t.device.type != "cuda"]
                if off:
                    raise ValueError(f"a CUDA graph captures CUDA tensors only; got inputs on {off[0]}")
                static = [t.clone() for t in inputs]
                graph, out = capture(lambda: self.fn(*static))
                self.graphs[key] = (graph, static, out)
            graph, static, out = self.graphs[key]
            for buffer, t in zip(static, inputs, strict=True):
                buffer.copy_(t)
            graph.replay()
            return out.clone()

    def reset(self) -> None:
        """Drop every captured graph (after the tensors they read were reallocated)."""
        self.graphs.clear()


__all__ = ["CUDAGraphRunner", "capture", "graphed"]
