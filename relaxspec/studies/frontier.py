"""One comparison of every method (issues 14, 15 and 29): tokens per target forward against distortion.

    python benchmarks/frontier.py                 # worlds + shipped model, resumable; writes docs/frontier.md
    python benchmarks/frontier.py --skip-shipped  # the synthetic worlds only
    python benchmarks/frontier.py --quick         # smoke run, a few minutes (results/frontier-quick)

Every method of :func:`relaxspec.studies.frontier_methods.methods` is one row: AR, EAGLE-2 exact, LANTERN
delta, LANTERN++ lam on the static tree (R2), SJD, GSD at G in {3, 10, 25, 50}, Cool-SD at two
strengths, traversal verification and the budgeted relaxation (issue 15), and the 2026 frontier (issue
29): SCD, SJD-PAC (+PD, +PD+AC), VVS, and the budgeted relaxation on SCD's and SJD-PAC's windows. In the
worlds of :data:`WORLDS` (``simulate.run``, 256-token sequences, seed 0): tokens per target forward (a VVS
skip step's tokens count with no forward) and the exact TV per token (the sum of the exact TVs of the
nodes that decided each token over the tokens emitted; SPEC 9.4 for the boosted rules, the proved bound
for ours); SJD and SCD also at every window of ``SCAN_WINDOWS``. On the shipped model (the reference
decoder, the same classes and uniforms in every row): tokens per target forward, FD with its bootstrap sd
against the noise floor, class accuracy. Outputs under ``--out``: ``worlds.csv`` (sweep rows, resumable),
``skips.jsonl`` (the VVS runs, resumable: ``relaxspec.studies.advise``'s per-sequence totals, which
count target forwards), ``shipped/`` (per-image records, resumable), ``table.md``, ``verdicts.json`` and
the figure ``frontier``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from relaxspec.results import config_key, read_results
from relaxspec.studies.frontier_claims import budget_claims, claims_2026, verdicts
from relaxspec.studies.frontier_methods import Method, methods, neighbour_k, scan_methods
from relaxspec.studies.frontier_shipped import (
    SHIPPED_MODELS,
    shipped_configs,
    shipped_methods,
    shipped_optimality_rows,
    shipped_rows,
    shipped_table,
)
from relaxspec.studies.optimality import fmt_tv, optimality_table, world_optimality_row
from relaxspec.studies.study_options import option_error, study_parser, study_setup
from relaxspec.sweep import SweepConfig, jobs, run_sweep

WORLDS = ["ambiguous", "confident", "mini-ambiguous-grid"]
"""The synthetic worlds: the two presets of SPEC 6 (every prefix change redraws every later state), and
the world fitted to the shipped ambiguous model's context sensitivity on its token grid (SPEC 11), where
a kept or coupled Jacobi draft can survive a rejection before it."""
SKIPS = "skips.jsonl"
# --quick, a smoke run of every method in a few minutes on 2 cores (BENCHMARKS.md): the worlds at
# study_options.QUICK_WORLD's V, this many shipped images per method, and the shipped optimality row over
# the first QUICK_TRACE_NODES tree nodes of one image (each node's optimum costs about 0.3 s:
# frontier_shipped).
QUICK_SHIPPED_IMAGES = 3
FULL_SEQUENCES = 16
"""Sequences per world row of a full run: the setting of docs/frontier.md's table (its worlds take about 34
minutes on 2 cores, docs/frontier.md)."""


def skips_verification(method: Method) -> bool:
    """Whether a method's steps may skip the target forward (VVS): its tokens per forward are not its
    tokens per step, so it runs outside the sweep's CSV (:func:`world_rows`)."""
    from relaxspec.core.trees.spec import tree_kind

    return tree_kind(method.tree) == "vvs"


def world_methods() -> list[Method]:
    """What the worlds run: every method but AR and the shipped-only settings, and the window scan."""
    rows = [m for m in methods() if m.tree != "ar" and not m.shipped_only]
    return rows + [m for m in scan_methods() if (m.tree, m.verification) not in {(r.tree, r.verification)
                                                                                 for r in rows}]


