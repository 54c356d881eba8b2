"""A verification: the rule, its relaxation or boost and its variant, as one value with a grammar.

SPEC sections 3 and 9 define four rules (R1 point-mass, R2 sampled-draft, R3 greedy, R4 traversal), two
LANTERN relaxations of R1-R3 (section 2) and three boosts of the sampled-draft rules R2 and R4 (GSD 9.2,
Cool-SD 9.3, the budget 9.5), each with a ``principled`` and an ``official`` variant. A
:class:`Verification` holds one such combination, validated once when it is built, and owns what every
layer asks of it: which draft sources it verifies (:meth:`Verification.source_problem`), which neighbour
columns and embedding it reads, which theory oracle decides a step, and its encoding for the kernels.

Grammar (``str(v)`` parses back to ``v``; :func:`parse` accepts the aliases too)::

    verification := RULE [ "+" METHOD [ ":" ARGS ] ] [ "/" VARIANT ]
    RULE    := r1 | r2 | r3 | r4          (aliases: pointmass, sampled, greedy, traversal)
    METHOD  := lantern    k=INT,delta=NUM      LANTERN's additive relaxation (alias: additive)
             | lantern++  k=INT,lam=NUM        LANTERN++'s multiplicative one (alias: multiplicative)
             | gsd        G=INT[,tau=,dist=,window=,embedding=]   group acceptance (alias: group)
             | cool       delta=NUM[,nu=,mu=] | omega=W1/W2/...   depth-scaled acceptance (alias: depth)
             | budget     tv=NUM,k=INT         the budgeted relaxation: TV per node <= tv
    VARIANT := principled | official      (principled is the default and is not written; a "/" that is not
                                           followed by a variant belongs to Cool-SD's omega list)

``r2+lantern++:k=1000,lam=5``, ``r1+lantern:k=1000,delta=0.1/official``, ``r4+budget:tv=0.1,k=50`` and
``r2+cool:delta=2`` are verifications; so is ``r1`` (the exact test). A method alone names the rule the
papers verify it with (:data:`METHOD_RULES`): ``lantern:k=1000,delta=0.1`` is R1 (LANTERN's dynamic
trees), ``lantern++:...``, ``gsd:...``, ``cool:...`` and ``budget:...`` are R2.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

import numpy as np

from relaxspec.theory.boost import NO_BOOST, OFFICIAL_BELOW, Boost, format_number
from relaxspec.theory.boost_law import window_extent
from relaxspec.theory.relax import Relax
from relaxspec.theory.rules import (
    BOOST_BUDGET,
    BOOST_CODES,
    BOOST_GROUP,
    RULES,
    VARIANTS,
    Rule,
    Variant,
    as_rule,
    as_variant,
    boost_embedding,
    budget_index_dtype,
    budget_table,
    rows_read,
    rule_table,
)

RULE_ALIASES = {"pointmass": Rule.R1, "sampled": Rule.R2, "greedy": Rule.R3, "traversal": Rule.R4}
"""Readable names of the rules (SPEC 3, 9.6)."""
RELAX_METHODS = {"lantern": "additive", "lantern++": "multiplicative"}
"""Grammar name -> :class:`theory.relax.Relax` kind."""
BOOST_METHODS = {"gsd": "gsd", "cool": "cool", "budget": "budget"}
"""Grammar name -> :meth:`theory.boost.Boost.parse` name."""
METHOD_ALIASES = {"additive": "lantern", "multiplicative": "lantern++", "group": "gsd", "depth": "cool"}
METHOD_RULES = {"lantern": Rule.R1, "lantern++": Rule.R2, "gsd": Rule.R2, "cool": Rule.R2, "budget": Rule.R2}
"""The rule a method alone stands for: the one its paper verifies it with."""
DEFAULT_VARIANT = Variant.PRINCIPLED


class DraftSource(enum.Enum):
    """What a verification is asked to verify."""

    AR = "ar"
    """No drafts: plain autoregressive sampling (one token per forward)."""
    RANKED = "ranked"
    """A tree whose children are a node's top-ranked tokens (EAGLE-2, DDD, ranked static trees)."""
    DRAWN = "drawn"
    """A tree whose children are drawn from q without replacement (static and Sequoia trees with draws)."""
    JACOBI = "jacobi"
    """A Jacobi window (SPEC 9.1): sampled drafts kept from the target's own earlier samples."""
    COUPLED = "coupled"
    """A coupled Jacobi window or an SJD-PAC window (SPEC 10.1-10.2) whose every draft is distributed as
    the law it is stored with (``principled`` and ``gumbel`` couplings, ``principled`` siblings)."""
    COUPLED_OFFICIAL = "coupled-official"
    """A coupled or SJD-PAC window whose kept drafts or siblings are not distributed as their stored laws
    (SCD's code's ``official`` coupling, SJD-PAC's code's ``official`` siblings; docs/theory.md 15.2)."""

    @property
    def is_window(self) -> bool:
        """True for the Jacobi windows, plain or coupled: no drafter, one target forward per window."""
        return self in (DraftSource.JACOBI, DraftSource.COUPLED, DraftSource.COUPLED_OFFICIAL)


