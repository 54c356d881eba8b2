"""Issue 7's measurement: relaxation-aware draft trees against EAGLE-2, LANTERN++'s static tree, DDD, Sequoia.

    python -m relaxspec.studies.relaxation_trees                  # worlds + shipped model (resumable)
    python -m relaxspec.studies.relaxation_trees --skip-shipped   # the synthetic worlds only
    python -m relaxspec.studies.relaxation_trees --quick          # smoke run (results/relaxation_trees-quick)

One table, one run, one seed: every policy at the same node budget (57
draft nodes) and the same relaxations, in the ``ambiguous`` and
``confident`` worlds (``simulate.run``, 256-token sequences, seed 0; Sequoia
vectors measured with seed 1) and on the shipped Fashion-MNIST model (the
reference decoder, the same images and uniforms in every row; FD and class
accuracy from its evaluator, ``mini.quality``). Around the table: how often
plain top-k siblings' proximity sets overlap (``core.trees.selection.sibling_overlap``),
and the analysis of why the goal is or is not met (a perfect drafter, and the
merged-mass budget at the root: docs/theory.md, Theorem 6).

Outputs (``--out``, default ``results/relaxation_trees``): ``worlds.csv`` (sweep
rows, resumable), ``shipped/`` (per-image records, resumable) and
``shipped.csv``, ``overlap.csv``, ``ceiling.csv``, ``table.md`` and the
figure ``tradeoff`` (PDF and PNG).

Over 400 lines: one study end to end (worlds, the shipped model, the table, the figure and the verdict),
kept in one file so that a reader can audit the whole measurement.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from relaxspec.core.cost import DEFAULT_TABLE, CostModel
from relaxspec.core.trees.policies import Eagle2Tree, LatentAwareTree
from relaxspec.core.trees.selection import ChildSelector, top_ranked
from relaxspec.core.trees.sequoia import SequoiaTree
from relaxspec.figstyle import relax_label
from relaxspec.results import load
from relaxspec.simulate.acceptance import measure_positional_acceptance
from relaxspec.simulate.engine import run
from relaxspec.simulate.overlap import sibling_overlap
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.studies.study_options import study_parser, study_setup
from relaxspec.sweep import SweepConfig, run_sweep
from relaxspec.theory import Relax, node_outcome, r1_distortion
from relaxspec.theory.relax import RelaxKind
from relaxspec.theory.rules import Rule
from relaxspec.theory.verification import Verification

WORLDS = ["ambiguous", "confident"]
RELAXATIONS = ["none", "additive:k=1000,delta=0.1", "additive:k=1000,delta=0.2",
               "multiplicative:k=1000,lam=2", "multiplicative:k=1000,lam=5"]
NODES = 57  # draft nodes of every tree (naive_extend_57's budget)
EXISTING = {  # spec -> label
    "eagle2:10,4,58": "EAGLE-2 (10, 4, 58)",
    "eagle2:10,8,58": "EAGLE-2 (10, 8, 58)",
    "static:naive_extend_57": "static naive_extend_57 (LANTERN++'s tree)",
    "ddd:10,11,5/7/9,-0.3,58": "DDD (10, 11, {5,7,9}, -0.3, 58)",
    "sequoia-lossless:57,8": "Sequoia (57, 8), vector of the exact rule",
    "sequoia:57,8": "Sequoia (57, 8), vector of the relaxed rule",
}
NEW = {
    "latent:10,4,58": "latent-aware EAGLE-2: q~ (1)",
    "latent-diverse:10,4,58": "latent-diverse siblings (2)",
    "latent-walk:10,4,58": "latent-aware EAGLE-2: R1 walk on q",
    "latent:10,8,58": "latent-aware EAGLE-2 (10, 8, 58): q~ (1)",
    "latent-walk:10,8,58": "latent-aware EAGLE-2 (10, 8, 58): R1 walk on q",
    "sequoia-diverse:57,8": "relaxation-aware Sequoia, diverse siblings (3)",
    "sequoia-walk:57,8": "relaxation-aware Sequoia, walk siblings (3)",
    "costaware:57,8,walk": "cost-aware size, walk siblings (4)",
}
LABELS = {**EXISTING, **NEW}
SHIPPED_RELAX = ["none", "additive:k=50,delta=0.2", "multiplicative:k=50,lam=5"]
# On the shipped model (reference decoder, about 1 s per image and policy on one core) a subset: every
# existing policy, and each new idea once (the worlds' runner-ups, diverse Sequoia and the 8-deep walk, and
# Sequoia on the exact rule's vector, are left to the worlds).
SHIPPED_TREES = {"eagle2:10,4,58", "static:naive_extend_57", "ddd:10,11,5/7/9,-0.3,58", "sequoia:57,8",
                 "latent:10,4,58", "latent-diverse:10,4,58", "latent-walk:10,4,58", "sequoia-walk:57,8",
                 "costaware:57,8,walk"}


# ---------------------------------------------------------------- synthetic worlds
def sweep_configs(n_sequences: int, seq_len: int, overrides: dict, cost: dict,
                  threads: int = 1) -> list[SweepConfig]:
    """The R1 grid over every tree and the R2 grid of LANTERN++'s static tree (SPEC: its verification), each
    configuration on ``threads`` Numba threads."""
    common = {"worlds": WORLDS, "n_sequences": n_sequences, "seq_len": seq_len,
              "seed": 0, "threads": threads, "sequoia": {"width": 16, "n_sequences": 16, "seq_len": 64},
              "cost": cost, **({"world_overrides": overrides} if overrides else {})}
    return [SweepConfig.from_dict({**common, "trees": list(LABELS), "verifications": verifications("r1")},
                                  source="benchmark"),
            SweepConfig.from_dict({**common, "trees": ["static:naive_extend_57"],
                                   "verifications": verifications("r2")}, source="benchmark")]


def verifications(rule: str) -> list[str]:
    """:data:`RELAXATIONS` under ``rule``, as verification specs."""
    return [str(Verification(rule, Relax.parse(text))) for text in RELAXATIONS]


def overlap_rows(overrides: dict, n_sequences: int, seq_len: int) -> list[dict]:
    """How often plain top-10 siblings' proximity sets overlap, per world and relaxation."""
    rows = []
    for w in WORLDS:
        world = LatentWorld.preset(w, **overrides)
        for text in RELAXATIONS[1:]:
            st = sibling_overlap(world, Relax.parse(text), top_k=10, n_sequences=n_sequences, seq_len=seq_len)
            rows.append({"world": w, "relax": text, **{k: round(v, 4) if isinstance(v, float) else v
                                                        for k, v in st.__dict__.items()}})
    return rows


