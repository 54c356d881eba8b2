"""The NumPy oracle of speculative Jacobi decoding (SJD, SPEC 9.1) with explicit uniforms.

A step verifies a window of L drafts d_1..d_L, each stored with the distribution q_j it was drawn from,
with one target forward over [last committed, d_1..d_L]. That forward gives p_j at every window position
j = 1..L (conditioned on the prefix and d_1..d_{j-1}) and p_{L+1} after the last draft. Rows are 0-based
here: ``p_rows[j - 1]`` is p_j, ``p_rows[L]`` is p_{L+1}; ``drafts[j - 1]`` is d_j.

The verification is rule R2 on a chain: node 0 (the last committed token) and nodes 1..L (tokens
d_1..d_L), node j - 1 the parent of node j, each node one draft whose q row is q_j, tested at depth j
(Cool-SD's depth is the window position). :func:`window_tree` builds it and ``theory.tree``'s
``sample_step``, ``path_tv`` and ``step_expectation`` verify it, so a window takes exactly the
decisions (and the SPEC 9.4 TVs) of a one-draft-per-node R2 tree with the same rows and uniforms.

Uniforms of one step (a step owns them; nothing is carried between steps):

- ``u_accept[j - 1]`` tests d_j (node j): accepted iff ``u_accept[j - 1] < a_j(d_j)``, a_j the
  (boosted) R2 acceptance at depth j;
- ``u_draw[j - 1]`` (j <= L) is spent by position j on one token, never two: the residual draw
  norm((p_j - q_j)^+) when d_j is the first rejected draft, else the token t_j ~ p_j that this forward
  samples there; ``u_draw[L]`` draws t_{L+1} ~ p_{L+1}, the bonus token when all L are accepted;
- ``u_fresh[k]`` fills window slot k (0-based) with a fresh token when it is not kept (below).

Indexing of the window update (SJD's code, tyshiwo1/Accelerating-T2I-AR-with-SJD,
``scheduler/jacobi_iteration_lumina_mgpt.py``: ``SpeculativeSampler`` and the "unmatched" tokens of
``prefix_matching_next_tokens``). After ``a`` acceptances the step emits d_1..d_a and one more token at
window position a + 1 (the residual draw, or the bonus t_{L+1} when a = L): a + 1 tokens per forward.
The next window keeps the tokens sampled after the emitted one, t_{a+2}..t_{L+1} (L - a tokens, none
when a = L), each with q := the p it was drawn from (t_{a+2} was drawn at the position right after the
emitted token, so it is the next window's d_1), and refills its last a slots with fresh tokens: one-hot q,
a uniform random token ``floor(u V)`` (``uniform``, SJD's default ``multi_token_init_scheme='random'``)
or a copy of the left neighbour (``copy``, SJD's ``repeat_horizon`` on a one-dimensional sequence: every
fresh token repeats the last kept token, or the last emitted one when nothing is kept; a first window
with nothing committed starts from a uniform token). Kept tokens were drawn in a context whose tail may
have been rejected; each is still a draw from a distribution fixed before the uniform that tests it, so
the unboosted window is lossless (SPEC 9.1). The first step's window is all fresh (SJD's code decodes its
first tokens autoregressively; here every step is a window step).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from relaxspec.theory.boost import Boost
from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.relax import NO_RELAX
from relaxspec.theory.rules import Rule, boost_embedding, neighbour_rows
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.tree import Tree, path_tv, sample_step, step_expectation
from relaxspec.theory.verification import Verification


class Fresh(enum.StrEnum):
    """How a window's new slots are filled (SPEC 9.1; a ``StrEnum``: ``Fresh.COPY == "copy"``)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    UNIFORM = "uniform"
    """A uniform random token (SJD's code: ``multi_token_init_scheme='random'``)."""
    COPY = "copy"
    """A copy of the slot's left neighbour (the last kept draft or committed token; uniform without one)."""

    @property
    def copies(self) -> bool:
        """True when a fresh slot copies its left neighbour instead of drawing a uniform token."""
        return self is Fresh.COPY


FRESH_CHOICES = tuple(Fresh)
DEFAULT_FRESH = Fresh.UNIFORM
"""SJD's code fills new window slots with uniform random image tokens
(``multi_token_init_scheme='random'``)."""
MAX_WINDOW = 64
"""The largest window L (drafts per forward) the suite accepts."""


