"""Property-test a verification rule: the suite's Hypothesis strategies and guarantee checks.

A rule is a callable ``rule(p, q, children, relax, neighbours, variant, u) -> Verdict``
(:mod:`relaxspec.testing.rules`; the node gives the relaxation and the variant); the checks run
Hypothesis over the strategies and raise an ``AssertionError`` naming the rule and the shrunk failing
input. The suite's rules and the proved values take one verification (a
:class:`~relaxspec.theory.verification.Verification` or its spec: ``TheoryRule("r2+gsd:G=4")``,
``proved_bound("r1")``). See docs/testing.md.

============================  ===========================================================
name                          what it is
============================  ===========================================================
``check_lossless``            the emitted law equals the target (exact, or chi-square)
``check_tv_bound``            TV(emitted, target) <= a claimed bound on every node
``check_matches``             same decisions as a reference rule given the same uniforms
``check_monotone``            acceptance non-decreasing in delta, lam or k
``check_expected_tokens``     E[tokens per step] on small trees equals the exact value
``check_consistent``          the rule's decisions follow its own law
``proved_bound``              theory's proved per-node TV bound of a verification: R1, R2, R3
                              (LANTERN), R4 (0, lossless), R2 boosted (SPEC 9.4), the budget (tv)
``theory_expected_tokens``    theory's exact E[tokens per step] of R1, R2 or R3 (boosted or not)
``Verdict``, ``Law``, ``Rule``  the protocol; ``TheoryRule``, ``KernelRule`` the suite's rules
                              (``TheoryRule("r2+gsd:G=4")``; ``grid_embedding`` GSD's test table)
strategies                    ``distributions``, ``codebooks``, ``neighbour_tables``,
                              ``relaxations``, ``nodes`` (``Node``), ``uniforms``,
                              ``static_trees``, ``tree_policies``, ``trees``,
                              ``tree_cases`` (``TreeCase``)
profiles                      ``relaxspec-quick``, ``-thorough``, ``-ci``: ``load_profile``
============================  ===========================================================

Importing this package registers the profiles and nothing else; the checks, strategies and
rules load on first use (so the pytest plugin stays cheap).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from relaxspec.testing.profiles import PROFILES, load_profile, register_profiles

if TYPE_CHECKING:
    from relaxspec.testing.checks import (
        EXACT_TOL,
        SEED,
        check_consistent,
        check_expected_tokens,
        check_lossless,
        check_matches,
        check_monotone,
        check_tv_bound,
        proved_bound,
        theory_expected_tokens,
    )
    from relaxspec.testing.rules import KernelRule, Law, Rule, TheoryRule, Verdict, grid_embedding
    from relaxspec.testing.stats import ALPHA, assert_counts_match, binomial_bounds
    from relaxspec.testing.strategies import (
        VARIANTS,
        Node,
        TreeCase,
        codebooks,
        distributions,
        neighbour_tables,
        nodes,
        relaxations,
        static_trees,
        tree_cases,
        tree_policies,
        trees,
        uniforms,
        weights_to_dist,
    )

_LAZY = {
    "relaxspec.testing.checks": ("EXACT_TOL", "SEED", "check_consistent",
                                 "check_expected_tokens", "check_lossless", "check_matches", "check_monotone",
                                 "check_tv_bound", "proved_bound", "theory_expected_tokens"),
    "relaxspec.testing.rules": ("KernelRule", "Law", "Rule", "TheoryRule", "Verdict", "grid_embedding"),
    "relaxspec.testing.stats": ("ALPHA", "assert_counts_match", "binomial_bounds"),
    "relaxspec.testing.strategies": ("VARIANTS", "Node", "TreeCase", "codebooks", "distributions",
                                     "neighbour_tables", "nodes", "relaxations", "static_trees",
                                     "tree_cases", "tree_policies", "trees", "uniforms", "weights_to_dist"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "ALPHA", "EXACT_TOL", "PROFILES", "SEED", "VARIANTS",
    "KernelRule", "Law", "Node", "Rule", "TheoryRule", "TreeCase", "Verdict",
    "assert_counts_match", "binomial_bounds", "grid_embedding",
    "check_consistent", "check_expected_tokens", "check_lossless", "check_matches", "check_monotone",
    "check_tv_bound", "codebooks", "distributions", "load_profile", "neighbour_tables", "nodes",
    "proved_bound", "register_profiles", "relaxations", "static_trees", "theory_expected_tokens",
    "tree_cases", "tree_policies", "trees", "uniforms", "weights_to_dist",
]


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'relaxspec.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
