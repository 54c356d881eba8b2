"""The one encoder and validator of a verification rule: (rule, relaxation, variant, neighbour table).

Every layer names a rule the same way (SPEC section 3): ``rule`` r1, r2, r3 or r4
(traversal verification, SPEC 9.6: ``theory.traversal``), a :class:`~theory.relax.Relax`,
a ``variant`` (``principled`` = SPEC,
``official`` = the published codes' rejection update) and the neighbour
table the relaxation reads. The official variant zeroes x and its first
k + 1 neighbours on a rejection, so it reads k + 1 columns of the table
(:func:`rows_read`). The Numba kernels take the same rule as plain integers
(:func:`encode`, :func:`relax_args`) and the columns it reads as a contiguous
int32 table (:func:`rule_table`); theory reads the int64 table of
:func:`neighbour_rows`.

A boost (``theory.boost.Boost``, SPEC 9.2-9.3, and the budget of 9.5) raises a sampled-draft test
(R2's stages, R4's edges) and keeps its standard residual: :func:`check_step_boost` says where it is
valid on a whole step (rule r2 or r4, no relaxation), :func:`check_boost` where theory's node-by-node
rules take it (R2 with GSD or Cool-SD), and :func:`encode_boost` hands it to the kernels as plain numbers
and arrays (the budget with the neighbour table it merges).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from relaxspec.theory.boost import NO_BOOST, OFFICIAL_BELOW, Boost, check_embedding, window_extent
from relaxspec.theory.neighbours import validate_neighbour_rows, validate_neighbours
from relaxspec.theory.relax import Relax

RULES = ("r1", "r2", "r3", "r4")
VARIANTS = ("principled", "official")
RULE_R1, RULE_R2, RULE_R3, RULE_R4 = 1, 2, 3, 4
"""The kernels' rule codes (the Numba kernels compare against these names, never bare integers)."""
RULE_CODES = {"r1": RULE_R1, "r2": RULE_R2, "r3": RULE_R3, "r4": RULE_R4}
VARIANT_PRINCIPLED, VARIANT_OFFICIAL = 0, 1
"""The kernels' variant codes."""
VARIANT_CODES = {"principled": VARIANT_PRINCIPLED, "official": VARIANT_OFFICIAL}


