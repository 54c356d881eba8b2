"""The one tree grammar: a spec string names a draft-tree policy everywhere.

The sweep's ``trees`` list, ``relaxspec generate --tree``, the mini model's
decoding configurations, trace headers, result rows and figure labels all
write trees the same way, and ``str(policy)`` (the policy's ``name``) is its
spec, which :func:`parse_tree` turns back into the same policy.

=================================  ==========================================================
spec                               policy
=================================  ==========================================================
``ar``                             no tree: autoregressive decoding (decoders only)
``static:NAME``                    a built-in static tree (``mc_sim_7b_63``, ``naive_extend_57``)
``static:[[0],[1],[0,0]]``         a static tree from its rank paths (JSON)
``chain:N``                        a chain of N top-ranked drafts
``eagle2:K,D,M``                   EAGLE-2: top-K, D expansions, M tokens (root included)
``ddd:K,CALLS,S1/S2/..,X,M``       DDD: at most CALLS draft calls, depth checks before calls
                                   S1, S2, ... with threshold X
``latent:K,D,M[,POOL]``            EAGLE-2 ranked by proximity mass (also ``latent-diverse``,
                                   ``latent-walk``; :mod:`core.trees.selection`)
``sequoia:N,DEPTH``                Sequoia's optimal tree for a positional acceptance vector
                                   (also ``sequoia-lossless``: the vector measured with the
                                   exact rule; ``sequoia-latent``, ``sequoia-diverse``,
                                   ``sequoia-walk``: children picked by that selection)
``costaware:N,DEPTH[,MODE]``       the Sequoia tree of largest predicted speed-up on a cost
                                   table (MODE q, latent, diverse or walk; default q)
``jacobi:L[,uniform|copy]``        SJD's Jacobi window of L sampled drafts, no drafter, fresh
                                   tokens uniform (default) or copies (:mod:`core.trees.jacobi`);
                                   ``,coupled=principled|official|gumbel``: SCD's coupled window
``pac:L[,...][,width=K,depth=D]``  SJD-PAC's proactive window (:mod:`core.trees.windows`)
``vvs:K,D,M,uniform=I|dynamic``    EAGLE-2 with VVS's skipped verification (:mod:`core.trees.skips`)
=================================  ==========================================================

What a spec cannot say comes with it as context: the verifier's relaxation
and neighbour table (relaxation-aware selections), the acceptance vector
(Sequoia-type trees; a vector, or a function of the selector and relaxation
that measures one) and the cost model (``costaware``). Sizes are bounded
(``MAX_TREE_NODES``, ``MAX_TREE_DEPTH``) before anything is built.

Numbers are ASCII digits with an optional minus sign (:mod:`core.trees.numbers`; DDD's THRESHOLD
also in decimal or exponent notation): ``+10``, ``1_0`` and other scripts' digits are refused.
Spaces or tabs around the spec, a number or a word, and leading zeros, are harmless: the canonical
spec (:func:`check_tree_spec`, ``str`` of the policy) drops them, as it drops a default (``POOL`` 40,
``costaware``'s MODE ``q``, ``jacobi``'s ``uniform``), so that one tree has one spec: the one sweeps
store and resume by.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import numpy as np

from relaxspec.core.trees.costaware import choose_static_size
from relaxspec.core.trees.jacobi import JacobiWindow
from relaxspec.core.trees.numbers import spec_float, spec_int
from relaxspec.core.trees.policies import (
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    DDDTree,
    Eagle2Tree,
    LatentAwareTree,
    StaticTree,
    TreePolicy,
    check_budget,
)
from relaxspec.core.trees.selection import SELECTION_MODES, ChildSelector
from relaxspec.core.trees.sequoia import SequoiaTree
from relaxspec.core.trees.skips import VVS_FORM, VvsTree
from relaxspec.core.trees.windows import (
    JACOBI_COUPLED_FORM,
    PAC_FORM,
    CoupledWindow,
    PacWindow,
    parse_jacobi,
    parse_pac,
)
from relaxspec.theory.relax import Relax
from relaxspec.theory.verification import DraftSource

LATENT_KINDS = {"latent": "latent", "latent-diverse": "diverse", "latent-walk": "walk"}
SEQUOIA_KINDS = {"sequoia": "q", "sequoia-lossless": "q", "sequoia-latent": "latent",
                 "sequoia-diverse": "diverse", "sequoia-walk": "walk"}
KINDS = ("ar", "static", "chain", "eagle2", "ddd", *LATENT_KINDS, *SEQUOIA_KINDS, "costaware", "jacobi",
         "pac", "vvs")
FORMS = {"static": "static:NAME or static:[[0],[1],...]", "chain": "chain:N", "eagle2": "eagle2:K,D,M",
         "ddd": "ddd:K,CALLS,S1/S2/..,THRESHOLD,M", "costaware": "costaware:N,DEPTH[,MODE]",
         **{k: f"{k}:K,D,M[,POOL]" for k in LATENT_KINDS}, **{k: f"{k}:N,DEPTH" for k in SEQUOIA_KINDS},
         "jacobi": JACOBI_COUPLED_FORM, "pac": PAC_FORM, "vvs": VVS_FORM}
R2_FORMS = "static:NAME, chain:N, sequoia:N,DEPTH, sequoia-lossless:N,DEPTH, costaware:N,DEPTH[,q], jacobi:L"

Acceptance = Sequence[float] | Callable[[ChildSelector, Relax], Sequence[float]]
Neighbours = np.ndarray | Callable[[int], np.ndarray] | None


def tree_kind(spec: str) -> str:
    """The kind of a spec (the part before ``:``), checked against :data:`KINDS`."""
    kind = str(spec).strip().partition(":")[0]
    if kind not in KINDS:
        raise ValueError(f"unknown tree kind in {spec!r}; tree specs: {', '.join(FORMS.values())}, or ar")
    return kind


def _ints(args: str, n: tuple[int, ...], spec: str) -> list[int]:
    parts = args.split(",") if args else []
    if len(parts) not in n:
        need = " or ".join(str(k) for k in n)
        raise ValueError(f"needs {need} comma-separated values ({FORMS[tree_kind(spec)]})")
    return [spec_int(p, FORMS[tree_kind(spec)]) for p in parts]


def check_tree_spec(spec: str) -> str:
    """Check a spec's syntax and sizes without building anything that needs context (raises ValueError);
    returns its canonical form (the policy's ``str``: module docstring), which parses back to it."""
    policy = _parse(spec, probe=True)
    return policy if isinstance(policy, str) else "ar" if policy is None else str(policy)


def parse_tree(spec: str, *, relax: Relax | None = None, neighbours: Neighbours = None,
               acceptance: Acceptance | None = None,
               cost: Callable[[], object] | object | None = None) -> TreePolicy | None:
    """The policy a spec names (``None`` for ``ar``); its ``name`` is the spec, normalised.

    Parameters
    ----------
    spec : a tree spec (module docstring).
    relax, neighbours : the verifier's relaxation and its neighbour table (an array, or a function of
        the relaxation's k returning one), for relaxation-aware selections.
    acceptance : Sequoia's positional acceptance vector, or a function ``(selector, relax) -> vector``
        measuring it (``sequoia-lossless`` passes ``Relax.none()``).
    cost : a ``core.cost.CostModel`` (or a function returning one), for ``costaware``.
    """
    policy = _parse(spec, relax=relax, neighbours=neighbours, acceptance=acceptance, cost=cost)
    assert not isinstance(policy, str)  # only a probe stops at the name
    return policy


def _parse(spec: str, *, relax: Relax | None = None, neighbours: Neighbours = None,
           acceptance: Acceptance | None = None, cost: Callable[[], object] | object | None = None,
           probe: bool = False) -> TreePolicy | str | None:
    """:func:`parse_tree`; a ``probe`` checks sizes without context, and returns a Sequoia-type spec's
    canonical name instead of a policy (building one needs the acceptance vector)."""
    text = str(spec).strip()
    if "\n" in text or "\r" in text:
        raise ValueError(f"tree spec {spec!r} must be one line")
    kind, _, args = text.partition(":")
    try:
        kind = tree_kind(text)
        if kind == "ar":
            if args:
                raise ValueError("ar takes no arguments")
            return None
        if kind == "static":
            args = args.strip()
            return StaticTree(_json_paths(args)) if args.startswith("[") else StaticTree.builtin(args)
        if kind == "chain":
            return StaticTree.chain(_ints(args, (1,), text)[0])
        if kind == "eagle2":
            return Eagle2Tree(*_ints(args, (3,), text))
        if kind == "ddd":
            return _ddd(args, text)
        if kind == "jacobi":
            return parse_jacobi(args)
        if kind == "pac":
            return parse_pac(args)
        if kind == "vvs":
            return VvsTree.parse(args)
        if kind in LATENT_KINDS:
            return _latent(kind, args, text, relax, neighbours, probe)
        return _sequoia(kind, args, text, relax, neighbours, acceptance, cost, probe)
    except ValueError as err:
        if str(err).startswith("unknown tree kind"):
            raise
        raise ValueError(f"bad tree spec {text!r}: {err}") from None


def _json_paths(args: str) -> list[list[int]]:
    try:
        paths = json.loads(args)
    except json.JSONDecodeError as err:
        raise ValueError(f"static rank paths must be a JSON list of lists of ints: {err}") from None
    # json reads ASCII digits only; true and false are ints to Python, not ranks
    if not isinstance(paths, list) or not all(
            isinstance(p, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in p)
            for p in paths):
        raise ValueError("static rank paths must be a JSON list of lists of ints, e.g. [[0],[1],[0,0]]")
    return paths


def _ddd(args: str, spec: str) -> DDDTree:
    parts = args.split(",")
    if len(parts) != 5:
        raise ValueError(f"needs 5 comma-separated values ({FORMS['ddd']})")
    k, calls, m = (spec_int(parts[i], FORMS["ddd"]) for i in (0, 1, 4))
    steps = [spec_int(s, FORMS["ddd"]) for s in parts[2].split("/") if s.strip()]
    threshold = spec_float(parts[3], f"THRESHOLD ({FORMS['ddd']})")
    check_budget("max_calls CALLS", calls, 1, MAX_TREE_DEPTH + 1)
    return DDDTree(k, calls, steps, threshold, m)


def _table(relax: Relax, neighbours: Neighbours) -> np.ndarray | None:
    if relax.is_exact:
        return None
    if neighbours is None:
        raise ValueError("it ranks by proximity mass and needs the verifier's neighbour table")
    return neighbours(relax.k) if callable(neighbours) else neighbours


def _latent(kind: str, args: str, spec: str, relax: Relax | None, neighbours: Neighbours,
            probe: bool) -> LatentAwareTree:
    vals = _ints(args, (3, 4), spec)
    # the probe checks the sizes with the exact rule, which needs no neighbour table
    rel = Relax.none() if probe else (relax or Relax.none())
    return LatentAwareTree(*vals[:3], relax=rel, neighbours=_table(rel, neighbours),
                           **({"pool": vals[3]} if len(vals) == 4 else {}), mode=LATENT_KINDS[kind])


def _selection_mode(kind: str, args: str) -> tuple[str, str]:
    """A Sequoia-type spec's selection mode and its size arguments (``costaware`` may end in ``,MODE``)."""
    parts = args.split(",") if args else []
    mode = SEQUOIA_KINDS.get(kind, "q")
    if kind == "costaware" and len(parts) == 3:
        mode = parts.pop().strip()
        if mode not in SELECTION_MODES:
            raise ValueError(f"MODE must be one of {SELECTION_MODES}, got {mode!r}")
    return mode, ",".join(parts)


def draws_children(spec: str) -> bool:
    """Whether the tree a spec names can draw its children from q without replacement (rule R2): the
    static trees that pick children by q (:data:`R2_FORMS`), decided from the spec alone."""
    kind = tree_kind(spec)
    if kind in ("static", "chain", "jacobi", "pac"):
        return True
    if measures_acceptance(spec):
        return _selection_mode(kind, str(spec).strip().partition(":")[2])[0] == "q"
    return False


def draft_source(tree: str | TreePolicy | JacobiWindow | None) -> DraftSource:
    """What a tree (a spec, a built policy, or None for AR) asks a verification to verify
    (``theory.verification.Verification.source_problem`` says whether it can)."""
    if tree is None or (isinstance(tree, str) and tree_kind(tree) == "ar"):
        return DraftSource.AR
    if isinstance(tree, str) and tree_kind(tree) in ("jacobi", "pac"):
        tree = parse_tree(tree)
    if isinstance(tree, CoupledWindow | PacWindow):  # SPEC 10.1-10.2
        return DraftSource.COUPLED if tree.follows_stored_laws else DraftSource.COUPLED_OFFICIAL
    if isinstance(tree, JacobiWindow):
        return DraftSource.JACOBI
    draws = draws_children(tree) if isinstance(tree, str) else tree.supports_draws
    return DraftSource.DRAWN if draws else DraftSource.RANKED


def measures_acceptance(spec: str) -> bool:
    """Whether the tree a spec names is built from a measured positional acceptance vector (the Sequoia-type
    trees and ``costaware``: a sweep's ``[sequoia]`` settings change it)."""
    kind = tree_kind(spec)
    return kind in SEQUOIA_KINDS or kind == "costaware"


def _sequoia(kind: str, args: str, spec: str, relax: Relax | None, neighbours: Neighbours,
             acceptance: Acceptance | None, cost, probe: bool) -> TreePolicy | str:
    mode, sizes = _selection_mode(kind, args)
    n, depth = _ints(sizes, (2,), spec)
    check_budget("N", n, 1, MAX_TREE_NODES)
    check_budget("DEPTH", depth, 1, MAX_TREE_DEPTH)
    name = f"{kind}:{n},{depth}" + (f",{mode}" if kind == "costaware" and mode != "q" else "")
    if probe:
        return name
    if acceptance is None:
        raise ValueError("a Sequoia-type tree needs a positional acceptance vector")
    rel = relax or Relax.none()
    selector = ChildSelector(mode, rel, None if mode == "q" else _table(rel, neighbours))
    vector = (acceptance(selector, Relax.none() if kind == "sequoia-lossless" else rel)
              if callable(acceptance) else acceptance)
    if kind == "costaware":
        if cost is None:
            raise ValueError("a costaware tree needs a cost table")
        chosen = choose_static_size(vector, cost() if callable(cost) else cost, n, depth)
        tree: TreePolicy = StaticTree(chosen.choices, selector=selector)
    else:
        tree = SequoiaTree(vector, n, depth, selector=selector)
    tree.name = name
    return tree
