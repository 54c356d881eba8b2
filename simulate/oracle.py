"""The readable NumPy oracle of one simulated sequence (``run(..., backend="numpy")``).

The same loop as the Numba engine, written with the world's NumPy rows,
the policies' NumPy ``build`` (with the world as draft callback),
``theory.sample_step`` and ``theory.node_outcome``. States come from the
world's transition (shared with the kernel: it defines the world).
"""

from __future__ import annotations

import numpy as np

from simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_counter, stream_key, uniform
from simulate.worlds import LatentWorld
from theory.relax import Relax
from theory.tree import Tree, greedy_path, sample_step
from theory.verify import node_outcome


class _States:
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

    def __init__(self, tree: Tree, states: _States, world, temperature: float):
        self.tree, self.states, self.world, self.T = tree, states, world, temperature
        self.rows: dict[int, np.ndarray] = {}

    def __getitem__(self, v):
        v = int(v)
        if v not in self.rows:
            z, _ = self.states.at(_token_path(self.tree.parents, self.tree.tokens, v))
            self.rows[v] = self.world.target_probs(z, self.T)
        return self.rows[v]


def _exact(tree: Tree, p: _LazyRows, q: np.ndarray, rule: str, relax: Relax, variant: str,
           nb: np.ndarray) -> tuple[float, float]:
    """E[tokens] and the TV bound of the step, from theory's exact node outcomes."""
    if rule == "r3":
        path = greedy_path(tree, p, nb, relax)
        tv = sum(1.0 for a, b in zip(path[:-1], path[1:], strict=True)
                 if tree.tokens[b] != int(np.argmax(p[a])))
        return 1.0 + float(tree.depths[path[-1]]), tv
    reach = np.ones(tree.size)
    tvs = np.zeros(tree.size)
    table = nb if nb.shape[1] else None
    for u in range(tree.size):
        kids = tree.children(u)
        if kids.size == 0:
            continue
        o = node_outcome(p[u], tree.tokens[kids], rule=rule, relax=relax, neighbours=table,
                         q=q[u] if rule == "r2" else None, variant=variant)
        reach[kids] = reach[u] * o.accept_probs
        tvs[u] = o.tv if rule == "r1" else (0.0 if relax.is_exact else np.nan)
    if rule == "r2":
        tv = 0.0 if relax.is_exact else np.nan
    elif relax.is_exact:
        tv = 0.0
    else:
        internal = np.array([tree.children(u).size > 0 for u in range(tree.size)])
        tv = float(np.sum(reach[internal] * tvs[internal]))
    return 1.0 + float(reach[1:].sum()), tv


def oracle_sequence(world, policy, rule, relax, variant, nb, seq_len, temperature, seed, s, o_int, o_exp,
                    o_tv) -> int:
    """Decode sequence ``s`` like the Numba engine; fills the per-step rows and returns the step count."""
    key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
    if isinstance(world, LatentWorld):
        z, h = world.initial(key)
    else:
        z, h = None, np.uint64(0)
    nb64 = nb.astype(np.int64)
    pos = step = 0
    while pos < seq_len:
        states = _States(world, z, h)

        def draft(parents, tokens, nodes, states=states):
            return np.array([world.draft_probs(*states.at(_token_path(parents, tokens, int(v))), temperature)
                             for v in nodes])

        u_tree = None
        if rule == "r2":
            n_t = policy.n_nodes
            u_tree = np.array([uniform(key, step_counter(step, w, U_TREE)) for w in range(n_t)])
        built = policy.build(world.draft_probs(z, h, temperature), draft, u_tree)
        tree = built.tree
        n = tree.size
        ua = np.array([uniform(key, step_counter(step, v, U_ACCEPT)) for v in range(n)])
        ud = np.array([uniform(key, step_counter(step, v, U_DRAW)) for v in range(n)])
        p = _LazyRows(tree, states, world, temperature)
        e_tok, e_tv = _exact(tree, p, built.q, rule, relax, variant, nb64)
        path, bonus = sample_step(tree, p, ua, ud, rule=rule, relax=relax, neighbours=nb64,
                                  q_dists=built.q if rule == "r2" else None, variant=variant)
        m = len(path)
        root_kids = tree.children(0)
        o_int[step] = (m, n - 1, tree.depth, m - 1, built.draft_calls,
                       int(np.flatnonzero(root_kids == path[1])[0]) if m > 1 else -1)
        o_exp[step] = e_tok
        o_tv[step] = e_tv
        z_end, h_end = states.at(_token_path(tree.parents, tree.tokens, path[-1]))
        if isinstance(world, LatentWorld):
            z, h = world.advance(z_end, h_end, bonus)
        pos += m
        step += 1
    return step
