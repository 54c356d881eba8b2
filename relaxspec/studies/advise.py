"""``relaxspec advise WORLD --tv PER_TOKEN``: which method to decode with, in one world, at one TV budget.

Every method and setting the suite implements (:func:`relaxspec.studies.frontier.methods` with
``every=True``, the one list of them) is simulated in the world (a preset or a world file from
``relaxspec fit``), and ranked by tokens per target forward and by the speed-up SPEC section 8 predicts
from a cost table (:class:`core.cost.CostModel`), among the rows whose TV per token is within the budget.
Each row says which TV it is (:data:`TV_KINDS`): 0 by theorem (lossless), the exact TV of the nodes
that decided each token, a proved bound (the budgeted relaxation, relaxed R4), a measured TV with no
proved bound (VVS: shown, marked, ranked by that measurement), or none recorded (SCD's and PAC's official
variants: shown, never ranked).

A run keeps, per sequence, the totals every figure is computed from (tokens, target forwards, summed
token TV, drafter calls and how many forwards verified n tokens), so the cost table is applied when the
report is written and the standard errors are over sequences (cluster-robust ratio estimators). Runs are
appended one JSON line each to ``OUT/runs.jsonl`` as they finish (:func:`relaxspec.results_lock
.append_line`, under :class:`~relaxspec.results_lock.ResultsLock`) and keyed by what changes them, so an
interrupted run resumes; the report (:mod:`relaxspec.studies.advise_report`) is written from the file.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from relaxspec.studies.frontier_methods import Method, methods, neighbour_k
from relaxspec.studies.study_options import QUICK_SEQ_LEN, QUICK_SEQUENCES, QUICK_WORLD

TV_LOSSLESS, TV_EXACT, TV_BOUND, TV_MEASURED, TV_UNKNOWN = (
    "lossless", "exact", "proved bound", "measured, no bound", "not recorded")
TV_KINDS = (TV_LOSSLESS, TV_EXACT, TV_BOUND, TV_MEASURED, TV_UNKNOWN)
"""What a row's TV per token is; :data:`RANKED_KINDS` may enter the ranking."""
RANKED_KINDS = (TV_LOSSLESS, TV_EXACT, TV_BOUND, TV_MEASURED)
RUNS = "runs.jsonl"
DEFAULT_SEQUENCES, DEFAULT_SEQ_LEN = 16, 256


