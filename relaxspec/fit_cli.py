"""``relaxspec fit TRACES... --out world.toml``: a world fitted to any model's captured traces.

The figures come from the traces (:mod:`simulate.fit_traces`), the context sensitivity kappa_m (SPEC
11), which traces cannot give (they hold laws only along the recorded prefixes), from a short
teacher-forced measurement on the model when one is at hand (``--model``: a shipped model's weights
folder, or the LlamaGen c2i checkpoint file ``relaxspec generate --trace`` decoded the traces with, its
shape, V, grid and guidance read from the traces' header; :mod:`mini.context_sensitivity`) or from a
file (``--kappa``: a
:meth:`simulate.context.ContextSensitivity.as_dict` JSON, e.g. measured on a LlamaGen checkpoint
elsewhere). The fit is :func:`simulate.fit_kappa.fit_world_model`; the world file
(:mod:`simulate.world_file`) holds the parameters and, under ``[fit]``, every figure and kappa beside
the model's, which the command also prints. ``relaxspec simulate`` (``worlds = ["world.toml"]``),
``world-stats`` and ``relaxspec.simulate("world.toml", ...)`` take the file by its path.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

DEFAULT_KAPPA_IMAGES = 16


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``relaxspec fit``."""
    p.add_argument("traces", nargs="+", type=Path, metavar="TRACE", help="trace folders of one model")
    p.add_argument("--out", type=Path, required=True, help="the world file to write (*.toml)")
    p.add_argument("--base", default="ambiguous",
                   help="preset or world file giving every parameter the fit does not choose (at the "
                        "traces' V)")
    p.add_argument("--model", type=Path, default=None,
                   help="the traces' model: a shipped model's weights folder (weights/, weights/ambiguous) "
                        "or the LlamaGen checkpoint file the traces were generated with (relaxspec generate "
                        "--trace): kappa is measured on it, teacher-forced")
    p.add_argument("--kappa", type=Path, default=None,
                   help="kappa_1..kappa_M measured elsewhere (JSON: kappa, stderr, units, positions)")
    p.add_argument("--kappa-images", type=int, default=DEFAULT_KAPPA_IMAGES,
                   help="AR samples of --model along which kappa is measured")
    p.add_argument("--grid-width", type=int, default=None,
                   help="the token grid's width W (default: the model's, the traces' header, else the "
                        "square root of the sequence length when it is a square)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the figures' bisections")
    p.add_argument("--iters", type=int, default=12, help="bisection steps per knob and round")
    p.add_argument("--n-sequences", type=int, default=32, help="world sequences per figure measurement")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per such sequence")
    p.add_argument("--seed", type=int, default=0, help="seed of --model's samples and of kappa's draws")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    from relaxspec.simulate.world_file import WORLD_SUFFIX, is_world_file

    for name, lo in (("kappa_images", 2), ("rounds", 1), ("iters", 1), ("n_sequences", 1), ("seq_len", 2),
                     ("seed", 0)):
        if getattr(args, name) < lo:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {lo}, got {getattr(args, name)}")
    if not is_world_file(args.out):
        raise ValueError(f"--out must name a world file ending in {WORLD_SUFFIX}, got {str(args.out)!r}")
    if args.model is not None and args.kappa is not None:
        raise ValueError("give --model or --kappa, not both (kappa is measured on the model or read)")


def _grid_width(args: argparse.Namespace | None, header_grid: int, positions: int) -> int:
    if args is not None and args.grid_width is not None:
        return args.grid_width
    if header_grid:
        return header_grid
    root = math.isqrt(positions)
    return root if root * root == positions else 0


def model_kappa(model: Path, header: Any, images: int, seed: int) -> tuple[Any, int]:
    """kappa_1..kappa_{W+1} of the traces' model and its grid width W, teacher-forced along ``images`` AR
    samples (class i % classes, uniforms keyed by (seed, i)): ``model`` is a shipped model's weights
    folder or the LlamaGen checkpoint file the traces name (``header``, a trace's); a ``ValueError``
    when it is not the model the traces were captured from."""
    if Path(model).is_dir():
        return shipped_kappa(Path(model), header.checkpoint_sha256, images, seed)
    return checkpoint_kappa(Path(model), header, images, seed)