def check_window_size(window: object) -> int:
    """``window`` as an int in [1, :data:`MAX_WINDOW`], else a ``ValueError`` naming the bounds."""
    try:
        whole = not isinstance(window, bool) and int(window) == window  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole or not 1 <= window <= MAX_WINDOW:  # type: ignore[operator]
        raise ValueError(f"the Jacobi window L must be an integer in [1, {MAX_WINDOW}], got {window!r}")
    return int(window)  # type: ignore[call-overload]


def check_fresh(fresh: str | Fresh) -> Fresh:
    """``fresh`` as a :class:`Fresh`, else a ``ValueError`` naming the choices."""
    if fresh not in FRESH_CHOICES:
        raise ValueError(f"fresh must be one of {FRESH_CHOICES}, got {fresh!r}")
    return Fresh(fresh)


def check_window_boost(boost: Boost, emb: np.ndarray | None, vocab_size: int) -> np.ndarray | None:
    """Check that ``boost`` can verify a window (none, gsd or cool: R2 so boosted verifies node by node,
    ``theory.verification.Verification.check_node_by_node``) and return the float64 embedding table a
    group boost needs (``None`` otherwise)."""
    window_verification(boost)
    return boost_embedding(boost, emb, vocab_size)


def _uniforms(u: np.ndarray, n: int, name: str) -> np.ndarray:
    a = np.asarray(u, dtype=np.float64)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    if not np.all((a >= 0.0) & (a < 1.0)):
        raise ValueError(f"{name} must hold uniforms in [0, 1)")
    return a


def _rows(rows: np.ndarray, n: int, name: str, vocab_size: int | None = None) -> np.ndarray:
    r = np.asarray(rows, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] != n or (vocab_size is not None and r.shape[1] != vocab_size):
        raise ValueError(f"{name} must have shape ({n}, {vocab_size or 'V'}), got {r.shape}")
    for i in range(n):
        validate_distribution(r[i], name=f"{name}[{i}]")
    return r


@dataclass(frozen=True)
class WindowInputs:
    """One validated window as rule R2 verifies it: the chain ``tree``, its node rows ``p`` (L + 1, V)
    and ``q`` (L + 1, V; the leaf's row uniform, never read) and the embedding table ``emb``."""

    tree: Tree
    p: np.ndarray
    q: np.ndarray
    emb: np.ndarray | None

    @property
    def neighbours(self) -> np.ndarray:
        """The empty int64 neighbour table of an unrelaxed rule."""
        return neighbour_rows(None, self.p.shape[1], NO_RELAX)


def window_tree(drafts: np.ndarray) -> Tree:
    """The window as a chain: node 0 the last committed token (token 0: never read), node j draft d_j."""
    d = np.asarray(drafts, dtype=np.int64)
    return Tree(np.arange(-1, d.size, dtype=np.int64), np.concatenate(([0], d)))


def check_window(p_rows: np.ndarray, drafts: np.ndarray, q_rows: np.ndarray, boost: Boost,
                 emb: np.ndarray | None) -> WindowInputs:
    """Validate one step's rows, drafts and boost: ``p_rows`` (L + 1, V), ``drafts`` (L,) tokens with
    q > 0, ``q_rows`` (L, V), GSD's ``emb`` (V, dim)."""
    d = np.asarray(drafts)
    if d.ndim != 1 or d.size < 1 or d.dtype.kind not in "iu":
        raise ValueError(f"drafts must be a non-empty 1-D integer array, got {d.dtype} of shape {d.shape}")
    L = check_window_size(d.size)
    p = _rows(p_rows, L + 1, "p_rows")
    V = p.shape[1]
    q = _rows(q_rows, L, "q_rows", V)
    d = d.astype(np.int64)
    if np.any((d < 0) | (d >= V)):
        raise ValueError(f"drafts must be tokens in [0, {V}), got {d.tolist()}")
    zero = np.flatnonzero(q[np.arange(L), d] <= 0.0)
    if zero.size:
        raise ValueError(f"draft d_{zero[0] + 1} = {d[zero[0]]} has zero probability under its q")
    emb = check_window_boost(boost, emb, V)
    return WindowInputs(window_tree(d), p, np.vstack((q, np.full((1, V), 1.0 / V))), emb)


