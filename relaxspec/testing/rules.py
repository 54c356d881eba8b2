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
- ``spec_rule``: the verification the rule claims to implement, a
  :class:`~relaxspec.theory.verification.Verification` or its spec (``"r1"``, ``"r2"``, ``"r3"``,
  ``"r4"``: one of SPEC section 3's rules or traversal verification, 9.6; ``"r2+gsd:G=4"`` boosted),
  without a relaxation (the node gives it); the checks then default to theory's exact values;
- ``kinds``: the relaxation kinds the rule takes (default: all; a boosted rule takes
  ``("none",)``, and the checks' default nodes keep to them).

:class:`TheoryRule` wraps theory's NumPy oracle (``theory.sample_node`` and
``theory.node_outcome``); :class:`KernelRule` wraps the Numba twins
(``simulate.verify_kernels.sample_node_r1_kernel`` / ``simulate.boost_kernels.sample_node_r2_kernel``),
which expose no law. Each takes one verification (a
:class:`~relaxspec.theory.verification.Verification` or its spec): its rule and its boost, the node
giving the relaxation and the variant (:func:`at_node`). A boost raises R2's test (GSD, Cool-SD;
SPEC 9.2-9.3: ``TheoryRule("r2+gsd:G=4")``) for children at ``depth``, GSD reading the embedding
``embedding(V)`` (default :func:`grid_embedding`); the budget of SPEC 9.5 (``"r2+budget:tv=0.1,k=2"``:
``theory.budget`` and its kernel) merges the node's own table, at most its width of columns.
Rule ``"r4"`` (traversal verification, SPEC 9.6) verifies the node as a one-level tree
(``theory.traversal``; the kernel ``simulate.traversal_kernels``): the children are the root's,
``u[i]`` child i's eta and ``u[m]`` the root's bonus draw; with any boost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from relaxspec.theory import rules as T
from relaxspec.theory.boost import NO_BOOST, Boost
from relaxspec.theory.budget import budget_node_outcome, check_budget, sample_budget_node
from relaxspec.theory.relax import KINDS, Relax
from relaxspec.theory.sampler import sample_node
from relaxspec.theory.traversal import sample_traversal_step, traversal_ends
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import DEFAULT_VARIANT, Verification
from relaxspec.theory.verify import NodeInputs, check_node_inputs, node_outcome

__all__ = ["KernelRule", "Law", "Rule", "TheoryRule", "Verdict", "at_node", "grid_embedding",
           "rule_verification"]


