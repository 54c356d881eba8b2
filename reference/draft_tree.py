"""A draft tree of the reference decoder (``reference.decode``): the tree policy run with the drafter,
pruned to the tokens left, mapped back to the drafter's own nodes (:class:`TreeDrafting`, a mixin of the
decoder)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from relaxspec.theory.tree import Tree, parent_depths


class TreeDrafting:
    """The drafting of ``reference.decode.Decoder`` (a mixin: it reads the decoder's settings, drafter,
    policy and logits helpers)."""

    def _draft(self, root: int, chain: list[int], chain_features: torch.Tensor, max_depth: int,
               rng: np.random.Generator) -> tuple[Tree, int, Callable, dict[int, np.ndarray], dict]:
        """Run the decoder's policy with its drafter; prune to ``max_depth``; map the result back to drafter
        nodes. Returns the tree, the drafter calls, ``located`` (drafter node ids of a path of the tree), the
        stored draft logits by node and the drafter's last partial tree (``parents``, ``tokens``)."""
        st, drafter = self.settings, self.drafter
        rows: dict[tuple[int, ...], np.ndarray] = {}  # token path below the root -> stored draft logits
        seen = {"parents": np.array([-1]), "tokens": np.array([root]), "calls": 0}
        rows[()] = self._stored(drafter.root(np.array(chain), chain_features)[:, None])[0]
        q_root = self._probs(rows[()], st.draft_sampling, "draft")

        def draft(parents: np.ndarray, tokens: np.ndarray, nodes: np.ndarray) -> np.ndarray:
            parents = np.asarray(parents, dtype=np.int64)
            nodes = np.asarray(nodes, dtype=np.int64)
            seen.update(parents=parents, tokens=np.asarray(tokens, dtype=np.int64))
            seen["calls"] += 1
            idx = np.flatnonzero(parent_depths(parents)[nodes] < max_depth)  # deeper: pruned
            out = np.full((nodes.size, self.vocab), 1.0 / self.vocab)
            if idx.size:
                stored = self._stored(drafter.draft(parents, tokens, nodes[idx]))
                keys = _token_paths(parents, tokens)
                for i, j in enumerate(idx.tolist()):
                    rows[keys[nodes[j]]] = stored[i]
                    out[j] = self._probs(stored[i], st.draft_sampling, "draft")
            return out

        u = rng.random(self.policy.n_nodes) if st.verification.samples_drafts else None
        built = self.policy.build(q_root, draft, u)
        tree = _prune(built.tree, max_depth, root)
        final_keys = _token_paths(tree.parents, tree.tokens)
        draft_rows = {v: rows[k] for v, k in enumerate(final_keys) if k in rows}
        partial_index = {k: v for v, k in enumerate(_token_paths(seen["parents"], seen["tokens"]))}

        def located(path: np.ndarray) -> np.ndarray:
            """Drafter node ids of an accepted path (-1 for nodes the drafter never saw)."""
            return np.array([partial_index.get(final_keys[v], -1) for v in path], dtype=np.int64)

        return (tree, int(getattr(built, "draft_calls", seen["calls"])), located, draft_rows,
                {"parents": seen["parents"], "tokens": seen["tokens"]})


def _token_paths(parents: np.ndarray, tokens: np.ndarray) -> list[tuple[int, ...]]:
    """Token path below the root of every node (siblings have distinct tokens, so it names the node)."""
    keys: list[tuple[int, ...]] = [()]
    for v in range(1, len(parents)):
        keys.append(keys[int(parents[v])] + (int(tokens[v]),))
    return keys


def _prune(tree: Tree, max_depth: int, root: int) -> Tree:
    """The tree with root token ``root`` (builders do not know it) and no node deeper than
    ``max_depth`` (order kept)."""
    keep = np.flatnonzero(tree.depths <= max_depth)
    new_id = -np.ones(tree.size, dtype=np.int64)
    new_id[keep] = np.arange(keep.size)
    parents = np.array([-1] + [new_id[tree.parents[v]] for v in keep[1:]], dtype=np.int64)
    tokens = tree.tokens[keep].copy()
    tokens[0] = root
    return Tree(parents, tokens)
