"""Jacobi windows (SJD, SPEC 9.1) in the reference decoder: what one target forward leaves to the next.

``theory.jacobi_sampler`` decides everything (which drafts pass, the emitted token, which sampled tokens
the next window keeps, the fresh tokens that refill it). This module adds what the decoder and its trace
need on top: the *stored logits* of every draft's law q_j, so that the q a replay computes from a trace
equals, bit for bit, the q the decoder verified with. A kept draft t_j was drawn from the target's p_j
of the previous forward: its q logits are that forward's stored (guided, trace-dtype) target row, which
``Sampling.probs`` turns into the same p_j again. A fresh draft is one-hot: 0 at its token and -inf
elsewhere, which every sampling setting turns into the point mass. ``reference.decode`` (the decoder)
and ``reference.replay`` (which rebuilds every window from the trace alone) both go through :class:`Kept`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.theory.jacobi_sampler import fill_window, kept_drafts


def fresh_logits(tokens: np.ndarray, vocab_size: int, dtype: str | np.dtype) -> np.ndarray:
    """Stored logits of one-hot laws: row k is 0 at ``tokens[k]`` and -inf elsewhere."""
    tokens = np.asarray(tokens, dtype=np.int64)
    out = np.full((tokens.size, vocab_size), -np.inf, dtype=dtype)
    out[np.arange(tokens.size), tokens] = 0.0
    return out


@dataclass(frozen=True)
class Kept:
    """What a forward leaves to the next window: the kept drafts, the stored logits of their laws and
    the last committed token (None before the first)."""

    tokens: np.ndarray
    q_logits: np.ndarray
    last: int | None

    @classmethod
    def nothing(cls, vocab_size: int, dtype: str | np.dtype) -> Kept:
        """The state before a sequence's first forward: nothing kept, nothing committed."""
        return cls(np.zeros(0, dtype=np.int64), np.zeros((0, vocab_size), dtype=dtype), None)

    @classmethod
    def after(cls, p: np.ndarray, target_logits: np.ndarray, accepted: int, u_draw: np.ndarray,
              emitted: int) -> Kept:
        """What a forward with target rows ``p`` (stored as ``target_logits``; L' + 1 rows for L' tested
        drafts), ``accepted`` acceptances and draw uniforms ``u_draw`` keeps, having emitted ``emitted``
        last: t_{a+2}..t_{L'+1} (``theory.jacobi_sampler.kept_drafts``), each drawn from the row after
        the one before it, so its q logits are rows a+1..L' of ``target_logits``."""
        tokens, _ = kept_drafts(p, u_draw, accepted)
        return cls(tokens, np.array(target_logits[accepted + 1:]), int(emitted))

    def window(self, window: int, fresh: str, u_fresh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next full window of ``window`` drafts and their q logits: the kept drafts, then fresh
        ones (``theory.jacobi_sampler.fill_window`` with uniforms ``u_fresh``)."""
        V = self.q_logits.shape[1]
        kept_q = np.zeros((self.tokens.size, V))  # fill_window copies q rows; only its tokens are read
        tokens, _ = fill_window(self.tokens, kept_q, window, V, fresh, u_fresh, self.last)
        q_logits = np.empty((window, V), dtype=self.q_logits.dtype)
        q_logits[:self.tokens.size] = self.q_logits
        q_logits[self.tokens.size:] = fresh_logits(tokens[self.tokens.size:], V, self.q_logits.dtype)
        return tokens, q_logits
