"""The rule protocol, and adapters that put the suite's own rules behind it.

A rule verifies one tree node. It is any callable::

    rule(p, q, children, relax, neighbours, variant, u) -> Verdict

- ``p``, ``q``: float64 (V,) target and draft distributions at the node;
- ``children``: int64 (m,) distinct child tokens in draft order;
- ``relax``: a :class:`theory.Relax`; ``neighbours``: the (V, W) integer neighbour
  table (any integer dtype; rows ordered by latent distance); ``variant``:
  ``"principled"`` or ``"official"`` (a rule with no variants ignores it);
- ``u``: m + 1 uniforms in [0, 1), read-only: ``u[i]`` decides child i and ``u[m]``
  draws the token emitted when no child is accepted (theory's convention).

It returns a :class:`Verdict`: the accepted child's index (or -1) and the emitted
token (the accepted child, or the draw), and, when the rule can compute it, its exact
:class:`Law` (independent of ``u``). The rule must be deterministic given its inputs.

Optional attributes tell the checks more (read with ``getattr``):

- ``name``: how messages name the rule (default: its ``__name__``);
- ``drafts``: ``"given"`` (default: the children are fixed, e.g. the top drafts,
  as R1 and R3 take them) or ``"sampled"`` (the children are draws from q without
  replacement, as R2 takes them: the checks draw them, and the rule's law is
  averaged over every draw order);
- ``target``: ``"p"`` (default) or ``"argmax"`` (a greedy rule: lossless means
  emitting the point mass on argmax p, lowest id among ties);
- ``spec_rule``: ``"r1"``, ``"r2"``, ``"r3"`` or ``"r4"`` when the rule claims to be one of
  SPEC section 3's rules or traversal verification (9.6; the checks then default to theory's exact
  values);
- ``kinds``: the relaxation kinds the rule takes (default: all; a boosted rule takes
  ``("none",)``, and the checks' default nodes keep to them).

:class:`TheoryRule` wraps theory's NumPy oracle (``theory.sample_node`` and
``theory.node_outcome``); :class:`KernelRule` wraps the Numba twins
(``simulate.verify_kernels.sample_node_r1_kernel`` / ``simulate.boost_kernels.sample_node_r2_kernel``),
which expose no law. Both take R2's boost (``theory.boost.Boost``: GSD, Cool-SD; SPEC
9.2-9.3) for children at ``depth``, GSD reading the embedding ``embedding(V)``
(default :func:`grid_embedding`), and the budget of SPEC 9.5 (``Boost.budget(tv, k)``:
``theory.budget`` and its kernel, merging the node's own table, at most its width of columns).
Rule ``"r4"`` (traversal verification, SPEC 9.6) verifies the node as a one-level tree
(``theory.traversal``; the kernel ``simulate.traversal_kernels``): the children are the root's,
``u[i]`` child i's eta and ``u[m]`` the root's bonus draw; with any boost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from relaxspec.theory import rules as T
from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.budget import budget_node_outcome, check_budget, sample_budget_node
from relaxspec.theory.relax import KINDS, Relax
from relaxspec.theory.rules import (
    SAMPLED_DRAFT_RULES,
    check_step_boost,
)
from relaxspec.theory.sampler import sample_node
from relaxspec.theory.traversal import sample_traversal_step, traversal_ends
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import NodeInputs, check_node_inputs, node_outcome

__all__ = ["KernelRule", "Law", "Rule", "TheoryRule", "Verdict", "grid_embedding"]


def grid_embedding(V: int) -> np.ndarray:
    """A fixed (V, 2) embedding for boosted rules under test: token x at (x mod 3, x div 3) / 2, so a
    token's grid neighbours lie at squared distance 0.25 and its diagonal ones at exactly 0.5, GSD's
    default ``dist``, which the strict test excludes (a tie on purpose)."""
    x = np.arange(V)
    return 0.5 * np.stack((x % 3, x // 3), axis=1).astype(np.float64)


def _boosted(rule: str, boost: Boost, depth: int) -> None:
    """Validate a rule's boost (``theory.rules.check_step_boost``) and depth at construction."""
    check_step_boost(rule, Relax.none(), boost)
    if isinstance(depth, bool) or int(depth) != depth or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    if rule == T.Rule.R4 and depth != 1:
        raise ValueError(f"rule r4 verifies the node as the root of a one-level tree: its children are at "
                         f"depth 1, got depth {depth!r}")


