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
from dataclasses import dataclass

from relaxspec.theory.boost import NO_BOOST, Boost, format_number
from relaxspec.theory.relax import Relax
from relaxspec.theory.rules import (
    RULES,
    SAMPLED_DRAFT_RULES,
    VARIANTS,
    EncodedRule,
    check_rule,
    check_step_boost,
    encode,
    rows_read,
)

RULE_ALIASES = {"pointmass": "r1", "sampled": "r2", "greedy": "r3", "traversal": "r4"}
"""Readable names of the rules (SPEC 3, 9.6)."""
RELAX_METHODS = {"lantern": "additive", "lantern++": "multiplicative"}
"""Grammar name -> :class:`theory.relax.Relax` kind."""
BOOST_METHODS = {"gsd": "gsd", "cool": "cool", "budget": "budget"}
"""Grammar name -> :meth:`theory.boost.Boost.parse` name."""
METHOD_ALIASES = {"additive": "lantern", "multiplicative": "lantern++", "group": "gsd", "depth": "cool"}
METHOD_RULES = {"lantern": "r1", "lantern++": "r2", "gsd": "r2", "cool": "r2", "budget": "r2"}
"""The rule a method alone stands for: the one its paper verifies it with."""
DEFAULT_VARIANT = "principled"


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

    rule: str = "r1"
    relax: Relax = Relax.none()
    variant: str = DEFAULT_VARIANT
    boost: Boost = NO_BOOST

    def __post_init__(self) -> None:
        if not isinstance(self.rule, str):
            raise ValueError(f"a rule is a string (one of {RULES}), got {type(self.rule).__name__}")
        object.__setattr__(self, "rule", RULE_ALIASES.get(self.rule, self.rule))
        check_rule(self.rule, self.variant)
        check_step_boost(self.rule, self.relax, self.boost)

    # ------------------------------------------------------------------ what it is
    @property
    def is_exact(self) -> bool:
        """True when the rule is lossless: no relaxation and no boost."""
        return self.relax.is_exact and self.boost.is_none

    @property
    def samples_drafts(self) -> bool:
        """True for the rules that verify drafts drawn from q (R2 and R4)."""
        return self.rule in SAMPLED_DRAFT_RULES

    @property
    def oracle(self) -> Oracle:
        """The theory oracle that decides a step."""
        if self.rule == "r4":
            return Oracle.TRAVERSAL
        return Oracle.BUDGET if self.boost.kind == "budget" else Oracle.TREE

    @property
    def neighbour_columns(self) -> int:
        """How many leading columns of the neighbour table a step reads (0: it needs no table)."""
        if self.boost.kind == "budget":
            return self.boost.k
        return rows_read(self.relax, self.variant)

    @property
    def uses_budget(self) -> bool:
        """True for the budgeted relaxation (SPEC 9.5): a node's stages share a TV budget."""
        return self.boost.kind == "budget"

    @property
    def variant_matters(self) -> bool:
        """True when the official variant decides otherwise than the principled one: a relaxed R1 or R2
        test (the official rejection update zeroes x and its merged neighbours; exact tests and R3's
        greedy walk are the same under both)."""
        return not self.relax.is_exact and self.rule != "r3"

    @property
    def neighbour_k(self) -> int:
        """The k of the neighbour table a run hands it (0: none): the relaxation's k or the budget's k
        (what ``world.neighbours(k)`` and a trace's stored table are asked for; the rule then reads
        :attr:`neighbour_columns` of it)."""
        return max(self.relax.k, self.boost.k if self.uses_budget else 0)

    @property
    def reads_embedding(self) -> bool:
        """True when the rule reads an embedding table (GSD's groups)."""
        return self.boost.kind == "group"

    # ------------------------------------------------------------------ what it verifies
    def source_problem(self, source: DraftSource) -> str | None:
        """Why this verification cannot verify drafts from ``source`` (None when it can): one place for
        "R2 and R4 need drawn children", "a Jacobi window needs a sampled-draft rule and no LANTERN
        relaxation" and "AR sampling takes no boost"."""
        if source is DraftSource.AR:
            if not self.boost.is_none:
                return f"boost {self.boost} raises the acceptance of drafts: AR sampling has none"
            if self.rule == "r4":
                return "rule r4 verifies sampled drafts by traversal: AR sampling has none"
            return None
        if source is DraftSource.JACOBI:
            if not self.samples_drafts:
                return (f"a Jacobi window verifies sampled drafts (SPEC 9.1): it needs rule r2 or r4, "
                        f"got rule {self.rule!r}")
            if not self.relax.is_exact:
                return (f"a Jacobi window takes no LANTERN relaxation (got {self.relax}): boost it with "
                        "gsd, cool or budget")
            return None
        if source is DraftSource.RANKED and self.samples_drafts:
            return (f"rule {self.rule} verifies children drawn from q without replacement: a tree that ranks "
                    "its children (top-k, or a latent-aware order) cannot give them (use a static or Sequoia "
                    "tree that draws from q)")
        return None

    def check_source(self, source: DraftSource, what: str = "") -> None:
        """Raise ``ValueError`` (prefixed by ``what``) when :meth:`source_problem` names a problem."""
        problem = self.source_problem(source)
        if problem is not None:
            raise ValueError(f"{what}: {problem}" if what else problem)

    # ------------------------------------------------------------------ the kernels' form
    def encode(self) -> EncodedRule:
        """The rule as the Numba kernels take it (``theory.rules.encode``; the boost encodes with its
        tables through ``theory.rules.encode_boost``)."""
        return encode(self.rule, self.relax, self.variant)

    # ------------------------------------------------------------------ the grammar
    def _method(self) -> str:
        if self.relax.kind == "additive":
            return f"lantern:k={self.relax.k},delta={format_number(self.relax.delta)}"
        if self.relax.kind == "multiplicative":
            return f"lantern++:k={self.relax.k},lam={format_number(self.relax.lam)}"
        if self.boost.kind == "budget":
            return f"budget:tv={format_number(self.boost.delta)},k={self.boost.k}"
        return "" if self.boost.is_none else str(self.boost)

    def _body(self) -> str:
        method = self._method()
        return f"{self.rule}+{method}" if method else self.rule

    def __str__(self) -> str:
        body = self._body()
        return body if self.variant == DEFAULT_VARIANT else f"{body}/{self.variant}"

    @classmethod
    def parse(cls, text: str | Verification) -> Verification:
        """:func:`parse`."""
        return parse(text)


