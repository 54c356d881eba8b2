"""Simulator validation on real logits: every method the decoder runs, on a shipped model.

For each configuration of :data:`VALIDATION_CONFIGS` (one line per method) the reference decoder
generates ``n`` images (class i % 10, uniforms keyed by (seed, i)) and writes a trace. Then:

- **measured**: the decoder's tokens per target forward over the speculative steps (the prefill's and
  the last token's forwards verify no draft and a world has neither; a VVS skip step emits tokens and
  makes no forward), with its standard error over images (a ratio estimator with images as the units, as
  ``simulate``'s over sequences);
- **replay** (``reference.replay.replay``: ``theory`` and ``simulate``'s Numba verifier) must
  reproduce every recorded outcome;
- **trace-driven**: ``simulate.run`` on the :class:`~simulate.worlds.TraceWorld`: the exact expected
  tokens of the recorded steps on their trees and logits over their target forwards (a VVS skip step:
  the expected length of the path it emits given its tree; :func:`trace_driven`);
- **fitted world**: ``simulate.run`` in the world ``relaxspec fit`` produces from this model's traces
  (:func:`relaxspec.fit_cli.fit_traces` on :func:`fit_sources`, the model's kappa measured on it
  teacher-forced), with the same tree, rule and relaxation or boost (:func:`world_prediction`);

each prediction with its relative error to the measurement. One world is fitted per
:func:`mini.calibration.world_key`: the EAGLE head's (sampled paths), the draft GPT's and the EAGLE
head's along greedy paths (rule r3), each from the lossless traces of that drafter and the traces with
no drafter (AR, Jacobi windows: the target's figures). The run itself (resume, worker processes, the
order of the phases) is :mod:`mini.validation_run`; the tables :mod:`mini.validation_report`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from relaxspec.core.trees.spec import measures_acceptance
from relaxspec.mini.calibration import world_key
from relaxspec.mini.decoding import DecodeConfig, make_decoder
from relaxspec.mini.fashion_mnist import NUM_CLASSES
from relaxspec.mini.quality import EAGLE2, NEIGHBOURS_K, STATIC, slug
from relaxspec.mini.shipped import MiniModel
from relaxspec.theory.boost import Boost

K = NEIGHBOURS_K
DDD = "ddd:10,11,5/7/9,-0.3,60"
SEQUOIA = "sequoia:57,8"
WINDOW = "jacobi:15"  # SJD's window of the frontier study (relaxspec.studies.frontier.WINDOW)
GSD = "r2+gsd:G=10,tau=0.15,dist=0.5"
VVS = "vvs:" + EAGLE2.partition(":")[2]  # VVS skips verification of the EAGLE-2 rows' trees (K, D, M)
VVS_LANTERN = f"r1+lantern:k={K},delta=0.1"  # as the frontier's VVS rows (LANTERN on the verify steps)
VALIDATION_CONFIGS: list[DecodeConfig] = [  # one line per method; the first eight are the 2024 rows
    DecodeConfig("EAGLE-2 r1 exact", tree=EAGLE2),
    DecodeConfig("EAGLE-2 r1 LANTERN delta=0.2", tree=EAGLE2, verification=f"r1+lantern:k={K},delta=0.2"),
    DecodeConfig("EAGLE-2 r3 exact", tree=EAGLE2, verification="r3"),
    DecodeConfig("DDD r1 exact", tree=DDD),
    DecodeConfig("static r1 exact", tree=STATIC),
    DecodeConfig("static r1 LANTERN++ lam=5", tree=STATIC, verification=f"r1+lantern++:k={K},lam=5"),
    DecodeConfig("static r2 exact", tree=STATIC, verification="r2"),
    DecodeConfig("static r2 exact, draft GPT", tree=STATIC, verification="r2", drafter="draft_gpt"),
    DecodeConfig("AR"),
    DecodeConfig("static r2 LANTERN++ lam=5", tree=STATIC, verification=f"r2+lantern++:k={K},lam=5"),
    DecodeConfig("Sequoia r1 exact", tree=SEQUOIA),
    DecodeConfig("SJD L=15", tree=WINDOW, verification="r2"),
    DecodeConfig("GSD G=10 L=15", tree=WINDOW, verification=GSD),
    DecodeConfig("static Cool-SD delta=2", tree=STATIC, verification=f"r2+{Boost.cool(2.0)}"),
    DecodeConfig("static r4 exact", tree=STATIC, verification="r4"),
    DecodeConfig("SJD L=15 + R4", tree=WINDOW, verification="r4"),
    DecodeConfig("static r2 budget tv=0.1", tree=STATIC, verification=f"r2+budget:tv=0.1,k={K}"),
    DecodeConfig("SJD L=15 + R4 + budget tv=0.1", tree=WINDOW, verification=f"r4+budget:tv=0.1,k={K}"),
    DecodeConfig("SCD L=15", tree=f"{WINDOW},coupled=principled", verification="r2"),
    DecodeConfig("SJD-PAC L=15 (+PD+AC)", tree="pac:15", verification="r2"),
    DecodeConfig("VVS every 2 + LANTERN delta=0.1", tree=f"{VVS},uniform=2", verification=VVS_LANTERN),
    DecodeConfig("VVS dynamic + LANTERN delta=0.1", tree=f"{VVS},dynamic", verification=VVS_LANTERN),
]
# the lossless traces the worlds are fitted to (each world takes those of its drafter and rule and those
# with no drafter); the Sequoia rows' positional acceptance is measured on ACCEPTANCE_SOURCE's trace
FIT_SOURCES = ("AR", "EAGLE-2 r1 exact", "static r2 exact", "SJD L=15", "EAGLE-2 r3 exact",
               "static r2 exact, draft GPT")
ACCEPTANCE_SOURCE = "EAGLE-2 r1 exact"
ACCEPTANCE_WIDTH = 16  # children ranked at the root (relaxspec trace-acceptance's default)
WORLD_SEQUENCES, WORLD_LEN = 64, 64  # the world's prediction: its standard error stays below the decoder's
COLUMNS = ("config", "decoding", "world_key", "sequences", "speculative_steps", "replayed_steps",
           "replay_mismatches", "measured_tokens_per_forward", "measured_se", "trace_driven_prediction",
           "trace_driven_rel_error", "world", "world_prediction", "world_se", "world_rel_error", "seconds")


def config_key(config: DecodeConfig) -> str:
    """The fitted world a configuration reads (:func:`mini.calibration.world_key`; AR and Jacobi windows,
    which run no drafter, read the EAGLE head's sampled world: their figures are the target's)."""
    return world_key(config.drafter, config.verification.rule)


def fit_sources(configs: list[DecodeConfig], key: str) -> list[DecodeConfig]:
    """The configurations of :data:`FIT_SOURCES` whose traces world ``key`` is fitted to: those of its
    drafter and rule, and (for a sampled world) those that run no drafter."""
    greedy = key.endswith("-greedy")
    return [c for c in configs if c.name in FIT_SOURCES and (
        config_key(c) == key or (not greedy and (c.is_ar or c.is_jacobi)))]


def needs_acceptance(config: DecodeConfig) -> bool:
    """Whether the configuration's tree is built from a positional acceptance vector (Sequoia-type)."""
    return not config.is_ar and not config.is_jacobi and measures_acceptance(config.tree)