def root_budget(world: LatentWorld, relax: Relax, selector: ChildSelector | None, n_sequences: int,
                seq_len: int) -> dict:
    """At the root of sampled positions, with 10 children (top-10 of q, or the selector's): exact R1
    acceptance, the target mass of the children, the merged mass M and its cap (Theorem 6)."""
    nb = world.neighbours(relax.k)
    acc, mass, merged, cap = [], [], [], []
    from relaxspec.simulate.rng import stream_key, uniform

    for s in range(n_sequences):
        key = np.uint64(stream_key(np.int64(0), np.int64(s)))
        z, h = world.initial(key)
        for t in range(seq_len):
            p, q = world.target_probs(z), world.draft_probs(z, h)
            kids = top_ranked(q, 10) if selector is None else selector.select(q, 10)[0]
            out = node_outcome(p, kids, Verification("r1", relax), neighbours=nb)
            d = r1_distortion(p, kids, relax=relax, neighbours=nb)
            acc.append(1.0 - out.reject_prob)
            mass.append(float(p[kids].sum()))
            merged.append(d.merged)
            cap.append(d.nominal)
            x = min(int(np.searchsorted(np.cumsum(p), uniform(key, t) * p.sum(), side="right")), p.size - 1)
            z, h = world.advance(z, h, x)
    return {"acceptance": np.mean(acc), "p_children": np.mean(mass), "merged": np.mean(merged),
            "merged_cap": np.mean(cap)}