def world_k(world: str, overrides: dict) -> int:
    """The proximity-set size in ``world``: :func:`~relaxspec.studies.frontier_methods.neighbour_k` at the
    V it runs at."""
    return neighbour_k(world_vocab(overrides)[world])


def world_rows(out: Path, n_sequences: int, seq_len: int, overrides: dict, threads: int = 1) -> list[dict]:
    """Run (resuming) every method of :func:`world_methods` in every world, each on ``threads`` Numba threads
    (the same numbers on any count); returns one record per run (``world``, ``tree``, ``verification``,
    ``tokens`` per target forward, its ``se``, ``tv`` per token)."""
    path, keys = out / "worlds.csv", set()
    wanted = world_methods()

    def sweep(batch: list[Method]) -> None:
        for m in tqdm(batch, desc="world methods", unit="method"):
            for w in WORLDS:
                v = m.verification_for(world_k(w, overrides))
                d = {"worlds": [w], "trees": [m.tree], "verifications": [str(v)], "n_sequences": n_sequences,
                     "seq_len": seq_len, "seed": 0, "threads": threads,
                     **({"world_overrides": overrides} if overrides else {})}
                cfg = SweepConfig.from_dict(d, source="frontier")
                keys.update(config_key(j.row_config(cfg)) for j in jobs(cfg))
                run_sweep(cfg, path, progress=False)

    # the budget on windows last (minutes a row: proximity masses at every window position), so that an
    # interrupted run already holds every anchor, the scan and VVS, which the claims read
    runnable = [m for m in wanted if not skips_verification(m)]
    sweep([m for m in runnable if not budget_on_window(m)])
    skips = _skip_records(out, [m for m in wanted if skips_verification(m)], n_sequences, seq_len, overrides,
                          threads=threads)
    sweep([m for m in runnable if budget_on_window(m)])
    return [_sweep_record(r) for r in read_results(path) if config_key(r) in keys] + skips


def budget_on_window(method: Method) -> bool:
    """Whether a method runs the budgeted relaxation on Jacobi, coupled or SJD-PAC windows (the slowest
    rows of the comparison)."""
    from relaxspec.core.trees.spec import draft_source

    return method.verification_for(1).uses_budget and draft_source(method.tree).is_window


def read_world_rows(out: Path, n_sequences: int, seq_len: int, overrides: dict) -> list[dict]:
    """The records :func:`world_rows` would return, from what ``out`` holds (nothing is run)."""
    done = read_results(out / "worlds.csv") if (out / "worlds.csv").exists() else []
    rows = [_sweep_record(r) for r in done if r["n_sequences"] == n_sequences and r["seq_len"] == seq_len]
    return rows + _skip_records(out, [m for m in world_methods() if skips_verification(m)], n_sequences,
                                seq_len, overrides, run=False)


def _sweep_record(r: dict) -> dict:
    """A sweep row as a record (a step is one target forward there)."""
    return {"world": r["world"], "tree": r["tree"], "verification": r["verification"],
            "tokens": r["mean_tokens_per_step"], "se": r["se_tokens_per_step"], "tv": r["tv_bound_per_token"]}


def _skip_records(out: Path, wanted: list[Method], n_sequences: int, seq_len: int, overrides: dict,
                  run: bool = True, threads: int = 1) -> list[dict]:
    """The VVS runs (resuming from ``out/skips.jsonl``, each on ``threads`` Numba threads): tokens per target
    forward from the per-sequence totals ``relaxspec.studies.advise`` keeps
    (:class:`~relaxspec.studies.advise.Run`)."""
    from relaxspec.core.trees.spec import parse_tree
    from relaxspec.results_lock import ResultsLock, append_line
    from relaxspec.simulate.engine import run as simulate
    from relaxspec.simulate.worlds import LatentWorld
    from relaxspec.studies.advise import from_result, ratio, ratio_se, read_runs, run_key, tv_kind

    path, records = out / SKIPS, []
    with ResultsLock(path):
        done = read_runs(path)
        for w in WORLDS:
            world = None
            for m in wanted:
                v = m.verification_for(world_k(w, overrides))
                key = run_key(w, overrides, m, str(v), n_sequences, seq_len, 0)
                if key not in done and run:
                    if world is None:
                        world = LatentWorld.preset(w, **overrides)
                        world.neighbours(world_k(w, overrides))
                    res = simulate(world, parse_tree(m.tree), v, n_sequences=n_sequences, seq_len=seq_len,
                                   seed=0, threads=threads)
                    done[key] = from_result(m, res, tv_kind(m, "vvs", v))
                    append_line(path, json.dumps(done[key].as_dict(key)) + "\n")
                if key in done:
                    r = done[key]
                    records.append({"world": w, "tree": m.tree, "verification": str(v),
                                    "tokens": ratio(r.tokens, r.forwards),
                                    "se": ratio_se(r.tokens, r.forwards), "tv": ratio(r.tv, r.tokens)})
    return records


