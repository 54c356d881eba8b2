"""How far each rule is from the best lossless acceptance (SPEC 9.7), at the nodes of a world or a trace:
the frontier study's optimality rows (:mod:`relaxspec.studies.frontier`) and their table."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from relaxspec.theory.boost import Boost

OPTIMALITY_FIELDS = ("r1", "r2", "r4", "gsd", "gsd_tv", "optimal_deterministic", "optimal_wor", "optimal_iid")


def _optimality_row(setting: str, accs: list, drafts: int) -> dict:
    """Mean of every rule's acceptance over the nodes ``accs`` (``theory.multidraft.NodeAcceptance``);
    GSD is NaN where it was not measured (no embedding table)."""
    row = {"world": setting, "nodes": len(accs), "drafts": drafts}
    for f in OPTIMALITY_FIELDS:
        values = [getattr(a, f) for a in accs]
        row[f] = float(np.mean(values)) if None not in values else float("nan")
    return row


def world_optimality_row(world: str, overrides: dict, n_sequences: int, seq_len: int, drafts: int = 4,
                         group: int = 10) -> dict:
    """How far each rule is from the best possible (SPEC 9.7): at the nodes a lossless decoder visits in
    the world preset ``world`` (with ``overrides``), ``drafts`` drafts drawn from q without replacement,
    the mean acceptance of R1 (top drafts of q), R2, R4 and GSD (G = ``group``) next to the optimal
    lossless acceptances."""
    from relaxspec.simulate.worlds import LatentWorld, sampled_nodes
    from relaxspec.theory.multidraft import node_acceptance
    from relaxspec.theory.sampler import draw_without_replacement

    latent = LatentWorld.preset(world, **overrides)
    emb, rng = latent.embedding(), np.random.default_rng(0)
    accs = [node_acceptance(p, q, drafts, children=draw_without_replacement(q, rng.random(drafts)),
                            gsd=Boost.group(group), emb=emb)
            for p, q in sampled_nodes(latent, n_sequences=n_sequences, seq_len=seq_len)]
    return _optimality_row(world, accs, drafts)


def trace_optimality_rows(path: str | Path, setting: str, *, emb: np.ndarray | None = None,
                          group: int = 10, max_nodes: int | None = None) -> list[dict]:
    """:func:`optimality_rows` at every node of a recorded trace that has children (one row per number of
    children): the trace's own p and q (its samplings) and its drafted children, in their draw order.

    The trace must hold sampled drafts (rule r2 or r4: children drawn from q without replacement);
    ``emb`` is GSD's embedding table (G = ``group``), or None to leave GSD out; ``max_nodes`` stops after
    that many nodes (in step order).

    Raises
    ------
    ValueError
        For a trace of another rule (its children were not drawn from q), or a malformed trace.
    """
    from relaxspec.core.trace import read_trace
    from relaxspec.theory.multidraft import node_acceptance
    from relaxspec.theory.tree import Tree

    trace = read_trace(path)
    h = trace.header
    if not h.verification.samples_drafts:
        raise ValueError(f"trace {path} verified with rule {h.verification.rule}: its children are not draws "
                         "from q without replacement (the optimal bound of SPEC 9.7 needs rule r2 or r4)")
    gsd = Boost.group(group) if emb is not None else None
    by_k: dict[int, list] = {}
    nodes = 0
    for step in trace.steps():
        tree = Tree(step.parents, step.tokens)
        for v in range(tree.size):
            kids = tree.children(v)
            if kids.size == 0:
                continue
            if max_nodes is not None and nodes >= max_nodes:
                return [_optimality_row(setting, accs, k) for k, accs in sorted(by_k.items())]
            nodes += 1
            p = h.target_sampling.probs(step.target_logits[v].astype(np.float64))
            q = h.draft_sampling.probs(step.draft_logits[v].astype(np.float64))
            by_k.setdefault(int(kids.size), []).append(
                node_acceptance(p, q, int(kids.size), children=step.tokens[kids], gsd=gsd, emb=emb))
    return [_optimality_row(setting, accs, k) for k, accs in sorted(by_k.items())]


def optimality_table(rows: list[dict]) -> list[str]:
    lines = ["| setting | nodes | drafts | R1 / p(top-k) | R2 / optimum w/o repl. | R4 | GSD G=10 (TV) | "
             "optimum, i.i.d. drafts |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['world']} | {r['nodes']} | {r['drafts']} | {r['r1']:.3f} / "
                     f"{r['optimal_deterministic']:.3f} | {r['r2']:.3f} / {r['optimal_wor']:.3f} | "
                     f"{r['r4']:.3f} | "
                     f"{fmt_tv(r['gsd'])} ({fmt_tv(r['gsd_tv'])}) | {r['optimal_iid']:.3f} |")
    return lines


def fmt_tv(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.4f}"