def _own_walk(rule: str, boost: Boost) -> bool:
    """R4 and the budget verify by their own walks (``theory.traversal``, ``theory.budget``)."""
    return rule == T.Rule.R4 or boost.uses_budget


def _node_boost(boost: Boost, neighbours: np.ndarray) -> Boost:
    """The budget reads at most the node table's width of neighbours (other boosts as they are)."""
    if not boost.uses_budget or boost.k <= neighbours.shape[1]:
        return boost
    return Boost.budget(boost.tv, int(neighbours.shape[1]))


def _checked(rule: str, boost: Boost, depth: int, embedding: Callable[[int], np.ndarray], p: np.ndarray,
             q: np.ndarray, children: np.ndarray, relax: Relax, neighbours: np.ndarray,
             variant: str) -> NodeInputs:
    """Validated node inputs (``theory.verify.check_node_inputs``; R4 and the budget, after
    ``theory.rules.check_step_boost``, as R2 with the same GSD or Cool-SD boost, or none)."""
    emb = embedding(p.size) if boost.reads_embedding else None
    if _own_walk(rule, boost):
        check_step_boost(rule, relax, boost)
        rule, boost = "r2", NO_BOOST if boost.uses_budget else boost
    qq = q if rule in SAMPLED_DRAFT_RULES else None
    return check_node_inputs(p, children, rule=rule, relax=relax, neighbours=neighbours, q=qq,
                             variant=variant, boost=boost, depth=depth, emb=emb)


