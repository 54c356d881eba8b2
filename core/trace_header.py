"""The header of a decoding trace (``core.trace``): the settings a trace was recorded with.

``header.json`` is read back field by field: each field's type and value are checked, and an error names
the file and the field (:meth:`TraceHeader.from_json`). What the run verified with is one field,
``verification`` (a :class:`theory.verification.Verification`, stored as its spec string); a trace of an
older format version (version 1 stored rule, relax, variant and boost apart; version 2 had no record of
SPEC 10's windows and skip steps) is refused in one line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from relaxspec.core.cost import CostModel
from relaxspec.core.trees.policies import TreePolicy
from relaxspec.core.trees.spec import parse_tree
from relaxspec.theory.distributions import logits_to_probs
from relaxspec.theory.verification import Verification

TRACE_VERSION = 3
"""The trace format this relaxspec writes and reads (2: one ``verification`` field; 3: a step may record a
coupled or PAC window's columns and coupling uniforms, or a VVS skip step: ``core.trace_step``)."""
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
    "Sampling": ((Sampling,), "a sampling table"), "dict[str, Any]": ((dict,), "a JSON object"),
    "Verification": ((Verification,), "a verification")}


@dataclass(frozen=True)
class TraceHeader:
    """Everything needed to re-verify a trace without the model."""

    model: str
    checkpoint_sha256: str
    vocab_size: int
    codebook_sha256: str
    verification: Verification
    tree: str
    target_sampling: Sampling = field(default_factory=Sampling)
    draft_sampling: Sampling = field(default_factory=Sampling)
    logits_dtype: str = "float16"
    extra: dict[str, Any] = field(default_factory=dict)
    version: int = TRACE_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.verification, str):  # its spec, as header.json stores it
            object.__setattr__(self, "verification", Verification.parse(self.verification))
        for f in fields(self):  # types first: a header is read from JSON, whose values may be anything
            kinds, what = _FIELD_TYPES[f.type]
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise ValueError(f"field {f.name!r} must be {what}, got {value!r}")
        if self.logits_dtype not in LOGIT_DTYPES:
            raise ValueError(f"logits_dtype must be one of {LOGIT_DTYPES}, got {self.logits_dtype!r}")
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {self.vocab_size}")

    @property
    def neighbour_columns(self) -> int:
        """Columns of the neighbour table the run read (``Verification.neighbour_k``: the relaxation's k, or
        the budget's k, SPEC 9.5); 0 when it read none (then the trace need not store one)."""
        return self.verification.neighbour_k

    def tree_policy(self, neighbours: np.ndarray | None = None) -> TreePolicy | None:
        """The policy that drafted the trace's trees (None for ``ar``), parsed back from ``tree`` with
        the context the header records (``extra``: ``tree_acceptance``, ``tree_cost``) and the trace's
        relaxation and neighbour table."""
        cost = self.extra.get("tree_cost")
        return parse_tree(self.tree, relax=self.verification.relax, neighbours=neighbours,
                          acceptance=self.extra.get("tree_acceptance"),
                          cost=(lambda: CostModel.from_table(cost["table"], cost["model"])) if cost else None)

    def to_json(self) -> str:
        """Serialise as JSON (the verification as its spec string)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(verification=str(self.verification), target_sampling=asdict(self.target_sampling),
                 draft_sampling=asdict(self.draft_sampling))
        return json.dumps(d, indent=2, sort_keys=True)

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
            older = isinstance(d.get("version"), int) and d["version"] < TRACE_VERSION
            raise ValueError(f"{source}: trace version {d.get('version')!r} is not {TRACE_VERSION}"
                             + (" (written by an older relaxspec: record the trace again)" if older else ""))
        try:
            d["target_sampling"] = Sampling(**d["target_sampling"])
            d["draft_sampling"] = Sampling(**d["draft_sampling"])
            if not isinstance(d["verification"], str):
                raise ValueError(f"field 'verification' must be a verification spec, got "
                                 f"{d['verification']!r}")
            return cls(**d)
        except (KeyError, TypeError) as err:
            raise ValueError(f"{source} is missing or has unknown fields: {err}") from err
        except ValueError as err:  # a field's type or value
            raise ValueError(f"{source}: {err}") from err