def window_verification(boost: Boost) -> Verification:
    """The verification of a window boosted by ``boost``: rule r2, no LANTERN relaxation (SPEC 9.1),
    verified node by node on the chain (``ValueError`` for the budget: ``theory.rule_step``)."""
    v = Verification(Rule.R2, boost=boost)
    v.check_node_by_node()
    return v


def node_uniforms(u_accept: np.ndarray) -> np.ndarray:
    """The chain's per-node acceptance uniforms: node j (j >= 1) tests d_j with ``u_accept[j - 1]``
    (node 0, the root, is never tested)."""
    return np.concatenate(([0.0], u_accept))


def verify_window(p_rows: np.ndarray, drafts: np.ndarray, q_rows: np.ndarray, boost: Boost,
                  emb: np.ndarray | None, u_accept: np.ndarray, u_draw: np.ndarray) -> tuple[int, int]:
    """Verify one window left to right (module docstring): ``(accepted, token)``, the number of drafts
    accepted and the token emitted after them (a residual draw, or the bonus t_{L+1} when all L pass).

    Parameters
    ----------
    p_rows : (L + 1, V) target rows p_1..p_{L+1}.
    drafts : (L,) the window's tokens d_1..d_L.
    q_rows : (L, V) the distribution each draft was drawn from (a one-hot row for a fresh token).
    boost : none, group (GSD, needs ``emb``) or depth (Cool-SD, depth = window position).
    emb : (V, dim) embedding table for the group boost, else unused.
    u_accept : (L,) acceptance uniforms; ``u_draw`` : (L + 1,) draw uniforms.
    """
    w = check_window(p_rows, drafts, q_rows, boost, emb)
    L = w.tree.size - 1
    ua = _uniforms(u_accept, L, "u_accept")
    ud = _uniforms(u_draw, L + 1, "u_draw")
    path, token = sample_step(w.tree, w.p, node_uniforms(ua), ud, window_verification(boost),
                              neighbours=w.neighbours, q_dists=w.q, emb=w.emb)
    return len(path) - 1, int(token)


def window_tv(p_rows: np.ndarray, drafts: np.ndarray, q_rows: np.ndarray, boost: Boost,
              emb: np.ndarray | None, accepted: int) -> float:
    """Exact TV of the tokens a window emitted after ``accepted`` acceptances: the SPEC 9.4 TVs of the
    laws of the tested positions 1..min(a + 1, L) (``theory.tree.path_tv``; 0 unboosted)."""
    w = check_window(p_rows, drafts, q_rows, boost, emb)
    return path_tv(w.tree, w.p, list(range(int(accepted) + 1)), window_verification(boost),
                   neighbours=w.neighbours, q_dists=w.q, emb=w.emb)


def window_expectation(p_rows: np.ndarray, drafts: np.ndarray, q_rows: np.ndarray, boost: Boost,
                       emb: np.ndarray | None) -> tuple[float, float]:
    """Given the window (so every p_j is fixed): ``(E[tokens], E[TV])``, E[tokens] = 1 + sum_k
    prod_{j<=k} a_j and E[TV] = sum_j prod_{i<j} a_i TV_j (``theory.tree.step_expectation``)."""
    w = check_window(p_rows, drafts, q_rows, boost, emb)
    e = step_expectation(w.tree, w.p, window_verification(boost), neighbours=w.neighbours, q_dists=w.q,
                         emb=w.emb)
    return e.tokens, e.tv


def kept_drafts(p_rows: np.ndarray, u_draw: np.ndarray, accepted: int) -> tuple[np.ndarray, np.ndarray]:
    """The drafts the next window keeps after ``accepted`` acceptances: t_{a+2}..t_{L+1}, drawn from
    p_{a+2}..p_{L+1} with ``u_draw[a+1..L]``, and their q rows (those p rows); empty when a = L."""
    p = np.asarray(p_rows, dtype=np.float64)
    L = p.shape[0] - 1
    if isinstance(accepted, bool) or int(accepted) != accepted or not 0 <= accepted <= L:
        raise ValueError(f"accepted must be an integer in [0, {L}], got {accepted!r}")
    ud = _uniforms(u_draw, L + 1, "u_draw")
    keep = range(int(accepted) + 1, L + 1)
    tokens = np.array([draw_token(p[k], float(ud[k])) for k in keep], dtype=np.int64)
    return tokens, p[int(accepted) + 1:].copy()