def trace_path(out: Path, config: DecodeConfig) -> Path:
    """Where a configuration's trace is written."""
    return Path(out) / f"{slug(config.name)}.trace"


def capture(mini: MiniModel, config: DecodeConfig, n_sequences: int, out: Path, seed: int = 0,
            progress: bool = True) -> Path:
    """Generate ``n_sequences`` images (class i % 10) with a trace at :func:`trace_path` (resumes)."""
    from relaxspec.reference.capture import capture_trace

    path = trace_path(out, config)
    drafter = "eagle_head" if config.drafter == "eagle" else "draft_gpt"
    capture_trace(make_decoder(mini, config), path, [i % NUM_CLASSES for i in range(n_sequences)], seed=seed,
                  neighbours=mini.neighbours() if config.verification.neighbour_k else None,
                  codebook=mini.tokenizer.codebook(), model=f"mini-fashion-mnist target ({config.name})",
                  checkpoint_sha256=mini.checkpoint_sha256("target"),
                  extra={"drafter": config.drafter, "drafter_sha256": mini.checkpoint_sha256(drafter)},
                  resume=True, progress=progress)
    return path


def acceptance_vector(path: Path, config: DecodeConfig) -> list[float]:
    """Sequoia's positional acceptance for ``config`` measured exactly on the trace at ``path``
    (``relaxspec trace-acceptance``: the top-16 of the drafter at every recorded root, under the
    configuration's rule and relaxation without its boost)."""
    from relaxspec.simulate.acceptance import trace_positional_acceptance
    from relaxspec.simulate.worlds import TraceWorld

    v = config.verification.measured_with(config.verification.relax)
    return [round(float(a), 6) for a in trace_positional_acceptance(TraceWorld(path), v,
                                                                     width=ACCEPTANCE_WIDTH)]


