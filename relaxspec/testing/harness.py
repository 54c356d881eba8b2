"""Calling a rule safely: validation of what it returns, its law averaged over draw orders,
Monte Carlo samples and tree walks.

Everything a rule does wrong (raising, returning a decision outside its children, a law
that is not a distribution, reading uniforms it was not given) becomes an
``AssertionError`` that names the rule and the input, so that Hypothesis shrinks it like
any other failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from relaxspec.testing.rules import Law, Verdict, rule_verification
from relaxspec.testing.strategies import Node, TreeCase
from relaxspec.theory.sampler import draw_without_replacement
from relaxspec.theory.stages import draft_residual
from relaxspec.theory.verification import Verification

__all__ = ["RuleInfo", "call", "children_for", "fail", "node_law", "rule_info", "sample_emitted",
           "target_law", "walk_tokens"]

SUM_TOL = 1e-9  # a law's emitted distribution must sum to 1 within this
NEG_TOL = 1e-12  # probabilities may be this far below 0 (rounding)
DRAFTS = ("given", "sampled")
TARGETS = ("p", "argmax")


@dataclass(frozen=True)
class RuleInfo:
    """A rule and what the checks know about it (the protocol's optional attributes; ``spec_rule`` parsed
    into the :class:`~relaxspec.theory.verification.Verification` it claims, or None)."""

    fn: Callable[..., object]
    name: str
    drafts: str
    target: str
    spec_rule: Verification | None


def rule_info(rule: object) -> RuleInfo:
    """Read a rule's optional attributes; ``AssertionError`` if it is not a usable rule."""
    if isinstance(rule, RuleInfo):
        return rule
    name = getattr(rule, "name", None) or getattr(rule, "__name__", None) or repr(rule)
    if not callable(rule):
        raise AssertionError(f"rule {name!r} is not callable: a rule is "
                             "rule(p, q, children, relax, neighbours, variant, u) -> Verdict")
    drafts = getattr(rule, "drafts", "given")
    target = getattr(rule, "target", "p")
    if drafts not in DRAFTS:
        raise AssertionError(f"rule {name!r} has drafts = {drafts!r}; expected one of {DRAFTS}")
    if target not in TARGETS:
        raise AssertionError(f"rule {name!r} has target = {target!r}; expected one of {TARGETS}")
    spec = getattr(rule, "spec_rule", None)
    if spec is not None:
        try:
            spec = rule_verification(spec, "spec_rule")
        except ValueError as err:  # one line naming the rule: its claim is not a verification
            msg = str(err)
            raise AssertionError(f"rule {name!r}: " + (msg if msg.startswith("spec_rule") else
                                                       f"spec_rule {spec!r}: {msg}")) from None
    return RuleInfo(rule, str(name), drafts, target, spec)


def fail(info: RuleInfo, problem: str, node: Node | TreeCase, children: np.ndarray | None = None,
         u: np.ndarray | None = None) -> NoReturn:
    """Raise the ``AssertionError`` that names the rule, the problem and the input."""
    __tracebackhide__ = True  # pytest shows the check's caller, not this machinery
    lines = [f"rule {info.name!r} {problem}", f"  input: {node!r}"]
    if children is not None:
        lines.append(f"  children verified: {children.tolist()}")
    if u is not None:
        lines.append(f"  uniforms: {u.tolist()}")
    raise AssertionError("\n".join(lines))


def _as_int(value: object) -> int | None:
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    return None


def _check_law(info: RuleInfo, law: object, node: Node, kids: np.ndarray, u: np.ndarray) -> Law:
    if not isinstance(law, Law):
        fail(info, f"returned law {law!r}, not a relaxspec.testing.Law", node, kids, u)
    acc = np.asarray(law.accept_probs, dtype=np.float64)
    em = np.asarray(law.emitted, dtype=np.float64)
    if acc.shape != kids.shape or em.shape != node.p.shape:
        fail(info, f"returned a law of shapes accept_probs {acc.shape}, emitted {em.shape}; expected "
             f"{kids.shape} and {node.p.shape}", node, kids, u)
    if not (np.all(np.isfinite(acc)) and np.all(np.isfinite(em))):
        fail(info, f"returned a law with NaN or infinite entries: {law!r}", node, kids, u)
    if acc.min(initial=0.0) < -NEG_TOL or em.min() < -NEG_TOL:
        fail(info, f"returned negative probabilities: accept_probs {acc.tolist()}, emitted {em.tolist()}",
             node, kids, u)
    if abs(em.sum() - 1.0) > SUM_TOL:
        fail(info, f"returned an emitted law that sums to {float(em.sum())!r}, not 1: {em.tolist()}", node,
             kids, u)
    if acc.sum() > 1.0 + SUM_TOL:
        fail(info, f"returned acceptance probabilities that sum to {float(acc.sum())!r} > 1: {acc.tolist()}",
             node, kids, u)
    short = np.flatnonzero(em[kids] < acc - NEG_TOL)
    if short.size:
        i = int(short[0])
        fail(info, f"accepts child {i} (token {int(kids[i])}) with probability {float(acc[i])!r} but emits "
             f"that token with probability {float(em[kids[i]])!r} only", node, kids, u)
    return Law(acc, em)


