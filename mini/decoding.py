"""Decoding with the mini model through the reference decoder, and exact per-step scoring.

:func:`make_decoder` wires the shipped (or any trained) mini model into
``reference.decode.Decoder`` for one :class:`DecodeConfig` (AR, or a drafter,
a tree policy, a rule and a relaxation). :class:`StepScorer` plugs into the
decoder's trace hook: for every speculative step it computes, from the very
logits and tree the decoder verified, simulate's exact expected tokens per
step and the step's TV bound (``simulate.step_expectation``) and optionally
forwards the step to a real :class:`~core.trace.TraceWriter`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.cost import DEFAULT_TABLE, CostModel
from core.trace import Sampling, TraceStep, TraceWriter
from core.trees.spec import check_tree_spec, parse_tree, tree_kind
from mini.shipped import MiniModel
from reference.decode import Decoder, DecodeSettings
from reference.drafter import EagleDraftSession, GPTDraftSession
from simulate.verify import step_expectation
from theory.relax import Relax
from theory.rules import neighbour_rows

DRAFTERS = ("eagle", "draft_gpt")
CFG_SCALE = 2.0


@dataclass(frozen=True)
class DecodeConfig:
    """One decoding configuration: ``tree = "ar"`` for plain sampling, else a tree spec
    (:mod:`core.trees.spec`) with a drafter and a rule."""

    name: str
    tree: str = "ar"
    acceptance: tuple[float, ...] | None = None  # Sequoia-type trees: the positional acceptance vector
    cost_table: str | None = None  # costaware trees: the latency table (default: the packaged CPU one)
    cost_model: str = "GPT-B"
    drafter: str = "eagle"
    rule: str = "r1"
    relax: str = "none"
    cfg_scale: float = CFG_SCALE

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of {DRAFTERS}, got {self.drafter!r}")
        Relax.parse(self.relax)
        check_tree_spec(self.tree)

    @property
    def relaxation(self) -> Relax:
        return Relax.parse(self.relax)

    @property
    def is_ar(self) -> bool:
        return tree_kind(self.tree) == "ar"

    def describe(self) -> str:
        if self.is_ar:
            return "AR sampling"
        return f"{self.tree} {self.drafter} {self.rule} {self.relax}"


def make_decoder(mini: MiniModel, config: DecodeConfig, logits_dtype: str = "float32") -> Decoder:
    """A reference ``Decoder`` running ``config`` on ``mini``."""
    settings = DecodeSettings(rule=config.rule, relax=config.relaxation, target_sampling=Sampling(),
                              draft_sampling=Sampling(), cfg_scale=config.cfg_scale,
                              logits_dtype=logits_dtype)
    neighbours = None if config.relaxation.is_exact else mini.neighbours()
    if config.is_ar:
        return Decoder(mini.target, settings, neighbours=neighbours)
    drafter = (EagleDraftSession(mini.eagle_head, mini.target) if config.drafter == "eagle"
               else GPTDraftSession(mini.draft_gpt))
    policy = parse_tree(config.tree, relax=config.relaxation, neighbours=neighbours,
                        acceptance=config.acceptance,
                        cost=lambda: CostModel.from_table(config.cost_table or DEFAULT_TABLE,
                                                          config.cost_model))
    return Decoder(mini.target, settings, drafter=drafter, policy=policy, neighbours=neighbours)


class StepScorer:
    """A trace sink for ``Decoder.generate``: exact expectations of every step, optional trace on disk.

    ``expected`` and ``tv`` hold, per speculative step (tree larger than the
    root), simulate's exact E[tokens] and TV bound; ``emitted`` the tokens the
    decoder actually emitted at those steps.
    """

    def __init__(self, mini: MiniModel, config: DecodeConfig, writer: TraceWriter | None = None) -> None:
        self.config = config
        self.writer = writer
        relax = config.relaxation
        table = None if relax.is_exact else mini.neighbours()
        self.neighbours = neighbour_rows(table, mini.vocab_size, relax, "principled")
        self.sampling = Sampling()
        self.expected: list[float] = []
        self.tv: list[float] = []
        self.emitted: list[int] = []
        self.sequence_tv: list[float] = []
        self._seq_tv = 0.0

    def add(self, step: TraceStep) -> None:
        """Score one step (and pass it on to the trace writer)."""
        if self.writer is not None:
            self.writer.add(step)
        if step.parents.size > 1:
            p = self.sampling.probs(np.asarray(step.target_logits, dtype=np.float64))
            q = None
            if self.config.rule == "r2":
                q = self.sampling.probs(np.asarray(step.draft_logits, dtype=np.float64))
            e = step_expectation(step.tree, p, rule=self.config.rule, relax=self.config.relaxation,
                                 neighbours=self.neighbours, q_dists=q)
            self.expected.append(e.tokens)
            self.tv.append(e.tv)
            self.emitted.append(step.tokens_emitted)
            self._seq_tv += e.tv

    def end_sequence(self) -> None:
        """Close a sequence (its summed per-step TV bound is recorded)."""
        if self.writer is not None:
            self.writer.end_sequence()
        self.sequence_tv.append(self._seq_tv)
        self._seq_tv = 0.0
