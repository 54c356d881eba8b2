"""Coupled Jacobi windows (SCD, SPEC 10.1) and SJD-PAC windows (SPEC 10.2) in the reference decoder: what
one target forward leaves to the next window.

The rules are :mod:`simulate.coupled_oracle`'s (the simulator's NumPy oracle; the decoder takes its
decisions given the same logits and uniforms, tested): a window is L columns, each its candidates (the
spine draft first) and the law they were drawn from, kept here as *stored logits* (a trace row) so that
the q a replay computes from a trace equals, bit for bit, the q the decoder verified with (as
:mod:`reference.jacobi` does for SJD). After a rejection at column c the next window's columns come from
the old columns kk = c + 1..L' against P[kk], the target row at the spine's node of depth kk (stored
logits of this forward): the spine draft is sampled from P[kk] (coupling ``none``: PAC without AC),
coupled (keep the old draft x with probability ``min(1, P(x)/q(x))``, else draw from ``norm((P - q)^+)``;
stored with P, or a kept draft with its old q for SCD's ``official``), or the Gumbel-max of P[kk] with the
noise of its absolute position (``gumbel``); column L is always a draw from P[L]. PD adds ``width - 1``
siblings at the first ``depth`` new columns, drawn without replacement from the stored law
(``principled``) or from the coupling's residual, a kept spine not excluded (``official``). The window's
end is refilled with fresh tokens (uniform or copies, one-hot laws), as SJD's.

Uniforms of one forward (``reference.decode``'s per-step order, after ``u_fresh`` (L)): ``u_accept``
(L, W) per column and candidate, ``u_draw`` (L + 1) per column (the residual at a rejected column, SJD's
sample at a later one, the bonus at L'), ``u_couple`` (L + 1, W + 1): at old column kk its keep test,
its residual redraw and its siblings' draws. The Gumbel noise of absolute position n is
:func:`gumbel_uniforms` of the sequence's ``noise_key`` (drawn once per sequence).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.core.trace import Sampling
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.windows import CoupledWindow, PacWindow
from relaxspec.reference.jacobi import fresh_logits
from relaxspec.theory.jacobi_sampler import fill_window
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.stages import seqsum

COUPLE_NONE, COUPLE_MAXIMAL, COUPLE_GUMBEL = 0, 1, 2
"""How the next window's spine drafts are formed (``simulate.coupled_kernels``' codes)."""
_COUPLINGS = {"none": COUPLE_NONE, "principled": COUPLE_MAXIMAL, "official": COUPLE_MAXIMAL,
              "gumbel": COUPLE_GUMBEL}
_STORES_OLD_LAW = {"none": False, "principled": False, "official": True, "gumbel": False}
_OFFICIAL_SIBLINGS = {"principled": False, "official": True}
KEEP, REDRAW, SIBLING = 0, 1, 2
"""Columns of ``u_couple``: the keep test, the residual redraw, then the siblings' draws."""


@dataclass(frozen=True)
class WindowPlan:
    """A coupled or PAC window as the decoder runs it: L, fresh tokens, the spine's coupling, whether a
    kept draft keeps its old law (SCD ``official``), PD's width and depth, official siblings, and
    whether the emitted law is the target's (docs/theory.md 15.2)."""

    window: int
    fresh: str
    coupling: int
    store_old: bool
    width: int
    depth: int
    official_siblings: bool
    lossless: bool

    @classmethod
    def of(cls, policy: JacobiWindow) -> WindowPlan:
        """The plan of a :class:`CoupledWindow` or :class:`PacWindow`."""
        if isinstance(policy, CoupledWindow):
            return cls(policy.window, policy.fresh, _COUPLINGS[policy.coupling],
                       _STORES_OLD_LAW[policy.coupling], 1, 0, False, policy.lossless)
        if isinstance(policy, PacWindow):
            return cls(policy.window, policy.fresh, _COUPLINGS[policy.coupling], False, policy.width,
                       policy.depth, _OFFICIAL_SIBLINGS[policy.siblings], policy.lossless)
        raise ValueError(f"expected a coupled or pac window, got {policy}")

    @property
    def gumbel(self) -> bool:
        return self.coupling == COUPLE_GUMBEL

    def max_nodes(self, columns: int | None = None) -> int:
        """Nodes of the largest column product of ``columns`` (default L) columns, root included."""
        size, level = 1, 1
        for k in range(self.window if columns is None else columns):
            level *= self.width if k < self.depth else 1
            size += level
        return size


def gumbel_uniforms(noise_key: int, position: int, vocab_size: int) -> np.ndarray:
    """The (V,) uniforms of the Gumbel noise fixed at absolute ``position`` of a sequence (``g = -log(-log
    u)``): ``numpy.random.default_rng([noise_key, position])``."""
    return np.random.default_rng([int(noise_key), int(position)]).random(int(vocab_size))


def gumbel_max(P: np.ndarray, u: np.ndarray) -> int:
    """``argmax_y log P(y) + g_y``, ``g_y = -log(-log u_y)`` (tokens with P = 0 never win; ties: the
    lowest token): ``simulate.coupled_oracle``'s Gumbel-max."""
    with np.errstate(divide="ignore"):
        score = np.where(P > 0.0, np.log(P) - np.log(-np.log(u)), -np.inf)
    return int(np.argmax(score))