def shipped_kappa(weights: Path, trace_sha256: str, images: int, seed: int) -> tuple[Any, int]:
    """:func:`model_kappa` of the shipped model in ``weights``."""
    import numpy as np
    import torch

    from relaxspec.mini.context_sensitivity import model_context_sensitivity
    from relaxspec.mini.decoding import CFG_SCALE, DecodeConfig, make_decoder
    from relaxspec.mini.fashion_mnist import NUM_CLASSES
    from relaxspec.mini.shipped import GRID_TOKENS, load_mini

    torch.set_num_threads(1)
    mini = load_mini(weights, drafters=False)
    sha = mini.checkpoint_sha256("target")
    if sha != trace_sha256:
        raise ValueError(f"--model {weights} is not the traces' model (weights SHA-256 {sha[:12]}, the "
                         f"traces' checkpoint {trace_sha256[:12]})")
    width = math.isqrt(GRID_TOKENS)
    ar = make_decoder(mini, DecodeConfig("AR"))
    labels = np.arange(images) % NUM_CLASSES
    tokens = np.array([ar.generate(int(c), seed, sequence=i).tokens for i, c in enumerate(labels)])
    return model_context_sensitivity(mini, tokens, labels, CFG_SCALE, width + 1, seed=seed), width


def checkpoint_kappa(path: Path, header: Any, images: int, seed: int) -> tuple[Any, int]:
    """:func:`model_kappa` of a LlamaGen c2i checkpoint: the GPT shape the header names (``relaxspec
    generate`` records ``--gpt-model``), its V, its grid (``extra["grid"]``) and guidance scale, the class
    count read off the checkpoint's class table (LlamaGen's holds the null class too); AR samples at
    the header's target sampling, whose laws kappa compares."""
    import numpy as np
    import torch

    from relaxspec.core.trace import file_sha256
    from relaxspec.mini.context_sensitivity import laws_context_sensitivity, transformer_laws
    from relaxspec.reference.checkpoint import read_state_dict
    from relaxspec.reference.decode import Decoder, DecodeSettings
    from relaxspec.reference.model import load_gpt

    if not path.is_file():
        raise ValueError(f"--model {path} is neither a shipped model's weights folder nor a checkpoint file")
    sha = file_sha256(path)
    if sha != header.checkpoint_sha256:
        raise ValueError(f"--model {path} is not the traces' model (file SHA-256 {sha[:12]}, the traces' "
                         f"checkpoint {header.checkpoint_sha256[:12]})")
    grid = header.extra.get("grid")
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError(f"--model {path}: the traces' header records no token grid (extra.grid, written by "
                         "relaxspec generate --trace)")
    table = read_state_dict(path).get("cls_embedding.embedding_table.weight")
    if table is None or table.ndim != 2 or table.shape[0] < 2:
        raise ValueError(f"--model {path} has no LlamaGen class table cls_embedding.embedding_table.weight")
    torch.set_num_threads(1)
    classes = int(table.shape[0]) - 1  # the null class's row (LlamaGen trains with class dropout)
    target = load_gpt(path, header.model, vocab_size=header.vocab_size, block_size=grid * grid,
                      num_classes=classes)
    cfg_scale = float(header.extra.get("cfg_scale", 1.0))
    sampling = header.target_sampling
    ar = Decoder(target, DecodeSettings("r1", target_sampling=sampling, draft_sampling=sampling,
                                        cfg_scale=cfg_scale))
    labels = np.arange(images) % classes
    tokens = np.array([ar.generate(int(c), seed, sequence=i).tokens for i, c in enumerate(labels)])
    laws = transformer_laws(target, labels, cfg_scale, sampling)
    return laws_context_sensitivity(laws, tokens, grid + 1, seed=seed), grid


def read_kappa(path: Path) -> Any:
    """A kappa file (``ContextSensitivity.as_dict`` JSON), checked; one-line errors naming it."""
    from relaxspec.simulate.context import ContextSensitivity

    try:
        d = json.loads(path.read_text())
        k = ContextSensitivity.from_dict(d)
    except OSError as err:
        raise ValueError(f"cannot read kappa file {path}: {err.strerror or err}") from err
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"kappa file {path} must hold JSON with lists kappa, stderr, positions and an "
                         f"integer units (ContextSensitivity.as_dict): {err}") from err
    if k.kappa.ndim != 1 or k.kappa.size < 1 or k.stderr.shape != k.kappa.shape:
        raise ValueError(f"kappa file {path}: kappa and stderr must be equal-length non-empty lists")
    return k