class Oracle(enum.Enum):
    """The theory module that decides a step under a verification (``theory.rule_step`` dispatches)."""

    TREE = "relaxspec.theory.tree"
    """R1-R3, and R2 with GSD or Cool-SD: node by node."""
    TRAVERSAL = "relaxspec.theory.traversal"
    """R4, plain or boosted (SPEC 9.6)."""
    BUDGET = "relaxspec.theory.budget"
    """R2 with the budgeted relaxation (SPEC 9.5): stages share a node's budget."""


@dataclass(frozen=True)
class Verification:
    """One verification rule; build it with :func:`parse` or directly (validated either way)."""

    rule: Rule = Rule.R1
    relax: Relax = Relax.none()
    variant: Variant = DEFAULT_VARIANT
    boost: Boost = NO_BOOST

    def __post_init__(self) -> None:
        if not isinstance(self.rule, str):
            raise ValueError(f"a rule is a string (one of {tuple(str(r) for r in RULES)}), got "
                             f"{type(self.rule).__name__}")
        object.__setattr__(self, "rule", as_rule(RULE_ALIASES.get(self.rule, self.rule)))
        object.__setattr__(self, "variant", as_variant(self.variant))
        problem = _combination_problem(self.rule, self.relax, self.boost)
        if problem is not None:
            raise ValueError(problem)

    # ------------------------------------------------------------------ what it is
    @property
    def is_exact(self) -> bool:
        """True when the rule is lossless: no relaxation and no boost."""
        return self.relax.is_exact and self.boost.is_none

    @property
    def samples_drafts(self) -> bool:
        """True for the rules that verify drafts drawn from q (R2 and R4)."""
        return self.rule.samples_drafts

    @property
    def is_traversal(self) -> bool:
        """True for R4 (SPEC 9.6): a step is one walk, not node by node."""
        return self.rule.is_traversal

    @property
    def tv_computable(self) -> bool:
        """Whether theory gives the TV this verification adds (exactly, or as a proved bound): every rule
        but R2 with a relaxation and no boost (LANTERN++'s relaxed R2: docs/theory.md, Finding 3), whose
        steps' TV is NaN."""
        return not (self.rule == Rule.R2 and self.boost.is_none and not self.relax.is_exact)

    @property
    def uses_budget(self) -> bool:
        """True for the budgeted relaxation (SPEC 9.5): a node's stages share a TV budget."""
        return self.boost.uses_budget

    @property
    def walks_own_step(self) -> bool:
        """True when a step is not ``theory.tree``'s node-by-node walk: R4 or the budget (their own oracles,
        :attr:`oracle`)."""
        return self.oracle is not Oracle.TREE

    @property
    def oracle(self) -> Oracle:
        """The theory oracle that decides a step."""
        if self.rule.is_traversal:
            return Oracle.TRAVERSAL
        return Oracle.BUDGET if self.boost.uses_budget else Oracle.TREE

    @property
    def neighbour_columns(self) -> int:
        """How many leading columns of the neighbour table a step reads (0: it needs no table)."""
        if self.boost.uses_budget:
            return self.boost.k
        return rows_read(self.relax, self.variant)

    @property
    def variant_matters(self) -> bool:
        """True when the official variant decides otherwise than the principled one: a relaxed R1 or R2
        test (the official rejection update zeroes x and its merged neighbours; exact tests and R3's
        greedy walk are the same under both)."""
        return not self.relax.is_exact and not self.rule.is_greedy

    @property
    def neighbour_k(self) -> int:
        """The k of the neighbour table a run hands it (0: none): the relaxation's k or the budget's k
        (what ``world.neighbours(k)`` and a trace's stored table are asked for; the rule then reads
        :attr:`neighbour_columns` of it)."""
        return max(self.relax.k, self.boost.k if self.uses_budget else 0)

    @property
    def reads_embedding(self) -> bool:
        """True when the rule reads an embedding table (GSD's groups)."""
        return self.boost.reads_embedding

    def measured_with(self, relax: Relax) -> Verification:
        """The verification a Sequoia-type tree's acceptance vector is measured with: this rule and variant,
        the tree's relaxation ``relax`` and no boost (a boost raises the test the vector ranks, not the
        ranking)."""
        return replace(self, relax=relax, boost=NO_BOOST)

    # ------------------------------------------------------------------ what it verifies
    def source_problem(self, source: DraftSource) -> str | None:
        """Why this verification cannot verify drafts from ``source`` (None when it can): one place for
        "R2 and R4 need drawn children", "a Jacobi window needs a sampled-draft rule and no LANTERN
        relaxation", "a coupled window takes R2, exact or budgeted, and the budget only where its drafts
        follow their stored laws" and "AR sampling takes no boost"."""
        if source is DraftSource.AR:
            if not self.boost.is_none:
                return f"boost {self.boost} raises the acceptance of drafts: AR sampling has none"
            if self.rule.is_traversal:
                return "rule r4 verifies sampled drafts by traversal: AR sampling has none"
            return None
        if source in (DraftSource.COUPLED, DraftSource.COUPLED_OFFICIAL):
            exact_or_budget = self.relax.is_exact and (self.boost.is_none or self.uses_budget)
            if self.rule != Rule.R2 or not exact_or_budget:
                return (f"a coupled or SJD-PAC window is verified by rule r2 (as SCD and SJD-PAC verify), "
                        f"exact or with the budget (r2+budget:tv=..,k=..), got {self}")
            if self.uses_budget and source is DraftSource.COUPLED_OFFICIAL:
                return ("the budget's TV bound needs every draft distributed as the law it is stored with "
                        "(docs/theory.md 15.6): not so for the official coupling or siblings; use the "
                        "principled or gumbel coupling and principled siblings")
            return None
        if source is DraftSource.JACOBI:
            if not self.samples_drafts:
                return (f"a Jacobi window verifies sampled drafts (SPEC 9.1): it needs rule r2 or r4, "
                        f"got rule {str(self.rule)!r}")
            if not self.relax.is_exact:
                return (f"a Jacobi window takes no LANTERN relaxation (got {self.relax}): boost it with "
                        "gsd, cool or budget")
            return None
        if source is DraftSource.RANKED and self.samples_drafts:
            return (f"rule {self.rule} verifies children drawn from q without replacement: a tree that ranks "
                    "its children (top-k, or a latent-aware order) cannot give them (use a static or Sequoia "
                    "tree that draws from q)")
        return None

    def check_node_by_node(self) -> None:
        """Raise ``ValueError`` unless ``theory.tree`` / ``theory.verify`` verify this rule node by node
        (R1-R3, R2 boosted by GSD or Cool-SD): rule r4 and the budget verify a step by their own walks
        (``theory.traversal``, ``theory.budget``; ``theory.rule_step`` sends a step there), so they are
        refused there rather than verified as something else (:attr:`walks_own_step`)."""
        if self.rule.is_traversal:
            raise ValueError("rule r4 (traversal verification) verifies a whole step, not node by node: "
                             "relaxspec.theory.traversal (or theory.rule_step) verifies it")
        if self.boost.uses_budget:
            raise ValueError(f"boost {self.boost} is not verified on draft trees node by node: its stages "
                             "share a node's budget (theory.budget, or theory.rule_step, verifies it)")

    def check_source(self, source: DraftSource, what: str = "") -> None:
        """Raise ``ValueError`` (prefixed by ``what``) when :meth:`source_problem` names a problem."""
        problem = self.source_problem(source)
        if problem is not None:
            raise ValueError(f"{what}: {problem}" if what else problem)

    # ------------------------------------------------------------------ the kernels' form
    def encode(self, vocab_size: int, *, neighbours: np.ndarray | None = None,
               emb: np.ndarray | None = None) -> KernelArgs:
        """The verification as the Numba kernels take it (:class:`KernelArgs`), with the tables it reads
        validated: the columns of the neighbour table the relaxation or the budget reads
        (:attr:`neighbour_columns`) and GSD's (V, d) embedding table ``emb``."""
        if isinstance(vocab_size, bool) or int(vocab_size) != vocab_size or vocab_size < 1:
            raise ValueError(f"encoding {self} needs the vocabulary size (an integer >= 1), got "
                             f"{vocab_size!r}")
        V = int(vocab_size)
        rs = (self.rule.code, self.relax.code, self.relax.k, float(self.relax.param), self.variant.code,
              rule_table(neighbours, V, self.relax, self.variant))
        return KernelArgs(self, rs, _boost_tuple(self.boost, V, neighbours, emb))

    # ------------------------------------------------------------------ the grammar
    def _method(self) -> str:
        if self.relax.is_additive:
            return f"lantern:k={self.relax.k},delta={format_number(self.relax.delta)}"
        if self.relax.is_multiplicative:
            return f"lantern++:k={self.relax.k},lam={format_number(self.relax.lam)}"
        return "" if self.boost.is_none else str(self.boost)

    def _body(self) -> str:
        method = self._method()
        return f"{self.rule}+{method}" if method else self.rule

    def __str__(self) -> str:
        body = self._body()
        return body if self.variant is DEFAULT_VARIANT else f"{body}/{self.variant}"

    @classmethod
    def parse(cls, text: str | Verification) -> Verification:
        """:func:`parse`."""
        return parse(text)