def ratio_and_se(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """sum(num) / sum(den) and its cluster-robust standard error with the entries as units (NaN for one
    unit)."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    r = float(num.sum() / den.sum())
    S = num.size
    if S < 2:
        return r, float("nan")
    return r, float(np.sqrt(S / (S - 1) * np.sum((num - r * den) ** 2)) / den.sum())


def trace_driven(path: Path, config: DecodeConfig) -> dict[str, Any]:
    """Measured and trace-driven tokens per target forward of the speculative steps in a trace, with the
    measurement's standard error over images (greedy decoding, rule r3: over classes, each class's one
    path decoded as often as it recurs; AR: 1 exactly, every forward emits one token). The trace-driven
    prediction is the recorded steps' exact expected tokens over their target forwards: a VVS skip step
    (``simulate.replay``: its E[gamma + 1] given the tree and the recorded Lbar) adds tokens and no
    forward; every other step is one forward."""
    from relaxspec.simulate import run
    from relaxspec.simulate.worlds import TraceWorld

    traced = run(TraceWorld(path), None, config.verification, n_sequences=1, threads=1)
    spec = traced.tree_size > 1
    n = traced.n_sequences
    if not spec.any():  # AR: no speculative step
        return {"speculative_steps": 0, "measured_tokens_per_forward": 1.0, "measured_se": 0.0,
                "trace_driven_prediction": 1.0, "trace_driven_rel_error": 0.0}
    forwards = (np.ones(traced.n_steps, dtype=np.int64) if traced.target_forwards is None
                else traced.target_forwards)[spec]
    seq = traced.sequence[spec]
    if config.verification.rule.is_greedy:  # image i decodes class i % 10's one greedy path: 10 units
        seq, n = seq % NUM_CLASSES, min(n, NUM_CLASSES)
    tokens = np.bincount(seq, weights=traced.tokens[spec].astype(np.float64), minlength=n)
    steps = np.bincount(seq, weights=forwards.astype(np.float64), minlength=n)  # target forwards per image
    measured, se = ratio_and_se(tokens, steps)
    predicted = float(traced.expected_tokens[spec].sum() / forwards.sum())
    return {"speculative_steps": int(spec.sum()), "measured_tokens_per_forward": round(measured, 4),
            "measured_se": round(se, 4), "trace_driven_prediction": round(predicted, 4),
            "trace_driven_rel_error": round(abs(predicted - measured) / measured, 4)}


def measure_config(mini: MiniModel, config: DecodeConfig, n_sequences: int, out: Path, seed: int = 0,
                   progress: bool = False) -> dict[str, Any]:
    """Capture, replay and score one configuration: its row without the world's columns."""
    from relaxspec.reference.replay import replay

    start = time.perf_counter()
    path = capture(mini, config, n_sequences, out, seed, progress)
    report = replay(path, require_simulate=True)
    row = {"config": config.name, "decoding": config.describe(), "world_key": config_key(config),
           "sequences": n_sequences, "replayed_steps": report.steps,
           "replay_mismatches": len(report.mismatches), **trace_driven(path, config)}
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def world_prediction(world: str, config: DecodeConfig, measured: float, seed: int = 0,
                     n_sequences: int = WORLD_SEQUENCES, seq_len: int = WORLD_LEN) -> dict[str, Any]:
    """The world's tokens per target forward for ``config`` (its tree built in the world: a Sequoia
    tree from the acceptance vector measured there, as a sweep does; VVS's skip steps count tokens and
    no forward, ``simulate.vvs``) with its standard error over sequences, and its error to
    ``measured``."""
    from relaxspec.simulate import run
    from relaxspec.simulate.inputs import as_tree, as_world

    w = as_world(world)
    if config.is_ar:
        value, se = 1.0, 0.0
    else:
        tree = as_tree(config.tree, w, config.verification, seed=seed, threads=1)
        sim = run(w, tree, config.verification, n_sequences=n_sequences, seq_len=seq_len, seed=seed,
                  threads=1)
        value, se = sim.tokens_per_forward, sim.se_tokens_per_forward
    return {"world": world, "world_prediction": round(value, 4), "world_se": round(se, 4),
            "world_rel_error": round(abs(value - measured) / measured, 4)}


def with_acceptance(config: DecodeConfig, vector: list[float]) -> DecodeConfig:
    """``config`` with Sequoia's acceptance vector filled in."""
    return replace(config, acceptance=tuple(vector))
