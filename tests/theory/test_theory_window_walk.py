"""The step oracle of coupled and SJD-PAC windows (theory.window_walk) and VVS's skip-step rules in
theory.vvs (issue 29 item 3): exact checks, no model."""

from __future__ import annotations

import numpy as np
import pytest
from frontier_helpers import random_window
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxspec.theory.tree import sample_step
from relaxspec.theory.vvs import (
    path_similarity,
    skip_expected_tokens,
    skip_laws,
    skip_path,
    skip_step_tv,
    skip_token_tvs,
)
from relaxspec.theory.window_walk import column_tree, level_starts, walk_columns


def test_column_tree_is_the_product_of_distinct_candidates() -> None:
    cols = np.array([[4, 2, -1], [1, 1, 3], [0, -1, -1]])
    tree = column_tree(7, cols)
    assert tree.tokens.tolist() == [7, 4, 2, 1, 3, 1, 3, 0, 0, 0, 0]
    assert tree.parents.tolist() == [-1, 0, 0, 1, 1, 2, 2, 3, 4, 5, 6]
    assert level_starts(cols).tolist() == [0, 1, 3, 7, 11]  # the spine: nodes 0, 1, 3, 7


def test_walk_columns_is_r2_on_the_column_tree_without_repeats() -> None:
    """Without a repeated candidate the walk is theory.tree.sample_step's R2 on the tree (path and
    emitted token; the bonus at the leaf drawn with its u_draw), 400 random windows."""
    rng = np.random.default_rng(0)
    V = 6
    for _ in range(400):
        cols, tree, p, q, ua, ud = random_window(rng, V, repeats=False)
        path, token = walk_columns(p, q, cols, ua, ud)
        q_nodes = np.array([q[d] if d < len(q) else np.full(V, 1.0 / V) for d in tree.depths])
        nb = np.zeros((V, 0), dtype=np.int64)
        want_path, want_token = sample_step(tree, p, ua, ud, "r2", neighbours=nb,
                                            q_dists=q_nodes)
        assert path == list(want_path)
        if token >= 0:
            assert token == want_token
        else:
            assert len(path) == len(cols) + 1


def test_a_repeated_candidate_is_decided_without_its_uniform() -> None:
    """A candidate listed twice has q' = 0 once the first was rejected: acceptance 0 or 1 (its node's
    uniform is its first listing's), and its rejection still moves the residual."""
    cols = np.array([[0, 0, 1]])
    p = np.array([[0.2, 0.5, 0.3], *[[1 / 3] * 3] * 2])
    q = np.array([[0.6, 0.1, 0.3]])
    # 0 rejected (u = 0.9 >= 0.2 / 0.6): r = norm((p - q)^+) = (0, 1, 0), q' = (0, 0.25, 0.75); the repeated
    # 0 has r(0) = 0: rejected, r = norm((r - q')^+) = (0, 1, 0); then 1 passes (r(1) / q'(1) = 4 >= 1)
    for u in (0.0, 0.5, 0.999):
        assert walk_columns(p, q, cols, np.array([0.0, 0.9, u]), np.full(3, 0.5)) == ([0, 2], -1)
    # the first 0 accepted (u = 0.3 < 1/3): the path ends at its node
    assert walk_columns(p, q, cols, np.array([0.0, 0.3, 0.5]), np.full(3, 0.5)) == ([0, 1], -1)


# ------------------------------------------------------------------ VVS skip steps
PARENTS = np.array([-1, 0, 0, 1, 1])
TOKENS = np.array([9, 0, 1, 0, 1])  # root, then 0 -> {0, 1} and 1


def target(h: tuple[int, ...]) -> np.ndarray:
    """p(. | 0) = (0.9, 0.1), p(. | 1) = (0.3, 0.7), and (0.5, 0.5) after the committed prefix."""
    return np.array([0.5, 0.5]) if not h else np.array([0.9, 0.1]) if h[-1] == 0 else np.array([0.3, 0.7])


