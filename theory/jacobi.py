"""Exact analysis of speculative Jacobi decoding (SJD, SPEC 9.1): tokens per target forward and the law
of the emitted sequence, for the exact rule and for GSD / Cool-SD boosts (docs/theory.md, section 11).

The window works as :mod:`theory.jacobi_sampler` (the Monte Carlo oracle) simulates it: one forward
tests drafts d_1..d_L left to right with the sampled-draft test (the j-th at depth j); after ``a``
acceptances it emits d_1..d_a and one more token (the residual draw, or the bonus t_{L+1}); the next
window keeps t_{a+2}..t_{L+1} with q := the p each was drawn from, and refills its last ``a`` slots with
fresh one-hot tokens, ``uniform`` random or a ``copy`` of the left neighbour.

(a) Stationary world (the target p is the same at every position, whatever the context). A kept token
was drawn from p and is tested against p, so it is accepted with probability 1 (exact rule, GSD and
Cool-SD alike); only the fresh tokens can fail. The window's state is therefore its number k of kept
tokens: a Markov chain on {0..L} (:func:`jacobi_kept_chain`). From k, with n = L - k fresh tokens and
N of them accepted before the first rejection, the forward emits k + N + 1 tokens and leaves n - N kept
tokens (0 when N = n). With a_m(x) the acceptance of a one-hot draft x at depth m
(:func:`theory.boost.onehot_acceptance`: p(x); GSD's p(C(x)); min(1, omega_m p(x))),
P(N >= i | k) = prod_{m=k+1}^{k+i} mean_x a_m(x) for uniform fresh tokens, and
sum_z p(z) prod_{m=k+1}^{k+i} a_m(z) for copies (every fresh token repeats the last kept token, or the
bonus when nothing is kept: a draw from p independent of the tests). Tokens per forward is the chain's
stationary average (:func:`jacobi_expected_tokens`).

(b) Tiny Markov target p(. | previous token) = ``trans[previous]``, the first token from ``start``.
:func:`jacobi_sequence_law` enumerates every forward's outcomes (acceptances, residual draws, the
tokens the forward samples, fresh tokens) and returns the exact law of the first n emitted tokens:
without a boost it equals the target's (:func:`markov_sequence_law`), which proves SJD lossless on the
instance; with one it gives the exact sequence-level TV. :func:`jacobi_markov_tokens_per_forward` is
the same enumeration as a chain over (context, window) states: in a stationary world it is the
brute-force check of (a).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.boost_law import boosted_acceptance, onehot_acceptance, stage_tv, standard_residual
from relaxspec.theory.distributions import validate_distribution
from relaxspec.theory.jacobi_sampler import (
    DEFAULT_FRESH,
    Fresh,
    check_fresh,
    check_window_boost,
    check_window_size,
)

MAX_ENUM_VOCAB, MAX_ENUM_WINDOW, MAX_ENUM_TOKENS = 4, 3, 5
"""Limits of the exact enumerations (b): V <= 4 tokens, windows L <= 3, sequences n <= 5."""
ONE_HOT = -1
"""The q of a fresh draft in an enumerated window state: the point mass on the token itself."""


# ----------------------------------------------------------- (a) stationary world: the kept-count chain
@dataclass(frozen=True)
class KeptChain:
    """SJD in a stationary world as a Markov chain on the number k = 0..L of kept tokens in the window.

    ``transition[k, k2]`` is P(k -> k2), ``tokens[k]`` the expected tokens one forward emits from k,
    ``stationary`` the chain's stationary law (unique: every state reaches k = 0)."""

    transition: np.ndarray
    tokens: np.ndarray
    stationary: np.ndarray

    @property
    def expected_tokens(self) -> float:
        """Long-run tokens per target forward: sum_k stationary[k] tokens[k]."""
        return float((self.stationary * self.tokens).sum())


def stationary_law(transition: np.ndarray) -> np.ndarray:
    """The stationary law pi = pi P of a chain with one recurrent class (``ValueError`` otherwise)."""
    P = np.asarray(transition, dtype=np.float64)
    S = P.shape[0]
    try:
        pi = np.linalg.solve((np.eye(S) - P + 1.0).T, np.ones(S))
    except np.linalg.LinAlgError:
        raise ValueError("the window chain has several recurrent classes: tokens per forward depends "
                         "on the first window") from None
    return np.maximum(pi, 0.0) / np.maximum(pi, 0.0).sum()