def world_vocab(overrides: dict) -> dict[str, int]:
    """The vocabulary size V each world runs at: the overrides' (``--quick``), else its preset's."""
    from relaxspec.simulate.worlds import PRESETS

    return {w: int(overrides.get("vocab_size", PRESETS[w].vocab_size)) for w in WORLDS}


def _vocab_note(vocab: dict[str, int]) -> str:
    sizes = sorted(set(vocab.values()), key=lambda V: -list(vocab.values()).count(V))
    if len(sizes) == 1:
        return f"V = {sizes[0]}"
    return f"V = {sizes[0]}; " + "; ".join(f"{w}: V = {V}" for w, V in vocab.items() if V != sizes[0])


def world_table(rows: list[dict], overrides: dict, method_list: list[Method] | None = None) -> list[dict]:
    """One record per (world, method) of ``method_list`` (default :func:`methods`), in table order:
    setting, method, family, tokens per forward (± se) and TV per token; the worlds ran with ``overrides``
    (their V sets the proximity-set size, :func:`world_k`)."""
    out = []
    for w in WORLDS:
        for m in methods() if method_list is None else method_list:
            if m.shipped_only:
                continue
            if m.tree == "ar":
                out.append({"setting": w, "method": "AR", "family": "ar", "lossy": False, "tokens": 1.0,
                            "se": 0.0, "tv": 0.0})
                continue
            hit = [r for r in rows if r["world"] == w and r["tree"] == m.tree
                   and r["verification"] == str(m.verification_for(world_k(w, overrides)))]
            if hit:
                r = hit[-1]
                out.append({"setting": w, "method": m.label, "family": m.family, "lossy": m.lossy,
                            "tokens": r["tokens"], "se": r["se"], "tv": r["tv"]})
    return out


def scan_table(rows: list[dict], overrides: dict) -> list[dict]:
    """:func:`world_table` of the window-length scan (:func:`scan_methods`)."""
    return world_table(rows, overrides, scan_methods())


def optimality_rows(overrides: dict, n_sequences: int, seq_len: int, drafts: int = 4,
                    group: int = 10) -> list[dict]:
    """:func:`relaxspec.studies.optimality.world_optimality_row` in each of :data:`WORLDS`."""
    return [world_optimality_row(w, overrides, n_sequences, seq_len, drafts, group) for w in WORLDS]


