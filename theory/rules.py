"""A verification rule's codes and the neighbour tables it reads (rule, relaxation, variant, table).

Every layer names a rule the same way (SPEC section 3): ``rule`` r1, r2, r3 or r4
(traversal verification, SPEC 9.6: ``theory.traversal``), a :class:`~theory.relax.Relax`,
a ``variant`` (``principled`` = SPEC,
``official`` = the published codes' rejection update) and the neighbour
table the relaxation reads. The official variant zeroes x and its first
k + 1 neighbours on a rejection, so it reads k + 1 columns of the table
(:func:`rows_read`). The Numba kernels take the same rule as the named codes below
(``theory.verification.Verification.encode``, :func:`relax_args`) and the columns it reads as a
contiguous int32 table (:func:`rule_table`); theory reads the int64 table of :func:`neighbour_rows`.

A boost (``theory.boost.Boost``, SPEC 9.2-9.3, and the budget of 9.5) raises a sampled-draft test
(R2's stages, R4's edges) and keeps its standard residual. Which combinations of rule, relaxation,
variant and boost exist is ``theory.verification.Verification``'s to say (validated once, when it is
built; ``Verification.check_node_by_node`` where theory's node-by-node rules take it: R1-R3, R2 with
GSD or Cool-SD); ``Verification.encode`` hands it to the kernels as the named codes, numbers and arrays
(the budget with the table of :func:`budget_table`).
"""

from __future__ import annotations

import enum

import numpy as np

from relaxspec.theory.boost import Boost, BoostKind, check_embedding
from relaxspec.theory.neighbours import validate_neighbour_rows, validate_neighbours
from relaxspec.theory.relax import VARIANT_CODES as VARIANT_CODES  # the variant's home is theory.relax
from relaxspec.theory.relax import VARIANT_OFFICIAL as VARIANT_OFFICIAL
from relaxspec.theory.relax import VARIANT_PRINCIPLED as VARIANT_PRINCIPLED
from relaxspec.theory.relax import VARIANTS as VARIANTS
from relaxspec.theory.relax import Relax, as_variant
from relaxspec.theory.relax import Variant as Variant

RULE_R1, RULE_R2, RULE_R3, RULE_R4 = 1, 2, 3, 4
"""The kernels' rule codes (the Numba kernels compare against these names, never bare integers)."""


class Rule(enum.StrEnum):
    """The verification rules of SPEC 3 and 9.6 (a ``StrEnum``: ``Rule.R2 == "r2"``)."""

    def __repr__(self) -> str:  # the spelling it is written and parsed with, as before it was an enum
        return repr(self.value)

    R1 = "r1"
    """Point-mass drafts: a child x is accepted with the relaxed mass r(A(x)) (LANTERN's rule)."""
    R2 = "r2"
    """Sampled drafts: children drawn from q without replacement, tested stage by stage (SpecInfer)."""
    R3 = "r3"
    """Greedy: the longest chain of acceptable children (deterministic)."""
    R4 = "r4"
    """Traversal verification (SPEC 9.6): sampled drafts tested path by path from the leaves."""

    @property
    def code(self) -> int:
        """The kernels' code (:data:`RULE_R1` ...)."""
        return RULE_CODES[self]

    @property
    def samples_drafts(self) -> bool:
        """True for the rules that verify drafts drawn from q (R2 and R4): the ones a boost raises."""
        return self in SAMPLED_DRAFT_RULES

    @property
    def is_point_mass(self) -> bool:
        """True for R1: each child is a point-mass draft tested on the residual of its earlier siblings."""
        return self is Rule.R1

    @property
    def is_greedy(self) -> bool:
        """True for R3: deterministic, no uniforms read."""
        return self is Rule.R3

    @property
    def is_traversal(self) -> bool:
        """True for R4: a whole step is one walk (``theory.traversal``), not node by node."""
        return self is Rule.R4


RULES = tuple(Rule)
RULE_CODES = {Rule.R1: RULE_R1, Rule.R2: RULE_R2, Rule.R3: RULE_R3, Rule.R4: RULE_R4}
SAMPLED_DRAFT_RULES = (Rule.R2, Rule.R4)
"""The rules that verify drafts drawn from q (R2 stage by stage, R4 path by path): the ones a boost raises."""


def as_rule(rule: str | Rule) -> Rule:
    """``rule`` as a :class:`Rule`; ``ValueError`` names an unknown one."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {tuple(str(r) for r in RULES)}")
    return Rule(rule)


def rows_read(relax: Relax, variant: str) -> int:
    """How many leading columns of a neighbour row a rule reads: 0 (exact), k, or k + 1 (official)."""
    if relax.is_exact:
        return 0
    return relax.k + 1 if as_variant(variant).is_official else relax.k


def _checked_table(neighbours: np.ndarray | None, vocab_size: int, relax: Relax) -> np.ndarray:
    if neighbours is None:
        raise ValueError(f"relaxation {relax} needs a neighbour table")
    validate_neighbours(neighbours, vocab_size, relax.k)
    return neighbours


def neighbour_rows(neighbours: np.ndarray | None, vocab_size: int, relax: Relax) -> np.ndarray:
    """Validate the table for ``relax`` (k columns) and return it whole as int64 (theory's form; empty when
    unused). The official variant reads one column more: the rules check the rows they read
    (:func:`rows_read`)."""
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


BOOST_NONE, BOOST_GROUP, BOOST_DEPTH, BOOST_BUDGET = 0, 1, 2, 3
"""The kernels' boost codes (``bs[0]``)."""
BOOST_CODES = {BoostKind.NONE: BOOST_NONE, BoostKind.GROUP: BOOST_GROUP, BoostKind.DEPTH: BOOST_DEPTH,
               BoostKind.BUDGET: BOOST_BUDGET}


def boost_embedding(boost: Boost, emb: np.ndarray | None, vocab_size: int) -> np.ndarray | None:
    """The embedding table a boost reads, validated: float64 (V, d >= 1) for GSD, None otherwise."""
    if not boost.reads_embedding:
        return None
    if emb is None:
        raise ValueError(f"boost {boost} (group acceptance) needs an embedding table of the "
                         f"{vocab_size} tokens")
    e = check_embedding(emb, vocab_size)
    if e.shape[1] < 1:
        raise ValueError(f"the embedding table has shape {e.shape}: it needs at least one dimension")
    return e


def budget_index_dtype(vocab_size: int) -> type:
    """The integer type of the budget's table (and of the boost tuple's unused one): uint16 while every id
    fits (V <= 65536), else int32. The budget gathers r over V x k of its entries per stage, so the
    table's bytes set the pace (the same ids, so the same sums)."""
    return np.uint16 if vocab_size <= 1 << 16 else np.int32


def budget_table(boost: Boost, neighbours: np.ndarray | None, vocab_size: int) -> np.ndarray:
    """The first k columns of the neighbour table a budget boost merges (SPEC 9.5: x's k nearest latent
    neighbours), validated on every row, as a C-contiguous (V, k) table of :func:`budget_index_dtype`;
    (V, 0) when k = 0."""
    if boost.k == 0:
        return np.zeros((vocab_size, 0), dtype=budget_index_dtype(vocab_size))
    if neighbours is None:
        raise ValueError(f"boost {boost} merges the mass of latent neighbours: it needs a neighbour table")
    validate_neighbours(neighbours, vocab_size, boost.k)
    validate_neighbour_rows(neighbours, np.arange(vocab_size), boost.k)  # ids in [0, V) before narrowing
    return np.ascontiguousarray(neighbours[:, :boost.k], dtype=budget_index_dtype(vocab_size))