def ceiling_rows(overrides: dict, n_sequences: int, seq_len: int,
                 budget_positions: tuple[int, int]) -> list[dict]:
    """Why (not): tokens per step with a perfect drafter (q = p), and the root's merged-mass budget."""
    rows = []
    for w in WORLDS:
        world = LatentWorld.preset(w, **overrides)
        par = world.params
        perfect = LatentWorld.preset(w, draft_beta=par.beta, draft_sigma=0.0, draft_token_noise=0.0,
                                     **overrides)
        for text in RELAXATIONS[1:]:
            relax = Relax.parse(text)
            nb = world.neighbours(relax.k)
            walk = ChildSelector("walk", relax, nb)
            row = {"world": w, "relax": text}
            for name, sel in (("top10", None), ("walk10", walk)):
                b = root_budget(world, relax, sel, *budget_positions)
                row.update({f"{name}_{k}": round(float(v), 4) for k, v in b.items()})
            a = measure_positional_acceptance(perfect, Verification(rule="r1", relax=relax), width=16,
                                              n_sequences=16,
                                              seq_len=64, seed=1)
            for name, pol in (("eagle2", Eagle2Tree(10, 4, NODES + 1)),
                              ("latent_walk", LatentAwareTree(10, 4, NODES + 1, relax=relax, neighbours=nb,
                                                              mode="walk")),
                              ("sequoia", SequoiaTree(a, NODES, 8))):
                res = run(perfect, pol, Verification(rule="r1", relax=relax), n_sequences=n_sequences,
                          seq_len=seq_len,
                          seed=0)
                row[f"perfect_{name}"] = round(res.mean_tokens_per_step, 4)
            rows.append(row)
    return rows


# ---------------------------------------------------------------- the shipped model
def shipped_rows(out: Path, n_images: int, n_trace: int, cost: CostModel) -> list[dict]:
    """Every policy on the shipped model with the EAGLE head: FD, class accuracy, tokens per step, depths."""
    import torch

    from relaxspec.mini.decoding import DecodeConfig, make_decoder
    from relaxspec.mini.quality import generate_config, summarise
    from relaxspec.mini.shipped import load_mini
    from relaxspec.reference.capture import capture_trace
    from relaxspec.simulate.acceptance import trace_positional_acceptance
    from relaxspec.simulate.worlds import TraceWorld

    torch.set_num_threads(1)  # one core each: the worlds can run beside (--skip-worlds / --skip-shipped)
    mini = load_mini()
    nb = mini.neighbours()
    eagle = f"eagle2:10,4,{NODES + 1}"
    # the trace the Sequoia vectors are measured on (exact EAGLE-2, seed 1: not the table's images)
    base = DecodeConfig("trace EAGLE-2", tree=eagle)
    trace_dir = out / "trace"
    capture_trace(make_decoder(mini, base), trace_dir, [i % 10 for i in range(n_trace)], seed=1,
                  neighbours=nb,
                  codebook=mini.tokenizer.codebook(), model="mini-fashion-mnist target (exact EAGLE-2)",
                  checkpoint_sha256=mini.checkpoint_sha256("target"), resume=True, progress=True)
    world = TraceWorld(trace_dir)
    configs = [DecodeConfig("AR")]
    vectors: dict[tuple[str, str, str], tuple[float, ...]] = {}  # Sequoia vectors, each measured once
    for text in SHIPPED_RELAX:
        relax = Relax.parse(text)

        def vector(mode: str, measured: Relax, relax: Relax = relax) -> tuple[float, ...]:
            key = (mode, str(measured), str(relax))
            if key not in vectors:
                sel = ChildSelector(mode, relax, None if relax.is_exact else nb)
                a = trace_positional_acceptance(world, Verification(rule="r1", relax=measured), width=16,
                                                selector=sel)
                vectors[key] = tuple(round(float(x), 6) for x in a)
            return vectors[key]

        # (spec, verification, how its Sequoia vector is measured: selection mode and the rule's relaxation)
        r1, r2 = Verification(Rule.R1, relax), Verification(Rule.R2, relax)
        specs = [(eagle, r1, None), ("static:naive_extend_57", r1, None),
                 ("static:naive_extend_57", r2, None), (f"ddd:10,11,5/7/9,-0.3,{NODES + 1}", r1, None),
                 ("sequoia-lossless:57,8", r1, ("q", Relax.none())), ("sequoia:57,8", r1, ("q", relax)),
                 (f"latent:10,4,{NODES + 1}", r1, None), (f"latent-diverse:10,4,{NODES + 1}", r1, None),
                 (f"latent-walk:10,4,{NODES + 1}", r1, None), (f"latent-walk:10,8,{NODES + 1}", r1, None),
                 ("sequoia-diverse:57,8", r1, ("diverse", relax)),
                 ("sequoia-walk:57,8", r1, ("walk", relax)),
                 ("costaware:57,8,walk", r1, ("walk", relax))]
        for spec, verification, measured in specs:
            lossless_ok = spec in (eagle, "static:naive_extend_57")
            if spec not in SHIPPED_TREES or (relax.is_exact and not lossless_ok):
                continue
            configs.append(DecodeConfig(f"{spec} {verification.rule} {text}", tree=spec,
                                        verification=verification,
                                        acceptance=vector(*measured) if measured else None,
                                        cost_table=str(cost.path), cost_model=cost.model))
    rows = []
    for c in tqdm(configs, desc="shipped configurations", unit="config"):
        records = generate_config(mini, c, n_images, out, progress=False)
        row = summarise(mini, c, records)
        spec = c.name.split(" ")[0] if not c.is_ar else "ar"
        depths = [d for r in records for d in r.get("tree_depths", [])]
        steps = [len(r["emitted"]) for r in records]
        row.update({"world": "shipped", "tree": spec, "verification": str(c.verification),
                    "mean_tree_depth": float(np.mean(depths)) if depths else 0.0,
                    "mean_accepted_depth": row["tokens_per_step"] - 1.0,
                    "speculative_steps": int(np.sum(steps))})
        rows.append(row)
    return rows


