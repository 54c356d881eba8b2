"""What a fitted world lacks, measured: a model's law after a token the target disfavours (issue 28).

SPEC 11's kappa_m replaces the token m back by a draw from its own law, and the fit matches it. But
several methods put tokens into the prefix that the target did not draw: VVS's skip steps emit drafts
unverified and a bonus from a stale row; the budgeted relaxation accepts drafts the target disfavours.
:func:`off_law_sensitivity` measures the law's response to such a token: kappa_m with the token m back
replaced by a law draw (SPEC 11's figure, the same uniforms) and by a uniformly drawn code, and the
entropy of the law right after the replaced token. Its consequences are measured on the steps of a
decoder's trace and of a world's run alike (both are a ``SimResult``): :func:`skip_effect` (VVS: the
drafts accepted at the verify step right after a skip and after a verify, and what a skip emits) and
:func:`position_acceptance` (a Jacobi window: P(position j + 1 accepted | j accepted)); on a trace,
:func:`root_entropy` reads the target's law at each step's root. ``relaxspec mini explain`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from relaxspec.mini.context_sensitivity import REPLACEMENTS, Laws, entropy, replaced_sums
from relaxspec.mini.validation import ratio_and_se
from relaxspec.simulate.context import ContextSensitivity, check_counts, summarise
from relaxspec.simulate.results import SimResult
from relaxspec.simulate.rng import check_seed, stream_key, uniform
from relaxspec.simulate.worlds import LatentWorld
from relaxspec.theory.sampler import draw_token

KINDS = REPLACEMENTS  # the replacement: a draw from the position's law (SPEC 11), a uniform code


@dataclass(frozen=True)
class MeanSe:
    """A mean, its standard error over independent units and the number of observations behind it."""

    mean: float
    se: float
    n: int

    @classmethod
    def of(cls, values: np.ndarray, units: np.ndarray | None = None) -> MeanSe:
        """Mean of ``values`` and its standard error: over the values when each is its own unit, else
        clustered by ``units`` (the unit of each value: steps of one sequence are correlated), the ratio
        estimator of ``mini.validation.ratio_and_se``. NaN standard error below 2 units."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return cls(float("nan"), float("nan"), 0)
        if units is None:
            se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
            return cls(float(v.mean()), se, int(v.size))
        _, idx = np.unique(np.asarray(units), return_inverse=True)
        mean, se = ratio_and_se(np.bincount(idx, weights=v), np.bincount(idx))
        return cls(mean, se, int(v.size))

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.se:.3f}"


@dataclass(frozen=True)
class OffLaw:
    """kappa_m under either replacement (``kappa[kind]``) and the entropy of the law right after the
    replaced token (``entropy``: keys ``original`` (no replacement), ``law``, ``uniform``; means over
    units, standard errors over units)."""

    kappa: dict[str, ContextSensitivity]
    entropy: dict[str, MeanSe]


def off_law_sensitivity(laws: Laws, tokens: np.ndarray, n_lags: int, *, seed: int = 0,
                        batch: int = 32) -> OffLaw:
    """:class:`OffLaw` of the model whose laws ``laws`` gives along the sequences ``tokens`` (N, T): every
    token replaced by a draw from its law (SPEC 11's kappa, the same uniforms) and by a uniformly drawn
    code (``mini.context_sensitivity.replaced_sums``)."""
    sums, ent = replaced_sums(laws, tokens, n_lags, seed=seed, batch=batch, kinds=KINDS, entropies=True)
    positions = np.asarray(tokens).shape[1] - np.arange(1, n_lags + 1)
    return OffLaw({kind: summarise(sums[kind], positions) for kind in KINDS},
                  {kind: MeanSe.of(v) for kind, v in ent.items()})