def check_rule(rule: str, variant: str) -> None:
    """Raise ``ValueError`` for an unknown rule or variant."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {RULES}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")


def rows_read(relax: Relax, variant: str) -> int:
    """How many leading columns of a neighbour row a rule reads: 0 (exact), k, or k + 1 (official)."""
    if relax.is_exact:
        return 0
    return relax.k + 1 if variant == "official" else relax.k


def _checked_table(neighbours: np.ndarray | None, vocab_size: int, relax: Relax) -> np.ndarray:
    if neighbours is None:
        raise ValueError(f"relaxation {relax} needs a neighbour table")
    validate_neighbours(neighbours, vocab_size, relax.k)
    return neighbours


def neighbour_rows(neighbours: np.ndarray | None, vocab_size: int, relax: Relax, variant: str) -> np.ndarray:
    """Validate the table for ``relax`` and return it whole as int64 (theory's form; empty when unused)."""
    if relax.is_exact:
        return np.zeros((vocab_size, 0), dtype=np.int64)
    return np.asarray(_checked_table(neighbours, vocab_size, relax), dtype=np.int64)


def rule_table(neighbours: np.ndarray | None, vocab_size: int, relax: Relax, variant: str) -> np.ndarray:
    """Validate the table and keep only the columns the rule reads, C-contiguous int32 (the kernels' form;
    converting just those columns, not a V x 1024 table)."""
    if relax.is_exact:
        return np.zeros((vocab_size, 0), dtype=np.int32)
    table = _checked_table(neighbours, vocab_size, relax)
    width = min(table.shape[1], rows_read(relax, variant))
    return np.ascontiguousarray(table[:, :width], dtype=np.int32)


def relax_args(relax: Relax) -> tuple[int, int, float]:
    """A relaxation as the kernels take it: ``(code, k, param)`` (code 0 none, 1 additive,
    2 multiplicative; param delta or lam)."""
    if not isinstance(relax, Relax):
        raise ValueError(f"relax must be a relaxspec.theory.Relax, got {type(relax).__name__}")
    return relax.code, relax.k, float(relax.param)


@dataclass(frozen=True)
class EncodedRule:
    """A verification rule as plain integers and a float (what the Numba kernels take)."""

    rule: int
    code: int
    k: int
    param: float
    variant: int


def encode(rule: str, relax: Relax, variant: str = "principled") -> EncodedRule:
    """Validate and encode a rule (see the module docstring)."""
    check_rule(rule, variant)
    return EncodedRule(RULE_CODES[rule], *relax_args(relax), VARIANT_CODES[variant])


BOOST_NONE, BOOST_GROUP, BOOST_DEPTH, BOOST_BUDGET = 0, 1, 2, 3
"""The kernels' boost codes (``bs[0]``)."""
BOOST_CODES = {"none": BOOST_NONE, "group": BOOST_GROUP, "depth": BOOST_DEPTH, "budget": BOOST_BUDGET}
SAMPLED_DRAFT_RULES = ("r2", "r4")
"""The rules that verify drafts drawn from q (R2 stage by stage, R4 path by path): the ones a boost raises."""


def check_step_boost(rule: str, relax: Relax, boost: Boost) -> None:
    """Raise ``ValueError`` unless (``rule``, ``relax``, ``boost``) verifies a whole step on a tree: a boost
    (GSD, Cool-SD, the budget of SPEC 9.5) raises a sampled-draft test and keeps the standard residual, so
    it needs rule r2 or r4 and no LANTERN relaxation; rule r4 (traversal verification, SPEC 9.6) takes no
    LANTERN relaxation at all (its relaxations are the boosts)."""
    if not isinstance(boost, Boost):
        raise ValueError(f"boost must be a relaxspec.theory.boost.Boost (e.g. Boost.parse('gsd:G=10')), "
                         f"got {type(boost).__name__}")
    if not isinstance(relax, Relax):
        raise ValueError(f"relax must be a relaxspec.theory.Relax, got {type(relax).__name__}")
    if rule == "r4" and not relax.is_exact:
        raise ValueError(f"rule r4 (traversal verification) takes no LANTERN relaxation (got {relax}): relax "
                         "it with a boost (budget:tv=..,k=.., gsd:.., cool:..)")
    if boost.is_none:
        return
    if rule not in SAMPLED_DRAFT_RULES:
        raise ValueError(f"boost {boost} raises a sampled-draft test: it needs rule r2 or r4, got rule "
                         f"{rule!r}")
    if not relax.is_exact:
        raise ValueError(f"boost {boost} keeps the standard residual and takes no LANTERN relaxation: "
                         f"use Relax.none() with it, got {relax}")


def check_boost(rule: str, relax: Relax, boost: Boost) -> None:
    """:func:`check_step_boost` for the node-by-node rules of ``theory.tree`` and ``theory.verify`` (R1-R3,
    R2 boosted by GSD or Cool-SD): rule r4 and the budget boost verify a step by their own walks
    (``theory.traversal``, ``theory.budget``; ``theory.rule_step`` sends a step there), so they are
    refused here rather than verified as something else."""
    check_step_boost(rule, relax, boost)
    if rule == "r4":
        raise ValueError("rule r4 (traversal verification) verifies a whole step, not node by node: "
                         "relaxspec.theory.traversal (or theory.rule_step) verifies it")
    if boost.kind == "budget":
        raise ValueError(f"boost {boost} is not verified on draft trees node by node: its stages share a "
                         "node's budget (theory.budget, or theory.rule_step, verifies it)")


def boost_embedding(boost: Boost, emb: np.ndarray | None, vocab_size: int) -> np.ndarray | None:
    """The embedding table a boost reads, validated: float64 (V, d >= 1) for GSD, None otherwise."""
    if boost.kind != "group":
        return None
    if emb is None:
        raise ValueError(f"boost {boost} (group acceptance) needs an embedding table of the "
                         f"{vocab_size} tokens")
    e = check_embedding(emb, vocab_size)
    if e.shape[1] < 1:
        raise ValueError(f"the embedding table has shape {e.shape}: it needs at least one dimension")
    return e


@dataclass(frozen=True)
class EncodedBoost:
    """A boost as the Numba kernels take it: ``kind`` (:data:`BOOST_CODES`), the GSD window's reach
    ``before`` / ``after`` (``theory.boost.window_extent``), ``fallback`` (x is tested alone when fewer
    than this many tokens rank below it: the official window's ``theory.boost.official_window_falls_back``,
    0 otherwise), ``tau``, ``dist``, the per-depth ``omega`` (float64, at least one entry), the
    embedding ``emb`` (float64 C-contiguous (V, d); (1, 1) unused), the budget's ``tv`` (0 unused) and
    the neighbour ``table`` it merges (int32 C-contiguous (V, k), its first k columns; (1, 0) unused)."""

    kind: int
    before: int
    after: int
    fallback: int
    tau: float
    dist: float
    omega: np.ndarray
    emb: np.ndarray
    tv: float = 0.0
    table: np.ndarray = field(default_factory=lambda: np.zeros((1, 0), dtype=np.int32))

    @property
    def args(self) -> tuple:
        """Positional kernel tuple ``bs = (kind, before, after, fallback, tau, dist, omega, emb, tv,
        table)``."""
        return (self.kind, self.before, self.after, self.fallback, self.tau, self.dist, self.omega, self.emb,
                self.tv, self.table)


def budget_table(boost: Boost, neighbours: np.ndarray | None, vocab_size: int) -> np.ndarray:
    """The first k columns of the neighbour table a budget boost merges (SPEC 9.5: x's k nearest latent
    neighbours), validated on every row, as a C-contiguous int32 (V, k) table; (V, 0) when k = 0."""
    if boost.k == 0:
        return np.zeros((vocab_size, 0), dtype=np.int32)
    if neighbours is None:
        raise ValueError(f"boost {boost} merges the mass of latent neighbours: it needs a neighbour table")
    validate_neighbours(neighbours, vocab_size, boost.k)
    table = np.ascontiguousarray(neighbours[:, :boost.k], dtype=np.int32)
    validate_neighbour_rows(table, np.arange(vocab_size), boost.k)
    return table


def encode_boost(rule: str, relax: Relax, boost: Boost = NO_BOOST, emb: np.ndarray | None = None,
                 vocab_size: int | None = None, neighbours: np.ndarray | None = None) -> EncodedBoost:
    """Validate (:func:`check_step_boost`, :func:`boost_embedding`, :func:`budget_table`) and encode a
    boost for the kernels; ``neighbours`` is the table the budget boost merges (the world's)."""
    check_step_boost(rule, relax, boost)
    if boost.kind in ("group", "budget") and vocab_size is None:
        raise ValueError(f"encoding boost {boost} needs the vocabulary size")
    if boost.kind == "group":
        e = np.ascontiguousarray(boost_embedding(boost, emb, vocab_size), dtype=np.float64)
        before, after = window_extent(boost.group_size, boost.window)
        fallback = OFFICIAL_BELOW if boost.window == "official" else 0
        return EncodedBoost(BOOST_CODES["group"], before, after, fallback, boost.tau, boost.dist, np.ones(1),
                            e)
    if boost.kind == "budget":
        return EncodedBoost(BOOST_CODES["budget"], 0, 0, 0, 0.0, 0.0, np.ones(1), np.zeros((1, 1)),
                            boost.tv, budget_table(boost, neighbours, vocab_size))
    omega = np.array(boost.omega if boost.kind == "depth" else (1.0,), dtype=np.float64)
    return EncodedBoost(BOOST_CODES[boost.kind], 0, 0, 0, 0.0, 0.0, omega, np.zeros((1, 1)))