@pytest.mark.parametrize("lbar", [0.0, 1.0, 1.5, 2.0, 3.7])
def test_skip_token_tvs_are_skip_step_tvs_at_the_emitted_prefixes(lbar: float) -> None:
    """The TV of each emitted token, from the target rows after the emitted prefixes only (what the next
    forward gives), equals skip_step_tv's exact value at that prefix, for every path the step can take."""
    stale = np.array([0.6, 0.4])
    exact = skip_step_tv(PARENTS, TOKENS, target, stale, lbar)
    laws, tokens = skip_laws(PARENTS, TOKENS, stale, lbar)
    assert tokens == pytest.approx(exact.expected_tokens, abs=0)
    seen = 0
    for u in (0.1, 0.4, 0.9):  # leaves 2, 3, 4 of node order [2, 3, 4]
        path = skip_path(PARENTS, u, int(lbar))
        drafts = [int(TOKENS[v]) for v in path[1:]]
        for bonus in (0, 1):
            emitted = [*drafts, bonus]
            rows = np.array([target(tuple(emitted[:i])) for i in range(len(emitted))])
            got = skip_token_tvs(PARENTS, TOKENS, stale, lbar, emitted, rows)
            want = [exact.positions[tuple(emitted[:i])][2] for i in range(len(emitted))]
            assert got.tolist() == want
            seen += 1
    assert seen == 6


def _emitted_lengths(parents: list[int], cap: int, v: int = 0, depth: int = 0) -> list[int]:
    """gamma + 1 of every root-to-leaf path below ``v`` (depth-first), cut after ``cap`` drafts."""
    kids = [c for c in range(len(parents)) if parents[c] == v]
    if not kids:
        return [min(depth, cap) + 1]
    return [n for c in kids for n in _emitted_lengths(parents, cap, c, depth + 1)]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(lbar=st.floats(0.0, 6.0), data=st.data())
def test_skip_expected_tokens_is_the_mean_over_leaves(lbar: float, data) -> None:
    """E[gamma + 1] of a skip step given its tree: the brute-force mean over every root-to-leaf path (each
    leaf equally likely) of min(depth, floor(Lbar)) + 1, and what skip_laws reports."""
    n = data.draw(st.integers(1, 9))
    parents = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)]
    lengths = _emitted_lengths(parents, int(np.floor(lbar)))
    got = skip_expected_tokens(parents, lbar)
    assert got == pytest.approx(np.mean(lengths), abs=1e-12)
    assert got == skip_laws(parents, [0] * n, np.array([0.5, 0.5]), lbar)[1]
    paths = [skip_path(np.array(parents), (j + 0.5) / len(lengths), int(np.floor(lbar)))
             for j in range(len(lengths))]  # skip_path's leaf for each slice of the uniform: every leaf once
    assert sorted(len(p) for p in paths) == sorted(lengths)


def test_skip_expected_tokens_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="smaller index"):
        skip_expected_tokens([-1, 2, 1], 1.0)
    with pytest.raises(ValueError, match="mean_accepted"):
        skip_expected_tokens([-1, 0], float("nan"))


def test_skip_path_takes_each_leaf_and_cuts_at_floor_lbar() -> None:
    assert [skip_path(PARENTS, u, 5) for u in (0.0, 0.34, 0.99)] == [[0, 2], [0, 1, 3], [0, 1, 4]]
    assert skip_path(PARENTS, 0.5, 1) == [0, 1] and skip_path(PARENTS, 0.5, 0) == [0]
    with pytest.raises(ValueError, match="uniform"):
        skip_path(PARENTS, 1.0, 1)


def test_path_similarity_by_hand() -> None:
    """Depth 1: paths [0, 1, 1] -> pairs (0,1), (0,1), (1,1): cosines 0, 0, 1 -> 1/3; depth 2: [0, 1] -> 0;
    weights 1 and alpha."""
    emb = np.eye(2)
    assert path_similarity(PARENTS, TOKENS, emb, 0.5) == pytest.approx((1 / 3) / 1.5, abs=1e-15)
    assert np.isnan(path_similarity(np.array([-1, 0]), np.array([3, 0]), emb, 0.9))
