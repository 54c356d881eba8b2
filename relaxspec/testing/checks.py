"""Guarantee checks: plain functions that run Hypothesis over the strategies and raise an
``AssertionError`` naming the rule and the (shrunk) failing input.

Call them inside a test::

    def test_my_rule_is_lossless():
        check_lossless(my_rule)

Each runs under the active Hypothesis settings profile (``relaxspec-quick``,
``relaxspec-thorough``, ``relaxspec-ci``: :mod:`relaxspec.testing.profiles`), or under
``settings=`` when given, always with ``deadline=None`` (the first call of a Numba rule
compiles it) and ``report_multiple_bugs=False`` (one error, not a group). Where a rule
exposes its exact :class:`~relaxspec.testing.Law` a check is exact (tolerance
``EXACT_TOL``); where it only samples, the check draws ``samples`` verdicts from a fixed seed
and fails a correct rule with probability at most ``alpha`` (default 1e-6) per generated
input (:mod:`relaxspec.testing.stats`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import hypothesis
import numpy as np
from hypothesis import HealthCheck
from hypothesis import strategies as st

import relaxspec.testing.strategies as S
from relaxspec.core.trees.policies import TreePolicy
from relaxspec.testing.harness import (
    RuleInfo,
    call,
    children_for,
    fail,
    node_law,
    rule_info,
    sample_emitted,
    target_law,
    walk_tokens,
)
from relaxspec.testing.rules import at_node, grid_embedding, rule_verification
from relaxspec.testing.stats import ALPHA, counts_mismatch, mean_below, mean_outside, tv_exceeds
from relaxspec.theory.bounds import tv_bound
from relaxspec.theory.distributions import total_variation
from relaxspec.theory.relax import Relax
from relaxspec.theory.rules import Rule
from relaxspec.theory.tree import Tree, expected_tokens_per_step, path_probs
from relaxspec.theory.verification import Verification
from relaxspec.theory.verify import node_outcome

__all__ = [
    "EXACT_TOL",
    "SEED",
    "check_consistent",
    "check_expected_tokens",
    "check_lossless",
    "check_matches",
    "check_monotone",
    "check_tv_bound",
    "proved_bound",
    "theory_expected_tokens",
]

EXACT_TOL = 1e-12
"""Rounding allowed in an exact comparison of probabilities (laws, TVs, acceptances)."""
SEED = 20250
"""Seed of every Monte Carlo sample the checks draw (the same input always gets the same verdict)."""
_TOKENS_TOL = 1e-9  # relative, on E[tokens per step]

Bound = Callable[[S.Node], float]


# ---------------------------------------------------------------- running Hypothesis
def _settings(user: hypothesis.settings | None) -> hypothesis.settings:
    base = user if user is not None else hypothesis.settings()
    suppress = list(base.suppress_health_check) + [HealthCheck.too_slow]
    return hypothesis.settings(base, deadline=None, report_multiple_bugs=False,
                               suppress_health_check=suppress)


def _run(check: str, strategy: st.SearchStrategy, body: Callable[[object], None],
         user: hypothesis.settings | None, info: RuleInfo) -> None:
    __tracebackhide__ = True

    def test(case: object) -> None:
        body(case)

    test.__name__ = test.__qualname__ = check
    runner = hypothesis.given(case=strategy)(hypothesis.settings(_settings(user))(test))
    try:
        runner()
    except hypothesis.errors.Flaky as err:
        raise AssertionError(f"rule {info.name!r}: {check} got different outcomes for the same input; "
                             "a rule must be deterministic given its uniforms") from err


@dataclasses.dataclass(frozen=True)
class Example:
    """One generated input of a node check: the node, its m + 1 uniforms ``u`` and the m
    uniforms ``draws`` that draw the children of a ``drafts = "sampled"`` rule."""

    node: S.Node
    u: np.ndarray
    draws: np.ndarray

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:  # Hypothesis prints examples with it
        printer.text(repr(self))  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"Example(node={self.node!r}, u={self.u.tolist()!r}, draws={self.draws.tolist()!r})"


@st.composite
def _with_uniforms(draw: st.DrawFn, nodes: st.SearchStrategy[S.Node]) -> Example:
    node = draw(nodes)
    return Example(node, draw(S.uniforms(node.m + 1)), draw(S.uniforms(node.m)))


def _default_nodes(info: RuleInfo, kinds: tuple[str, ...] = S.KINDS, max_m: int = 6) -> st.SearchStrategy:
    takes = getattr(info.fn, "kinds", None)  # the relaxation kinds the rule takes (a boost: none only)
    if takes is not None:
        kinds = tuple(k for k in kinds if k in takes) or tuple(takes)
    if info.drafts == "sampled":  # the law is averaged over every draw order: keep V^m small
        return S.nodes(max_v=8, max_m=min(max_m, 3), kinds=kinds)
    return S.nodes(max_v=16, max_m=max_m, kinds=kinds)


# ---------------------------------------------------------------- lossless
def check_lossless(rule: object, *, nodes: st.SearchStrategy[S.Node] | None = None, samples: int = 2000,
                   alpha: float = ALPHA, settings: hypothesis.settings | None = None) -> None:
    """The rule emits its target law (p; argmax p for ``target = "argmax"``) on every node.

    Parameters
    ----------
    rule : a rule (:mod:`relaxspec.testing.rules`).
    nodes : strategy of :class:`~relaxspec.testing.strategies.Node`; default
        ``nodes(kinds=("none",))``, both variants (a relaxed rule is lossless only without relaxation).
    samples, alpha : Monte Carlo size and false-failure rate per node, for a rule that exposes no law
        (a chi-square test of the emitted tokens).
    settings : Hypothesis settings (default: the active profile).
    """
    __tracebackhide__ = True
    info = rule_info(rule)
    strategy = _with_uniforms(nodes if nodes is not None else _default_nodes(info, ("none",)))

    def body(case: Example) -> None:
        __tracebackhide__ = True
        node, u = case.node, case.u
        target = target_law(info, node.p)
        law = node_law(info, node, u)
        if law is not None:
            diff = np.abs(law.emitted - target)
            if diff.max() > 1e-9:
                x = int(np.argmax(diff))
                got, want = float(law.emitted[x]), float(target[x])
                tv = total_variation(law.emitted, target)
                fail(info, f"is not lossless: it emits token {x} with probability {got!r}, the target "
                     f"{want!r} (TV {tv:.3g}); emitted law {law.emitted.tolist()}", node)
            return
        tokens, _ = sample_emitted(info, node, samples, SEED)
        reason = counts_mismatch(tokens, target, alpha)
        if reason:
            fail(info, f"is not lossless: its {samples} emitted tokens do not follow the target: {reason}; "
                 f"counts {tokens.astype(int).tolist()}", node)

    _run("check_lossless", strategy, body, settings, info)


# ---------------------------------------------------------------- distortion
def proved_bound(verification: Verification | str, depth: int = 1,
                 embedding: Callable[[int], np.ndarray] = grid_embedding) -> Bound:
    """The suite's proved per-node TV bound under ``verification`` (a
    :class:`~relaxspec.theory.verification.Verification` or its spec: the rule and its boost, each node
    giving the relaxation and variant, as :class:`~relaxspec.testing.TheoryRule`'s) as a callable of the
    node.

    - R1, R2 (children drawn from q), R3 with LANTERN's relaxations: ``theory.bounds.tv_bound``
      (R1: p(D), docs/theory.md Theorems 6-7);
    - R4 (traversal verification, unboosted): 0, it is lossless (Theorem 12.2);
    - R2 boosted by GSD or Cool-SD, for children at ``depth`` (GSD reading ``embedding(V)``): SPEC 9.4
      stage by stage, ``theory.node_outcome(p, m, "r2+...").stage_tv`` averaged over the draw orders of
      the node's m children (exact for m = 1, docs/theory.md section 11);
    - the budget boost (SPEC 9.5): its ``tv`` at every node (Theorem 14.1; for R4 at one node too, which
      is R2 there).

    R4 boosted by GSD or Cool-SD has no proved per-node bound here: ``ValueError``.
    """
    v = rule_verification(verification, "proved_bound")
    if v.is_traversal and not v.boost.is_none and not v.uses_budget:
        raise ValueError(f"proved_bound: no per-node bound is proved for {str(v)!r} (rule r4 boosted by "
                         f"{v.boost.kind}); pass a bound of your own")
    if v.uses_budget:
        def budget(node: S.Node) -> float:
            return v.boost.tv

        budget.__name__ = f"proved_bound({str(v)!r})"
        return budget

    def bound(node: S.Node) -> float:
        if v.is_traversal:
            return 0.0
        at = at_node(v, node.relax, node.variant)
        if not v.boost.is_none:
            emb = embedding(node.V) if v.reads_embedding else None
            return node_outcome(node.p, node.m, at, neighbours=node.nb, q=node.q, depth=depth,
                                emb=emb).stage_tv
        children = node.m if v.rule == Rule.R2 else node.kids
        return tv_bound(node.p, children, at, neighbours=node.nb, q=node.q if v.rule == Rule.R2 else None)

    boosted = "" if v.boost.is_none else f", depth={depth}"
    bound.__name__ = f"proved_bound({str(v)!r}{boosted})"
    return bound


def check_tv_bound(rule: object, bound: Bound, *, nodes: st.SearchStrategy[S.Node] | None = None,
                   samples: int = 20000, alpha: float = ALPHA,
                   settings: hypothesis.settings | None = None) -> None:
    """TV(emitted law, target) <= ``bound(node)`` on every generated node.

    Parameters
    ----------
    rule : a rule.
    bound : the claimed bound, a callable of the :class:`~relaxspec.testing.strategies.Node`
        (e.g. :func:`proved_bound`).
    nodes : default ``nodes()``: every relaxation kind and variant.
    samples, alpha : for a rule without a law: fail when the empirical TV of ``samples`` draws
        exceeds the bound by more than its concentration slack (:func:`~relaxspec.testing.stats.tv_exceeds`).
    settings : Hypothesis settings (default: the active profile).
    """
    __tracebackhide__ = True
    info = rule_info(rule)
    bname = getattr(bound, "__name__", repr(bound))
    strategy = _with_uniforms(nodes if nodes is not None else _default_nodes(info))

    def body(case: Example) -> None:
        __tracebackhide__ = True
        node, u = case.node, case.u
        try:
            b = float(bound(node))
        except Exception as err:  # name the bound and the input
            raise AssertionError(f"bound {bname} raised {type(err).__name__}: {err}\n"
                                 f"  input: {node!r}") from err
        target = target_law(info, node.p)
        law = node_law(info, node, u)
        if law is not None:
            tv = total_variation(law.emitted, target)
            if tv > b + EXACT_TOL:
                fail(info, f"exceeds its TV bound: TV(emitted, target) = {tv!r} > {bname} = {b!r}; "
                     f"emitted law {law.emitted.tolist()}", node)
            return
        tokens, _ = sample_emitted(info, node, samples, SEED)
        reason = tv_exceeds(tokens, target, b, alpha)
        if reason:
            fail(info, f"exceeds its TV bound {bname}: {reason}", node)

    _run("check_tv_bound", strategy, body, settings, info)


# ---------------------------------------------------------------- decisions
def check_matches(rule: object, reference_rule: object, *, nodes: st.SearchStrategy[S.Node] | None = None,
                  settings: hypothesis.settings | None = None) -> None:
    """Both rules take the same decision (accepted index and emitted token) given the same node,
    children and uniforms: a kernel against its oracle, a port against theory.

    Children of ``drafts = "sampled"`` rules are drawn from q with generated uniforms, the same
    for both. ``nodes`` defaults to every relaxation kind and variant.
    """
    __tracebackhide__ = True
    info, ref = rule_info(rule), rule_info(reference_rule)
    if info.drafts != ref.drafts:
        raise AssertionError(f"rule {info.name!r} takes {info.drafts} children but the reference "
                             f"{ref.name!r} takes {ref.drafts} ones: they verify different nodes")
    strategy = _with_uniforms(nodes if nodes is not None else _default_nodes(info))

    def body(case: Example) -> None:
        __tracebackhide__ = True
        node, u, draws = case.node, case.u, case.draws
        kids = children_for(info, node, draws)
        if kids.size < node.m:  # q had fewer tokens than m to draw
            u = np.concatenate((u[: kids.size], u[-1:]))
        got, want = call(info, node, kids, u), call(ref, node, kids, u)
        if (got.index, got.token) != (want.index, want.token):
            fail(info, f"decides (index {got.index}, token {got.token}) where the reference {ref.name!r} "
                 f"decides (index {want.index}, token {want.token})", node, kids, u)

    _run("check_matches", strategy, body, settings, info)


def check_consistent(rule: object, *, nodes: st.SearchStrategy[S.Node] | None = None, samples: int = 2000,
                     alpha: float = ALPHA, settings: hypothesis.settings | None = None) -> None:
    """The rule's decisions follow its own law: a chi-square test of ``samples`` emitted tokens
    against ``law.emitted`` and of the accepted indices against ``law.accept_probs`` (the rule
    must expose its law). Ties the exact checks, which read the law, to what the rule does."""
    __tracebackhide__ = True
    info = rule_info(rule)
    strategy = _with_uniforms(nodes if nodes is not None else _default_nodes(info))

    def body(case: Example) -> None:
        __tracebackhide__ = True
        node, u = case.node, case.u
        law = node_law(info, node, u)
        if law is None:
            fail(info, "exposes no law: check_consistent compares decisions with the rule's own law", node)
        tokens, indices = sample_emitted(info, node, samples, SEED)
        reject = max(0.0, 1.0 - law.accept)
        for what, counts, probs in (("emitted tokens", tokens, law.emitted),
                                    ("accepted indices", indices, np.append(law.accept_probs, reject))):
            reason = counts_mismatch(counts, probs / probs.sum(), alpha)
            if reason:
                fail(info, f"decides against its own law: its {samples} {what} do not follow it: {reason}; "
                     f"counts {counts.astype(int).tolist()}, law {probs.tolist()}", node)

    _run("check_consistent", strategy, body, settings, info)


# ---------------------------------------------------------------- monotonicity
_PARAMETERS = {"delta": ("additive",), "lam": ("multiplicative",), "k": ("additive", "multiplicative")}


@st.composite
def _relaxation_pairs(draw: st.DrawFn, nodes: st.SearchStrategy[S.Node], parameter: str
                      ) -> tuple[Example, Relax, Relax]:
    ex = draw(_with_uniforms(nodes))
    r = ex.node.relax
    if r.kind not in _PARAMETERS[parameter]:
        raise AssertionError(f"check_monotone({parameter!r}) needs nodes with a "
                             f"{' or '.join(_PARAMETERS[parameter])} relaxation, got {r}")
    if parameter == "k":
        k1 = draw(st.integers(1, r.k))
        lo, hi = dataclasses.replace(r, k=k1), r
    elif parameter == "delta":
        d = sorted(draw(st.lists(st.one_of(st.sampled_from([0.0, 0.05, 0.1, 0.5, 1.0]), st.floats(0.0, 1.0)),
                                 min_size=2, max_size=2)))
        lo, hi = Relax.additive(r.k, d[0]), Relax.additive(r.k, d[1])
    else:
        lam = sorted(draw(st.lists(st.one_of(st.sampled_from([1.0, 1.5, 2.0, 10.0]), st.floats(1.0, 20.0)),
                                   min_size=2, max_size=2)))
        lo, hi = Relax.multiplicative(r.k, lam[0]), Relax.multiplicative(r.k, lam[1])
    return ex, lo, hi


def check_monotone(rule: object, parameter: str, *, nodes: st.SearchStrategy[S.Node] | None = None,
                   samples: int = 2000, alpha: float = ALPHA,
                   settings: hypothesis.settings | None = None) -> None:
    """P(some child accepted) is non-decreasing in the relaxation ``parameter`` (``"delta"``,
    ``"lam"`` or ``"k"``), the rest of the node fixed.

    The suite claims it for one child (docs/theory.md Proposition 4), so ``nodes`` defaults to
    single-child nodes of the parameter's kind; with several children a larger proximity set
    can absorb a later child, and no rule of the suite claims it. A rule without a law is
    tested on ``samples`` paired runs sharing their uniforms (one-sided Hoeffding at ``alpha``).
    """
    if parameter not in _PARAMETERS:
        raise AssertionError(f"check_monotone: parameter must be one of {sorted(_PARAMETERS)}, "
                             f"got {parameter!r}")
    __tracebackhide__ = True
    info = rule_info(rule)
    base = nodes if nodes is not None else _default_nodes(info, _PARAMETERS[parameter], max_m=1)
    strategy = _relaxation_pairs(base, parameter)

    def body(case: tuple[Example, Relax, Relax]) -> None:
        __tracebackhide__ = True
        ex, lo, hi = case
        node, u = ex.node, ex.u
        n_lo, n_hi = dataclasses.replace(node, relax=lo), dataclasses.replace(node, relax=hi)
        law_lo, law_hi = node_law(info, n_lo, u), node_law(info, n_hi, u)
        if law_lo is not None and law_hi is not None:
            if law_lo.accept > law_hi.accept + EXACT_TOL:
                fail(info, f"is not monotone in {parameter}: acceptance {law_lo.accept!r} at {lo} > "
                     f"{law_hi.accept!r} at {hi}", node)
            return
        rng = np.random.default_rng(SEED)
        diff = np.empty(samples)
        for s in range(samples):
            kids = children_for(info, node, rng.random(node.m))
            us = rng.random(kids.size + 1)
            hi_ok, lo_ok = call(info, n_hi, kids, us).index >= 0, call(info, n_lo, kids, us).index >= 0
            diff[s] = float(hi_ok) - float(lo_ok)
        reason = mean_below(diff, 2.0, alpha)
        if reason:
            fail(info, f"is not monotone in {parameter} from {lo} to {hi}: {reason}", node)

    _run("check_monotone", strategy, body, settings, info)


# ---------------------------------------------------------------- trees
def theory_expected_tokens(verification: Verification | str,
                           embedding: Callable[[int], np.ndarray] = grid_embedding
                           ) -> Callable[[S.TreeCase], float]:
    """theory's exact E[tokens per step] (``theory.tree.expected_tokens_per_step``) under ``verification``
    (a value or its spec: the rule and its boost, the case giving the relaxation and variant; GSD reads
    ``embedding(V)``), as a callable of a :class:`~relaxspec.testing.strategies.TreeCase`."""
    v = rule_verification(verification, "theory_expected_tokens")
    if v.is_traversal:
        raise ValueError("rule r4 (traversal verification) is not a node-by-node walk: a rejected subtree "
                         "changes its parent's test, so E[tokens per step] is not composed from node laws "
                         "(theory.traversal.traversal_ends gives it on a drawn tree)")
    v.check_node_by_node()

    def expected(case: S.TreeCase) -> float:
        emb = embedding(case.V) if v.reads_embedding else None
        return expected_tokens_per_step(case.tree, case.p, at_node(v, case.relax, case.variant),
                                        neighbours=case.nb, q_dists=case.q if v.samples_drafts else None,
                                        emb=emb)

    expected.__name__ = f"theory_expected_tokens({str(v)!r})"
    return expected


def _composed_tokens(info: RuleInfo, case: S.TreeCase) -> float | None:
    """1 + sum over non-root v of prod P(edge accepted) (SPEC section 4) from the rule's per-node laws."""
    edge = np.ones(case.tree.size)
    for u in range(case.tree.size):
        kids = case.tree.children(u)
        if kids.size == 0:
            continue
        node = case.node(u)
        law = node_law(info, node, np.full(node.m + 1, 0.5))
        if law is None:
            return None
        edge[kids] = law.accept_probs
    return 1.0 + float(path_probs(case.tree, edge)[1:].sum())


