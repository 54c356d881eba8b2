"""The time budget of a resumable training run, counted over all its segments.

A run that is stopped and resumed is several processes ("segments"). The
ledger, a JSON file in the output folder (``training_log.json``), records
each segment's command, start time, wall and CPU seconds and how it ended
(``running``, ``finished``, ``interrupted``, ``failed``). A segment's
seconds are updated whenever a checkpoint is written and when it ends, so a
process killed without warning (SIGKILL) under-counts by at most one
checkpoint interval. The budget used is the sum of the segments' wall
seconds: time between segments does not count, work redone after a resume
(the steps after the last checkpoint) does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from relaxspec.mini.timing import Clock, load_average

LEDGER_NAME = "training_log.json"


class RunLedger:
    """Segments of one training run in ``directory/training_log.json`` (see the module docstring)."""

    def __init__(self, directory: Path, budget_seconds: float) -> None:
        self.path = Path(directory) / LEDGER_NAME
        self.budget_seconds = float(budget_seconds)
        self.segments: list[dict[str, Any]] = []
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
                self.segments = list(data["segments"])
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ValueError(f"training ledger {self.path} is malformed ({err}); fix or delete "
                                 "it") from err
        self._clock: Clock | None = None

    def start(self, command: str, threads: int) -> None:
        """Open a new segment (this process)."""
        self._clock = Clock()
        self.segments.append({"command": command, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "threads": threads, "load_average_start": load_average(),
                              "wall_seconds": 0.0, "cpu_seconds": 0.0, "status": "running",
                              "components": []})
        self._write()

    def update(self, status: str | None = None, component: str | None = None) -> None:
        """Record the open segment's seconds so far (and its ``status``, a ``component`` it finished)."""
        if self._clock is None:
            return
        seg = self.segments[-1]
        seg["wall_seconds"] = round(self._clock.wall(), 1)
        seg["cpu_seconds"] = round(self._clock.cpu(), 1)
        if status:
            seg["status"] = status
            seg["load_average_end"] = load_average()
        if component:
            seg["components"].append(component)
        self._write()

    def wall_seconds(self) -> float:
        """Wall seconds of every segment so far (the budget used)."""
        return float(sum(s["wall_seconds"] for s in self.segments))

    def cpu_seconds(self) -> float:
        """CPU seconds of every segment so far."""
        return float(sum(s["cpu_seconds"] for s in self.segments))

    def summary(self) -> str:
        """One line: segments, wall and CPU used against the budget."""
        return (f"{len(self.segments)} segment(s), {self.wall_seconds() / 60:.1f} min wall "
                f"({self.cpu_seconds() / 60:.1f} CPU-min) of the {self.budget_seconds / 60:.0f}-minute "
                "budget")

    def _write(self) -> None:
        data = {"budget_wall_seconds": self.budget_seconds, "wall_seconds": round(self.wall_seconds(), 1),
                "cpu_seconds": round(self.cpu_seconds(), 1), "segments": self.segments}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.path)