def _method_parts(method: str, text: str) -> tuple[Relax, Boost]:
    name, colon, args = method.partition(":")
    name = METHOD_ALIASES.get(name.strip(), name.strip())
    if name in RELAX_METHODS:
        return Relax.parse(f"{RELAX_METHODS[name]}{colon}{args}"), NO_BOOST
    if name == "budget":
        # the grammar calls the budget's per-node TV ``tv`` (``delta`` is LANTERN's merged-mass cap)
        items = [item.strip() for item in args.split(",") if item.strip()]
        if any(item.partition("=")[0].strip() == "delta" for item in items):
            raise ValueError(f"verification {text!r}: the budget's TV per node is written tv=..., not delta")
        args = ",".join("delta=" + item.partition("=")[2] if item.partition("=")[0].strip() == "tv" else item
                        for item in items)
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
                             f"with a rule {RULES + tuple(RULE_ALIASES)} or a method {tuple(METHOD_RULES)}")
        rule, method = METHOD_RULES[name], body
    try:
        relax, boost = _method_parts(method, text) if method.strip() else (Relax.none(), NO_BOOST)
        return Verification(rule, relax, variant, boost)
    except ValueError as err:
        prefix = f"verification {text!r}: "
        raise ValueError(str(err) if str(err).startswith(prefix) else prefix + str(err)) from None