def _tree_strategy(info: RuleInfo, tree: object) -> st.SearchStrategy[S.TreeCase]:
    kinds = ("none",) if info.spec_rule is not None and info.spec_rule.rule.is_greedy else S.KINDS
    max_v = 6 if info.drafts == "sampled" else 8
    if tree is None:
        return S.tree_cases(max_v=max_v, kinds=kinds)
    if isinstance(tree, (TreePolicy, Tree)):
        min_v = 3 if isinstance(tree, TreePolicy) else max(3, int(tree.tokens.max()) + 1)
        return S.tree_cases(min_v=min_v, max_v=max(min_v, max_v), policies=st.just(tree), kinds=kinds)
    if isinstance(tree, st.SearchStrategy):
        return tree
    raise AssertionError(f"check_expected_tokens: tree must be None, a TreePolicy, a theory.Tree or a "
                         f"strategy of TreeCase, got {type(tree).__name__}")


def check_expected_tokens(rule: object, tree: object = None, *,
                          expected: Callable[[S.TreeCase], float] | None = None, samples: int = 2000,
                          alpha: float = ALPHA, settings: hypothesis.settings | None = None) -> None:
    """E[tokens per step] of the rule walking a tree node by node equals the exact value.

    The rule's value is its per-node laws composed over the tree (SPEC section 4: 1 + sum over
    non-root v of the product of P(child accepted | parent reached) on v's path), an exact
    enumeration of the walk; a rule without a law is walked ``samples`` times (two-sided
    Hoeffding at ``alpha``). ``expected`` (default: theory's value for the rule's ``spec_rule``,
    :func:`theory_expected_tokens`) is the claimed exact value; without one the walk is compared
    with the rule's own composed law.

    Parameters
    ----------
    tree : ``None`` (small static, EAGLE-2, DDD and random trees over V <= 8), a
        :class:`core.trees.policies.TreePolicy` or :class:`theory.Tree` (fixed; distributions
        generated), or a strategy of :class:`~relaxspec.testing.strategies.TreeCase`.

    R3's tree rule accepts the longest chain of acceptable nodes, not a node-by-node walk; the
    two agree when at most one sibling is acceptable, which ``Relax.none()`` guarantees, so the
    default trees of an R3 rule are unrelaxed.
    """
    __tracebackhide__ = True
    info = rule_info(rule)
    if expected is None and info.spec_rule is not None:
        expected = theory_expected_tokens(info.spec_rule)
    ename = getattr(expected, "__name__", repr(expected))
    strategy = _tree_strategy(info, tree)

    def body(case: S.TreeCase) -> None:
        __tracebackhide__ = True
        want = None
        if expected is not None:
            try:
                want = float(expected(case))
            except Exception as err:  # name the reference and the input
                raise AssertionError(f"expected value {ename} raised {type(err).__name__}: {err}\n"
                                     f"  input: {case!r}") from err
        got = _composed_tokens(info, case)
        if got is not None and want is not None:
            if abs(got - want) > _TOKENS_TOL * max(1.0, abs(want)):
                fail(info, f"expects {got!r} tokens per step (its per-node laws composed over the tree), "
                     f"{ename} gives {want!r}", case)
            return
        if got is None and want is None:
            raise AssertionError(f"check_expected_tokens: rule {info.name!r} exposes no law and names no "
                                 "spec_rule: pass expected=")
        # one side only: walk the tree with the rule's decisions and compare with it
        value, name = (want, ename) if want is not None else (got, "its own composed law")
        tokens = walk_tokens(info, case, samples, SEED)
        reason = mean_outside(tokens, value, float(case.tree.depth), alpha)
        if reason:
            fail(info, f"walks the tree to a tokens-per-step mean other than {name} ({value!r}): {reason}",
                 case)

    _run("check_expected_tokens", strategy, body, settings, info)