S = TypeVar("S", bound=Hashable)
Move = tuple[float, Iterable[tuple[float, S]]]
"""One outcome of a chain's state: (its probability times its reward, [(probability of the outcome and the
next state, next state), ...])."""


def long_run_reward(first: Iterable[S], moves: Callable[[S], Iterable[Move[S]]]) -> float:
    """The stationary mean reward per move of the chain over the states reachable from ``first`` (a
    window chain's tokens per forward): ``moves(state)`` gives each outcome's reward and next states
    (:data:`Move`); the chain must have one recurrent class (:func:`stationary_law`)."""
    index: dict[S, int] = {}
    edges: list[dict[int, float]] = []
    reward: list[float] = []
    todo: list[S] = []

    def state(key: S) -> int:
        if key not in index:
            index[key] = len(index)
            todo.append(key)
            edges.append(defaultdict(float))
            reward.append(0.0)
        return index[key]

    for key in first:
        state(key)
    while todo:
        key = todo.pop()
        i = index[key]
        for r, nxt in moves(key):
            reward[i] += r
            for pr, key2 in nxt:
                edges[i][state(key2)] += pr
    P = np.zeros((len(index), len(index)))
    for i, row in enumerate(edges):
        for j, pr in row.items():
            P[i, j] = pr
    return float((stationary_law(P) * np.array(reward)).sum())


def _survival(p: np.ndarray, acc: np.ndarray, k: int, fresh: Fresh) -> np.ndarray:
    """s[i] = P(the first i fresh tokens of a window with k kept tokens are all accepted), i = 0..L-k;
    ``acc[m - 1]`` is the one-hot acceptance vector at depth m."""
    L = acc.shape[0]
    s = np.ones(L - k + 1)
    if not fresh.copies:
        for i in range(1, L - k + 1):
            s[i] = s[i - 1] * float(acc[k + i - 1].mean())
        return s
    run = np.ones(p.size)
    tiny = np.finfo(np.float64).tiny
    for i in range(1, L - k + 1):
        run = run * acc[k + i - 1]
        run[run < tiny] = 0.0  # drop subnormal products (< 1e-307): negligible, and slow to multiply
        s[i] = float((p * run).sum())  # not p @ run: a BLAS call per step costs ms when cores are busy
    return s


def jacobi_kept_chain(p: np.ndarray, window: int, *, fresh: str = DEFAULT_FRESH, boost: Boost = NO_BOOST,
                      emb: np.ndarray | None = None) -> KeptChain:
    """The exact chain of SJD windows of ``window`` drafts in a stationary world with target ``p``
    (module docstring, (a)); ``boost`` none, GSD (``emb`` its embedding table) or Cool-SD."""
    p = validate_distribution(p, name="p")
    L = check_window_size(window)
    fresh = check_fresh(fresh)
    emb = check_window_boost(boost, emb, p.size)
    if boost.scales_by_depth:
        acc = np.array([onehot_acceptance(p, boost, depth=m) for m in range(1, L + 1)])
    else:
        acc = np.broadcast_to(onehot_acceptance(p, boost, emb=emb), (L, p.size))
    T = np.zeros((L + 1, L + 1))
    tokens = np.zeros(L + 1)
    for k in range(L + 1):
        n = L - k
        s = _survival(p, acc, k, fresh)
        tokens[k] = k + 1 + float(s[1:].sum())
        T[k, 0] += s[n]
        for N in range(n):
            T[k, n - N] += s[N] - s[N + 1]
    return KeptChain(T, tokens, stationary_law(T))


def jacobi_expected_tokens(p: np.ndarray, window: int, *, fresh: str = DEFAULT_FRESH, boost: Boost = NO_BOOST,
                           emb: np.ndarray | None = None) -> float:
    """Exact long-run tokens per target forward of SJD with a window of ``window`` drafts in a stationary
    world with target ``p`` (every position, any context), fresh tokens ``uniform`` or ``copy``, the
    sampled-draft test boosted by ``boost`` (none, GSD with embedding table ``emb``, or Cool-SD)."""
    return jacobi_kept_chain(p, window, fresh=fresh, boost=boost, emb=emb).expected_tokens


