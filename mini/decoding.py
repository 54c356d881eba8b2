"""Decoding with the mini model through the reference decoder, and exact per-step scoring.

:func:`make_decoder` wires the shipped (or any trained) mini model into
``reference.decode.Decoder`` for one :class:`DecodeConfig` (AR; a drafter, a
tree policy and a verification, e.g. ``r1+lantern:k=50,delta=0.2``; or SJD's
Jacobi windows ``jacobi:L`` with rule r2 or r4 and no drafter; rules r2 and r4
(traversal verification, sampled-draft static trees and windows only)
optionally boosted: GSD ``r2+gsd:..`` reading the spec's embedding, the
target's token embedding or the VQ codebook, Cool-SD ``r2+cool:..``, or the
budgeted relaxation ``r2+budget:tv=..,k=..`` reading the tokenizer's neighbour
table). :class:`StepScorer` plugs into the
decoder's trace hook: for every speculative step it computes, from the very
logits and tree the decoder verified, the exact expected tokens per step and
the step's TV or its proved bound: simulate's ``step_expectation`` (a Jacobi
window is rule R2 on its chain, so this is its exact E[tokens] and E[TV] given
its drafts, as ``theory.jacobi_sampler.window_expectation``), and for R4 or the
budget theory's ``theory.rule_step.rule_step_expectation`` (R4: the expected
sum of the entered stages' Deltas, 0 lossless; budgeted R2: the expected sum of
the verified nodes' charges, docs/theory.md sections 12.4 and 14.2); it
optionally forwards the step to a real :class:`~core.trace.TraceWriter`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relaxspec.core.cost import DEFAULT_TABLE, CostModel
from relaxspec.core.trace import Sampling, TraceStep, TraceWriter
from relaxspec.core.trees.spec import check_tree_spec, draft_source, parse_tree, tree_kind
from relaxspec.core.trees.windows import CoupledWindow, PacWindow
from relaxspec.mini.shipped import MiniModel
from relaxspec.reference.coupled import WindowPlan
from relaxspec.reference.decode import Decoder, DecodeSettings, gsd_embedding
from relaxspec.reference.drafter import EagleDraftSession, GPTDraftSession
from relaxspec.reference.frontier import reads_codes, tree_slots
from relaxspec.reference.vvs import skip_token_tvs
from relaxspec.simulate.verify import step_expectation
from relaxspec.theory.rule_step import (
    rule_step_expectation,
    step_neighbours,
)
from relaxspec.theory.verification import Verification
from relaxspec.theory.vvs import skip_laws
from relaxspec.theory.window_walk import has_repeats

DRAFTERS = ("eagle", "draft_gpt")
CFG_SCALE = 2.0

@dataclass(frozen=True)
class DecodeConfig:
    """One decoding configuration: ``tree = "ar"`` for plain sampling, else a tree spec
    (:mod:`core.trees.spec`) with a drafter and a verification (a
    :class:`theory.verification.Verification` or its spec string, e.g. ``r1+lantern:k=50,delta=0.2``,
    ``r2+gsd:G=10``; ``jacobi:L[,copy]``: Jacobi windows, rule r2 or r4, no drafter; r4 needs sampled
    drafts: a static tree or a window)."""

    name: str
    tree: str = "ar"
    acceptance: tuple[float, ...] | None = None  # Sequoia-type trees: the positional acceptance vector
    cost_table: str | None = None  # costaware trees: the latency table (default: the packaged CPU one)
    cost_model: str = "GPT-B"
    drafter: str = "eagle"
    verification: Verification = Verification()
    cfg_scale: float = CFG_SCALE

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of {DRAFTERS}, got {self.drafter!r}")
        object.__setattr__(self, "verification", Verification.parse(self.verification))  # a spec string too
        check_tree_spec(self.tree)
        self.verification.check_source(draft_source(self.tree), f"tree {self.tree}")

    @property
    def is_ar(self) -> bool:
        return tree_kind(self.tree) == "ar"

    @property
    def is_jacobi(self) -> bool:
        """Whether the tree is a window of sampled drafts (SJD's, SCD's coupled or SJD-PAC's): no drafter."""
        return draft_source(self.tree).is_window

    def describe(self) -> str:
        if self.is_ar:
            return "AR sampling"
        if self.is_jacobi:
            return f"{self.tree} {self.verification}"
        return f"{self.tree} {self.drafter} {self.verification}"


def config_embedding(mini: MiniModel, config: DecodeConfig) -> np.ndarray | None:
    """GSD's embedding table of ``config`` on ``mini`` (``reference.decode.gsd_embedding``: the
    target's token embedding or the tokenizer's codebook, as the boost spec says); None for other boosts."""
    if not config.verification.reads_embedding:
        return None
    return gsd_embedding(config.verification.boost.embedding, mini.target, mini.tokenizer.codebook())


def make_decoder(mini: MiniModel, config: DecodeConfig, logits_dtype: str = "float32") -> Decoder:
    """A reference ``Decoder`` running ``config`` on ``mini`` (VVS's dynamic schedule compares the
    tokenizer's code vectors)."""
    neighbours = mini.neighbours() if config.verification.neighbour_k else None
    policy = None if config.is_ar else parse_tree(
        config.tree, relax=config.verification.relax, neighbours=neighbours, acceptance=config.acceptance,
        cost=lambda: CostModel.from_table(config.cost_table or DEFAULT_TABLE, config.cost_model))
    settings = DecodeSettings(config.verification, target_sampling=Sampling(), draft_sampling=Sampling(),
                              cfg_scale=config.cfg_scale, logits_dtype=logits_dtype,
                              max_tree_nodes=tree_slots(policy))
    if config.is_ar:
        return Decoder(mini.target, settings, neighbours=neighbours)
    embedding = config_embedding(mini, config)
    if config.is_jacobi:
        return Decoder(mini.target, settings, policy=policy, neighbours=neighbours, embedding=embedding)
    drafter = (EagleDraftSession(mini.eagle_head, mini.target) if config.drafter == "eagle"
               else GPTDraftSession(mini.draft_gpt))
    codes = mini.tokenizer.codebook().astype(np.float32) if reads_codes(policy) else None
    return Decoder(mini.target, settings, drafter=drafter, policy=policy, neighbours=neighbours,
                   embedding=embedding, codes=codes)


class StepScorer:
    """A trace sink for ``Decoder.generate``: exact expectations of every step, optional trace on disk.

    ``expected`` and ``tv`` hold, per speculative step (tree larger than the
    root), simulate's exact E[tokens] and TV bound; ``emitted`` the tokens the
    decoder actually emitted at those steps.
    """

    def __init__(self, mini: MiniModel, config: DecodeConfig, writer: TraceWriter | None = None) -> None:
        self.config = config
        self.writer = writer
        v = config.verification
        table = mini.neighbours() if v.neighbour_k else None
        self.neighbours = step_neighbours(table, mini.vocab_size, v)
        self.boost = v.boost
        self.embedding = config_embedding(mini, config)
        self.sampling = Sampling()
        policy = parse_tree(config.tree) if config.is_jacobi else None  # a window needs no context
        self.window = WindowPlan.of(policy) if isinstance(policy, CoupledWindow | PacWindow) else None
        self.expected: list[float] = []
        self.tv: list[float] = []
        self.emitted: list[int] = []
        self.sequence_tv: list[float] = []
        self._seq_tv = 0.0

    def add(self, step: TraceStep) -> None:
        """Score one step (and pass it on to the trace writer). A VVS skip step: E[tokens] given its tree
        and the exact TVs of the tokens it emitted, summed (``reference.vvs.skip_token_tvs``); a coupled
        or PAC window: R2's on its tree, the TV 0 for the lossless windows and NaN for the others (their
        distortion depends on the window's history: docs/theory.md 15.2)."""
        if self.writer is not None:
            self.writer.add(step)
        if step.skipped:
            stale = self.sampling.probs(step.stale_logits.astype(np.float64))[0]
            tv = float(skip_token_tvs(step, self.sampling).sum())
            self.expected.append(skip_laws(step.parents, step.tokens, stale, step.mean_accepted)[1])
            self.tv.append(tv)
            self.emitted.append(step.tokens_emitted)
            self._seq_tv += tv
        elif step.parents.size > 1:
            p = self.sampling.probs(np.asarray(step.target_logits, dtype=np.float64))
            v = self.config.verification
            q = None
            if v.samples_drafts:
                q = self.sampling.probs(np.asarray(step.draft_logits, dtype=np.float64))
            expectation = rule_step_expectation if v.walks_own_step else step_expectation
            e = expectation(step.tree, p, v, neighbours=self.neighbours, q_dists=q, emb=self.embedding)
            tokens, tv = e.tokens, e.tv
            if self.window is not None:
                cols = step.columns.reshape(-1, self.window.width)
                tokens = np.nan if has_repeats(cols) else tokens
                tv = tv if self.window.lossless else np.nan
            self.expected.append(tokens)
            self.tv.append(tv)
            self.emitted.append(step.tokens_emitted)
            self._seq_tv += tv

    def end_sequence(self) -> None:
        """Close a sequence (its summed per-step TV bound is recorded)."""
        if self.writer is not None:
            self.writer.end_sequence()
        self.sequence_tv.append(self._seq_tv)
        self._seq_tv = 0.0
