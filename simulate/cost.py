"""The cost model of SPEC section 8 on a measured latency table, and cost-aware tree sizes (issue 7).

    speedup = E[tokens per step] * t_target(1) / (t_target(n_verify) + n_draft_calls * t_draft)

``t_target(n)`` is one target forward over n new tokens (the root, i.e. the
last committed token, plus the draft nodes: ``n_verify = tree nodes + 1``)
and ``t_draft`` one drafter forward. Both come from a table written by
``benchmarks/decoder_bench.py`` (``benchmarks/decoder_<device>.csv``): rows
with ``role = target`` for the model, averaged over the prefix lengths
measured and interpolated linearly in n (extrapolated linearly from the last
two sizes beyond the largest), and the drafter row of that model (the EAGLE
head over a beam of 10, one per draft call whatever the call's width).

The committed table is CPU-only (``benchmarks/decoder_cpu.csv``, one core:
a 60-token tree costs about 6x an AR step, so trees barely pay); no GPU
table exists yet. The table path is a parameter: a GPU table written by the
same script plugs in unchanged.

:func:`choose_static_size` is the cost-aware size (issue 7, item 4): among
Sequoia trees with at most ``max_nodes`` nodes and depth at most
``max_depth`` for a measured positional acceptance vector, the one whose
predicted speedup (Sequoia's DP value for E[tokens], the tree's own node
count and depth for the cost) is largest, not the one with most tokens.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT_TABLE = Path(__file__).resolve().parents[1] / "benchmarks" / "decoder_cpu.csv"


@dataclass(frozen=True)
class CostTable:
    """Target latency per tree size and drafter latency for one model on one device (milliseconds)."""

    path: str
    device: str
    model: str
    drafter: str
    sizes: np.ndarray  # n_tokens measured (increasing)
    target_latency_ms: np.ndarray  # t_target(n), mean over the prefix lengths measured
    draft_ms: float

    @classmethod
    def load(cls, path: str | Path = DEFAULT_TABLE, model: str = "GPT-B", drafter: str | None = None,
             mode: str = "eager") -> CostTable:
        """Read the ``model``'s rows of a decoder latency CSV (``drafter``: the drafter row's model
        column, default the one naming ``model`` in parentheses, e.g. ``EAGLE head (GPT-B)``)."""
        path = Path(path)
        try:
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        except OSError as err:
            raise ValueError(f"cannot read cost table {path}: {err}") from err
        need = {"device", "model", "role", "prefix", "n_tokens", "mode", "latency_ms"}
        if not rows or need - set(rows[0]):
            raise ValueError(f"{path} is not a decoder latency table (needs columns {sorted(need)})")
        rows = [r for r in rows if r["mode"] == mode]
        targets = [r for r in rows if r["role"] == "target" and r["model"] == model]
        if not targets:
            models = sorted({r["model"] for r in rows if r["role"] == "target"})
            raise ValueError(f"{path} has no {mode} target rows for model {model!r}; models: {models}")
        name = drafter or next((r["model"] for r in rows if r["role"] == "drafter"
                                and r["model"].endswith(f"({model})")), None)
        drafts = [float(r["latency_ms"]) for r in rows if r["role"] == "drafter" and r["model"] == name]
        if not drafts:
            raise ValueError(f"{path} has no drafter rows for {name or model!r}")
        by_n: dict[int, list[float]] = {}
        for r in targets:
            by_n.setdefault(int(r["n_tokens"]), []).append(float(r["latency_ms"]))
        sizes = np.array(sorted(by_n), dtype=np.int64)
        if sizes[0] != 1 or sizes.size < 2:
            raise ValueError(f"{path}: model {model!r} needs t_target at n = 1 and at least one larger n")
        t = np.array([np.mean(by_n[n]) for n in sizes])
        if np.any(~np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"{path}: latencies must be positive")
        return cls(str(path), targets[0]["device"], model, str(name), sizes, t, float(np.mean(drafts)))

    def t_target(self, n: float) -> float:
        """t_target(n) in ms: piecewise linear in n, linear extrapolation beyond the largest size."""
        if not n >= 1:
            raise ValueError(f"a target forward covers n >= 1 tokens, got {n!r}")
        s, t = self.sizes, self.target_latency_ms
        if n <= s[-1]:
            return float(np.interp(n, s, t))
        slope = (t[-1] - t[-2]) / (s[-1] - s[-2])
        return float(t[-1] + slope * (n - s[-1]))

    def speedup(self, tokens_per_step: float, n_verify: float, draft_calls: float) -> float:
        """SPEC section 8's speedup over autoregressive decoding (1 token per t_target(1))."""
        if not tokens_per_step >= 1 or not draft_calls >= 0:
            raise ValueError("tokens_per_step must be >= 1 and draft_calls >= 0")
        return float(tokens_per_step * self.t_target(1) / (self.t_target(n_verify)
                                                            + draft_calls * self.draft_ms))

    def __str__(self) -> str:
        return f"{self.model} on {self.device} ({Path(self.path).name})"


@dataclass(frozen=True)
class SizeChoice:
    """The cost-aware size and the grid it was chosen from."""

    n_nodes: int  # the chosen tree's draft nodes
    depth: int
    choices: list  # its rank paths
    tokens: float  # predicted E[tokens per step]
    speedup: float  # predicted speedup
    grid: list  # (max_nodes, max_depth, nodes, depth, tokens, speedup) for every candidate


def choose_static_size(acceptance, cost: CostTable, max_nodes: int, max_depth: int) -> SizeChoice:
    """The Sequoia tree (at most ``max_nodes`` nodes, depth at most ``max_depth``) of largest predicted
    speedup; ties go to the smaller tree. A static tree makes one draft call per level with children."""
    from simulate.sequoia import sequoia_table

    table = sequoia_table(acceptance, max_nodes, max_depth)  # validates its arguments
    grid = []
    best = None
    for d in range(1, int(max_depth) + 1):
        for n in range(1, int(max_nodes) + 1):
            paths, value = table.choices(n, d)
            if not paths:
                continue
            size, depth = len(paths), max(len(p) for p in paths)
            s = cost.speedup(1.0 + value, size + 1, depth)
            grid.append((n, d, size, depth, 1.0 + value, s))
            if best is None or s > best.speedup or (s == best.speedup and size < best.n_nodes):
                best = SizeChoice(size, depth, paths, 1.0 + value, s, grid)
    if best is None:
        raise ValueError("the acceptance vector is all zero: no tree pays")
    return best
