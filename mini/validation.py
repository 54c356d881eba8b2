"""Simulator validation on real logits: traces of the mini model, replay, predicted vs measured.

For each tree policy and rule, the reference decoder generates images with
the mini model and writes a trace. Then:

- replay (``reference.replay.replay``: ``theory`` and ``simulate``'s Numba
  verifier) must reproduce every recorded outcome;
- the *trace-driven* prediction is ``simulate.run`` on the
  :class:`~simulate.worlds.TraceWorld`: the exact expected tokens per step on
  the recorded trees and logits, averaged over the speculative steps;
- the *calibrated-world* prediction is ``simulate.run`` in a latent-field
  world fitted to the model and the configuration's drafter
  (:mod:`mini.calibration`), with the same tree policy, rule and relaxation;

each against the decoder's measured mean tokens per speculative step, with
the relative error.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from relaxspec.core.trees.spec import parse_tree
from relaxspec.mini.calibration import world_key
from relaxspec.mini.decoding import DecodeConfig, make_decoder
from relaxspec.mini.fashion_mnist import NUM_CLASSES
from relaxspec.mini.quality import EAGLE2, NEIGHBOURS_K, STATIC, slug
from relaxspec.mini.shipped import MiniModel
from relaxspec.reference.capture import capture_trace
from relaxspec.reference.replay import replay
from relaxspec.simulate import run
from relaxspec.simulate.worlds import LatentWorld, TraceWorld

DDD = "ddd:10,11,5/7/9,-0.3,60"
VALIDATION_CONFIGS: list[DecodeConfig] = [
    DecodeConfig("EAGLE-2 r1 exact", tree=EAGLE2),
    DecodeConfig("EAGLE-2 r1 LANTERN delta=0.2", tree=EAGLE2,
                 verification=f"r1+lantern:k={NEIGHBOURS_K},delta=0.2"),
    DecodeConfig("EAGLE-2 r3 exact", tree=EAGLE2, verification="r3"),
    DecodeConfig("DDD r1 exact", tree=DDD),
    DecodeConfig("static r1 exact", tree=STATIC),
    DecodeConfig("static r1 LANTERN++ lam=5", tree=STATIC,
                 verification=f"r1+lantern++:k={NEIGHBOURS_K},lam=5"),
    DecodeConfig("static r2 exact", tree=STATIC, verification="r2"),
    DecodeConfig("static r2 exact, draft GPT", tree=STATIC, verification="r2",
                 drafter="draft_gpt"),
]
WORLD_SEQUENCES = 64  # the world's prediction: its standard error stays below the decoder's
COLUMNS = ("config", "decoding", "world", "sequences", "speculative_steps", "replayed_steps",
           "replay_mismatches",
           "measured_tokens_per_step", "trace_driven_prediction", "trace_driven_rel_error",
           "world_prediction", "world_se", "world_rel_error", "seconds")


def capture(mini: MiniModel, config: DecodeConfig, n_sequences: int, out: Path, seed: int = 0,
            progress: bool = True) -> Path:
    """Generate ``n_sequences`` images (class i % 10) with a trace at ``OUT/<config>.trace`` (resumes)."""
    path = out / f"{slug(config.name)}.trace"
    drafter = "eagle_head" if config.drafter == "eagle" else "draft_gpt"
    capture_trace(make_decoder(mini, config), path, [i % NUM_CLASSES for i in range(n_sequences)], seed=seed,
                  neighbours=mini.neighbours() if config.verification.neighbour_k else None,
                  codebook=mini.tokenizer.codebook(), model=f"mini-fashion-mnist target ({config.name})",
                  checkpoint_sha256=mini.checkpoint_sha256("target"),
                  extra={"drafter": config.drafter, "drafter_sha256": mini.checkpoint_sha256(drafter)},
                  resume=True, progress=progress)
    return path


def validate_config(mini: MiniModel, config: DecodeConfig, world: str | None, n_sequences: int,
                    out: Path, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Capture, replay and predict one configuration; one row of the validation table (``world``: the
    preset fitted to the model and the configuration's drafter, or None for no world column)."""
    start = time.perf_counter()
    path = capture(mini, config, n_sequences, out, seed, progress)
    report = replay(path, require_simulate=True)
    traced = run(TraceWorld(path), None, config.verification,
                 n_sequences=1)
    spec = traced.tree_size > 1
    measured = float(traced.tokens[spec].mean())
    predicted = float(traced.expected_tokens[spec].mean())
    row: dict[str, Any] = {
        "config": config.name, "decoding": config.describe(), "sequences": n_sequences,
        "speculative_steps": int(spec.sum()), "replayed_steps": report.steps,
        "replay_mismatches": len(report.mismatches), "measured_tokens_per_step": round(measured, 4),
        "trace_driven_prediction": round(predicted, 4),
        "trace_driven_rel_error": round(abs(predicted - measured) / measured, 4),
    }
    if world is not None:
        policy = parse_tree(config.tree)
        sim = run(LatentWorld.preset(world), policy, config.verification,
                  n_sequences=WORLD_SEQUENCES, seq_len=64, seed=seed)
        row.update(world=world, world_prediction=round(sim.mean_tokens_per_step, 4),
                   world_se=round(sim.se_tokens_per_step, 4),
                   world_rel_error=round(abs(sim.mean_tokens_per_step - measured) / measured, 4))
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def run_validation(mini: MiniModel, out: Path, worlds: dict[str, str] | None, n_sequences: int = 20,
                   configs: list[DecodeConfig] | None = None, seed: int = 0,
                   progress: bool = True) -> list[dict[str, Any]]:
    """Every configuration; ``OUT/validation.csv`` is rewritten after each one. ``worlds``: the fitted
    world preset per ``mini.calibration.world_key`` (``eagle``, ``draft_gpt``, ``eagle-greedy``); None:
    no world column."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for config in configs or VALIDATION_CONFIGS:
        world = None if worlds is None else worlds[world_key(config.drafter, config.verification.rule)]
        rows.append(validate_config(mini, config, world, n_sequences, out, seed, progress))
        tmp = out / "validation.csv.tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)
        tmp.replace(out / "validation.csv")
    return rows
