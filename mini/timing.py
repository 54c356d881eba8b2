"""Wall-clock and CPU time of a piece of work, and the machine's load while it ran.

``train-mini`` records both in every card: wall time alone misleads on a
shared machine (it grows with the load), CPU time (all threads of this
process) does not, and the 1-minute load average says how shared it was.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field


def load_average() -> float:
    """The 1-minute load average (NaN where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return float("nan")


@dataclass
class Clock:
    """Started at construction: :meth:`wall` and :meth:`cpu` seconds since then."""

    _wall: float = field(default_factory=time.perf_counter)
    _cpu: float = field(default_factory=time.process_time)
    load_at_start: float = field(default_factory=load_average)

    def wall(self) -> float:
        """Wall-clock seconds since the start."""
        return time.perf_counter() - self._wall

    def cpu(self) -> float:
        """CPU seconds of this process (every thread) since the start."""
        return time.process_time() - self._cpu