def fit_report(fit: Any, figures: Any, grid_width: int, kappa_source: str | None) -> dict[str, Any]:
    """The world file's ``[fit]`` table: sources and samples, then every figure and kappa beside the
    model's."""
    table: dict[str, Any] = {
        "sources": figures.sources, "vocab_size": figures.vocab_size, "sequences": figures.sequences,
        "positions": figures.positions, "drafter_roots": figures.roots, "deep_nodes": figures.deep_nodes,
        "greedy": figures.greedy, "grid_width": grid_width, "fitted": list(fit.fitted),
        "figures": {name: {"model": g, "world": w, "fitted": f,
                           **({"model_stderr": figures.stderr[name]} if name in figures.stderr else {})}
                    for name, g, w, f in fit.rows() if not name.startswith("kappa_")}}
    if fit.kappa_goal is not None:
        table["kappa"] = {"source": kappa_source, "lags": [int(m) for m in fit.kappa_goal.lags],
                          "model": [float(v) for v in fit.kappa_goal.kappa],
                          "model_stderr": [float(v) for v in fit.kappa_goal.stderr],
                          "model_units": fit.kappa_goal.units,
                          "world": [float(v) for v in fit.kappa.kappa],
                          "world_stderr": [float(v) for v in fit.kappa.stderr],
                          "world_units": fit.kappa.units}
    return table


def fit_traces(traces: list[Path], out: Path, *, base: str = "ambiguous", model: Path | None = None,
               kappa: Path | None = None, kappa_images: int = DEFAULT_KAPPA_IMAGES,
               grid_width: int | None = None, rounds: int = 3, iters: int = 12, n_sequences: int = 32,
               seq_len: int = 64, seed: int = 0) -> Any:
    """Fit a world to ``traces`` and write it to the world file ``out`` (the options of ``relaxspec
    fit``, which calls this; so does ``relaxspec mini validate``); returns the
    :class:`simulate.fit_kappa.WorldFit`."""
    from relaxspec.core.trace import read_trace
    from relaxspec.simulate.fit_kappa import fit_world_model
    from relaxspec.simulate.fit_traces import trace_figures
    from relaxspec.simulate.world_file import world_params, write_world_file

    params = world_params(base)
    figures = trace_figures(traces)
    measured, kappa_source, width = None, None, None
    if model is not None:
        measured, width = model_kappa(model, read_trace(traces[0]).header, kappa_images, seed)
        kappa_source = f"{model} (teacher-forced, {kappa_images} AR samples)"
    elif kappa is not None:
        measured, kappa_source = read_kappa(kappa), str(kappa)
    grid = grid_width if grid_width is not None else (
        width if width is not None else _grid_width(None, figures.grid, figures.positions))
    params = replace(params, vocab_size=figures.vocab_size)
    fit = fit_world_model(figures.figures, params, measured, grid_width=grid, rounds=rounds, iters=iters,
                          n_sequences=n_sequences, seq_len=seq_len, greedy=figures.greedy)
    table = fit_report(fit, figures, grid, kappa_source)
    comment = (f"relaxspec world fitted by `relaxspec fit` to {len(figures.sources)} trace(s) of one model\n"
               "(V {0}); [fit] lists each figure: the model's, the world's, whether fitted.\n"
               "Use it by path: worlds = [\"{1}\"] in a sweep config, relaxspec.simulate(\"{1}\", ...)."
               ).format(figures.vocab_size, out)
    write_world_file(out, fit.params, table, comment)
    return fit


def run(args: argparse.Namespace) -> int:
    """Fit, write the world file, print the figures beside their goals."""
    _check(args)
    fit = fit_traces(args.traces, args.out, base=args.base, model=args.model, kappa=args.kappa,
                     kappa_images=args.kappa_images, grid_width=args.grid_width, rounds=args.rounds,
                     iters=args.iters, n_sequences=args.n_sequences, seq_len=args.seq_len, seed=args.seed)
    print(f"wrote {args.out}")
    print(f"{'figure':<22} {'model':>9} {'world':>9}  fitted")
    for name, g, w, f in fit.rows():
        print(f"{name:<22} {g:9.4f} {w:9.4f}  {'yes' if f else 'no'}")
    return 0
