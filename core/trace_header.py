"""The header of a decoding trace (``core.trace``): the settings a trace was recorded with.

``header.json`` is read back field by field: each field's type and value are checked, and an error names
the file and the field (:meth:`TraceHeader.from_json`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from relaxspec.core.cost import CostModel
from relaxspec.core.trees.policies import TreePolicy
from relaxspec.core.trees.spec import parse_tree
from relaxspec.theory.boost import Boost
from relaxspec.theory.distributions import logits_to_probs
from relaxspec.theory.relax import Relax

TRACE_VERSION = 1
LOGIT_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class Sampling:
    """How logits become probabilities (``theory.logits_to_probs`` arguments)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_k", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"sampling {name} must be a number, got {value!r}")

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """Probabilities from logits stored in a trace (float64)."""
        return logits_to_probs(logits, temperature=self.temperature, top_k=self.top_k,
                               top_p=self.top_p)


# the declared types of TraceHeader's fields (annotations are strings here) -> the type a value must have
_FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "a string"), "int": ((int, np.integer), "an integer"),
    "Sampling": ((Sampling,), "a sampling table"), "dict[str, Any]": ((dict,), "a JSON object")}


@dataclass(frozen=True)
class TraceHeader:
    """Everything needed to re-verify a trace without the model."""

    model: str
    checkpoint_sha256: str
    vocab_size: int
    codebook_sha256: str
    rule: str
    relax: str
    variant: str
    tree: str
    target_sampling: Sampling = field(default_factory=Sampling)
    draft_sampling: Sampling = field(default_factory=Sampling)
    logits_dtype: str = "float16"
    extra: dict[str, Any] = field(default_factory=dict)
    version: int = TRACE_VERSION
    boost: str = "none"

    def __post_init__(self) -> None:
        for f in fields(self):  # types first: a header is read from JSON, whose values may be anything
            kinds, what = _FIELD_TYPES[f.type]
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise ValueError(f"field {f.name!r} must be {what}, got {value!r}")
        if self.logits_dtype not in LOGIT_DTYPES:
            raise ValueError(f"logits_dtype must be one of {LOGIT_DTYPES}, got {self.logits_dtype!r}")
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {self.vocab_size}")
        Relax.parse(self.relax)  # raises on a bad relaxation string
        Boost.parse(self.boost)  # raises on a bad boost string

    @property
    def relaxation(self) -> Relax:
        """The relaxation the run verified with."""
        return Relax.parse(self.relax)

    @property
    def boosting(self) -> Boost:
        """The boost of the run's sampled-draft tests (``Boost.none()`` for older traces)."""
        return Boost.parse(self.boost)

    @property
    def neighbour_columns(self) -> int:
        """Columns of the neighbour table the run read: the relaxation's k, or the budget boost's k
        (SPEC 9.5); 0 when it read none (then the trace need not store one)."""
        boost = self.boosting
        return max(self.relaxation.k, boost.k if boost.kind == "budget" else 0)

    def tree_policy(self, neighbours: np.ndarray | None = None) -> TreePolicy | None:
        """The policy that drafted the trace's trees (None for ``ar``), parsed back from ``tree`` with
        the context the header records (``extra``: ``tree_acceptance``, ``tree_cost``) and the trace's
        relaxation and neighbour table."""
        cost = self.extra.get("tree_cost")
        return parse_tree(self.tree, relax=self.relaxation, neighbours=neighbours,
                          acceptance=self.extra.get("tree_acceptance"),
                          cost=(lambda: CostModel.from_table(cost["table"], cost["model"])) if cost else None)

    def to_json(self) -> str:
        """Serialise as JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "header") -> TraceHeader:
        """Parse and validate a header written by :meth:`to_json`."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{source} is not valid JSON: {err}") from err
        if not isinstance(d, dict):
            raise ValueError(f"{source} must hold a JSON object")
        if d.get("version") != TRACE_VERSION:
            raise ValueError(f"{source}: trace version {d.get('version')!r} is not {TRACE_VERSION}")
        try:
            d["target_sampling"] = Sampling(**d["target_sampling"])
            d["draft_sampling"] = Sampling(**d["draft_sampling"])
            return cls(**d)
        except (KeyError, TypeError) as err:
            raise ValueError(f"{source} is missing or has unknown fields: {err}") from err
        except ValueError as err:  # a field's type or value
            raise ValueError(f"{source}: {err}") from err