@dataclass(frozen=True, eq=False)
class KernelArgs:
    """A verification as the Numba kernels take it: the rule tuple ``rs`` and the boost tuple ``bs``.

    ``rs = (rule, code, k, param, variant, nb)``: ``theory.rules.RULE_R1`` .. ``RULE_R4``, the relaxation's
    ``theory.relax.RELAX_*`` code, its k and delta or lam, ``theory.relax.VARIANT_*`` and the int32
    C-contiguous columns of the neighbour table it reads ((V, 0) exact).

    ``bs = (kind, before, after, fallback, tau, dist, omega, emb, tv, table)``: ``theory.rules.BOOST_*``,
    the GSD window's reach (``theory.boost.window_extent``), ``fallback`` (x is tested alone when fewer
    than this many tokens rank below it: the official window, ``theory.boost.official_window_falls_back``;
    0 otherwise), ``tau``, ``dist``, the per-depth ``omega`` (float64, at least one entry), the embedding
    ``emb`` (float64 C-contiguous (V, d); (1, 1) unused), the budget's ``tv`` (0 unused) and the neighbour
    ``table`` it merges (C-contiguous (V, k) of ``theory.rules.budget_index_dtype``; (1, 0) unused).
    """

    verification: Verification
    rs: tuple
    bs: tuple

    @property
    def neighbours(self) -> np.ndarray:
        """The relaxation's int32 neighbour columns (``rs[5]``)."""
        return self.rs[5]

    @property
    def emb(self) -> np.ndarray:
        """GSD's embedding table (``bs[7]``)."""
        return self.bs[7]

    @property
    def budget_table(self) -> np.ndarray:
        """The budget's neighbour columns (``bs[9]``)."""
        return self.bs[9]


