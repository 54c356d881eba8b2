"""What the reference decoder reports: per-step statistics and a sequence's result (``reference.decode``
and its loops for SPEC 10's methods, ``reference.decode_columns`` and ``reference.decode_vvs``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    host_bytes: int = 0
    skipped: bool = False


@dataclass
class DecodeResult:
    """Generated image tokens (grid^2,) and per-step statistics."""

    tokens: np.ndarray
    steps: list[StepStats]

    @property
    def tokens_per_step(self) -> float:
        return float(np.mean([s.tokens for s in self.steps]))

    @property
    def tokens_per_forward(self) -> float:
        """Tokens per target forward: a VVS skip step emits its tokens with none."""
        return float(sum(s.tokens for s in self.steps) / sum(not s.skipped for s in self.steps))


__all__ = ["DecodeResult", "StepStats"]