def _star(x: NodeInputs, u: np.ndarray) -> tuple[Tree, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The node as a one-level tree for R4: (tree, p rows, q rows, u_accept, u_draw); the children's rows
    are p and q (read only by a bonus after an accepted child, which the node does not emit)."""
    m = x.m
    tree = Tree(np.array([-1] + [0] * m), np.concatenate(([0], x.kids)))
    ua = np.concatenate(([0.0], np.asarray(u[:m], dtype=np.float64)))
    ud = np.concatenate(([float(u[m])], np.full(m, 0.5)))
    return tree, np.tile(x.p, (m + 1, 1)), np.tile(x.q, (m + 1, 1)), ua, ud


def relaxation_kinds(rule: str, boost: Boost) -> tuple[str, ...]:
    """The relaxation kinds a rule takes: all, or none when boosted or R4."""
    return KINDS if boost.is_none and rule != T.Rule.R4 else ("none",)


def draft_kind(rule: str) -> str:
    """R2 and R4 verify children drawn from q ("sampled"); R1 and R3 take them as given."""
    return "sampled" if rule in SAMPLED_DRAFT_RULES else "given"


@dataclass(frozen=True)
class Law:
    """The exact law of one node's verification.

    Attributes
    ----------
    accept_probs : (m,) probability that child i is accepted.
    emitted : (V,) distribution of the emitted token.
    """

    accept_probs: np.ndarray
    emitted: np.ndarray

    @property
    def accept(self) -> float:
        """Probability that some child is accepted."""
        return float(np.sum(self.accept_probs))


@dataclass(frozen=True)
class Verdict:
    """A rule's decision at one node: accepted child ``index`` (-1: none), emitted ``token``,
    and its exact ``law`` when the rule can compute it."""

    index: int
    token: int
    law: Law | None = field(default=None)


class Rule(Protocol):
    """A verification rule at one node (see the module docstring for the arguments)."""

    def __call__(self, p: np.ndarray, q: np.ndarray, children: np.ndarray, relax: Relax,
                 neighbours: np.ndarray, variant: str, u: np.ndarray) -> Verdict: ...


_RULES = T.RULES


@dataclass(frozen=True)
class TheoryRule:
    """One of SPEC section 3's rules as theory computes it.

    Decisions from ``theory.sample_node``; with ``law=True`` (default) the exact
    law from ``theory.node_outcome`` (for R2: conditional on the draw order).
    ``boost`` (R2 and R4) boosts every stage, for children at ``depth``; GSD reads
    ``embedding(V)``. R4 (a one-level tree) and the budget: decisions from
    ``theory.traversal.sample_traversal_step`` / ``theory.budget.sample_budget_node``, laws from
    ``traversal_ends`` / ``budget_node_outcome`` (given the draw order).
    """

    rule: str
    law: bool = True
    boost: Boost = NO_BOOST
    depth: int = 1
    embedding: Callable[[int], np.ndarray] = grid_embedding

    def __post_init__(self) -> None:
        if self.rule not in _RULES:
            raise ValueError(f"unknown rule {self.rule!r}; expected one of {_RULES}")
        _boosted(self.rule, self.boost, self.depth)

    @property
    def name(self) -> str:
        """``theory <rule>`` (and the boost)."""
        boost = "" if self.boost.is_none else f" {self.boost} depth {self.depth}"
        return f"theory {self.rule}{boost}" + ("" if self.law else " (sampling only)")

    @property
    def kinds(self) -> tuple[str, ...]:
        """The relaxation kinds it takes: all, or none when boosted or R4."""
        return relaxation_kinds(self.rule, self.boost)

    @property
    def drafts(self) -> str:
        """R2 and R4 verify children drawn from q; R1 and R3 take them as given."""
        return draft_kind(self.rule)

    @property
    def target(self) -> str:
        """R3 is greedy: its lossless law is the point mass on argmax p."""
        return "argmax" if self.rule == T.Rule.R3 else "p"

    @property
    def spec_rule(self) -> str:
        """The SPEC rule implemented."""
        return self.rule

    def __call__(self, p: np.ndarray, q: np.ndarray, children: np.ndarray, relax: Relax,
                 neighbours: np.ndarray, variant: str, u: np.ndarray) -> Verdict:
        x = _checked(self.rule, self.boost, self.depth, self.embedding, p, q, children, relax, neighbours,
                     variant)
        if _own_walk(self.rule, self.boost):
            return self._own(x, neighbours, u)
        qq = q if self.rule == T.Rule.R2 else None
        m = x.m
        i, token = sample_node(x.p, x.kids, u[:m], float(u[m]), rule=self.rule, relax=relax,
                               neighbours=x.nb, q=x.q, variant=variant, boost=self.boost, depth=self.depth,
                               emb=x.emb)
        if not self.law:
            return Verdict(i, token)
        out = node_outcome(x.p, x.kids, rule=self.rule, relax=relax, neighbours=neighbours, q=qq,
                           variant=variant, boost=self.boost, depth=self.depth, emb=x.emb)
        return Verdict(i, token, Law(out.accept_probs, out.emitted))

    def _own(self, x: NodeInputs, neighbours: np.ndarray, u: np.ndarray) -> Verdict:
        """R4 on the node as a one-level tree, or budgeted R2 (``theory.traversal``, ``theory.budget``)."""
        boost = _node_boost(self.boost, neighbours)
        m = x.m
        if self.rule == T.Rule.R2:
            nb = check_budget(boost, neighbours, x.p.size, np.flatnonzero(x.q > 0))
            i, token = sample_budget_node(x.p, x.q, x.kids, u[:m], float(u[m]), boost=boost, nb=nb)
            if not self.law:
                return Verdict(i, token)
            out = budget_node_outcome(x.p, x.q, x.kids, boost=boost, neighbours=neighbours)
            return Verdict(i, token, Law(out.accept_probs, out.emitted))
        tree, P, Q, ua, ud = _star(x, u)
        table = neighbours if boost.uses_budget else None
        path, bonus = sample_traversal_step(tree, P, Q, ua, ud, boost=boost, neighbours=table, emb=x.emb)
        i = path[-1] - 1
        verdict = (i, int(x.kids[i])) if i >= 0 else (-1, int(bonus))
        if not self.law:
            return Verdict(*verdict)
        accept, emitted = np.zeros(m), np.zeros(x.p.size)
        for end in traversal_ends(tree, P, Q, boost=boost, neighbours=table, emb=x.emb).ends:
            if end.node == 0:
                emitted += end.prob * end.law
            else:
                accept[end.node - 1] = end.prob
                emitted[x.kids[end.node - 1]] += end.prob
        return Verdict(*verdict, Law(accept, emitted))


@dataclass(frozen=True)
class KernelRule:
    """R1, R2 or R4 as the Numba kernels verify a node (``simulate.verify_kernels``; R4 on the node as a
    one-level tree, ``simulate.traversal_kernels`` through ``simulate.step_kernels.sample_step_kernel``);
    no law.

    ``boost``, ``depth`` and ``embedding`` as :class:`TheoryRule`'s. The first call
    compiles the kernels (seconds; cached on disk afterwards).
    """

    rule: str
    boost: Boost = NO_BOOST
    depth: int = 1
    embedding: Callable[[int], np.ndarray] = grid_embedding

    def __post_init__(self) -> None:
        if self.rule not in (T.Rule.R1, T.Rule.R2, T.Rule.R4):
            raise ValueError(f"the node kernels are sample_node_r1_kernel, sample_node_r2_kernel and R4's "
                             f"traversal_step_kernel: rule must be 'r1', 'r2' or 'r4', got {self.rule!r}")
        _boosted(self.rule, self.boost, self.depth)

    @property
    def name(self) -> str:
        """``simulate <rule> kernel`` (and the boost)."""
        boost = "" if self.boost.is_none else f" {self.boost} depth {self.depth}"
        return f"simulate {self.rule} kernel{boost}"

    @property
    def kinds(self) -> tuple[str, ...]:
        """As :class:`TheoryRule`'s."""
        return relaxation_kinds(self.rule, self.boost)

    @property
    def drafts(self) -> str:
        """As :class:`TheoryRule`."""
        return draft_kind(self.rule)

    @property
    def target(self) -> str:
        """The kernels' rules are lossless towards p."""
        return "p"

    @property
    def spec_rule(self) -> str:
        """The SPEC rule implemented."""
        return self.rule

    def __call__(self, p: np.ndarray, q: np.ndarray, children: np.ndarray, relax: Relax,
                 neighbours: np.ndarray, variant: str, u: np.ndarray) -> Verdict:
        from relaxspec.simulate.boost_kernels import sample_node_r2_kernel
        from relaxspec.simulate.step_kernels import sample_step_kernel
        from relaxspec.simulate.verify import tree_arrays
        from relaxspec.simulate.verify_kernels import (
            draw_token_kernel,
            draw_token_residual_kernel,
            sample_node_r1_kernel,
        )

        x = _checked(self.rule, self.boost, self.depth, self.embedding, p, q, children, relax, neighbours,
                     variant)
        v = Verification(self.rule, relax, variant, _node_boost(self.boost, neighbours))
        enc = v.encode(x.p.size, neighbours=neighbours, emb=x.emb)
        rs, bs = enc.rs, enc.bs
        if v.is_traversal:
            tree, P, Q, ua, ud = _star(x, u)
            path, bonus, _ = sample_step_kernel(*tree_arrays(tree), P, Q, ua, ud, rs, bs)
            i = int(path[-1]) - 1
            return Verdict(i, int(x.kids[i])) if i >= 0 else Verdict(-1, int(bonus))
        _, code, k, param, var, nb = rs
        V, m = x.p.size, x.m
        pc = np.ascontiguousarray(x.p)
        kids = np.ascontiguousarray(x.kids)
        uk = np.array(u[:m], dtype=np.float64)
        if self.rule == T.Rule.R1:
            mark = np.zeros(V, dtype=np.int64)
            i, epoch, unif = sample_node_r1_kernel(pc, kids, uk, mark, 0, code, k, param, var, nb)
            if i >= 0:
                return Verdict(int(i), int(kids[i]))
            return Verdict(-1, int(draw_token_residual_kernel(pc, mark, epoch, unif, float(u[m]),
                                                              np.empty(V))))
        r, qp, res = np.empty(V), np.empty(V), np.empty(V)
        qc = np.ascontiguousarray(x.q)
        i = sample_node_r2_kernel(pc, qc, kids, uk, code, k, param, var, nb, r, qp, res,
                                  self.depth, bs)
        if i >= 0:
            return Verdict(int(i), int(kids[i]))
        return Verdict(-1, int(draw_token_kernel(r, float(u[m]), np.empty(V))))
