"""The readable NumPy oracle of one simulated sequence (``run(..., backend="numpy")``).

The same loop as the Numba engine, written with the world's rows, the
policies' NumPy ``build`` (with the world as draft callback),
``theory.sample_step`` and ``theory.node_outcome``. States and rows come from
the world's kernels (one implementation defines the world); everything the
rules and policies decide is NumPy and theory.
"""

from __future__ import annotations

import numpy as np

from simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_counter, stream_key, uniform
from simulate.worlds import LatentWorld
from theory.boost import NO_BOOST
from theory.tree import Tree, path_tv, sample_step, step_expectation


class States:
    """World states of the nodes of one step's (partial) trees, memoised by token path."""

    def __init__(self, world, z0, h0):
        self.world = world
        self.memo = {(): (z0, h0)}

    def at(self, path: tuple[int, ...]):
        if path not in self.memo:
            z, h = self.at(path[:-1])
            self.memo[path] = self.world.advance(z, h, path[-1]) if isinstance(self.world, LatentWorld) \
                else (None, h)
        return self.memo[path]


def _token_path(parents: np.ndarray, tokens: np.ndarray, v: int) -> tuple[int, ...]:
    out = []
    while v != 0:
        out.append(int(tokens[v]))
        v = int(parents[v])
    return tuple(out[::-1])


class _LazyRows:
    """p at the nodes of a tree, computed when first read."""

    def __init__(self, tree: Tree, states: States, world, temperature: float):
        self.tree, self.states, self.world, self.T = tree, states, world, temperature
        self.rows: dict[int, np.ndarray] = {}

    def __getitem__(self, v):
        v = int(v)
        if v not in self.rows:
            z, _ = self.states.at(_token_path(self.tree.parents, self.tree.tokens, v))
            self.rows[v] = self.world.target_probs(z, self.T)
        return self.rows[v]


def world_draft(world, states: States, temperature: float):
    """The ``draft(parents, tokens, nodes)`` callback of ``policy.build``: the world's q after each node."""

    def draft(parents, tokens, nodes):
        return np.array([world.draft_probs(*states.at(_token_path(parents, tokens, int(v))), temperature)
                         for v in nodes])

    return draft


def oracle_sequence(world, policy, rule, relax, variant, nb, seq_len, temperature, seed, s, exact, o_int,
                    o_exp, o_tv, o_ttv, boost=NO_BOOST, emb=None) -> int:
    """Decode sequence ``s`` like the Numba engine; fills the per-step rows and returns the step count.

    p is read only where the walk (or, with ``exact``, theory's expectation) needs it; the step's TV is
    ``theory.tree.path_tv``. R2 takes a ``boost`` (GSD: the embedding table ``emb``)."""
    key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
    if isinstance(world, LatentWorld):
        z, h = world.initial(key)
    else:
        z, h = None, np.uint64(0)
    nb64 = nb.astype(np.int64)
    pos = step = 0
    while pos < seq_len:
        states = States(world, z, h)
        u_tree = None
        if rule == "r2":
            n_t = policy.n_nodes
            u_tree = np.array([uniform(key, step_counter(step, w, U_TREE)) for w in range(n_t)])
        built = policy.build(world.draft_probs(z, h, temperature), world_draft(world, states, temperature),
                             u_tree)
        tree = built.tree
        n = tree.size
        ua = np.array([uniform(key, step_counter(step, v, U_ACCEPT)) for v in range(n)])
        ud = np.array([uniform(key, step_counter(step, v, U_DRAW)) for v in range(n)])
        p = _LazyRows(tree, states, world, temperature)
        if exact:
            e = step_expectation(tree, p, rule=rule, relax=relax, neighbours=nb64, q_dists=built.q,
                                 variant=variant, boost=boost, emb=emb)
            o_exp[step], o_tv[step] = e.tokens, e.tv
        q = built.q if rule == "r2" else None
        path, bonus = sample_step(tree, p, ua, ud, rule=rule, relax=relax, neighbours=nb64, q_dists=q,
                                  variant=variant, boost=boost, emb=emb)
        m = len(path)
        root_kids = tree.children(0)
        o_int[step] = (m, n - 1, tree.depth, m - 1, built.draft_calls,
                       int(np.flatnonzero(root_kids == path[1])[0]) if m > 1 else -1)
        o_ttv[step] = path_tv(tree, p, path, rule=rule, relax=relax, neighbours=nb64, q_dists=q,
                              variant=variant, boost=boost, emb=emb)
        z_end, h_end = states.at(_token_path(tree.parents, tree.tokens, path[-1]))
        if isinstance(world, LatentWorld):
            z, h = world.advance(z_end, h_end, bonus)
        pos += m
        step += 1
    return step