# ---------------------------------------------------------------- the table
def verification_of(row: dict) -> Verification:
    """What a row (a sweep's or :func:`shipped_rows`') was verified with: its ``verification`` column."""
    return Verification.parse(row["verification"])


def world_table(rows: list[dict], cost: CostModel) -> tuple[list[str], list[dict]]:
    """Markdown rows of the synthetic table and, per (world, relaxation), the goal's comparison."""
    lines = ["| world | relaxation | policy | rule | tokens/step | accepted depth | tree depth | nodes | "
             "draft calls | TV bound/sequence | TV bound/token | speedup (cost model) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for w in WORLDS:
        for text in RELAXATIONS:
            sel = [r for r in rows if r["world"] == w and verification_of(r).relax == Relax.parse(text)]
            order = list(LABELS)
            sel.sort(key=lambda r: (order.index(r["tree"]), verification_of(r).rule))
            for r in sel:
                s = cost.speedup(r["mean_tokens_per_step"], r["mean_tree_size"] + 1,
                                 r["draft_calls_per_step"])
                new = "**" if r["tree"] in NEW else ""
                lines.append(
                    f"| {w} | {relax_label(text)} | {new}{LABELS[r['tree']]}{new} | {_rule(r)} | "
                    f"{r['mean_tokens_per_step']:.3f} ± {r['se_tokens_per_step']:.3f} | "
                    f"{r['mean_accepted_depth']:.3f} | {r['mean_tree_depth']:.2f} | "
                    f"{r['mean_tree_size']:.1f} | "
                    f"{r['draft_calls_per_step']:.2f} | {fmt_tv(r['tv_bound_per_sequence'])} | "
                    f"{fmt_tv(r['tv_bound_per_token'])} | {s:.2f} |")
            verdicts.append(compare(w, text, sel, "mean_tokens_per_step", "se_tokens_per_step"))
    return lines, verdicts


def _rule(row: dict) -> str:
    """A row's rule as the tables write it (``R1``)."""
    return verification_of(row).rule.upper()


def shipped_tv(row: dict) -> float:
    """The shipped rows' TV bound (NaN for relaxed R2: its per-step TV is not computed exactly)."""
    v = verification_of(row)
    return float("nan") if v.samples_drafts and not v.relax.is_exact else row["tv_bound_per_sequence"]


def fmt_tv(x: float) -> str:
    return "n/a (R2)" if not np.isfinite(x) else f"{x:.3f}"


def compare(world: str, text: str, rows: list[dict], col: str, se_col: str | None) -> dict:
    """Best new policy at the equal budget (cost-aware excluded) against the best existing one, both verified
    with R1 (R2's distortion is not bounded by the relaxation: docs/theory.md, Finding 3)."""
    equal = [r for r in rows
             if not r["tree"].startswith("costaware") and verification_of(r).rule.is_point_mass]
    old = max((r for r in equal if r["tree"] in EXISTING), key=lambda r: r[col])
    new = max((r for r in equal if r["tree"] in NEW), key=lambda r: r[col])
    gain = new[col] / old[col] - 1.0
    se = None
    if se_col:
        se = (new[col] / old[col]) * np.hypot(new[se_col] / new[col], old[se_col] / old[col])
    return {"world": world, "relax": text, "best_existing": f"{LABELS[old['tree']]} {_rule(old)}",
            "existing": old[col], "best_new": LABELS[new["tree"]], "new": new[col], "gain": gain,
            "gain_se": se, "new_row": new, "old_row": old}


def shipped_table(rows: list[dict]) -> tuple[list[str], list[dict]]:
    lines = ["| relaxation | policy | rule | tokens/step | accepted depth | tree depth | "
             "target forwards/image | TV bound/sequence | FD | class accuracy |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for text in ["none"] + SHIPPED_RELAX[1:]:
        sel = [r for r in rows if verification_of(r).relax == Relax.parse(text) and r["tree"] != "ar"]
        if text == "none":
            sel = [r for r in rows if r["tree"] == "ar"] + sel
        for r in sel:
            name = "AR sampling" if r["tree"] == "ar" else LABELS[r["tree"]]
            new = "**" if r["tree"] in NEW else ""
            lines.append(f"| {relax_label(text)} | {new}{name}{new} | {_rule(r)} | "
                         f"{r['tokens_per_step']:.3f} | {r['mean_accepted_depth']:.3f} | "
                         f"{r['mean_tree_depth']:.2f} | "
                         f"{r['target_forwards_per_image']:.1f} | {fmt_tv(shipped_tv(r))} | "
                         f"{r['fd']:.2f} | {r['class_accuracy']:.2f} |")
        spec = [r for r in sel if r["tree"] != "ar"]
        if text != "none" and any(r["tree"] in NEW for r in spec):
            verdicts.append(compare("shipped", text, spec, "tokens_per_step", None))
    return lines, verdicts


def figure(rows: list[dict], out: Path) -> list[Path]:
    """Tokens per step against the TV bound per token (R1), one panel per world, one line per policy."""
    from relaxspec.figstyle import pyplot, save, subplots

    plt = pyplot(headless=True)
    fig, axes = subplots(1, 2, width="full", height=2.8)
    for ax, w in zip(axes, WORLDS, strict=True):
        for i, tree in enumerate(LABELS):
            for kind, marker in ((RelaxKind.ADDITIVE, "o"), (RelaxKind.MULTIPLICATIVE, "s")):
                sel = [r for r in rows if r["world"] == w and r["tree"] == tree
                       and verification_of(r).rule.is_point_mass
                       and verification_of(r).relax.kind in (RelaxKind.NONE, kind)]
                sel.sort(key=lambda r: r["tv_bound_per_token"])
                ax.plot([r["tv_bound_per_token"] for r in sel], [r["mean_tokens_per_step"] for r in sel],
                        marker=marker, ls="-" if tree in NEW else "--", color=f"C{i % 10}",
                        label=LABELS[tree] if kind is RelaxKind.ADDITIVE else None)
        ax.set_xlabel("TV bound per token (sum of exact node TVs / tokens)")
        ax.set_ylabel("tokens per step")
        ax.set_title(f"{w} world (o: LANTERN δ, □: LANTERN++ λ)")
        ax.grid(alpha=0.3)
    axes[1].legend(loc="lower right", fontsize=4.5)
    fig.tight_layout()
    paths = save(fig, out, "tradeoff")
    plt.close(fig)
    return paths


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    ap = study_parser("relaxation_trees", __doc__, quick_images=4)
    ap.add_argument("--cost-table", default=str(DEFAULT_TABLE),
                    help="latency CSV (benchmarks/decoder_bench.py)")
    ap.add_argument("--cost-model", default="GPT-B", help="model rows for the worlds (V = 16384)")
    ap.add_argument("--shipped-cost-model", default="GPT-S", help="model rows for the shipped model")
    ap.add_argument("--shipped-images", type=int, default=100, help="images per shipped-model configuration")
    ap.add_argument("--trace-images", type=int, default=20, help="images of the trace Sequoia is measured on")
    ap.add_argument("--skip-worlds", action="store_true",
                    help="only generate the shipped-model images (run beside a --skip-shipped run)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    overrides, out = study_setup(args, "relaxation_trees", shipped_images=4, trace_images=2)
    cost = {"table": args.cost_table, "model": args.cost_model}
    table = CostModel.from_table(args.cost_table, args.cost_model)
    shipped_lines: list[str] = []
    verdicts: list[dict] = []
    if not args.skip_shipped:
        scost = CostModel.from_table(args.cost_table, args.shipped_cost_model)
        srows = shipped_rows(out / "shipped", args.shipped_images, args.trace_images, scost)
        write_csv(out / "shipped.csv", srows)
        shipped_lines, verdicts = shipped_table(srows)
    if args.skip_worlds:
        return 0
    for cfg in sweep_configs(args.sequences, args.seq_len, overrides, cost, args.threads):
        run_sweep(cfg, out / "worlds.csv")
    rows = [r for r in load(out / "worlds.csv").to_dict("records")  # with the verification's views
            if r["n_sequences"] == args.sequences and r["seq_len"] == args.seq_len]
    pos = (4, 32) if args.quick else (8, 64)
    if not (out / "overlap.csv").exists():
        write_csv(out / "overlap.csv", overlap_rows(overrides, *pos))
    if not (out / "ceiling.csv").exists():
        write_csv(out / "ceiling.csv", ceiling_rows(overrides, args.sequences, args.seq_len, pos))
    lines, world_verdicts = world_table(rows, table)
    verdicts = world_verdicts + verdicts
    figure(rows, out)
    goal = "## Goal: best new vs best existing policy, R1, 57 nodes, same relaxation"
    report = ["## Synthetic worlds", "", *lines, "", "## Shipped model", "",
              *(shipped_lines or ["(skipped)"]), "", goal, "",
              "| setting | relaxation | best existing | tokens/step | best new | tokens/step | gain |",
              "|---|---|---|---|---|---|---|"]
    for v in verdicts:
        se = f" ± {100 * v['gain_se']:.1f}%" if v["gain_se"] is not None else ""
        report.append(f"| {v['world']} | {relax_label(v['relax'])} | {v['best_existing']} | "
                      f"{v['existing']:.3f} | {v['best_new']} | {v['new']:.3f} | "
                      f"{100 * v['gain']:+.1f}%{se} |")
    shipped_cost = "" if args.skip_shipped else f", {args.shipped_cost_model} (shipped model)"
    report += ["", f"Cost model: {table} (worlds){shipped_cost}; {time.perf_counter() - t0:.0f} s.", ""]
    (out / "table.md").write_text("\n".join(report))
    with open(out / "verdicts.json", "w") as f:
        json.dump([{k: v for k, v in d.items() if not k.endswith("_row")} for d in verdicts], f, indent=1)
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
