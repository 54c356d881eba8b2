"""The readable NumPy oracle of one simulated sequence (``run(..., backend="numpy")``).

The same loop as the Numba engine, written with the world's rows, the
policies' NumPy ``build`` (with the world as draft callback),
``theory.sample_step`` and ``theory.node_outcome``. States and rows come from
the world's kernels (one implementation defines the world); everything the
rules and policies decide is NumPy and theory. Rule r4 (traversal verification)
and the budget boost verify through ``theory.rule_step`` (``theory.traversal``,
``theory.budget``), their TV record through :func:`step_record_tv`.
"""

from __future__ import annotations

import numpy as np

from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_counter, stream_key, uniform
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory.budget import budget_r2_given_states, check_budget
from relaxspec.theory.rule_step import rule_step_expectation, sample_rule_step
from relaxspec.theory.traversal import TraversalWalk, check_traversal_inputs
from relaxspec.theory.tree import Tree, path_tv, sample_step, step_expectation
from relaxspec.theory.verification import Verification


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
        paths = [_token_path(parents, tokens, int(v)) for v in nodes]
        return np.array([world.draft_probs(*states.at(path), temperature, depth=len(path)) for path in paths])

    return draft


def step_record_tv(tree: Tree, p: np.ndarray, q: np.ndarray, path: list[int], verification: Verification,
                   nb: np.ndarray | None, emb: np.ndarray | None) -> float:
    """The TV record of a step under ``verification`` (R4, or budgeted R2) that ended on ``path`` (rows
    ``p``, ``q`` of every node): R4, the sum of the Deltas of the stages the step entered, i.e. of the
    tests the exact walk (``TraversalWalk.tests``) makes up to the one that ended the step (0 lossless; its
    expectation given the tree is ``traversal_ends``' ``tv_bound``, Theorem 12.3); budgeted R2, the charges
    of the stages each node on the path tested (``theory.budget.budget_r2_given_states``; their expectation is
    ``budget_r2_step_ends``' bound). Sums run in the kernels' order."""
    boost = verification.boost
    if verification.is_traversal:
        p, q, table, e = check_traversal_inputs(tree, p, q, boost, nb, emb)
        total = 0.0
        for t in TraversalWalk(tree, p, q, boost, table, e).tests():
            total += t.charge
            if t.node == path[-1]:
                return total
        raise ValueError(f"the R4 walk never tests node {path[-1]}: the path does not come from this tree")
    table = check_budget(boost, nb, p.shape[1])
    total = 0.0
    for j, u in enumerate(path):
        kids = tree.children(u)
        if kids.size == 0:
            continue
        tested = int(np.flatnonzero(kids == path[j + 1])[0]) + 1 if j + 1 < len(path) else kids.size
        node = 0.0
        for st in budget_r2_given_states(p[u], q[u], tree.tokens[kids], table, boost):
            if st.stage is not None and st.index < tested:
                node += st.stage.charge
        total += node
    return total


def oracle_sequence(world, policy, verification: Verification, nb, seq_len, temperature, seed, s, exact,
                    o_int, o_exp, o_tv, o_ttv, emb=None) -> int:
    """Decode sequence ``s`` like the Numba engine; fills the per-step rows and returns the step count.

    p is read only where the walk (or, with ``exact``, theory's expectation) needs it; the step's TV is
    ``theory.tree.path_tv``. R2 and R4 take a boost (GSD: the embedding table ``emb``; the budget:
    the int table ``nb`` it merges); R4 and the budget read p at every node (``theory.rule_step``) and
    record :func:`step_record_tv`."""
    key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
    if isinstance(world, LatentWorld):
        z, h = world.initial(key)
    else:
        z, h = None, np.uint64(0)
    v = verification
    nb64 = nb.astype(np.int64)
    pos = step = 0
    while pos < seq_len:
        states = States(world, z, h)
        u_tree = None
        if v.samples_drafts:
            n_t = policy.n_nodes
            u_tree = np.array([uniform(key, step_counter(step, w, U_TREE)) for w in range(n_t)])
        built = policy.build(world.draft_probs(z, h, temperature), world_draft(world, states, temperature),
                             u_tree)
        tree = built.tree
        n = tree.size
        ua = np.array([uniform(key, step_counter(step, v, U_ACCEPT)) for v in range(n)])
        ud = np.array([uniform(key, step_counter(step, v, U_DRAW)) for v in range(n)])
        p = _LazyRows(tree, states, world, temperature)
        q = built.q if v.samples_drafts else None
        own = v.walks_own_step
        if own:  # theory.traversal / theory.budget read whole row arrays
            p = np.array([p[v] for v in range(n)])
        if exact:
            expect = rule_step_expectation if own else step_expectation
            e = expect(tree, p, v, neighbours=nb64, q_dists=built.q, emb=emb)
            o_exp[step], o_tv[step] = e.tokens, e.tv
        sample = sample_rule_step if own else sample_step
        path, bonus = sample(tree, p, ua, ud, v, neighbours=nb64, q_dists=q, emb=emb)
        m = len(path)
        root_kids = tree.children(0)
        o_int[step] = (m, n - 1, tree.depth, m - 1, built.draft_calls,
                       int(np.flatnonzero(root_kids == path[1])[0]) if m > 1 else -1)
        if own:
            o_ttv[step] = step_record_tv(tree, p, q, path, v, nb64, emb)
        else:
            o_ttv[step] = path_tv(tree, p, path, v, neighbours=nb64, q_dists=q, emb=emb)
        z_end, h_end = states.at(_token_path(tree.parents, tree.tokens, path[-1]))
        if isinstance(world, LatentWorld):
            z, h = world.advance(z_end, h_end, bonus)
        pos += m
        step += 1
    return step
