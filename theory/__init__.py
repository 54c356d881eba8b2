"""Exact analysis of relaxed speculative verification (float64, no Monte Carlo)."""

from theory.distributions import (
    cfg_logits,
    logits_to_probs,
    total_variation,
    validate_distribution,
    validate_logits,
)
from theory.neighbours import (
    load_neighbours,
    neighbour_table,
    save_neighbours,
    validate_neighbours,
)
from theory.relax import Relax, merge_count, proximity_set
from theory.sampler import draw_token, draw_without_replacement, sample_node
from theory.tree import (
    Tree,
    chain_expected_tokens,
    choices_to_parents,
    expected_tokens_per_step,
    greedy_path,
    node_accept_probs,
    path_probs,
    sample_step,
)
from theory.verify import RULES, NodeOutcome, neighbour_rows, node_outcome

__all__ = [
    "RULES",
    "NodeOutcome",
    "Relax",
    "Tree",
    "cfg_logits",
    "chain_expected_tokens",
    "choices_to_parents",
    "draw_token",
    "draw_without_replacement",
    "expected_tokens_per_step",
    "greedy_path",
    "load_neighbours",
    "logits_to_probs",
    "merge_count",
    "neighbour_rows",
    "neighbour_table",
    "node_accept_probs",
    "node_outcome",
    "path_probs",
    "proximity_set",
    "sample_node",
    "sample_step",
    "save_neighbours",
    "total_variation",
    "validate_distribution",
    "validate_logits",
    "validate_neighbours",
]
