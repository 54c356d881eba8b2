"""The cost model of SPEC section 8 on the decoder's measured latency tables.

    speedup = E[tokens per step] * t_target(1) / (t_target(n_verify) + n_draft_calls * t_draft)

``t_target(n)`` is one target forward over n new tokens and ``t_draft`` one
drafter forward, read from a table written by ``benchmarks/decoder_bench.py``
(``benchmarks/decoder_cpu.csv``, ``benchmarks/decoder_cuda.csv``): rows of
(device, model, role, prefix, n_tokens, mode, latency_ms). The model averages
the latencies over the table's prefix lengths (a sequence visits them all) and
interpolates t_target linearly in n between measured tree sizes (linear
extrapolation beyond the largest). ``n_verify`` counts the tree's nodes with
its root (the last committed token the target also processes). Over many
steps the speedup is the ratio of totals: tokens * t_target(1) / time.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def read_table(path: str | Path) -> list[dict]:
    """The rows of a latency CSV (numbers parsed)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"latency table {path} does not exist")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for key in ("batch", "prefix", "n_tokens"):
            r[key] = int(r[key])
        r["latency_ms"] = float(r["latency_ms"])
    return rows


def target_models(rows: list[dict]) -> list[str]:
    """Target models of a table, in table order."""
    return list(dict.fromkeys(r["model"] for r in rows if r["role"] == "target"))


@dataclass(frozen=True)
class CostModel:
    """Latencies (ms) of one target and its drafter on one device."""

    device: str
    model: str
    drafter: str
    sizes: np.ndarray  # measured n (sorted)
    t_target_ms: np.ndarray  # mean over prefixes at each n
    t_draft_ms: float

    @classmethod
    def from_table(cls, path: str | Path, model: str, *, drafter: str | None = None, mode: str = "eager",
                   draft_tokens: int = 10) -> CostModel:
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
        sizes, t = _mean_by_n(mine)
        drafter = drafter or f"EAGLE head ({model})"
        draft = [r for r in rows if r["model"] == drafter]
        if not draft:
            raise ValueError(f"{path} has no {mode} rows for the drafter {drafter!r}")
        if draft[0]["role"] == "target":
            d_sizes, d_t = _mean_by_n(draft)
            t_draft = float(np.interp(draft_tokens, d_sizes, d_t))
        else:
            t_draft = float(np.mean([r["latency_ms"] for r in draft]))
        return cls(mine[0]["device_name"], model, drafter, sizes, t, t_draft)

    def target_ms(self, n: float | np.ndarray) -> np.ndarray:
        """t_target(n): piecewise linear in the measured sizes, linear beyond the largest."""
        n = np.asarray(n, dtype=np.float64)
        out = np.interp(n, self.sizes, self.t_target_ms)
        if self.sizes.size >= 2:
            slope = (self.t_target_ms[-1] - self.t_target_ms[-2]) / (self.sizes[-1] - self.sizes[-2])
            out = np.where(n > self.sizes[-1], self.t_target_ms[-1] + slope * (n - self.sizes[-1]), out)
        return out

    @property
    def ar_step_ms(self) -> float:
        """t_target(1): one autoregressive step."""
        return float(self.target_ms(1.0))

    def step_ms(self, n_verify: np.ndarray, draft_calls: np.ndarray) -> np.ndarray:
        """Time of speculative steps: t_target(n_verify) + draft_calls * t_draft."""
        return self.target_ms(n_verify) + np.asarray(draft_calls, dtype=np.float64) * self.t_draft_ms

    def speedup(self, tokens: np.ndarray, n_verify: np.ndarray, draft_calls: np.ndarray) -> float:
        """Speedup over AR of steps emitting ``tokens`` with trees of ``n_verify`` nodes (root included)."""
        tokens = np.asarray(tokens, dtype=np.float64)
        return float(tokens.sum() * self.ar_step_ms / self.step_ms(n_verify, draft_calls).sum())


def _mean_by_n(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.array(sorted({r["n_tokens"] for r in rows}), dtype=np.float64)
    t = np.array([np.mean([r["latency_ms"] for r in rows if r["n_tokens"] == n]) for n in sizes])
    return sizes, t
