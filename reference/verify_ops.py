"""Tensor primitives of the device verifier (``reference.verify``): theory's arithmetic on torch tensors.

Each function is the torch twin of a NumPy function in ``theory`` and computes the same float64 numbers on
CPU (sums that decide anything are sequential: ``torch.cumsum`` runs left to right on CPU, as
``theory.stages.seqsum`` does). On a GPU the sums are parallel scans, so a float32 decision may differ
from theory's where a uniform lies within rounding of its threshold.

Every value that leaves the device goes through :class:`HostLink`, which counts the transfers, so a
decoder can state its host traffic per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def seqsum(a: torch.Tensor) -> torch.Tensor:
    """Sequential sum over the last axis (``theory.stages.seqsum``; 0 for an empty axis)."""
    if a.shape[-1] == 0:
        return a.new_zeros(a.shape[:-1])
    return torch.cumsum(a, dim=-1)[..., -1]


def normalise_residual(res: torch.Tensor) -> torch.Tensor:
    """Rows of an unnormalised residual divided by their sequential sums, uniform over V where a row has
    no mass (``simulate.verify_kernels.normalise_residual_kernel``; theory's R2 and boosted stages)."""
    total = seqsum(res).unsqueeze(-1)
    return torch.where(total > 0.0, res / total, 1.0 / res.shape[-1])


def draw_token(r: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws (``theory.sampler.draw_token``) from unnormalised rows ``r`` (..., V) with
    uniforms ``u`` (...): the smallest x with cumsum[x] > u * total; ``floor(u * V)`` (at most V - 1)
    for a row without mass; the last token with mass when ``u * total`` rounds up to the total.
    No host synchronisation: returns a long tensor of shape ``u.shape``."""
    V = r.shape[-1]
    u = u.to(r.dtype)
    cum = torch.cumsum(r, dim=-1)
    total = cum[..., -1]
    x = torch.searchsorted(cum.contiguous(), (u * total).unsqueeze(-1).contiguous(), right=True).squeeze(-1)
    has_mass = r > 0
    last = V - 1 - torch.argmax(torch.flip(has_mass, dims=(-1,)).to(torch.uint8), dim=-1)
    x = torch.where(x >= V, last, x)
    empty = torch.clamp(torch.floor(u * V).long(), max=V - 1)
    return torch.where(total <= 0.0, empty, x)


@dataclass
class HostLink:
    """Device-to-host transfers of one verifier: every value read on the host passes here.

    ``syncs`` counts the reads (each one waits for the device), ``bytes`` their size."""

    syncs: int = 0
    bytes: int = 0

    def read(self, t: torch.Tensor) -> np.ndarray:
        """``t`` on the host as a NumPy array (counted)."""
        self.syncs += 1
        self.bytes += t.numel() * t.element_size()
        return t.detach().cpu().numpy()

    def item(self, t: torch.Tensor) -> int | float | bool:
        """A 0-d tensor's value on the host (counted)."""
        return self.read(t.reshape(())).item()

    def reset(self) -> tuple[int, int]:
        """Return ``(syncs, bytes)`` since the last reset and start counting again."""
        out = (self.syncs, self.bytes)
        self.syncs = self.bytes = 0
        return out


__all__ = ["HostLink", "draw_token", "normalise_residual", "seqsum"]