def _combination_problem(rule: Rule, relax: Relax, boost: Boost) -> str | None:
    """Why (``rule``, ``relax``, ``boost``) is no verification (None when it is one): a boost (GSD,
    Cool-SD, the budget of SPEC 9.5) raises a sampled-draft test and keeps the standard residual, so it
    needs rule r2 or r4 and no LANTERN relaxation; rule r4 (traversal verification, SPEC 9.6) takes no
    LANTERN relaxation at all (its relaxations are the boosts)."""
    if not isinstance(boost, Boost):
        return (f"boost must be a relaxspec.theory.boost.Boost (e.g. Boost.parse('gsd:G=10')), got "
                f"{type(boost).__name__}")
    if not isinstance(relax, Relax):
        return f"relax must be a relaxspec.theory.Relax, got {type(relax).__name__}"
    if rule.is_traversal and not relax.is_exact:
        return (f"rule r4 (traversal verification) takes no LANTERN relaxation (got {relax}): relax it "
                "with a boost (budget:tv=..,k=.., gsd:.., cool:..)")
    if boost.is_none:
        return None
    if not rule.samples_drafts:
        return f"boost {boost} raises a sampled-draft test: it needs rule r2 or r4, got rule {str(rule)!r}"
    if not relax.is_exact:
        return (f"boost {boost} keeps the standard residual and takes no LANTERN relaxation: use "
                f"Relax.none() with it, got {relax}")
    return None


