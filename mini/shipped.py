"""Loading the trained mini model (by default the shipped ``weights/``) into the reference classes.

Every component is checked against its card (hash, config, tensor names and
shapes), and the components against each other: the target's and drafters'
vocabulary must equal the tokenizer's codebook size, the EAGLE head must fit
the target's shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from relaxspec.mini.evaluator import FashionClassifier, load_evaluator
from relaxspec.mini.tokenizer import config_from_dict
from relaxspec.mini.weights import WEIGHTS_DIR, card_path, load_component, load_state_strict
from relaxspec.reference.drafter import EagleHead
from relaxspec.reference.model import Transformer
from relaxspec.reference.model_config import GPTConfig
from relaxspec.reference.vq import VQModel

GRID_TOKENS = 64
COMPONENT_NAMES = ("evaluator", "tokenizer", "target", "eagle_head", "draft_gpt")


def load_tokenizer(directory: Path = WEIGHTS_DIR) -> tuple[VQModel, dict[str, Any]]:
    """The VQ tokenizer and its card."""
    state, card = load_component(directory, "tokenizer")
    model = VQModel(config_from_dict(card["config"]))
    load_state_strict(model, state, f"tokenizer weights in {directory}")
    return model.eval(), card


def _gpt_config(config: dict, what: str) -> GPTConfig:
    try:
        return GPTConfig(**config)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} card config is malformed: {err}") from err


def load_gpt_component(directory: Path = WEIGHTS_DIR,
                       name: str = "target") -> tuple[Transformer, dict[str, Any]]:
    """A reference GPT component (``target`` or ``draft_gpt``) and its card."""
    state, card = load_component(directory, name)
    model = Transformer(_gpt_config(card["config"], name))
    load_state_strict(model, state, f"{name} weights in {directory}")
    return model.eval(), card


def load_eagle_head(target: Transformer, directory: Path = WEIGHTS_DIR) -> tuple[EagleHead, dict[str, Any]]:
    """The EAGLE head trained for ``target`` and its card."""
    state, card = load_component(directory, "eagle_head")
    target_config = card["config"].get("target") if isinstance(card["config"], dict) else None
    if not isinstance(target_config, dict):
        raise ValueError(f"eagle_head card in {directory} lacks config.target (the target it was "
                         "trained for)")
    trained_for = _gpt_config(target_config, "eagle_head")
    if trained_for != target.cfg:
        raise ValueError(f"the EAGLE head in {directory} was trained for target {trained_for}, "
                         f"not for {target.cfg}")
    head = EagleHead(target.cfg)
    load_state_strict(head, state, f"eagle_head weights in {directory}")
    return head.eval(), card


@dataclass
class MiniModel:
    """The whole mini model: tokenizer, target, both drafters, evaluator and their cards."""

    tokenizer: VQModel
    target: Transformer
    eagle_head: EagleHead | None
    draft_gpt: Transformer | None
    evaluator: FashionClassifier
    cards: dict[str, dict[str, Any]]
    directory: Path
    _neighbours: dict[bool, np.ndarray] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.cfg.codebook_size

    def neighbours(self, normalize: bool = False) -> np.ndarray:
        """LANTERN's neighbour table of the codebook (all V - 1 columns; raw code vectors by default)."""
        if normalize not in self._neighbours:
            self._neighbours[normalize] = self.tokenizer.neighbours(None, normalize=normalize)
        return self._neighbours[normalize]

    def checkpoint_sha256(self, name: str = "target") -> str:
        """SHA-256 of a component's weights file (from its verified card)."""
        return self.cards[name]["weights_sha256"]


def check_vocabularies(tokenizer: VQModel, models: dict[str, Transformer]) -> None:
    """Raise if a GPT's vocabulary or grid differs from the tokenizer's codebook and token grid."""
    V = tokenizer.cfg.codebook_size
    for name, m in models.items():
        if m.cfg.vocab_size != V:
            raise ValueError(f"vocabulary mismatch: {name} has {m.cfg.vocab_size} tokens but the tokenizer's "
                             f"codebook has {V} codes")
        if m.cfg.block_size != GRID_TOKENS:
            raise ValueError(f"{name} generates {m.cfg.block_size} tokens, the tokenizer's grid has "
                             f"{GRID_TOKENS}")


def load_mini(directory: Path = WEIGHTS_DIR, threads: int | None = None, drafters: bool = True) -> MiniModel:
    """Load and cross-check every component in ``directory`` (default: the shipped weights).

    ``drafters=False`` skips the EAGLE head and the draft GPT (enough for AR sampling). A folder without
    an evaluator (``weights/ambiguous``) uses the first model's: the evaluator judges images, not tokens.
    """
    if threads:
        torch.set_num_threads(threads)
    directory = Path(directory)
    tokenizer, tok_card = load_tokenizer(directory)
    target, target_card = load_gpt_component(directory, "target")
    evaluator, eval_card = load_evaluator(directory if card_path(directory, "evaluator").is_file()
                                          else WEIGHTS_DIR)
    cards = {"tokenizer": tok_card, "target": target_card, "evaluator": eval_card}
    draft = head = None
    if drafters:
        draft, cards["draft_gpt"] = load_gpt_component(directory, "draft_gpt")
        head, cards["eagle_head"] = load_eagle_head(target, directory)
    check_vocabularies(tokenizer, {"target": target, **({"draft_gpt": draft} if draft else {})})
    return MiniModel(tokenizer, target, head, draft, evaluator, cards, directory)