def world_laws(world: LatentWorld, n_sequences: int, seq_len: int, seed: int = 0,
               horizon: int | None = None) -> tuple[np.ndarray, Laws]:
    """Sequences sampled from ``world``'s target (sequence s from ``stream_key(seed, s)``, as
    ``simulate.context``) and the teacher-forced laws along any sequences of unit s: the world's rows
    from its initial state for s, advanced token by token. A row's laws up to its first token d that
    differs from unit s's own sequence are that sequence's; with ``horizon`` set, only the ``horizon``
    laws after d are computed and later ones are left 0 (what kappa_1..kappa_horizon read)."""
    if not isinstance(world, LatentWorld):
        raise ValueError(f"a world's laws along a prefix need a LatentWorld, got {type(world).__name__}")
    check_counts(1, n_sequences, seq_len)
    seed = check_seed(seed)
    if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1):
        raise ValueError(f"horizon must be None or an integer >= 1, got {horizon!r}")
    tokens = np.zeros((n_sequences, seq_len), dtype=np.int64)
    states, rows = [], np.zeros((n_sequences, seq_len, world.vocab_size))
    for s in range(n_sequences):
        key = np.uint64(stream_key(np.int64(seed), np.int64(s)))
        along = [world.initial(key)]
        for t in range(seq_len):
            rows[s, t] = world.target_probs(along[t][0])
            tokens[s, t] = draw_token(rows[s, t], uniform(key, t))
            along.append(world.advance(*along[t], int(tokens[s, t])))
        states.append(along)

    def laws(seqs: np.ndarray, s: int) -> np.ndarray:
        seqs = np.asarray(seqs, dtype=np.int64)
        if seqs.shape[1] != seq_len:
            raise ValueError(f"sequences of unit {s} must have {seq_len} tokens, got {seqs.shape[1]}")
        out = np.zeros((*seqs.shape, world.vocab_size))
        for b, row in enumerate(seqs):
            diff = np.flatnonzero(row != tokens[s])
            d = int(diff[0]) if diff.size else seq_len
            out[b, :d + 1] = rows[s, :d + 1]  # the law of token t reads tokens before t only
            last = seq_len if horizon is None else min(seq_len, d + 1 + horizon)
            state = states[s][d]
            for t in range(d + 1, last):
                state = world.advance(*state, int(row[t - 1]))
                out[b, t] = world.target_probs(state[0])
        return out

    return tokens, laws