def grid_embedding(V: int) -> np.ndarray:
    """A fixed (V, 2) embedding for boosted rules under test: token x at (x mod 3, x div 3) / 2, so a
    token's grid neighbours lie at squared distance 0.25 and its diagonal ones at exactly 0.5, GSD's
    default ``dist``, which the strict test excludes (a tie on purpose)."""
    x = np.arange(V)
    return 0.5 * np.stack((x % 3, x // 3), axis=1).astype(np.float64)


def rule_verification(verification: Verification | str, what: str) -> Verification:
    """``verification`` (a value or its spec) as a rule under test holds it: its rule and boost, with no
    relaxation and the default variant, which every generated node gives (:func:`at_node`); ``what``
    names the caller in the one-line ``ValueError``."""
    v = Verification.parse(verification)
    if not v.relax.is_exact or v.variant is not DEFAULT_VARIANT:
        raise ValueError(f"{what}: the checks give every node its relaxation and variant: name the rule and "
                         f"its boost only (e.g. 'r1', 'r2+gsd:G=4'), got {str(v)!r}")
    return v


def at_node(verification: Verification, relax: Relax, variant: str) -> Verification:
    """The verification a node is verified with: the rule and boost of ``verification``, the node's
    relaxation and variant (validated: a boost or rule r4 with a relaxation is refused)."""
    return replace(verification, relax=relax, variant=variant)


def _check_depth(v: Verification, depth: int) -> None:
    """Validate the children's depth at construction (R4: the node is a one-level tree's root)."""
    if isinstance(depth, bool) or int(depth) != depth or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    if v.is_traversal and depth != 1:
        raise ValueError(f"rule r4 verifies the node as the root of a one-level tree: its children are at "
                         f"depth 1, got depth {depth!r}")


def _node_boost(boost: Boost, neighbours: np.ndarray) -> Boost:
    """The budget reads at most the node table's width of neighbours (other boosts as they are)."""
    if not boost.uses_budget or boost.k <= neighbours.shape[1]:
        return boost
    return Boost.budget(boost.tv, int(neighbours.shape[1]))


def _checked(v: Verification, depth: int, embedding: Callable[[int], np.ndarray], p: np.ndarray,
             q: np.ndarray, children: np.ndarray, neighbours: np.ndarray) -> NodeInputs:
    """Validated node inputs under the node's verification ``v`` (``theory.verify.check_node_inputs``;
    R4 and the budget, which walk their own way, as R2 with the same GSD or Cool-SD boost, or none)."""
    emb = embedding(p.size) if v.reads_embedding else None
    if v.walks_own_step:
        v = Verification(T.Rule.R2, v.relax, v.variant, NO_BOOST if v.uses_budget else v.boost)
    qq = q if v.samples_drafts else None
    return check_node_inputs(p, children, v, neighbours=neighbours, q=qq, depth=depth, emb=emb)


def _star(x: NodeInputs, u: np.ndarray) -> tuple[Tree, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The node as a one-level tree for R4: (tree, p rows, q rows, u_accept, u_draw); the children's rows
    are p and q (read only by a bonus after an accepted child, which the node does not emit)."""
    m = x.m
    tree = Tree(np.array([-1] + [0] * m), np.concatenate(([0], x.kids)))
    ua = np.concatenate(([0.0], np.asarray(u[:m], dtype=np.float64)))
    ud = np.concatenate(([float(u[m])], np.full(m, 0.5)))
    return tree, np.tile(x.p, (m + 1, 1)), np.tile(x.q, (m + 1, 1)), ua, ud


def relaxation_kinds(verification: Verification) -> tuple[str, ...]:
    """The relaxation kinds a rule under ``verification`` takes: all, or none when boosted or R4."""
    return KINDS if verification.boost.is_none and not verification.is_traversal else ("none",)


def draft_kind(verification: Verification) -> str:
    """R2 and R4 verify children drawn from q ("sampled"); R1 and R3 take them as given."""
    return "sampled" if verification.samples_drafts else "given"


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


@dataclass(frozen=True)
class TheoryRule:
    """One of SPEC section 3's rules as theory computes it, under ``verification`` (a
    :class:`~relaxspec.theory.verification.Verification` or its spec: the rule and its boost,
    :func:`rule_verification`; each node gives the relaxation and variant).

    Decisions from ``theory.sample_node``; with ``law=True`` (default) the exact
    law from ``theory.node_outcome`` (for R2: conditional on the draw order).
    A boost (R2 and R4) boosts every stage, for children at ``depth``; GSD reads
    ``embedding(V)``. R4 (a one-level tree) and the budget: decisions from
    ``theory.traversal.sample_traversal_step`` / ``theory.budget.sample_budget_node``, laws from
    ``traversal_ends`` / ``budget_node_outcome`` (given the draw order).
    """

    verification: Verification | str
    law: bool = True
    depth: int = 1
    embedding: Callable[[int], np.ndarray] = grid_embedding

    def __post_init__(self) -> None:
        v = rule_verification(self.verification, "TheoryRule")
        object.__setattr__(self, "verification", v)
        _check_depth(v, self.depth)

    @property
    def _v(self) -> Verification:
        return self.verification  # type: ignore[return-value]  # parsed in __post_init__

    @property
    def name(self) -> str:
        """``theory <verification>`` (and the depth when boosted)."""
        depth = "" if self._v.boost.is_none else f" depth {self.depth}"
        return f"theory {self._v}{depth}" + ("" if self.law else " (sampling only)")

    @property
    def kinds(self) -> tuple[str, ...]:
        """The relaxation kinds it takes: all, or none when boosted or R4."""
        return relaxation_kinds(self._v)

    @property
    def drafts(self) -> str:
        """R2 and R4 verify children drawn from q; R1 and R3 take them as given."""
        return draft_kind(self._v)

    @property
    def target(self) -> str:
        """R3 is greedy: its lossless law is the point mass on argmax p."""
        return "argmax" if self._v.rule.is_greedy else "p"

    @property
    def spec_rule(self) -> Verification:
        """The verification implemented."""
        return self._v

    def __call__(self, p: np.ndarray, q: np.ndarray, children: np.ndarray, relax: Relax,
                 neighbours: np.ndarray, variant: str, u: np.ndarray) -> Verdict:
        v = at_node(self._v, relax, variant)
        x = _checked(v, self.depth, self.embedding, p, q, children, neighbours)
        if v.walks_own_step:
            return self._own(v, x, neighbours, u)
        qq = q if v.rule == T.Rule.R2 else None
        m = x.m
        i, token = sample_node(x.p, x.kids, u[:m], float(u[m]), v, neighbours=x.nb, q=x.q, depth=self.depth,
                               emb=x.emb)
        if not self.law:
            return Verdict(i, token)
        out = node_outcome(x.p, x.kids, v, neighbours=neighbours, q=qq, depth=self.depth, emb=x.emb)
        return Verdict(i, token, Law(out.accept_probs, out.emitted))

    def _own(self, v: Verification, x: NodeInputs, neighbours: np.ndarray, u: np.ndarray) -> Verdict:
        """R4 on the node as a one-level tree, or budgeted R2 (``theory.traversal``, ``theory.budget``)."""
        boost = _node_boost(v.boost, neighbours)
        m = x.m
        if v.rule == T.Rule.R2:
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

    ``verification``, ``depth`` and ``embedding`` as :class:`TheoryRule`'s. The first call
    compiles the kernels (seconds; cached on disk afterwards).
    """

    verification: Verification | str
    depth: int = 1
    embedding: Callable[[int], np.ndarray] = grid_embedding

    def __post_init__(self) -> None:
        v = rule_verification(self.verification, "KernelRule")
        if v.rule not in (T.Rule.R1, T.Rule.R2, T.Rule.R4):
            raise ValueError(f"the node kernels are sample_node_r1_kernel, sample_node_r2_kernel and R4's "
                             f"traversal_step_kernel: rule must be 'r1', 'r2' or 'r4', got {str(v.rule)!r}")
        object.__setattr__(self, "verification", v)
        _check_depth(v, self.depth)

    @property
    def _v(self) -> Verification:
        return self.verification  # type: ignore[return-value]  # parsed in __post_init__

    @property
    def name(self) -> str:
        """``simulate <verification> kernel`` (and the depth when boosted)."""
        depth = "" if self._v.boost.is_none else f" depth {self.depth}"
        return f"simulate {self._v} kernel{depth}"

    @property
    def kinds(self) -> tuple[str, ...]:
        """As :class:`TheoryRule`'s."""
        return relaxation_kinds(self._v)

    @property
    def drafts(self) -> str:
        """As :class:`TheoryRule`."""
        return draft_kind(self._v)

    @property
    def target(self) -> str:
        """The kernels' rules are lossless towards p."""
        return "p"

    @property
    def spec_rule(self) -> Verification:
        """The verification implemented."""
        return self._v

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

        v = at_node(self._v, relax, variant)
        x = _checked(v, self.depth, self.embedding, p, q, children, neighbours)
        v = replace(v, boost=_node_boost(v.boost, neighbours))
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
        if v.rule == T.Rule.R1:
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
