"""``relaxspec mini ...``: the analyses of the shipped Fashion-MNIST model (tables in docs/mini_model.md).

- ``ambiguity``: token selection ambiguity of the model vs the synthetic presets (``--fit`` fits a world);
- ``quality``: FD and class accuracy per decoding configuration, tokens per step, TV bound, sample grid;
- ``validate``: traces, replay, and simulate's predicted vs the decoder's measured tokens per step;
- ``explain``: what the fitted world lacks, measured (after ``validate``: the law after a token the target
  disfavours; position acceptance along the window; VVS's verify steps after a skip);
- ``compare``: both shipped models (``weights/``, ``weights/ambiguous/``) and the worlds side by side
  (ambiguity, quality, context sensitivity kappa_m).

Every command resumes from what ``--out`` already holds. Decoding runs on one
thread: batch-2 (CFG) forwards of a small model are latency-bound, and a
second thread only adds synchronisation (28x slower on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from relaxspec.core.execution import add_scheduler_arguments

DEFAULT_OUT = Path("results/mini")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options and subcommands of ``relaxspec mini``."""
    parser.add_argument("--weights", type=Path, default=None, help="weights folder (default: weights/)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="output folder (each command resumes from what it holds)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the generated images (uniforms keyed by (seed, image index))")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    msub = parser.add_subparsers(dest="mini_command", metavar="MINI_COMMAND")
    amb = msub.add_parser("ambiguity", help="target ambiguity and drafter acceptance vs the world presets")
    amb.add_argument("--n-images", type=int, default=200, help="AR samples to measure along")
    amb.add_argument("--fit", action="store_true", help="fit a latent world to the model's statistics")
    amb.set_defaults(func=_ambiguity)
    qual = msub.add_parser("quality",
                           help="FD / class accuracy / tokens per step / TV bound per configuration")
    qual.add_argument("--n-images", type=int, default=1000, help="images per configuration")
    qual.add_argument("--configs", default=None, help="comma-separated configuration names (default: all)")
    add_scheduler_arguments(qual)  # images are generated in tasks of a few images, one torch thread each
    qual.set_defaults(func=_quality)
    val = msub.add_parser("validate", help="every method the decoder runs: traces, replay, the trace-driven "
                                           "and the fitted world's predictions vs the decoder (resumable)")
    val.add_argument("--n-sequences", type=int, default=40, help="images decoded per configuration")
    val.add_argument("--configs", default=None, help="comma-separated configuration names (default: all)")
    val.add_argument("--workers", type=int, default=1, help="worker processes (one thread each)")
    val.add_argument("--device", default="cpu", help="torch device the decoder runs on (cpu, cuda)")
    val.add_argument("--keep-traces", action="store_true", help="keep every trace (default: each is "
                                                                 "deleted once nothing reads it)")
    val.add_argument("--no-world", action="store_true", help="fit no world (no world column)")
    val.add_argument("--kappa-images", type=int, default=16, help="AR samples kappa is measured along")
    val.add_argument("--fit-rounds", type=int, default=3, help="rounds of the bisections (relaxspec fit)")
    val.add_argument("--fit-iters", type=int, default=12, help="bisection steps per knob and round")
    val.add_argument("--fit-sequences", type=int, default=32, help="world sequences per figure of the fit")
    val.add_argument("--docs", type=Path, default=None,
                     help="write the tables into this markdown file's section for the model (its markers)")
    val.add_argument("--advise-tv", type=float, default=0.05, metavar="PER_TOKEN",
                     help="the TV budget per token at which relaxspec advise picks a method in the fitted "
                          "world; its pick is decoded as one more row (a negative value: no advise)")
    val.add_argument("--report-only", action="store_true", help="run nothing: the tables of --out's rows")
    val.set_defaults(func=_validate)
    rep = msub.add_parser("report", help="markdown tables of the cards and of the analyses in --out")
    rep.set_defaults(func=_report)
    cmp = msub.add_parser("compare", help="both shipped models (weights/, weights/ambiguous/) and the worlds "
                                          "side by side: ambiguity over all and object positions, class "
                                          "accuracy, FD (writes OUT/compare/comparison.md)")
    cmp.add_argument("--n-images", type=int, default=200, help="AR samples per model")
    cmp.add_argument("--kappa-images", type=int, default=40,
                     help="samples per model along which the context sensitivity kappa_m is measured")
    cmp.add_argument("--kappa-sequences", type=int, default=16,
                     help="sequences per world preset along which kappa_m is measured")
    cmp.add_argument("--kappa-len", type=int, default=256, help="tokens per such sequence")
    cmp.set_defaults(func=_compare)
    exp = msub.add_parser("explain", help="what the fitted world lacks, measured: the law after a token "
                                          "the target disfavours, and its effect on the window budget and "
                                          "VVS rows (after validate; decodes the traces it misses)")
    exp.add_argument("--n-sequences", type=int, default=40, help="images per decoded row (validate's)")
    exp.add_argument("--kappa-images", type=int, default=16,
                     help="AR images (and world sequences) along which the off-law sensitivity is measured")
    exp.add_argument("--docs", type=Path, default=None,
                     help="write the table into this markdown file's section for the model (its markers)")
    exp.set_defaults(func=_explain)
    parser.set_defaults(func=lambda args: parser.print_help())


def _pick_configs(configs: list, spec: str | None) -> list:
    """The configurations ``--configs`` names (comma-separated; all without it), in their table order."""
    if not spec:
        return configs
    wanted = [s.strip() for s in spec.split(",")]
    names = [c.name for c in configs]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise ValueError(f"unknown configurations {unknown}; expected some of {names}")
    return [c for c in configs if c.name in wanted]


def _at_least(args: argparse.Namespace, **minimum: int) -> None:
    """Raise ``ValueError`` naming the first option ``--NAME`` below its minimum."""
    for name, lo in minimum.items():
        value = getattr(args, name)
        if value < lo:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {lo}, got {value}")


def _load(args: argparse.Namespace, drafters: bool = True):
    import torch

    from relaxspec.mini.shipped import load_mini
    from relaxspec.mini.weights import WEIGHTS_DIR

    torch.set_num_threads(1)
    return load_mini(args.weights or WEIGHTS_DIR, drafters=drafters)


def _ambiguity(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from relaxspec.mini.ambiguity import model_ambiguity, teacher_forced
    from relaxspec.mini.calibration import fit_world, model_figures, params_literal, stats_of
    from relaxspec.mini.decoding import CFG_SCALE, DecodeConfig, make_decoder
    from relaxspec.mini.fashion_mnist import NUM_CLASSES
    from relaxspec.mini.quality import QUALITY_CONFIGS, generate_config
    from relaxspec.simulate.worlds import PRESETS

    _at_least(args, seed=0, n_images=1)
    mini = _load(args)
    records = generate_config(mini, QUALITY_CONFIGS[0], args.n_images, args.out, args.seed,
                              not args.no_progress)
    tokens = np.array([r["tokens"] for r in records])
    labels = np.array([r["label"] for r in records])
    tf = teacher_forced(mini, tokens, labels, CFG_SCALE, below_root=args.fit)
    result = {"model": model_ambiguity(mini, tokens, labels, CFG_SCALE, tf), "cfg_scale": CFG_SCALE,
              "n_images": len(records), "target_sha256": mini.checkpoint_sha256("target"),
              "worlds": {name: stats_of(PRESETS[name]) for name in PRESETS}}
    if args.fit:
        base = replace(PRESETS["ambiguous"], vocab_size=tf.p.shape[1])
        positions = tokens.shape[1] - 1
        fitted, target = {}, None
        # the draft GPT reads tokens only: below the root it sees what it sees at the root (no drift)
        for drafter, q, deep in (("eagle", tf.q_eagle, tf.q_eagle_deep), ("draft_gpt", tf.q_gpt, None)):
            goals = model_figures(tf.p, q, positions, deep)
            params, figures = fit_world(goals, base, target=target)
            target = target or params
            fitted[drafter] = {"params": params_literal(params), "model": goals, "world": figures}
            print(f"{drafter}: {params_literal(params)}", flush=True)
        # greedy decoding (rule r3) is deterministic: one path per class, measured along them
        greedy = make_decoder(mini, DecodeConfig("greedy AR", verification="r3"))
        classes = np.arange(NUM_CLASSES)
        paths = np.array([greedy.generate(int(c), args.seed).tokens for c in classes])
        tg = teacher_forced(mini, paths, classes, CFG_SCALE, below_root=True)
        goals = model_figures(tg.p, tg.q_eagle, positions, tg.q_eagle_deep)
        params, figures = fit_world(goals, base, greedy=True)
        fitted["eagle-greedy"] = {"params": params_literal(params), "model": goals, "world": figures}
        print(f"eagle-greedy: {params_literal(params)}", flush=True)
        result["fitted"] = fitted
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ambiguity.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def _quality(args: argparse.Namespace) -> int:
    from relaxspec.core.execution import Executor
    from relaxspec.mini.fashion_mnist import load_sample
    from relaxspec.mini.figures import sample_grid
    from relaxspec.mini.quality import (
        IMAGES_PER_TASK,
        QUALITY_CONFIGS,
        finished_rows,
        generate_all,
        noise_floor,
        read_records,
        real_baseline,
        real_halves,
        slug,
        write_table,
    )
    from relaxspec.mini.tokenizer import decode_tokens

    _at_least(args, seed=0, n_images=2)  # FD needs two images
    configs = _pick_configs(QUALITY_CONFIGS, args.configs)
    mini = _load(args, drafters=not all(c.is_ar for c in configs))
    with Executor(args.scheduler, args.workers, tasks=-(-args.n_images // IMAGES_PER_TASK) * len(configs),
                  dashboard=not args.no_progress) as executor:
        generate_all(mini, args.out, args.n_images, configs, args.seed, not args.no_progress, executor)
    rows = finished_rows(mini, args.out)  # this run's configurations and any finished earlier in --out
    images, labels = load_sample()
    n_real = min(max(max(r["n_images"] for r in rows), 20), len(labels) // 2)
    halves = real_halves(images, labels, n_real)
    real_rows = [real_baseline(mini, *h, f"real test images {n}") for n, h in zip("AB", halves, strict=True)]
    rows = real_rows + rows
    write_table(args.out / "quality.csv", rows)
    print(noise_floor(mini, (halves[0][0], halves[1][0]), args.out))
    grid_rows = []
    finished = {r["config"] for r in rows}
    for c in (c for c in QUALITY_CONFIGS if c.name in finished):
        recs = sorted(read_records(args.out / slug(c.name) / "images.jsonl"), key=lambda r: r["index"])[:10]
        grid_rows.append((c.name, decode_tokens(mini.tokenizer, np.array([r["tokens"] for r in recs]))))
    sample_grid(grid_rows, np.arange(10), args.out / "samples.png",
                "Same class and seed per column (uniforms keyed by (seed, image index))")
    for r in rows:
        print(r)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from relaxspec.mini.validation import VALIDATION_CONFIGS, config_key
    from relaxspec.mini.validation_report import load_worlds, render, write_section
    from relaxspec.mini.validation_run import (
        WORLDS,
        FitOptions,
        pick_config,
        read_pick,
        read_rows,
        run_validation,
    )
    from relaxspec.mini.weights import WEIGHTS_DIR

    _at_least(args, seed=0, n_sequences=2, workers=1, kappa_images=2, fit_rounds=1, fit_iters=1,
              fit_sequences=2)  # a standard error needs 2 images
    configs = _pick_configs(VALIDATION_CONFIGS, args.configs)
    weights = args.weights or WEIGHTS_DIR
    out = args.out / "validation"
    if args.docs is not None and not args.docs.is_file():
        raise ValueError(f"--docs {args.docs} is not a file")
    if args.report_only:
        rows = read_rows(out / "validation.csv")
    else:
        rows = run_validation(weights, out, args.n_sequences, configs, seed=args.seed, workers=args.workers,
                              device=args.device, keep_traces=args.keep_traces, worlds=not args.no_world,
                              fit=FitOptions(args.kappa_images, args.fit_rounds, args.fit_iters,
                                             args.fit_sequences),
                              advise_tv=args.advise_tv if args.advise_tv >= 0 else None,
                              log=lambda m: print(m, flush=True))
    worlds = load_worlds(out / WORLDS, sorted({config_key(c) for c in configs}))
    model = "first model (weights/)" if Path(weights).resolve() == WEIGHTS_DIR.resolve() else \
        f"model {Path(weights).name} ({weights})"
    where = "" if args.weights is None else f" --weights {args.weights}"
    command = f"relaxspec mini{where} --out {args.out} validate --n-sequences {args.n_sequences}"
    pick = read_pick(out)
    extra = pick_config(pick) if pick else None
    lines = render(rows, configs + ([extra] if extra else []), worlds, model=model, command=command,
                   pick=pick)
    print("\n".join(lines))
    if args.docs is not None:
        write_section(args.docs, Path(weights).name, lines)
    return 0 if all(r["replay_mismatches"] == 0 for r in rows.values()) else 1


def _explain(args: argparse.Namespace) -> int:
    from relaxspec.mini.validation_report import write_section
    from relaxspec.mini.weights import WEIGHTS_DIR
    from relaxspec.mini.world_gaps import explain

    _at_least(args, seed=0, n_sequences=2, kappa_images=2)
    if args.docs is not None and not args.docs.is_file():
        raise ValueError(f"--docs {args.docs} is not a file")
    weights = args.weights or WEIGHTS_DIR
    lines = explain(weights, args.out / "validation", n_sequences=args.n_sequences,
                    kappa_images=args.kappa_images, seed=args.seed, log=lambda m: print(m, flush=True))
    where = "" if args.weights is None else f" --weights {args.weights}"
    seed = "" if args.seed == 0 else f" --seed {args.seed}"
    command = (f"relaxspec mini{where} --out {args.out}{seed} explain --n-sequences {args.n_sequences} "
               f"--kappa-images {args.kappa_images}")
    lines = ["```bash", command, "```", "", *lines]
    print("\n".join(lines))
    if args.docs is not None:
        write_section(args.docs, Path(weights).name, lines, command="explain")
    return 0


def _compare(args: argparse.Namespace) -> int:
    import torch

    from relaxspec.mini.model_comparison import compare, render

    _at_least(args, seed=0, n_images=10, kappa_images=2, kappa_sequences=2, kappa_len=10)
    torch.set_num_threads(1)
    print(render(compare(args.out / "compare", args.n_images, args.seed, not args.no_progress,
                         kappa_images=args.kappa_images, kappa_sequences=args.kappa_sequences,
                         kappa_len=args.kappa_len)))
    return 0


def _report(args: argparse.Namespace) -> int:
    from relaxspec.mini.report import render
    from relaxspec.mini.weights import WEIGHTS_DIR

    text = render(args.weights or WEIGHTS_DIR, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tables.md").write_text(text)
    print(text)
    return 0