def _speculative(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    forwards = (np.ones(result.n_steps, dtype=np.int64) if result.target_forwards is None
                else np.asarray(result.target_forwards))
    return forwards, np.asarray(result.sequence)


@dataclass(frozen=True)
class SkipEffect:
    """VVS (SPEC 10.3), over the speculative steps (tree size > 1; a skip step is one): drafts accepted at
    verify steps right after a skip step and right after a verify step (a sequence's first speculative
    step counts in neither), and drafts a skip step emits (gamma); standard errors over sequences."""

    after_skip: MeanSe
    after_verify: MeanSe
    skip_drafts: MeanSe


def skip_effect(result: SimResult) -> SkipEffect:
    """:class:`SkipEffect` of a run or a trace replay with skip steps (``target_forwards`` 0): a decoder's
    prefill and last-token steps (no draft) are left out, as a world has none."""
    forwards, seq = _speculative(result)
    spec = np.asarray(result.tree_size) > 1
    forwards, seq = forwards[spec], seq[spec]
    acc = np.asarray(result.accepted_depth, dtype=np.float64)[spec]
    prev_same = np.r_[False, seq[1:] == seq[:-1]]
    prev_skip = np.r_[False, forwards[:-1] == 0]
    verify = forwards > 0
    groups = (verify & prev_same & prev_skip, verify & prev_same & ~prev_skip, ~verify)
    return SkipEffect(*(MeanSe.of(acc[g], seq[g]) for g in groups))


def accepted_drafts(result: SimResult) -> MeanSe:
    """Drafts accepted per speculative verify step (tree size > 1, a target forward), over sequences."""
    forwards, seq = _speculative(result)
    keep = (np.asarray(result.tree_size) > 1) & (forwards > 0)
    return MeanSe.of(np.asarray(result.accepted_depth, dtype=np.float64)[keep], seq[keep])


def position_acceptance(result: SimResult, depth: int = 4) -> np.ndarray:
    """P(accepted depth >= j + 1 | >= j) for j = 0..depth-1 over the speculative steps (tree size > 1):
    along a window, the chance that position j + 1's draft is accepted once the first j were."""
    d = np.asarray(result.accepted_depth)[np.asarray(result.tree_size) > 1]
    reached = np.array([(d >= j).sum() for j in range(depth + 1)], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return reached[1:] / reached[:-1]


def root_entropy(path: str | Path) -> dict[str, MeanSe]:
    """Entropy of the target's law (the trace header's sampling) at the root of a trace's speculative
    verify steps, grouped by the speculative step before: ``after skip`` (a VVS skip step) and ``after
    verify`` (a sequence's first speculative step counts in neither); standard errors over sequences."""
    from relaxspec.core.trace import read_trace

    trace = read_trace(path)
    sampling = trace.header.target_sampling
    groups: dict[str, tuple[list[float], list[int]]] = {"after skip": ([], []), "after verify": ([], [])}
    last: dict[int, bool] = {}  # sequence -> was its latest speculative step a skip (a sequence is in order)
    for st in trace.steps():
        if st.tokens.size < 2 and not st.skipped:  # the prefill or the last token: no draft
            continue
        prev = last.get(st.sequence)
        last[st.sequence] = st.skipped
        if prev is None or st.skipped:
            continue
        p = sampling.probs(st.target_logits[:1].astype(np.float64))[0]
        values, units = groups["after skip" if prev else "after verify"]
        values.append(float(entropy(p)))
        units.append(st.sequence)
    return {k: MeanSe.of(v, u) for k, (v, u) in groups.items()}


# the validation rows (VALIDATION_CONFIGS names) whose misses these figures explain, EAGLE-2's for comparison
WINDOWS = ("SJD L=15", "SJD L=15 + R4", "SJD L=15 + R4 + budget tv=0.1", "SCD L=15", "SJD-PAC L=15 (+PD+AC)")
VVS_ROW = "VVS every 2 + LANTERN delta=0.1"
NO_SKIP = "EAGLE-2 + LANTERN delta=0.1, no skip"  # VVS's verify steps alone, its baseline (no validate row)
EXACT_TREE = "EAGLE-2 r1 exact"
EXPLAINED = (EXACT_TREE, *WINDOWS, VVS_ROW, NO_SKIP)
KAPPA_LAGS = 2
WINDOW_DEPTH = 4


def _per_forward(result: SimResult) -> float:
    forwards, _ = _speculative(result)
    spec = np.asarray(result.tree_size) > 1
    return float(np.asarray(result.tokens)[spec].sum() / forwards[spec].sum())


def explain(weights: Path, out: Path, *, n_sequences: int = 40, kappa_images: int = 16, seed: int = 0,
            log: Callable[[str], None] = print) -> list[str]:
    """``relaxspec mini explain``: the figures of this module on the model in ``weights`` (its traces of
    :data:`EXPLAINED` in ``out``, decoded where missing, as ``relaxspec mini validate`` names them) and on
    its fitted world ``out/worlds/eagle.toml``; the markdown lines of the section."""
    import torch

    world_file = Path(out) / "worlds" / "eagle.toml"
    if not world_file.is_file():
        raise ValueError(f"{world_file} is missing: run relaxspec mini validate on this --out first (it fits "
                         "the world)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-2 forwards of a small model: a second thread only synchronises
    try:
        return _explain(weights, out, world_file, n_sequences, kappa_images, seed, log)
    finally:
        torch.set_num_threads(threads)


def _explain(weights: Path, out: Path, world_file: Path, n_sequences: int, kappa_images: int, seed: int,
             log: Callable[[str], None]) -> list[str]:
    from relaxspec.mini.context_sensitivity import guided_laws
    from relaxspec.mini.decoding import CFG_SCALE, DecodeConfig, make_decoder
    from relaxspec.mini.fashion_mnist import NUM_CLASSES
    from relaxspec.mini.quality import EAGLE2
    from relaxspec.mini.shipped import load_mini
    from relaxspec.mini.validation import VALIDATION_CONFIGS, VVS_LANTERN, WORLD_LEN, WORLD_SEQUENCES, capture
    from relaxspec.simulate import run
    from relaxspec.simulate.inputs import as_tree, as_world
    from relaxspec.simulate.worlds import TraceWorld

    world = as_world(str(world_file))
    mini = load_mini(weights)
    configs = {c.name: c for c in VALIDATION_CONFIGS}
    configs[NO_SKIP] = DecodeConfig(NO_SKIP, tree=EAGLE2, verification=VVS_LANTERN)
    model, fitted = {}, {}
    for name in EXPLAINED:
        cfg = configs[name]
        log(f"{name}: decoding (resumes) and replaying {n_sequences} images; the world's {WORLD_SEQUENCES} "
            "sequences")
        path = capture(mini, cfg, n_sequences, Path(out), seed, progress=False)
        model[name] = (path, run(TraceWorld(path), None, cfg.verification, n_sequences=1, threads=1))
        fitted[name] = run(world, as_tree(cfg.tree), cfg.verification, n_sequences=WORLD_SEQUENCES,
                           seq_len=WORLD_LEN, seed=seed)
    log(f"off-law sensitivity: {kappa_images} AR images of the model, {kappa_images} world sequences")
    labels = np.arange(kappa_images) % NUM_CLASSES
    ar = make_decoder(mini, DecodeConfig("AR"))
    tokens = np.array([ar.generate(int(c), seed, sequence=i).tokens for i, c in enumerate(labels)])
    off = {"model": off_law_sensitivity(guided_laws(mini, labels, CFG_SCALE), tokens, KAPPA_LAGS, seed=seed),
           "world": off_law_sensitivity(*reversed(world_laws(world, kappa_images, tokens.shape[1], seed,
                                                             horizon=KAPPA_LAGS)), KAPPA_LAGS, seed=seed)}
    return render(off, model, fitted, n_sequences=n_sequences, kappa_images=kappa_images)


def render(off: dict[str, OffLaw], model: dict[str, tuple[Path, SimResult]], fitted: dict[str, SimResult], *,
           n_sequences: int, kappa_images: int) -> list[str]:
    """The markdown lines of :func:`explain`'s figures."""
    def row(label: str, a: object, b: object) -> str:
        return f"| {label} | {a} | {b} |"

    def kap(who: str, kind: str, m: int) -> str:
        k = off[who].kappa[kind]
        return f"{k.kappa[m]:.3f} ± {k.stderr[m]:.3f}"

    def hazard(r: SimResult) -> str:
        return ", ".join(f"{h:.2f}" for h in position_acceptance(r, WINDOW_DEPTH))

    lines = [f"Model: {n_sequences} images per decoded row, off-law figures along {kappa_images} AR images; "
             f"world: the fitted `eagle` world, {kappa_images} sequences for the off-law figures.", "",
             "| figure | model | fitted world |", "|---|---|---|"]
    for m in range(KAPPA_LAGS):
        lines.append(row(f"kappa_{m + 1}, the token replaced by a law draw (SPEC 11; fitted)",
                         kap("model", "law", m), kap("world", "law", m)))
        lines.append(row(f"kappa_{m + 1}, the token replaced by a uniform code", kap("model", "uniform", m),
                         kap("world", "uniform", m)))
    for kind, label in (("original", "as sampled"), ("law", "after a law draw"),
                        ("uniform", "after a uniform code")):
        lines.append(row(f"entropy of the next law (nats), {label}", off["model"].entropy[kind],
                         off["world"].entropy[kind]))
    for name in WINDOWS:
        lines.append(row(f"{name}: tokens per forward", f"{_per_forward(model[name][1]):.3f}",
                         f"{_per_forward(fitted[name]):.3f}"))
        lines.append(row(f"{name}: P(position j + 1 accepted given j), j = 0..{WINDOW_DEPTH - 1}",
                         hazard(model[name][1]), hazard(fitted[name])))
        lines.append(row(f"{name}: entropy of the root's law (nats)",
                         root_entropy(model[name][0])["after verify"], "(not recorded)"))
    vvs, base = VVS_ROW, NO_SKIP
    ms, ws = skip_effect(model[vvs][1]), skip_effect(fitted[vvs])
    for name in (base, vvs):
        lines.append(row(f"{name}: tokens per forward", f"{_per_forward(model[name][1]):.3f}",
                         f"{_per_forward(fitted[name]):.3f}"))
    lines.append(row(f"{base}: drafts accepted per step", accepted_drafts(model[base][1]),
                     accepted_drafts(fitted[base])))
    lines.append(row(f"{vvs}: drafts accepted at a verify step after a skip", ms.after_skip, ws.after_skip))
    lines.append(row(f"{vvs}: drafts a skip step emits (gamma)", ms.skip_drafts, ws.skip_drafts))
    lines.append(row(f"{base}: entropy of the root's law (nats)",
                     root_entropy(model[base][0])["after verify"], "(not recorded)"))
    lines.append(row(f"{vvs}: entropy of the root's law after a skip (nats)",
                     root_entropy(model[vvs][0])["after skip"], "(not recorded)"))
    lines.append(row(f"{EXACT_TREE}: entropy of the root's law (nats)",
                     root_entropy(model[EXACT_TREE][0])["after verify"], "(not recorded)"))
    return lines


__all__ = ["EXPLAINED", "KINDS", "NO_SKIP", "VVS_ROW", "WINDOWS", "MeanSe", "OffLaw", "SkipEffect",
           "accepted_drafts", "entropy", "explain", "off_law_sensitivity", "position_acceptance", "render",
           "root_entropy", "skip_effect", "world_laws"]