def call(info: RuleInfo, node: Node, kids: np.ndarray, u: np.ndarray) -> Verdict:
    """Call the rule on ``node`` with children ``kids`` and m + 1 uniforms ``u``; validate the verdict."""
    __tracebackhide__ = True
    u = np.array(u, dtype=np.float64)
    u.setflags(write=False)
    try:
        out = info.fn(node.p.copy(), node.q.copy(), kids.copy(), node.relax, node.nb.copy(), node.variant, u)
    except IndexError as err:
        fail(info, f"raised IndexError: {err} (it is given m + 1 = {u.size} uniforms: u[i] for child i, "
             f"u[m] for the residual draw)", node, kids, u)
    except Exception as err:  # any failure of the rule is the rule's failure
        fail(info, f"raised {type(err).__name__}: {err}", node, kids, u)
    if isinstance(out, tuple) and len(out) in (2, 3):
        out = Verdict(*out)
    if not isinstance(out, Verdict):
        fail(info, f"returned {out!r}, not a Verdict(index, token, law=None)", node, kids, u)
    index, token = _as_int(out.index), _as_int(out.token)
    m, V = kids.size, node.V
    if index is None or not -1 <= index < m:
        fail(info, f"returned index {out.index!r}: not -1 or the index of one of its {m} children", node,
             kids, u)
    if token is None or not 0 <= token < V:
        fail(info, f"returned token {out.token!r}: not a token id in [0, {V})", node, kids, u)
    if index >= 0 and token != int(kids[index]):
        fail(info, f"accepted child {index} (token {int(kids[index])}) but emitted token {token}", node,
             kids, u)
    law = None if out.law is None else _check_law(info, out.law, node, kids, u)
    if law is not None:
        if index >= 0 and law.accept_probs[index] <= 0.0:
            fail(info, f"accepted child {index}, which its own law accepts with probability 0", node, kids, u)
        if law.emitted[token] <= 0.0:
            fail(info, f"emitted token {token}, which its own law emits with probability 0", node, kids, u)
    return Verdict(index, token, law)


def children_for(info: RuleInfo, node: Node, draws: np.ndarray) -> np.ndarray:
    """The children the rule verifies: the node's own, or (``drafts = "sampled"``) draws from q
    without replacement with uniforms ``draws`` (``theory.draw_without_replacement``)."""
    if info.drafts == "given":
        return node.kids
    return draw_without_replacement(node.q, draws[: node.m])


def _draw_orders(q: np.ndarray, m: int) -> Iterator[tuple[np.ndarray, float]]:
    """Every order of up to m draws from q without replacement, with its probability."""

    def walk(drawn: list[int], weight: float) -> Iterator[tuple[np.ndarray, float]]:
        qp = draft_residual(q, np.array(drawn, dtype=np.int64)) if len(drawn) < m else None
        if qp is None:
            yield np.array(drawn, dtype=np.int64), weight
            return
        for c in np.flatnonzero(qp > 0):
            yield from walk(drawn + [int(c)], weight * float(qp[c]))

    yield from walk([], 1.0)


def _uniforms_for(u: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate((u[:n], u[-1:]))


def node_law(info: RuleInfo, node: Node, u: np.ndarray) -> Law | None:
    """The rule's exact law at ``node`` (``None`` if it exposes none).

    ``drafts = "sampled"``: the law averaged over every draw order of m
    children from q (``accept_probs[i]``: the i-th draw is accepted); the
    rule is called once per order, so keep V and m small.
    """
    if info.drafts == "given":
        return call(info, node, node.kids, u).law
    acc, em = np.zeros(node.m), np.zeros(node.V)
    for order, weight in _draw_orders(node.q, node.m):
        law = call(info, node, order, _uniforms_for(u, order.size)).law
        if law is None:
            return None
        acc[: order.size] += weight * law.accept_probs
        em += weight * law.emitted
    return Law(acc, em)


def target_law(info: RuleInfo, p: np.ndarray) -> np.ndarray:
    """The law the rule emits when lossless: p, or the point mass on argmax p (``target = "argmax"``)."""
    if info.target == "p":
        return p
    out = np.zeros_like(p)
    out[int(np.argmax(p))] = 1.0
    return out


def _one(info: RuleInfo, node: Node, rng: np.random.Generator) -> tuple[np.ndarray, Verdict]:
    kids = children_for(info, node, rng.random(node.m))
    return kids, call(info, node, kids, rng.random(kids.size + 1))


def sample_emitted(info: RuleInfo, node: Node, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Verify ``node`` n times with uniforms from ``seed``: (counts of emitted tokens, counts of
    accepted indices, the last bin counting rejections)."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros(node.V)
    indices = np.zeros(node.m + 1)
    for _ in range(n):
        _, v = _one(info, node, rng)
        tokens[v.token] += 1
        indices[v.index] += 1
    return tokens, indices


def walk_tokens(info: RuleInfo, case: TreeCase, n: int, seed: int) -> np.ndarray:
    """Tokens per step of n verification steps on ``case``, walking node by node with the rule
    (SPEC section 3: an accepted child becomes the next node; 1 + accepted drafts)."""
    rng = np.random.default_rng(seed)
    out = np.ones(n)
    kids_of = [case.tree.children(u) for u in range(case.tree.size)]
    node_of = [case.node(u) for u in range(case.tree.size)]
    for s in range(n):
        u = 0
        while kids_of[u].size:
            _, v = _one(info, node_of[u], rng)
            if v.index < 0:
                break
            u = int(kids_of[u][v.index])
            out[s] += 1
    return out