# ----------------------------------------------------------- (b) tiny Markov targets: exact enumeration
def check_markov(start: np.ndarray, trans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``start`` (V,) and ``trans`` (V, V) as float64 distributions, V <= :data:`MAX_ENUM_VOCAB`."""
    s = validate_distribution(start, name="start")
    t = np.asarray(trans, dtype=np.float64)
    if t.shape != (s.size, s.size):
        raise ValueError(f"trans must have shape ({s.size}, {s.size}) (row x: p(. | x)), got {t.shape}")
    if s.size > MAX_ENUM_VOCAB:
        raise ValueError(f"exact enumeration is limited to V <= {MAX_ENUM_VOCAB} tokens, got V = {s.size}")
    for x in range(s.size):
        validate_distribution(t[x], name=f"trans[{x}]")
    return s, t


def _check_enum(window: int, n_tokens: int | None) -> int:
    L = check_window_size(window)
    if L > MAX_ENUM_WINDOW:
        raise ValueError(f"exact enumeration is limited to windows L <= {MAX_ENUM_WINDOW}, got L = {L}")
    if n_tokens is not None and (isinstance(n_tokens, bool) or int(n_tokens) != n_tokens
                                 or not 1 <= n_tokens <= MAX_ENUM_TOKENS):
        raise ValueError(f"n_tokens must be an integer in [1, {MAX_ENUM_TOKENS}], got {n_tokens!r}")
    return L


def markov_sequence_law(start: np.ndarray, trans: np.ndarray, n_tokens: int) -> np.ndarray:
    """The target's law of its first ``n_tokens`` tokens: an array of shape (V,) * n."""
    s, t = check_markov(start, trans)
    _check_enum(1, n_tokens)
    law = s.copy()
    for _ in range(int(n_tokens) - 1):
        law = law[..., None] * t[np.indices(law.shape)[-1]]
    return law


def token_tvs(law: np.ndarray, start: np.ndarray, trans: np.ndarray) -> list[np.ndarray]:
    """Each token's conditional TV to the Markov target, from a law of the first n tokens (shape (V,) * n):
    entry t (0-based) has shape (V,) * t and holds TV(P(x_t = . | x_{<t} = h), p(. | h)) for every prefix h
    of positive probability (NaN elsewhere), p(. | h) = ``trans[h[-1]]`` (``start`` for h empty)."""
    s, t = check_markov(start, trans)
    law = np.asarray(law, dtype=np.float64)
    if law.ndim < 1 or law.shape != (s.size,) * law.ndim:
        raise ValueError(f"law must have shape (V,) * n with V = {s.size}, got {law.shape}")
    out = []
    for i in range(law.ndim):
        joint = law.sum(axis=tuple(range(i + 1, law.ndim)))  # the law of x_0..x_i
        mass = joint.sum(axis=-1, keepdims=True)
        target = s if i == 0 else t[np.indices(joint.shape[:-1])[-1]]
        with np.errstate(invalid="ignore", divide="ignore"):
            cond = joint / mass
        tv = 0.5 * np.abs(cond - target).sum(axis=-1)
        out.append(np.where(mass[..., 0] > 0.0, tv, np.nan))
    return out


Window = tuple[tuple[int, int], ...]
"""An enumerated window: (token, q) per slot, q a row id of the target (a kept draft) or ONE_HOT."""


class _Enumerator:
    """One SJD forward's outcomes on a Markov target, with cached acceptances, residuals and TVs.

    Distributions are numbered once (identical rows share an id, so a stationary world has a single
    one); ``ctx`` is the row id of the current context (the last committed token's row, or start's)."""

    def __init__(self, start: np.ndarray, trans: np.ndarray, L: int, fresh: Fresh, boost: Boost,
                 emb: np.ndarray | None) -> None:
        self.V, self.L, self.fresh, self.boost, self.emb = start.size, L, fresh, boost, emb
        self.rows: list[np.ndarray] = []
        self.row_of = [self._row_id(trans[x]) for x in range(self.V)]
        self.start = self._row_id(start)
        self._test: dict[tuple[int, int, int, int], tuple[float, np.ndarray]] = {}
        self._tv: dict[tuple[int, int, int, int], float] = {}
        self._forward: dict[tuple[int, Window], tuple[list, list[float]]] = {}
        self._kept: dict[tuple[int, ...], list[tuple[float, Window]]] = {}

    def _row_id(self, row: np.ndarray) -> int:
        for i, r in enumerate(self.rows):
            if np.array_equal(r, row):
                return i
        self.rows.append(row)
        return len(self.rows) - 1

    def _q(self, qid: int, token: int) -> np.ndarray:
        if qid == ONE_HOT:
            q = np.zeros(self.V)
            q[token] = 1.0
            return q
        return self.rows[qid]

    def _depth(self, j: int) -> int:
        return j if self.boost.scales_by_depth else 1

    def test(self, ctx: int, token: int, qid: int, j: int) -> tuple[float, np.ndarray]:
        """(acceptance, residual law) of draft ``token`` (q = ``qid``) at window position ``j``."""
        key = (ctx, token, qid, self._depth(j))
        if key not in self._test:
            p, q = self.rows[ctx], self._q(qid, token)
            a = boosted_acceptance(p, q, token, self.boost, depth=j, emb=self.emb)
            self._test[key] = (a, standard_residual(p, q))
        return self._test[key]

    def position_tv(self, ctx: int, token: int, qid: int, j: int) -> float:
        """Exact TV of the law position ``j`` emits, its draft drawn from its q (SPEC 9.4)."""
        key = (ctx, token if qid == ONE_HOT else -1, qid, self._depth(j))
        if key not in self._tv:
            self._tv[key] = stage_tv(self.rows[ctx], self._q(qid, token), self.boost, j, self.emb)
        return self._tv[key]

    def fill(self, kept: Window, last: int | None) -> list[tuple[float, Window]]:
        """Complete a window after ``kept`` with fresh one-hot tokens; ``last`` = the last committed token
        (a copy's left neighbour when nothing is kept; ``None``: nothing committed yet)."""
        n = self.L - len(kept)
        if not self.fresh.copies:
            return [(self.V ** -n, kept + tuple((x, ONE_HOT) for x in xs))
                    for xs in itertools.product(range(self.V), repeat=n)]
        left = kept[-1][0] if kept else last
        if left is not None or n == 0:
            return [(1.0, kept + ((left, ONE_HOT),) * n)]
        return [(1.0 / self.V, ((x, ONE_HOT),) * n) for x in range(self.V)]

    def forward(self, ctx: int, window: Window) -> tuple[list[tuple[float, tuple[int, ...], tuple[int, ...]]],
                                                         list[float]]:
        """All outcomes of one forward: ``(prob, emitted tokens, rows of the kept tokens)`` (the kept
        tokens themselves: :meth:`kept`), and the probability ``reach[j - 1]`` that position j is tested."""
        key = (ctx, window)
        if key in self._forward:
            return self._forward[key]
        ctxs = (ctx, *(self.row_of[x] for x, _ in window))  # the row at positions 1..L+1
        outcomes: list[tuple[float, tuple[int, ...], tuple[int, ...]]] = []
        reach, reaches = 1.0, []
        drafts = tuple(x for x, _ in window)
        for j, (x, qid) in enumerate(window, start=1):
            reaches.append(reach)
            a, res = self.test(ctxs[j - 1], x, qid, j)
            if reach * (1.0 - a) > 0.0:
                for y in np.flatnonzero(res > 0):
                    outcomes.append((reach * (1.0 - a) * res[y], drafts[:j - 1] + (int(y),), ctxs[j:]))
            reach *= a
            if reach == 0.0:
                break
        else:
            bonus = self.rows[ctxs[-1]]
            for y in np.flatnonzero(bonus > 0):
                outcomes.append((reach * bonus[y], drafts + (int(y),), ()))
        self._forward[key] = (outcomes, reaches)
        return outcomes, reaches

    def kept(self, rows: tuple[int, ...]) -> list[tuple[float, Window]]:
        """Every draw of the kept tokens t ~ their rows, each keeping its row as q: ``(prob, drafts)``."""
        if rows not in self._kept:
            draws = []
            for ts in itertools.product(*(np.flatnonzero(self.rows[r] > 0) for r in rows)):
                pr = 1.0
                for t, r in zip(ts, rows, strict=True):
                    pr *= self.rows[r][t]
                draws.append((pr, tuple((int(t), r) for t, r in zip(ts, rows, strict=True))))
            self._kept[rows] = draws
        return self._kept[rows]


@dataclass(frozen=True)
class SequenceLaw:
    """The exact law of SJD's first n emitted tokens (shape (V,) * n) and E[sum over those tokens of the
    TV of the test that decided each] (Theorem 12's bound on the sequence TV; 0 without a boost)."""

    law: np.ndarray
    expected_tv_sum: float


def jacobi_sequence_law(start: np.ndarray, trans: np.ndarray, window: int, n_tokens: int, *,
                        fresh: str = DEFAULT_FRESH, boost: Boost = NO_BOOST,
                        emb: np.ndarray | None = None) -> SequenceLaw:
    """Enumerate SJD on the Markov target (``start``, ``trans``) from an empty prefix and an all-fresh
    window until ``n_tokens`` tokens are emitted; V <= 4, L <= 3, n <= 5 (module docstring, (b))."""
    s, t = check_markov(start, trans)
    L = _check_enum(window, n_tokens)
    fresh = check_fresh(fresh)
    emb = check_window_boost(boost, emb, s.size)
    n = int(n_tokens)
    en = _Enumerator(s, t, L, fresh, boost, emb)
    law = np.zeros((s.size,) * n)
    tv_sum = 0.0
    frontier: dict[tuple[tuple[int, ...], Window], float] = defaultdict(float)
    for pr, w in en.fill((), None):
        frontier[((), w)] += pr
    while frontier:
        nxt: dict[tuple[tuple[int, ...], Window], float] = defaultdict(float)
        for (prefix, w), prob in frontier.items():
            ctx = en.row_of[prefix[-1]] if prefix else en.start
            outcomes, reaches = en.forward(ctx, w)
            ctxs = [ctx] + [en.row_of[x] for x, _ in w]
            for j, reach in enumerate(reaches, start=1):
                if len(prefix) + j <= n:
                    tv_sum += prob * reach * en.position_tv(ctxs[j - 1], w[j - 1][0], w[j - 1][1], j)
            for pr, emitted, rows in outcomes:
                seq = prefix + emitted
                if len(seq) >= n:  # later forwards cannot change the first n tokens
                    law[seq[:n]] += prob * pr
                    continue
                for pk, kept in en.kept(rows):
                    for pf, w2 in en.fill(kept, seq[-1]):
                        nxt[(seq, w2)] += prob * pr * pk * pf
        frontier = nxt
    return SequenceLaw(law, tv_sum)


def jacobi_markov_tokens_per_forward(start: np.ndarray, trans: np.ndarray, window: int, *,
                                     fresh: str = DEFAULT_FRESH, boost: Boost = NO_BOOST,
                                     emb: np.ndarray | None = None) -> float:
    """Long-run tokens per target forward of SJD on a Markov target, exact from the chain over the
    (context, window) states reachable from the first window; with every row of ``trans`` equal to p it
    is the brute-force check of :func:`jacobi_expected_tokens` (V <= 4, L <= 3)."""
    s, t = check_markov(start, trans)
    L = _check_enum(window, None)
    fresh = check_fresh(fresh)
    emb = check_window_boost(boost, emb, s.size)
    en = _Enumerator(s, t, L, fresh, boost, emb)

    def moves(state: tuple[int, Window]) -> Iterator[Move[tuple[int, Window]]]:
        outcomes, _ = en.forward(*state)
        for pr, emitted, rows in outcomes:
            yield pr * len(emitted), [(pr * pk * pf, (en.row_of[emitted[-1]], w2))
                                      for pk, kept in en.kept(rows) for pf, w2 in en.fill(kept, emitted[-1])]

    return long_run_reward([(en.start, w) for _, w in en.fill((), None)], moves)


__all__ = [
    "MAX_ENUM_TOKENS",
    "MAX_ENUM_VOCAB",
    "MAX_ENUM_WINDOW",
    "KeptChain",
    "SequenceLaw",
    "check_markov",
    "jacobi_expected_tokens",
    "jacobi_kept_chain",
    "jacobi_markov_tokens_per_forward",
    "jacobi_sequence_law",
    "long_run_reward",
    "markov_sequence_law",
    "stationary_law",
    "token_tvs",
]