def _boost_tuple(boost: Boost, vocab_size: int, neighbours: np.ndarray | None, emb: np.ndarray | None
                 ) -> tuple:
    """The kernels' ``bs`` (:class:`KernelArgs`), its tables validated."""
    none = np.zeros((1, 1))
    if boost.reads_embedding:
        e = np.ascontiguousarray(boost_embedding(boost, emb, vocab_size), dtype=np.float64)
        before, after = window_extent(boost.group_size, boost.window)
        fallback = OFFICIAL_BELOW if boost.official_window else 0
        return (BOOST_GROUP, before, after, fallback, boost.tau, boost.dist, np.ones(1), e, 0.0,
                np.zeros((1, 0), dtype=budget_index_dtype(vocab_size)))
    if boost.uses_budget:
        return (BOOST_BUDGET, 0, 0, 0, 0.0, 0.0, np.ones(1), none, boost.tv,
                budget_table(boost, neighbours, vocab_size))
    omega = np.array(boost.omega if boost.scales_by_depth else (1.0,), dtype=np.float64)
    return (BOOST_CODES[boost.kind], 0, 0, 0, 0.0, 0.0, omega, none, 0.0,
            np.zeros((1, 0), dtype=budget_index_dtype(vocab_size)))


def _method_parts(method: str, text: str) -> tuple[Relax, Boost]:
    name, colon, args = method.partition(":")
    name = METHOD_ALIASES.get(name.strip(), name.strip())
    if name in RELAX_METHODS:
        return Relax.parse(f"{RELAX_METHODS[name]}{colon}{args}"), NO_BOOST
    if name in BOOST_METHODS:
        return Relax.none(), Boost.parse(f"{BOOST_METHODS[name]}{colon}{args}")
    known = ", ".join([*RELAX_METHODS, *BOOST_METHODS])
    raise ValueError(f"verification {text!r}: unknown method {name!r}; expected one of {known}")


def parse(text: str | Verification) -> Verification:
    """Parse a verification spec (module docstring); a :class:`Verification` is returned as it is.

    Raises
    ------
    ValueError
        Naming the spec and what is wrong with it (unknown rule, method, key or variant, a bad number,
        or a combination SPEC does not define).
    """
    if isinstance(text, Verification):
        return text
    if not isinstance(text, str):
        raise ValueError(f"a verification must be a string such as 'r2+lantern++:k=1000,lam=5', got "
                         f"{type(text).__name__}")
    body, _, tail = text.strip().rpartition("/")
    if tail.strip() in VARIANTS:
        variant = tail.strip()
    else:  # no variant: the last "/" (if any) separates Cool-SD's omegas
        body, variant = text.strip(), DEFAULT_VARIANT
    head, _, method = body.partition("+")
    rule = RULE_ALIASES.get(head.strip(), head.strip())
    if rule not in RULES:  # no rule: a method alone, verified by the rule its paper uses
        name = body.partition(":")[0].strip()
        name = METHOD_ALIASES.get(name, name)
        if name not in METHOD_RULES:
            raise ValueError(f"verification {text!r}: unknown rule or method {head.strip()!r}; a spec starts "
                             f"with a rule {tuple(str(r) for r in RULES) + tuple(RULE_ALIASES)} or a method "
                             f"{tuple(METHOD_RULES)}")
        rule, method = METHOD_RULES[name], body
    try:
        relax, boost = _method_parts(method, text) if method.strip() else (Relax.none(), NO_BOOST)
        return Verification(as_rule(rule), relax, as_variant(variant), boost)
    except ValueError as err:
        prefix = f"verification {text!r}: "
        raise ValueError(str(err) if str(err).startswith(prefix) else prefix + str(err)) from None