def fill_window(kept: np.ndarray, kept_q: np.ndarray, window: int, vocab_size: int, fresh: str,
                u_fresh: np.ndarray, last: int | None) -> tuple[np.ndarray, np.ndarray]:
    """A full window: the ``kept`` drafts (rows ``kept_q``) then fresh tokens with one-hot q in slots
    ``len(kept)..L-1`` (``uniform``: ``floor(u_fresh[k] V)``; ``copy``: the left neighbour, the last
    kept token or else ``last``, the last committed token; with neither, slot k draws uniformly)."""
    L = check_window_size(window)
    copies = check_fresh(fresh).copies
    kept = np.asarray(kept, dtype=np.int64)
    if kept.size > L:
        raise ValueError(f"{kept.size} kept drafts do not fit a window of {L}")
    uf = _uniforms(u_fresh, L, "u_fresh")
    tokens = np.empty(L, dtype=np.int64)
    q = np.zeros((L, vocab_size))
    tokens[:kept.size] = kept
    q[:kept.size] = kept_q
    left = int(kept[-1]) if kept.size else (None if last is None else int(last))
    for k in range(kept.size, L):
        if copies and left is not None:
            tok = left
        else:
            tok = min(int(uf[k] * vocab_size), vocab_size - 1)
        tokens[k] = tok
        q[k, tok] = 1.0
        left = tok
    return tokens, q


@dataclass(frozen=True)
class JacobiStep:
    """One forward of a Jacobi decode: drafts accepted, tokens emitted (accepted + 1), their exact TV
    (:func:`window_tv`), the window's :func:`window_expectation` (NaN unless asked for) and how many of
    its drafts were kept from the previous forward."""

    accepted: int
    tokens: np.ndarray
    token_tv: float
    expected_tokens: float
    expected_tv: float
    kept: int


Uniforms = Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray]]


def decode_jacobi(target: Callable[[object], np.ndarray], advance: Callable[[object, int], object],
                  state: object, vocab_size: int, window: int, n_tokens: int, uniforms: Uniforms, *,
                  fresh: str = DEFAULT_FRESH, boost: Boost, emb: np.ndarray | None = None,
                  exact: bool = False) -> list[JacobiStep]:
    """Decode at least ``n_tokens`` tokens with Jacobi windows (the last step may overshoot).

    ``target(state)`` is p after a prefix's state, ``advance(state, x)`` the state after token x,
    ``uniforms(step)`` the step's ``(u_accept (L,), u_draw (L + 1,), u_fresh (L,))``. ``exact`` adds
    each step's :func:`window_expectation`.
    """
    L = check_window_size(window)
    check_fresh(fresh)
    emb = check_window_boost(boost, emb, vocab_size)
    kept, kept_q = np.zeros(0, dtype=np.int64), np.zeros((0, vocab_size))
    last: int | None = None
    steps: list[JacobiStep] = []
    pos = 0
    while pos < n_tokens:
        u_accept, u_draw, u_fresh = uniforms(len(steps))
        drafts, q = fill_window(kept, kept_q, L, vocab_size, fresh, u_fresh, last)
        states = [state]
        for x in drafts:
            states.append(advance(states[-1], int(x)))
        p = np.array([target(s) for s in states])
        a, token = verify_window(p, drafts, q, boost, emb, u_accept, u_draw)
        e_tokens, e_tv = window_expectation(p, drafts, q, boost, emb) if exact else (np.nan, np.nan)
        steps.append(JacobiStep(a, np.append(drafts[:a], token), window_tv(p, drafts, q, boost, emb, a),
                                e_tokens, e_tv, int(kept.size)))
        kept, kept_q = kept_drafts(p, u_draw, a)
        state = advance(states[a], token)
        last = token
        pos += a + 1
    return steps


__all__ = [
    "DEFAULT_FRESH",
    "FRESH_CHOICES",
    "Fresh",
    "JacobiStep",
    "MAX_WINDOW",
    "WindowInputs",
    "check_fresh",
    "check_window",
    "check_window_boost",
    "check_window_size",
    "decode_jacobi",
    "fill_window",
    "kept_drafts",
    "node_uniforms",
    "verify_window",
    "window_expectation",
    "window_tree",
    "window_tv",
]