@dataclass(frozen=True)
class Run:
    """One method's simulation in a world, as per-sequence totals (arrays of length ``n_sequences``):
    ``tokens``, target ``forwards``, summed token ``tv``, drafter ``calls``, and ``sizes[n]``: how many
    target forwards verified n tokens (the root included)."""

    method: str
    family: str
    tree: str
    verification: str
    tv_kind: str
    tokens: np.ndarray
    forwards: np.ndarray
    tv: np.ndarray
    calls: np.ndarray
    sizes: dict[int, np.ndarray]

    def as_dict(self, key: str) -> dict:
        """The JSON line of this run (under ``key``)."""
        return {"key": key, "method": self.method, "family": self.family, "tree": self.tree,
                "verification": self.verification, "tv_kind": self.tv_kind,
                "tokens": self.tokens.tolist(), "forwards": self.forwards.tolist(),
                "tv": [None if not np.isfinite(t) else float(t) for t in self.tv],
                "calls": self.calls.tolist(), "sizes": {str(n): c.tolist() for n, c in self.sizes.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> Run:
        """The run of a JSON line."""
        return cls(d["method"], d["family"], d["tree"], d["verification"], d["tv_kind"],
                   np.asarray(d["tokens"], dtype=np.float64), np.asarray(d["forwards"], dtype=np.float64),
                   np.array([np.nan if t is None else t for t in d["tv"]], dtype=np.float64),
                   np.asarray(d["calls"], dtype=np.float64),
                   {int(n): np.asarray(c, dtype=np.float64) for n, c in d["sizes"].items()})

    def time_ms(self, cost) -> np.ndarray:
        """Per sequence, the decoding time SPEC 8 predicts on ``cost`` (a :class:`core.cost.CostModel`):
        the target forwards' t_target(n) plus the drafter's calls."""
        t = self.calls * cost.t_draft_ms
        for n, count in self.sizes.items():
            t = t + count * float(cost.target_ms(n))
        return t

    def summary(self, cost) -> dict:
        """Tokens per target forward, TV per token and SPEC 8's speed-up, each with its standard error
        over sequences."""
        time = self.time_ms(cost)
        tokens_ar = self.tokens * cost.ar_step_ms
        return {"tokens_per_forward": ratio(self.tokens, self.forwards),
                "se_tokens_per_forward": ratio_se(self.tokens, self.forwards),
                "tv_per_token": ratio(self.tv, self.tokens),
                "se_tv_per_token": ratio_se(self.tv, self.tokens),
                "speedup": ratio(tokens_ar, time), "se_speedup": ratio_se(tokens_ar, time),
                "verified_per_forward": ratio(sum(n * c for n, c in self.sizes.items()), self.forwards),
                "draft_calls_per_forward": ratio(self.calls, self.forwards)}


def ratio(num: np.ndarray, den: np.ndarray) -> float:
    """sum(num) / sum(den) (NaN when a numerator is NaN: a TV not recorded)."""
    return float(np.sum(num) / np.sum(den))


def ratio_se(num: np.ndarray, den: np.ndarray) -> float:
    """Cluster-robust standard error of sum(num) / sum(den) with sequences as the units (as
    ``SimResult.se_tokens_per_step``); 0 when every sequence has the same ratio, NaN for one sequence."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    S = num.size
    if S < 2:
        return float("nan")
    r = num.sum() / den.sum()
    return float(np.sqrt(S / (S - 1) * np.sum((num - r * den) ** 2)) / den.sum())


def tv_kind(method: Method, tree_kind: str, verification) -> str:
    """Which TV a method's rows record (:data:`TV_KINDS`); NaN token TVs are :data:`TV_UNKNOWN` (decided
    where the run's numbers are read)."""
    if not method.lossy:
        return TV_LOSSLESS
    if tree_kind == "vvs":  # the skipped tokens' exact TV: bounded by ours (docs/theory.md 15.7), else not
        from relaxspec.core.trees.spec import parse_tree

        bounded = parse_tree(method.tree).schedule.bounded and verification.is_exact
        return TV_BOUND if bounded else TV_MEASURED
    if verification.uses_budget or (verification.is_traversal and not verification.is_exact):
        return TV_BOUND
    return TV_EXACT


def quick_overrides(world: str) -> dict:
    """The world overrides of ``--quick``: the frontier's small V where the world's is larger, else none."""
    from relaxspec.simulate.world_file import world_params

    return dict(QUICK_WORLD) if world_params(world).vocab_size > QUICK_WORLD["vocab_size"] else {}


def ar_run(n_sequences: int, seq_len: int) -> Run:
    """AR, exactly: one token per target forward of one token, no drafter, TV 0."""
    ones = np.full(n_sequences, float(seq_len))
    zeros = np.zeros(n_sequences)
    return Run("AR", "ar", "ar", "r1", TV_LOSSLESS, ones, ones.copy(), zeros, zeros.copy(), {1: ones.copy()})


def verified_tokens(tree_size: np.ndarray) -> np.ndarray:
    """SPEC 8's n_verify of each step: the tree's nodes and the root (the last committed token, which the
    forward processes too: ``core.cost``). For an SJD-PAC window the tree is the column product the
    simulator walks and records (SPEC 10.2: K candidates per node for the first D new columns, then the
    spine's one draft per column below every path, as SJD-PAC's code batches its root-to-leaf rows): a
    step can accept a token below depth D on a sibling's path only because that path was verified, so it
    is charged too."""
    return np.asarray(tree_size, dtype=np.int64) + 1


def from_result(method: Method, res, kind: str) -> Run:
    """The per-sequence totals of a ``SimResult``."""
    S = res.n_sequences
    seq = res.sequence
    fw = np.ones(res.n_steps, dtype=np.float64) if res.target_forwards is None else \
        res.target_forwards.astype(np.float64)

    def per(values: np.ndarray) -> np.ndarray:
        return np.bincount(seq, weights=values, minlength=S).astype(np.float64)

    n_verify = verified_tokens(res.tree_size)
    sizes = {int(n): per(fw * (n_verify == n)) for n in np.unique(n_verify[fw > 0])}
    tv = per(res.token_tv)
    if not np.all(np.isfinite(tv)):
        kind = TV_UNKNOWN
    return Run(method.label, method.family, method.tree, str(res.verification), kind,
               per(res.tokens.astype(np.float64)), per(fw), tv, per(res.draft_calls.astype(np.float64)),
               sizes)


def run_key(world: str, overrides: dict, method: Method, verification: str, n_sequences: int, seq_len: int,
            seed: int) -> str:
    """What changes a run: the world (a world file by its parameters), the tree, the verification, sizes."""
    from relaxspec.simulate.world_file import is_world_file, params_sha256, world_params

    ident = params_sha256(world_params(world)) if is_world_file(world) else world
    text = json.dumps([ident, overrides, method.tree, verification, n_sequences, seq_len, seed],
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_runs(path: Path) -> dict[str, Run]:
    """The runs already in ``path`` by key; a torn last line (a crash mid-write) is skipped with a
    warning, any other bad line is an error naming the file and line."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines(keepends=True)
    out = {}
    for i, line in enumerate(lines, start=1):
        try:
            d = json.loads(line)
            out[d["key"]] = Run.from_dict(d)
        except (ValueError, KeyError, TypeError) as err:
            if i == len(lines) and not line.endswith("\n"):
                warnings.warn(f"{path}: dropped a torn last line (it runs again)", UserWarning, stacklevel=2)
                continue
            raise ValueError(f"{path} line {i} is not an advise run: {err}") from None
    return out


@dataclass(frozen=True)
class Plan:
    """What an advise run simulates: the world, its overrides, the sizes and the methods."""

    world: str
    overrides: dict
    n_sequences: int
    seq_len: int
    seed: int = 0

    @property
    def vocab_size(self) -> int:
        from relaxspec.simulate.world_file import world_params

        return int(self.overrides.get("vocab_size", world_params(self.world).vocab_size))

    def methods(self) -> list[Method]:
        """Every method the worlds run (the shipped model's codebook rows left out)."""
        return [m for m in methods(every=True) if not m.shipped_only]


def simulate_all(plan: Plan, out: Path, *, progress: bool = True) -> tuple[list[Run], list[str]]:
    """Simulate (resuming from ``out/runs.jsonl``) every method of ``plan``; returns the runs in method
    order and one line per method the world cannot run, with the reason."""
    from tqdm.auto import tqdm

    from relaxspec.core.trees.spec import tree_kind
    from relaxspec.results_lock import ResultsLock, append_line
    from relaxspec.simulate.engine import run
    from relaxspec.sweep import SweepConfig, build_world, jobs
    from relaxspec.sweep import job_tree as make_tree

    out.mkdir(parents=True, exist_ok=True)
    path = out / RUNS
    k = neighbour_k(plan.vocab_size)
    runs: list[Run] = [ar_run(plan.n_sequences, plan.seq_len)]
    skipped: list[str] = []
    worlds: dict = {}
    with ResultsLock(path):
        done = read_runs(path)
        for m in tqdm([m for m in plan.methods() if m.tree != "ar"], desc="advise", unit="method",
                      disable=not progress):
            v = m.verification_for(k)
            key = run_key(plan.world, plan.overrides, m, str(v), plan.n_sequences, plan.seq_len, plan.seed)
            if key in done:
                runs.append(done[key])
                continue
            d = {"worlds": [plan.world], "trees": [m.tree], "verifications": [str(v)],
                 "n_sequences": plan.n_sequences, "seq_len": plan.seq_len, "seed": plan.seed,
                 **({"world_overrides": plan.overrides} if plan.overrides else {})}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cfg = SweepConfig.from_dict(d, source="advise")
                job = next(jobs(cfg))
                if plan.world not in worlds:
                    worlds[plan.world] = build_world(cfg, plan.world)
                world = worlds[plan.world]
                tree = make_tree(cfg, job, world)
                res = run(world, tree, v, n_sequences=plan.n_sequences, seq_len=plan.seq_len, seed=plan.seed)
            except ValueError as err:  # a method this world does not support (said in the report)
                skipped.append(f"{m.label} ({m.tree}, {v}): {' '.join(str(err).split())}")
                continue
            r = from_result(m, res, tv_kind(m, tree_kind(m.tree), v))
            append_line(path, json.dumps(r.as_dict(key)) + "\n")
            runs.append(r)
    return runs, skipped


def rank(runs: list[Run], cost, budget: float) -> list[dict]:
    """One record per run (:meth:`Run.summary` plus method, family, tree, verification, TV kind), with
    ``within`` (its TV kind may be ranked and its TV per token is at most ``budget``) and, for those,
    ``rank_tokens`` and ``rank_speedup`` (1 = best; ties share the order of the method list)."""
    if not (np.isfinite(budget) and budget >= 0):
        raise ValueError(f"the TV budget per token must be a number >= 0, got {budget!r}")
    rows = []
    for r in runs:
        s = r.summary(cost)
        within = r.tv_kind in RANKED_KINDS and bool(s["tv_per_token"] <= budget + 1e-12)
        rows.append({"method": r.method, "family": r.family, "tree": r.tree, "verification": r.verification,
                     "tv_kind": r.tv_kind, **s, "within": within, "rank_tokens": None, "rank_speedup": None})
    ok = [row for row in rows if row["within"]]
    for col, rk in (("tokens_per_forward", "rank_tokens"), ("speedup", "rank_speedup")):
        for i, row in enumerate(sorted(ok, key=lambda row: -row[col]), start=1):
            row[rk] = i
    return rows


def bests(rows: list[dict], col: str) -> dict[str, dict | None]:
    """The lossless and the lossy row with the largest ``col`` within the budget (None: there is none)."""
    ok = [r for r in rows if r["within"]]
    pick = {"lossless": [r for r in ok if r["tv_kind"] == TV_LOSSLESS],
            "lossy": [r for r in ok if r["tv_kind"] != TV_LOSSLESS]}
    return {name: max(rs, key=lambda r: r[col]) if rs else None for name, rs in pick.items()}


def sizes(quick: bool, n_sequences: int | None, seq_len: int | None) -> tuple[int, int]:
    """The run sizes: the options', else ``--quick``'s or the defaults."""
    base = (QUICK_SEQUENCES, QUICK_SEQ_LEN) if quick else (DEFAULT_SEQUENCES, DEFAULT_SEQ_LEN)
    n, L = n_sequences or base[0], seq_len or base[1]
    for name, v, lo in (("--sequences", n, 2), ("--seq-len", L, 1)):
        if v < lo:
            raise ValueError(f"{name} must be >= {lo}, got {v}")
    return n, L