def _norm(w: np.ndarray) -> np.ndarray | None:
    s = seqsum(w)
    return w / s if s > 0.0 else None


def _draw_without(law: np.ndarray, first: list[int], u: np.ndarray) -> list[int]:
    """``u.size`` draws without replacement from ``law``, the tokens in ``first`` excluded (fewer when the
    support runs out); draw i spends ``u[i]``."""
    out: list[int] = []
    rest = law.copy()
    rest[first] = 0.0
    for ui in u:
        r = _norm(rest)
        if r is None:
            break
        y = draw_token(r, float(ui))
        out.append(y)
        rest[y] = 0.0
    return out


@dataclass(frozen=True)
class Columns:
    """What a forward leaves to the next window: the kept columns' candidates (spine first), the stored
    logits of their laws and the last committed token (None before the first)."""

    cands: tuple[tuple[int, ...], ...]
    q_logits: np.ndarray
    last: int | None

    @classmethod
    def nothing(cls, vocab_size: int, dtype: str | np.dtype) -> Columns:
        """The state before a sequence's first forward."""
        return cls((), np.zeros((0, vocab_size), dtype=dtype), None)

    def window(self, plan: WindowPlan, u_fresh: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """The next full window of L columns and their laws' stored logits: the kept columns, then fresh
        one-hot tokens (``theory.jacobi_sampler.fill_window``'s rule with uniforms ``u_fresh``)."""
        V, k = self.q_logits.shape[1], len(self.cands)
        spine = np.array([c[0] for c in self.cands], dtype=np.int64)
        tokens, _ = fill_window(spine, np.zeros((k, V)), plan.window, V, plan.fresh, u_fresh, self.last)
        q_logits = np.empty((plan.window, V), dtype=self.q_logits.dtype)
        q_logits[:k] = self.q_logits
        q_logits[k:] = fresh_logits(tokens[k:], V, self.q_logits.dtype)
        return [*self.cands, *((int(t),) for t in tokens[k:])], q_logits

    @classmethod
    def after(cls, plan: WindowPlan, cands: list[tuple[int, ...]], q_logits: np.ndarray,
              spine_logits: np.ndarray, rejected: int, emitted: int, position: int, u_couple: np.ndarray,
              u_draw: np.ndarray, noise_key: int, sampling: Sampling) -> Columns:
        """The columns a forward keeps (module docstring): ``cands`` and ``q_logits`` the window it
        verified (L columns, truncated or not), ``spine_logits`` (L' + 1, V) the stored target rows at
        its spine's nodes, ``rejected`` the column where the walk stopped (L' when every one passed:
        nothing kept), ``emitted`` the token it emitted last, ``position`` the absolute position of its
        column 0, ``u_couple`` (L + 1, W + 1) and ``u_draw`` (L + 1,) its uniforms."""
        Lp = spine_logits.shape[0] - 1
        dtype = q_logits.dtype
        if rejected >= Lp:
            return cls((), np.zeros((0, q_logits.shape[1]), dtype=dtype), int(emitted))
        P = sampling.probs(spine_logits.astype(np.float64))
        V = P.shape[1]
        out: list[tuple[int, ...]] = []
        rows: list[np.ndarray] = []
        for kk in range(rejected + 1, Lp + 1):
            Pk, stored_row, stored, kept, res = P[kk], spine_logits[kk], P[kk], False, P[kk]
            if plan.gumbel:
                y = gumbel_max(Pk, gumbel_uniforms(noise_key, position + kk, V))
            elif kk == plan.window or plan.coupling == COUPLE_NONE:
                y = draw_token(Pk, float(u_draw[kk]))
            else:  # the maximal coupling of the old spine draft with P[kk]
                x = cands[kk][0]
                q = sampling.probs(q_logits[kk].astype(np.float64)[None])[0]
                a = min(1.0, Pk[x] / q[x])
                nr = _norm(np.maximum(Pk - q, 0.0))
                res = nr if nr is not None else Pk
                if u_couple[kk, KEEP] < a or nr is None:
                    y, kept = x, True
                    if plan.store_old:
                        stored_row, stored = q_logits[kk], q
                else:
                    y = draw_token(nr, float(u_couple[kk, REDRAW]))
            col = [int(y)]
            if plan.width > 1 and kk - rejected <= plan.depth:
                u = u_couple[kk, SIBLING: SIBLING + plan.width - 1]
                if plan.official_siblings:
                    col += _draw_without(res, [] if kept else [y], u)
                else:
                    col += _draw_without(stored, [y], u)
            out.append(tuple(col))
            rows.append(np.asarray(stored_row, dtype=dtype))
        return cls(tuple(out), np.array(rows, dtype=dtype).reshape(len(rows), V), int(emitted))


def column_array(cands: list[tuple[int, ...]], width: int) -> np.ndarray:
    """Columns as an (L', width) int array padded with -1 (a trace's ``columns``)."""
    out = np.full((len(cands), width), -1, dtype=np.int64)
    for c, col in enumerate(cands):
        out[c, :len(col)] = col
    return out


__all__ = ["COUPLE_GUMBEL", "COUPLE_MAXIMAL", "COUPLE_NONE", "Columns", "WindowPlan", "column_array",
           "gumbel_max", "gumbel_uniforms"]
