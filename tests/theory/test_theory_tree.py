"""Trees (theory.tree): validation, exact expected tokens per step, the chain closed form."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from theory_strategies import distributions, neighbour_tables, relaxations

from relaxspec.theory import (
    Relax,
    Tree,
    chain_expected_tokens,
    choices_to_parents,
    expected_tokens_per_step,
    greedy_path,
    node_outcome,
    sample_step,
)
from relaxspec.theory.rules import neighbour_rows
from relaxspec.theory.verification import Verification


@st.composite
def trees(draw, V: int, max_nodes: int = 12) -> Tree:
    """A random tree in topological order whose siblings carry distinct tokens."""
    n = draw(st.integers(1, max_nodes))
    parents = [-1]
    tokens = [0]
    for v in range(1, n):
        u = draw(st.integers(0, v - 1))
        used = {tokens[w] for w in range(1, v) if parents[w] == u}
        free = [t for t in range(V) if t not in used]
        if not free:
            break
        parents.append(u)
        tokens.append(draw(st.sampled_from(free)))
    return Tree(np.array(parents), np.array(tokens))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), V=st.integers(2, 8))
def test_theory_tree_r1_none_is_sum_of_path_products(data, V):
    """With R1 and none, E[tokens] = 1 + sum over v of prod p_u(token of the next node)."""
    tree = data.draw(trees(V))
    dists = np.array([data.draw(distributions(V)) for _ in range(tree.size)])
    expected = 1.0
    for v in range(1, tree.size):
        prod, w = 1.0, v
        while w != 0:
            prod *= dists[tree.parents[w], tree.tokens[w]]
            w = tree.parents[w]
        expected += prod
    got = expected_tokens_per_step(tree, dists, "r1")
    assert got == pytest.approx(expected, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), V=st.integers(2, 8), gamma=st.integers(0, 6))
def test_theory_tree_chain_matches_closed_form(data, V, gamma):
    """A chain of gamma drafts with the same target and the same child token at every node
    has i.i.d. acceptance a: E[tokens] = (1 - a^(gamma+1)) / (1 - a)."""
    p = data.draw(distributions(V))
    nb = data.draw(neighbour_tables(V))
    relax = data.draw(relaxations(nb.shape[1]))
    variant = data.draw(st.sampled_from(["principled", "official"]))
    c = data.draw(st.integers(0, V - 1))
    tree = Tree(np.arange(-1, gamma), np.array([0] + [c] * gamma))
    dists = np.tile(p, (gamma + 1, 1))
    for rule in ("r1", "r3"):
        a = node_outcome(p, [c], Verification(rule, relax, variant), neighbours=nb).accept_probs[0]
        got = expected_tokens_per_step(tree, dists, Verification(rule, relax, variant), neighbours=nb)
        assert got == pytest.approx(chain_expected_tokens(a, gamma), abs=1e-12)
    if V <= 12:  # R2 chain, one draft per node: a = sum min(p, q) with none
        q = data.draw(distributions(V))
        got = expected_tokens_per_step(tree, dists, "r2", q_dists=np.tile(q, (gamma + 1, 1)))
        a = min(1.0, float(np.minimum(p, q).sum()))
        assert got == pytest.approx(chain_expected_tokens(a, gamma), abs=1e-12)


@pytest.mark.parametrize(
    "p2, path_none, path_relaxed",
    [((0.5, 0.2, 0.3), [0, 2, 3], [0, 2, 3]),  # the longest acceptable chain wins
     ((0.2, 0.3, 0.5), [0, 2], [0, 1])],  # a tie in depth goes to the first node
)
def test_theory_tree_r3_counts_the_greedy_chain(p2, path_none, path_relaxed):
    # root -> node 1 (token 2), node 2 (token 1); node 2 -> node 3 (token 0)
    tree = Tree(np.array([-1, 0, 0, 2]), np.array([0, 2, 1, 0]))
    p = np.array([[0.1, 0.45, 0.45], [0.5, 0.2, 0.3], p2, [0.2, 0.3, 0.5]])
    nb = np.array([[1, 2], [2, 0], [0, 1]])
    none, relaxed = Relax.none(), Relax.additive(1, 0.1)  # node 1: 0.45 + 0.1 beats 0.45
    assert greedy_path(tree, p, neighbour_rows(nb, 3, none), none) == path_none
    assert greedy_path(tree, p, neighbour_rows(nb, 3, relaxed),
                       relaxed) == path_relaxed
    assert expected_tokens_per_step(tree, p, "r3") == len(path_none)
    assert expected_tokens_per_step(tree, p, Verification("r3", relaxed), neighbours=nb) == len(path_relaxed)


def test_theory_chain_expected_tokens():
    assert chain_expected_tokens(0.5, 3) == pytest.approx(1.875)
    assert chain_expected_tokens(1.0, 4) == 5.0
    assert chain_expected_tokens(0.0, 4) == 1.0
    with pytest.raises(ValueError, match="acceptance probability"):
        chain_expected_tokens(1.5, 2)
    with pytest.raises(ValueError, match="gamma"):
        chain_expected_tokens(0.5, -1)


def test_theory_choices_to_parents():
    parents, ranks = choices_to_parents([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    assert parents.tolist() == [-1, 0, 0, 1, 1, 2, 3]
    assert ranks.tolist() == [-1, 0, 1, 0, 1, 0, 0]
    with pytest.raises(ValueError, match="no parent path"):
        choices_to_parents([[0, 1]])
    with pytest.raises(ValueError, match="repeat"):
        choices_to_parents([[0], [0]])
    with pytest.raises(ValueError, match="non-empty"):
        choices_to_parents([[]])


@pytest.mark.parametrize(
    "parents, tokens, depths, match",
    [
        ([-1, 1], [0, 1], None, "parent must come before"),
        ([-1, 0, 2], [0, 1, 2], None, "parent must come before"),
        ([-1, 0, 3, 1], [0, 1, 2, 3], None, "parent must come before"),
        ([0, 0], [0, 1], None, "must have parent -1"),
        ([-1, 0, 0], [0, 1, 1], None, "repeats token"),
        ([-1, 0], [0, 1, 2], None, "differs"),
        ([-1.0, 0.0], [0, 1], None, "integer"),
        ([-1, 0], [0, -1], None, "non-negative"),
        ([-1, 0], [0, 1], [0, 2], "depths"),
        ([], [], None, "non-empty"),
    ],
)
def test_theory_tree_bad_input(parents, tokens, depths, match):
    with pytest.raises(ValueError, match=match):
        Tree(np.array(parents), np.array(tokens), depths)


def test_theory_tree_bad_dists():
    tree = Tree(np.array([-1, 0]), np.array([0, 5]))
    with pytest.raises(ValueError, match="out of range"):
        expected_tokens_per_step(tree, np.full((2, 3), 1 / 3), "r1")
    with pytest.raises(ValueError, match="shape"):
        expected_tokens_per_step(tree, np.full((3, 6), 1 / 6), "r1")
    with pytest.raises(ValueError, match="sum to 1"):
        expected_tokens_per_step(tree, np.full((2, 6), 0.2), "r1")
    with pytest.raises(ValueError, match="needs q_dists"):
        expected_tokens_per_step(tree, np.full((2, 6), 1 / 6), "r2")


def test_sample_step_without_a_table() -> None:
    """No neighbour table is needed when the rule merges nothing; a relaxation without one is named."""
    tree = Tree(np.array([-1, 0, 0]), np.array([0, 1, 2]))
    p = np.full((3, 4), 0.25)
    u = np.array([0.9, 0.1, 0.1])
    assert sample_step(tree, p, u, u, "r1", neighbours=None) == ([0, 1], 0)
    with pytest.raises(ValueError, match="needs a neighbour table"):
        sample_step(tree, p, u, u, Verification("r1", Relax.additive(2, 0.1)), neighbours=None)