# ---------------------------------------------------------------- table, figure
def table(world: list[dict], shipped: list[dict], n_images: int, floors: dict[str, dict] | None,
          vocab: dict[str, int] | int, scan: list[dict] | None = None) -> list[str]:
    """The report's tables; ``vocab``: the V the worlds ran at (:func:`world_vocab`; one V for all);
    ``scan``: the window-length scan's rows (:func:`scan_table`); ``floors``: each shipped model's noise
    floor (``mini.quality.noise_floor``'s record)."""
    vocab = vocab if isinstance(vocab, dict) else dict.fromkeys(WORLDS, int(vocab))
    lines = [f"### Synthetic worlds ({_vocab_note(vocab)})", "",
             "| world | method | tokens per target forward | exact TV per token |", "|---|---|---|---|"]
    for r in world:
        lines.append(f"| {r['setting']} | {r['method']} | {r['tokens']:.3f} ± {r['se']:.3f} | "
                     f"{fmt_tv(r['tv'])} |")
    if scan:
        Ls = list(dict.fromkeys(r["method"].split("L=")[1] for r in scan))
        lines += ["", "### Window length: SJD against SCD (tokens per target forward)", "",
                  "| world | method | " + " | ".join(f"L = {L}" for L in Ls) + " |",
                  "|---|---|" + "---|" * len(Ls)]
        for w in dict.fromkeys(r["setting"] for r in scan):
            for name in ("SJD", "SCD"):
                by = {r["method"]: r for r in scan if r["setting"] == w}
                cells = [_fmt_tokens(by.get(f"{name} L={L}")) for L in Ls]
                lines.append(f"| {w} | {name} | " + " | ".join(cells) + " |")
    return lines + shipped_table(shipped, floors or {})


def _fmt_tokens(r: dict | None) -> str:
    return "" if r is None else f"{r['tokens']:.3f} ± {r['se']:.3f}"


