"""What the reference decoder needs to run SPEC 10's methods: the checks of a coupled or PAC window
(``reference.decode_columns``) and of a VVS tree (``reference.decode_vvs``), the largest forward each
runs, and VVS's skip schedule."""

from __future__ import annotations

import numpy as np

from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.skips import SkipSchedule, VvsTree
from relaxspec.core.trees.spec import draft_source
from relaxspec.core.trees.windows import CoupledWindow, PacWindow
from relaxspec.reference.coupled import WindowPlan
from relaxspec.theory.boost import check_embedding
from relaxspec.theory.rules import Rule
from relaxspec.theory.tree import Tree
from relaxspec.theory.verification import Verification
from relaxspec.theory.vvs import path_similarity, unit_rows


def check_frontier(policy: object, verification: Verification, codes: np.ndarray | None,
                   vocab_size: int) -> np.ndarray | None:
    """Raise ``ValueError`` (one line) unless ``policy`` runs with ``verification`` (a coupled or PAC window:
    rule r2 with no relaxation or boost, as SCD and SJD-PAC verify; VVS: rule r1, LANTERN's relaxation or
    none, no boost, as VVS verifies); returns the unit code vectors VVS's dynamic schedule compares
    (``codes``: the (V, d) float32 code table; only that schedule reads one)."""
    check_frontier_rule(policy, verification)
    dynamic = reads_codes(policy)
    if codes is None:
        if dynamic:
            raise ValueError(f"{policy}: the dynamic schedule compares the paths' code vectors: give the "
                             "codebook (codes=, the VQ codebook as float32)")
        return None
    if not dynamic:
        raise ValueError(f"a code table is read only by VVS's dynamic schedule, not by tree {policy}")
    table = check_embedding(codes, vocab_size)
    if not np.array_equal(table.astype(np.float32), table):
        raise ValueError("the code table must hold float32 values (a trace stores float32)")
    return unit_rows(table)


def check_frontier_rule(policy: object, verification: Verification) -> None:
    """Raise ``ValueError`` (one line) unless the decoder runs ``policy`` with ``verification``
    (:func:`check_frontier`); any other policy passes. Which verification a window takes is
    ``Verification.source_problem``'s (R2, exact or budgeted); the decoder runs the exact test on windows
    (the budget on them, docs/theory.md 15.6, runs in the simulator), and VVS's schedules without a TV bound
    (a bounded skip reads the target's rows after the skip's prefixes: a forward the decoder skips)."""
    if isinstance(policy, CoupledWindow | PacWindow):
        verification.check_source(draft_source(policy), str(policy))
        if not verification.is_exact:
            raise ValueError(f"{policy}: the reference decoder verifies coupled and SJD-PAC windows by the "
                             f"exact test (rule r2); {verification} on them runs in the simulator "
                             "(relaxspec simulate)")
    if isinstance(policy, VvsTree):
        if verification.rule != Rule.R1 or not verification.boost.is_none:
            raise ValueError(f"{policy}: VVS verifies its EAGLE-2 trees with rule r1 (LANTERN's relaxation "
                             f"or none) and no boost, got {verification}")
        if policy.schedule.bounded:
            raise ValueError(f"{policy}: a skip bounded by tv reads the target's rows after the skip's "
                             "prefixes, the forward a decoder skips: it runs in the simulator only")


def tree_nodes_needed(policy: object) -> int:
    """The most nodes one target forward of ``policy`` runs (root included): a window's chain or column
    product; a VVS verify step after a skip runs the skipped tokens (depth + 1) before its tree."""
    if isinstance(policy, CoupledWindow | PacWindow):
        return WindowPlan.of(policy).max_nodes()
    if isinstance(policy, JacobiWindow):
        return policy.window + 1
    if isinstance(policy, VvsTree):
        return policy.depth + 1 + policy.total_tokens + 1
    return 1


DEFAULT_TREE_NODES = 128
"""``DecodeSettings.max_tree_nodes``'s default: the tree slots of the decoder's caches."""


def tree_slots(policy: object) -> int:
    """The tree slots a decoder of ``policy`` needs: the default, or more for a window or VVS's forward
    (:func:`tree_nodes_needed`)."""
    return max(DEFAULT_TREE_NODES, tree_nodes_needed(policy))


def reads_codes(policy: object) -> bool:
    """Whether ``policy`` reads the code vectors (VVS's dynamic schedule): the decoder takes ``codes=``."""
    return isinstance(policy, VvsTree) and policy.schedule.kind.reads_similarity


def schedule_skips(schedule: SkipSchedule, step: int, tree: Tree, codes: np.ndarray | None) -> bool:
    """Whether speculative step ``step`` (0-based, skip steps counted) skips by ``schedule``, given that
    it may (a verify step came before, and the step before was not a skip): ``uniform``: every I-th step
    (``step % I == 1``); ``dynamic``: the tree's path similarity (``theory.vvs.path_similarity`` with the
    unit ``codes``) is >= S."""
    if schedule.kind.is_periodic:
        return step % schedule.interval == 1
    return bool(path_similarity(tree.parents, tree.tokens, codes, schedule.alpha) >= schedule.similarity)


__all__ = ["DEFAULT_TREE_NODES", "check_frontier", "check_frontier_rule", "reads_codes", "schedule_skips",
           "tree_nodes_needed", "tree_slots"]
