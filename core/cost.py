"""The cost model of SPEC section 8 on the decoder's measured latency tables.

    speedup = E[tokens per step] * t_target(1) / (t_target(n_verify) + n_draft_calls * t_draft)

``t_target(n)`` is one target forward over n new tokens and ``t_draft`` one
drafter forward, read from a table written by ``benchmarks/decoder_bench.py``
(``core/tables/decoder_cpu.csv``, ``core/tables/decoder_cuda.csv``, shipped with the
package): rows of
(device, device_name, model, role, prefix, n_tokens, mode, latency_ms, ...).
The model averages the latencies over the table's prefix lengths (a sequence
visits them all) and interpolates t_target linearly in n between measured
tree sizes (linear extrapolation beyond the largest). ``n_verify`` counts the
tree's nodes with its root (the last committed token the target also
processes). Over many steps the speedup is the ratio of totals:
tokens * t_target(1) / time.

The committed table is CPU-only (one core: a 60-token tree costs about 6x an
AR step, so trees barely pay); a GPU table written by the same script plugs
in unchanged. The module needs only NumPy, so ``simulate`` uses it too.

The cost-aware tree size built on it is :func:`core.trees.costaware.choose_static_size`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TABLES = Path(__file__).resolve().parent / "tables"
DEFAULT_TABLE = TABLES / "decoder_cpu.csv"
COLUMNS = ("device", "device_name", "model", "role", "prefix", "n_tokens", "mode", "latency_ms")


def read_table(path: str | Path) -> list[dict]:
    """The rows of a latency CSV (numbers parsed), with a clear error for a missing or foreign file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"latency table {path} does not exist")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = sorted(set(COLUMNS) - set(rows[0] if rows else ()))
    if missing:
        raise ValueError(f"{path} is not a decoder latency table: no rows or missing columns {missing}")
    for i, r in enumerate(rows, start=2):
        try:
            for key in ("prefix", "n_tokens"):
                r[key] = int(r[key])
            r["latency_ms"] = float(r["latency_ms"])
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path} line {i}: {err}") from err
        if not (np.isfinite(r["latency_ms"]) and r["latency_ms"] > 0 and r["n_tokens"] >= 1):
            raise ValueError(f"{path} line {i}: latencies must be positive and n_tokens >= 1")
    return rows


def target_models(rows: list[dict]) -> list[str]:
    """Target models of a table, in table order."""
    return list(dict.fromkeys(r["model"] for r in rows if r["role"] == "target"))


@dataclass(frozen=True)
class CostModel:
    """Latencies (ms) of one target and its drafter on one device."""

    device: str  # "cpu" or "cuda"
    device_name: str  # e.g. "CPU (1 thread)", "NVIDIA H100 80GB HBM3"
    model: str
    drafter: str
    sizes: np.ndarray  # measured n (sorted, starting at 1)
    t_target_ms: np.ndarray  # mean over prefixes at each n
    t_draft_ms: float
    path: str = ""

    @classmethod
    def from_table(cls, path: str | Path = DEFAULT_TABLE, model: str = "GPT-B", *, drafter: str | None = None,
                   mode: str = "eager", draft_tokens: int = 10) -> CostModel:
        """The cost model of ``model`` from a latency CSV.

        ``drafter`` names the drafter's rows: by default the ``drafter`` row
        ``EAGLE head (<model>)``; a target model of the table (an independent
        drafter GPT) is costed at its t(``draft_tokens``).
        """
        rows = [r for r in read_table(path) if r["mode"] == mode]
        mine = [r for r in rows if r["role"] == "target" and r["model"] == model]
        if not mine:
            raise ValueError(f"{path} has no {mode} target rows for {model!r}; "
                             f"target models: {target_models(rows)}")
        drafter = drafter or f"EAGLE head ({model})"
        draft = [r for r in rows if r["model"] == drafter]
        if not draft:
            raise ValueError(f"{path} has no {mode} rows for the drafter {drafter!r}")
        if draft[0]["role"] == "target":
            d_sizes, d_t = _mean_by_n(draft)
            t_draft = float(np.interp(draft_tokens, d_sizes, d_t))
        else:
            t_draft = float(np.mean([r["latency_ms"] for r in draft]))
        sizes, t = _mean_by_n(mine)
        if sizes[0] != 1 or sizes.size < 2:
            raise ValueError(f"{path}: {model!r} needs t_target at n = 1 and at least one larger n")
        return cls(mine[0]["device"], mine[0]["device_name"], model, drafter, sizes, t, t_draft, str(path))

    def target_ms(self, n: float | np.ndarray) -> np.ndarray:
        """t_target(n) for n >= 1: piecewise linear in the measured sizes, linear beyond the largest."""
        n = np.asarray(n, dtype=np.float64)
        if not np.all(n >= 1):
            raise ValueError(f"a target forward covers n >= 1 tokens, got {n!r}")
        out = np.interp(n, self.sizes, self.t_target_ms)
        slope = (self.t_target_ms[-1] - self.t_target_ms[-2]) / (self.sizes[-1] - self.sizes[-2])
        return np.where(n > self.sizes[-1], self.t_target_ms[-1] + slope * (n - self.sizes[-1]), out)

    @property
    def ar_step_ms(self) -> float:
        """t_target(1): one autoregressive step."""
        return float(self.target_ms(1.0))

    def step_ms(self, n_verify: float | np.ndarray, draft_calls: float | np.ndarray) -> np.ndarray:
        """Time of speculative steps: t_target(n_verify) + draft_calls * t_draft."""
        calls = np.asarray(draft_calls, dtype=np.float64)
        if not np.all(calls >= 0):
            raise ValueError("draft_calls must be >= 0")
        return self.target_ms(n_verify) + calls * self.t_draft_ms

    def speedup(self, tokens: float | np.ndarray, n_verify: float | np.ndarray,
                draft_calls: float | np.ndarray) -> float:
        """Speedup over AR of steps emitting ``tokens`` with trees of ``n_verify`` nodes (root included):
        per step (scalars) or over many steps (arrays, the ratio of totals)."""
        tokens = np.asarray(tokens, dtype=np.float64)
        if not np.all(tokens >= 1):
            raise ValueError("a step emits at least one token")
        return float(tokens.sum() * self.ar_step_ms / np.sum(self.step_ms(n_verify, draft_calls)))

    def __str__(self) -> str:
        return f"{self.model} on {self.device_name} ({Path(self.path).name})"


def _mean_by_n(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.array(sorted({r["n_tokens"] for r in rows}), dtype=np.float64)
    t = np.array([np.mean([r["latency_ms"] for r in rows if r["n_tokens"] == n]) for n in sizes])
    return sizes, t
