"""The readable NumPy oracle of VVS's skipped verification (SPEC 10.3): one sequence, step by step.

The twin of :mod:`simulate.vvs_kernels` (same decisions given the same uniforms): EAGLE-2's tree from
``Eagle2Tree.build`` on the world's drafter, a verify step by ``theory.tree.sample_step`` (R1), a skip
step by the module's rules (leaf, gamma, stale bonus: :mod:`simulate.vvs_kernels`' docstring), its
``token_tv`` from ``theory.vvs.skip_step_tv``: the TVs of the emitted prefixes' laws, summed; a bounded
schedule (``tv=B``) skips only where ``skip_step_tv``'s largest TV is at most B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.core.trees.skips import VvsTree
from relaxspec.simulate.oracle import States, world_draft
from relaxspec.simulate.rng import U_ACCEPT, U_DRAW, U_TREE, step_counter, stream_key, uniform
from relaxspec.simulate.vvs_kernels import SKIP_NODE
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory import vvs
from relaxspec.theory.rules import Rule
from relaxspec.theory.sampler import draw_token
from relaxspec.theory.tree import Tree, path_tv, sample_step, step_expectation
from relaxspec.theory.verification import Verification
from relaxspec.theory.vvs import skip_step_tv


def vvs_verification_problem(tree: VvsTree, verification: Verification) -> str | None:
    """Why ``tree``'s verify steps cannot be verified with ``verification`` (None when they can): VVS
    verifies its EAGLE-2 trees with rule r1 (LANTERN's relaxation or none) and no boost."""
    if verification.rule != Rule.R1 or not verification.boost.is_none:
        return (f"{tree}: VVS verifies its EAGLE-2 trees with rule r1 (LANTERN's relaxation or none) and no "
                f"boost, got rule {verification.rule}, boost {verification.boost}")
    return None


@dataclass(frozen=True)
class VvsStep:
    """One step of a sequence: ``path`` (tree nodes root.. the last emitted draft), ``bonus``, whether it
    was ``skipped``, its token TV, E[tokens] and E[TV] (NaN without ``exact``) and its tree."""

    path: list[int]
    bonus: int
    skipped: bool
    token_tv: float
    expected_tokens: float
    expected_tv: float
    tree: Tree
    draft_calls: int


def leaves(tree: Tree) -> list[int]:
    """The tree's leaves in node order (``theory.vvs.leaves``)."""
    return [int(v) for v in vvs.leaves(tree.parents)]


def root_path(tree: Tree, v: int) -> list[int]:
    """The nodes from the root to ``v`` (``theory.vvs.root_path``)."""
    return vvs.root_path(tree.parents, v)


def prefix_of(tree: Tree, v: int) -> tuple[int, ...]:
    """The tokens from the root's child to ``v``."""
    return tuple(int(tree.tokens[w]) for w in root_path(tree, v)[1:])


def path_similarity(tree: Tree, emb: np.ndarray, alpha: float) -> float:
    """The dynamic schedule's score (``theory.vvs.path_similarity``, the reference decoder's too)."""
    return vvs.path_similarity(tree.parents, tree.tokens, emb, alpha)


def decode_vvs(world, tree: VvsTree, verification: Verification | str, nb: np.ndarray, emb: np.ndarray | None,
               seq_len: int, temperature: float, seed: int, s: int, exact: bool) -> list[VvsStep]:
    """Decode sequence ``s`` of a run under ``verification`` (rule r1, relaxed or not: a value or its spec;
    ``nb``: its neighbour table, int64; ``emb``: the unit code vectors the dynamic schedule reads)."""
    verification = Verification.parse(verification)
    problem = vvs_verification_problem(tree, verification)
    if problem is not None:
        raise ValueError(problem)
    key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
    latent = isinstance(world, LatentWorld)
    z, h = world.initial(key) if latent else (None, np.uint64(0))
    policy, sched = tree.eagle2, tree.schedule
    steps: list[VvsStep] = []
    stale = np.empty(0)
    accepted = pos = 0
    while pos < seq_len:
        step = len(steps)
        states = States(world, z, h)
        built = policy.build(world.draft_probs(z, h, temperature), world_draft(world, states, temperature))
        t = built.tree

        def target(prefix: tuple[int, ...], states=states) -> np.ndarray:
            return world.target_probs(states.at(prefix)[0], temperature)

        verified = sum(not st.skipped for st in steps)
        skip = verified > 0 and not steps[-1].skipped
        if skip:
            if sched.kind.is_periodic:
                skip = step % sched.interval == 1
            else:
                skip = bool(path_similarity(t, emb, sched.alpha) >= sched.similarity)
        if skip:  # the exact TVs of what the skip can emit, given the tree (and its bound, when it has one)
            r = skip_step_tv(t.parents, t.tokens, target, stale, accepted / verified)
            skip = not sched.bounded or r.max_tv <= sched.tv
        if skip:
            u_leaf = uniform(key, step_counter(step, SKIP_NODE, U_TREE))
            path = vvs.skip_path(t.parents, u_leaf, accepted // verified)
            bonus = draw_token(stale, uniform(key, step_counter(step, SKIP_NODE, U_DRAW)))
            emitted = prefix_of(t, path[-1])
            tv = sum(r.positions[emitted[:i]][2] for i in range(len(path)))
            e = (r.expected_tokens, r.expected_tv) if exact else (np.nan, np.nan)
        else:
            ua = np.array([uniform(key, step_counter(step, v, U_ACCEPT)) for v in range(t.size)])
            ud = np.array([uniform(key, step_counter(step, v, U_DRAW)) for v in range(t.size)])
            p = np.array([target(prefix_of(t, v)) for v in range(t.size)])
            kw = dict(verification=verification, neighbours=nb)
            path, bonus = sample_step(t, p, ua, ud, **kw)
            tv = path_tv(t, p, path, **kw)
            ex = step_expectation(t, p, **kw) if exact else None
            e = (ex.tokens, ex.tv) if ex is not None else (np.nan, np.nan)
            stale = p[path[-1]]  # the last target row held: where this step drew its last token
            accepted += len(path) - 1
        steps.append(VvsStep(list(path), int(bonus), skip, float(tv), float(e[0]), float(e[1]), t,
                             built.draft_calls))
        if latent:
            z, h = world.advance(*states.at(prefix_of(t, path[-1])), bonus)
        pos += len(path)
    return steps


__all__ = ["VvsStep", "decode_vvs", "leaves", "path_similarity", "root_path", "vvs_verification_problem"]