def figure(world: list[dict], shipped: list[dict], out: Path, name: str = "frontier") -> list[Path]:
    """Pareto panels: tokens per forward against exact TV per token (each world) and against FD (shipped)."""
    from relaxspec.figstyle import figure_legend, method_style, panel_label, pyplot, save, subplots

    plt = pyplot(headless=True)
    models = list(dict.fromkeys(r["setting"] for r in shipped))
    # the worlds in the first row, the shipped models in the second (a panel a third of the page wide)
    ncols, nrows = max(len(WORLDS), len(models)), 2 if models else 1
    fig, axes = subplots(nrows, ncols, width="full", height=2.4 * nrows)
    axes = np.atleast_1d(axes).ravel()
    xlabel = "TV per token\n(exact; ours: proved bound)"
    panels = [(w, [r for r in world if r["setting"] == w], "tv", xlabel) for w in WORLDS]
    panels += [(m.replace("shipped", "shipped model"), [r for r in shipped if r["setting"] == m], "fd",
                "FD (Fashion-MNIST features)") for m in models]
    for ax in axes[len(panels):]:
        ax.remove()
    for i, (ax, (title, rows, xcol, xlabel)) in enumerate(zip(axes, panels, strict=False)):
        for fam in dict.fromkeys(r["family"] for r in rows):
            pts = sorted((r for r in rows if r["family"] == fam and np.isfinite(r[xcol])),
                         key=lambda r: r[xcol])
            if not pts:
                continue
            st = method_style(fam)
            ax.plot([r[xcol] for r in pts], [r["tokens"] for r in pts], color=st.color, marker=st.marker,
                    ls=st.linestyle, label=st.label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("tokens per target forward")
        ax.set_title(title)
        panel_label(ax, "abcdef"[i])
    fig.tight_layout()
    figure_legend(fig)
    paths = save(fig, out, name)
    plt.close(fig)
    return paths


def missing_rows(world: list[dict], shipped: list[dict], models: list[str],
                 with_2026: bool = True) -> list[str]:
    """``setting: method`` of every row the comparison has but ``world`` (:func:`world_table`) and
    ``shipped`` (the shipped rows of ``models``) lack, in table order."""
    have = {(r["setting"], r["method"]) for r in world + shipped}
    want = [(w, m.label) for w in WORLDS for m in methods() if not m.shipped_only]
    want += [(name, m.label) for name in models for m in shipped_methods(with_2026)]
    return [f"{s}: {label}" for s, label in want if (s, label) not in have]


def _shipped_models(option: str | None, quick: bool) -> list[str]:
    """The shipped models a run generates on (``--shipped-models``; default both, ``--quick`` the first)."""
    if option is None:
        return ["shipped"] if quick else list(SHIPPED_MODELS)
    names = [n.strip() for n in option.split(",") if n.strip()]
    for n in names:
        if n not in SHIPPED_MODELS:
            raise ValueError(f"--shipped-models: unknown model {n!r}; expected some of "
                             f"{tuple(SHIPPED_MODELS)}")
    return names


def main(argv: list[str] | None = None) -> tuple[list[str], Path]:
    """Run the comparison; returns the report's lines and the output folder."""
    ap = study_parser("frontier", __doc__, quick_images=QUICK_SHIPPED_IMAGES, sequences=FULL_SEQUENCES)
    ap.add_argument("--shipped-images", type=int, default=200, help="images per shipped-model method")
    ap.add_argument("--report-only", action="store_true",
                    help="generate no shipped image: score the images already generated")
    ap.add_argument("--skip-worlds", action="store_true",
                    help="run no world configuration (report the rows already in OUT/worlds.csv)")
    ap.add_argument("--shipped-models", default=None,
                    help=f"comma-separated shipped models of {tuple(SHIPPED_MODELS)} (default: both; "
                         "--quick: shipped)")
    ap.add_argument("--ambiguous-images", type=int, default=None,
                    help="images per method on the shipped ambiguous model (default: --shipped-images; its "
                         "decoding is 4-15x slower per image)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    overrides, out = study_setup(args, "frontier", shipped_images=QUICK_SHIPPED_IMAGES)
    try:  # checked before the worlds run, not after
        models = _shipped_models(args.shipped_models, args.quick)
    except ValueError as err:
        option_error("frontier", str(err))
    if args.skip_worlds:
        rows = read_world_rows(out, args.sequences, args.seq_len, overrides)
    else:
        rows = world_rows(out, args.sequences, args.seq_len, overrides, args.threads)
    world, scan = world_table(rows, overrides), scan_table(rows, overrides)
    shipped, floors = [], {}
    for m in [] if args.skip_shipped else models:
        n = args.shipped_images
        if m == "shipped ambiguous" and args.ambiguous_images:
            n = args.ambiguous_images
        rows_m, floors[m] = shipped_rows(out, n, not args.report_only, m, with_2026=not args.quick)
        shipped += rows_m
    fd_floors = {m: max(f["fd_between"].values()) for m, f in floors.items() if f}
    claims = (verdicts(world + shipped, fd_floors) + budget_claims(world + shipped, fd_floors)
              + claims_2026(world + shipped, scan, fd_floors))
    opt_path = out / "optimality.json"
    if not opt_path.exists() and not args.skip_worlds:
        opt_path.write_text(json.dumps(optimality_rows(overrides, *((2, 16) if args.quick else (2, 32))),
                                       indent=1))
    opt_rows = json.loads(opt_path.read_text()) if opt_path.exists() else []
    if not args.skip_shipped and "shipped" in models:  # a trace of the first shipped model's static tree
        opt_rows += shipped_optimality_rows(out / "shipped", args.quick)
    figure(world, shipped, out)
    gaps = missing_rows(world, shipped, [] if args.skip_shipped else models, with_2026=not args.quick)
    report = [*table(world, shipped, args.shipped_images, floors, world_vocab(overrides), scan), "",
              *([f"Not measured yet (the run was stopped; the same command resumes it): {'; '.join(gaps)}.",
                 ""] if gaps else []),
              "### Claims", "", *claims, "",
              "### Distance to the optimal multi-draft acceptance (SPEC 9.7)", "",
              *(optimality_table(opt_rows) if opt_rows else
                ["(not run: `--skip-worlds` reports only what exists)"]), "",
              f"{args.sequences} sequences x {args.seq_len} tokens per world row; this run: "
              f"{time.perf_counter() - t0:.0f} s wall, world rows on {args.threads} Numba threads."]
    (out / "table.md").write_text("\n".join(report) + "\n")
    (out / "verdicts.json").write_text(json.dumps({"claims": claims, "noise_floor": fd_floors}, indent=1))
    return report, out


__all__ = ["WORLDS", "Method", "budget_claims", "claims_2026", "figure", "main", "methods", "missing_rows",
           "optimality_rows",
           "optimality_table",
           "read_world_rows", "scan_methods", "scan_table", "shipped_configs", "shipped_methods",
           "shipped_rows", "table", "verdicts", "world_methods", "world_rows", "world_table", "world_vocab"]
