"""Exact analysis of relaxed speculative verification (float64, no Monte Carlo)."""

from theory.bounds import (
    R1Distortion,
    r1_distortion,
    r2_stage_bound,
    r2_tv_bound,
    r3_tv_bound,
    tv_bound,
)
from theory.distributions import (
    cfg_logits,
    logits_to_probs,
    total_variation,
    validate_distribution,
    validate_logits,
)
from theory.multidraft import optimal_deterministic_acceptance, optimal_multidraft_acceptance
from theory.neighbours import (
    load_neighbours,
    neighbour_table,
    save_neighbours,
    validate_neighbour_rows,
    validate_neighbours,
)
from theory.relax import Relax, merge_count, proximity_set
from theory.rules import RULES, neighbour_rows
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
    step_expectation,
)
from theory.verify import (
    NodeOutcome,
    R1Stage,
    R2State,
    node_outcome,
    r1_walk,
    r2_given_states,
    r2_states,
)

__all__ = [
    "NodeOutcome",
    "R1Distortion",
    "R1Stage",
    "R2State",
    "RULES",
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
    "optimal_deterministic_acceptance",
    "optimal_multidraft_acceptance",
    "path_probs",
    "proximity_set",
    "r1_distortion",
    "r1_walk",
    "r2_given_states",
    "r2_stage_bound",
    "r2_states",
    "r2_tv_bound",
    "r3_tv_bound",
    "sample_node",
    "sample_step",
    "step_expectation",
    "save_neighbours",
    "total_variation",
    "tv_bound",
    "validate_distribution",
    "validate_logits",
    "validate_neighbour_rows",
    "validate_neighbours",
]
