"""Resumable training loops: checkpoints of a loop's whole state, at intervals and on termination.

A training loop (the tokenizer's, the GPTs' and the EAGLE head's) hands a
:class:`LoopCheckpoint` the objects whose state decides its next step (the
module, the optimiser, the LR schedule, the data generator, extra tensors),
restores them before its first step (:meth:`LoopCheckpoint.restore` returns
the step to resume at) and calls :meth:`LoopCheckpoint.after_step` after
every step. The state is written atomically every ``every_seconds`` of wall
time and when a stop was requested (SIGTERM or SIGINT while
:func:`termination_handler` is active, or ``stop_at`` in tests); after a
requested stop the checkpoint is written and :class:`TrainingInterrupted` is
raised. Saving and restoring are exact (float32 parameters, optimiser
moments, generator states), so a resumed loop ends with the same weights as
an uninterrupted one on the same machine and thread count.

A checkpoint carries a fingerprint of what its loop trains (config, budget,
seed, hashes of its inputs): resuming from one with another fingerprint is
refused with a message naming the file, so a changed budget never mixes with
an old run. Wall and CPU seconds of earlier segments are carried over, so a
card's training time is the sum over all segments.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from relaxspec.mini.timing import Clock

_STOP_REQUESTED = {"signal": None}


class TrainingInterrupted(RuntimeError):
    """A stop was requested; the loop's state was checkpointed and a later run resumes from it."""


def request_stop(reason: str = "requested") -> None:
    """Ask every running loop to checkpoint and stop after its current step."""
    _STOP_REQUESTED["signal"] = reason


def stop_requested() -> str | None:
    """Why a stop was requested (``None``: it was not)."""
    return _STOP_REQUESTED["signal"]


def clear_stop() -> None:
    """Forget a stop request (a new run starts)."""
    _STOP_REQUESTED["signal"] = None


def _on_signal(signum: int, frame: object) -> None:
    request_stop(signal.Signals(signum).name)


@contextmanager
def termination_handler() -> Iterator[None]:
    """While active, SIGTERM and SIGINT request a stop (checkpoint, then :class:`TrainingInterrupted`)
    instead of killing the process; the previous handlers are restored on exit. Outside the main
    thread (where Python cannot install handlers) it does nothing."""
    clear_stop()
    previous = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, _on_signal)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _state_of(obj: Any) -> Any:
    if isinstance(obj, torch.Generator):
        return obj.get_state()
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if hasattr(obj, "state_dict"):
        return obj.state_dict()
    raise TypeError(f"cannot checkpoint a {type(obj).__name__}")


def _restore_into(obj: Any, saved: Any) -> None:
    if isinstance(obj, torch.Generator):
        obj.set_state(saved)
    elif isinstance(obj, torch.Tensor):
        with torch.no_grad():
            obj.copy_(saved)
    else:
        obj.load_state_dict(saved)


@dataclass
class LoopCheckpoint:
    """The checkpoint file of one training loop (see the module docstring)."""

    path: Path
    fingerprint: dict[str, Any]
    every_seconds: float = 300.0
    stop_at: int | None = None
    on_save: Callable[[], None] | None = None
    prior_wall: float = 0.0
    prior_cpu: float = 0.0
    _clock: Clock = field(default_factory=Clock)
    _last_save: float = 0.0

    def __post_init__(self) -> None:
        if not self.every_seconds > 0:
            raise ValueError(f"checkpoint interval must be > 0 seconds, got {self.every_seconds}")
        self._key = json.dumps(self.fingerprint, sort_keys=True, default=str)

    def restore(self, state: dict[str, Any]) -> int:
        """Load the saved state into ``state``'s objects; return the number of steps already done
        (0 without a checkpoint). Starts this segment's clock."""
        self._clock = Clock()
        self._last_save = 0.0
        if not self.path.is_file():
            return 0
        try:
            saved = torch.load(self.path, weights_only=True)
        except Exception as err:  # a torn or foreign file: name it rather than fail deep in torch
            raise ValueError(f"checkpoint {self.path} is unreadable ({err}); delete it or pass "
                             "--force") from err
        if saved.get("fingerprint") != self._key:
            raise ValueError(f"checkpoint {self.path} was written by a run with other settings "
                             f"({saved.get('fingerprint')}), not {self._key}; delete it or pass --force")
        missing = sorted(set(state) - set(saved["state"]))
        if missing:
            raise ValueError(f"checkpoint {self.path} lacks state {missing}")
        for name, obj in state.items():
            _restore_into(obj, saved["state"][name])
        self.prior_wall, self.prior_cpu = float(saved["wall_seconds"]), float(saved["cpu_seconds"])
        return int(saved["step"])

    def wall(self) -> float:
        """Loop wall seconds over every segment so far."""
        return self.prior_wall + self._clock.wall()

    def cpu(self) -> float:
        """Loop CPU seconds over every segment so far."""
        return self.prior_cpu + self._clock.cpu()

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Write the state after ``step`` steps (atomically: a crash mid-write keeps the previous one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"fingerprint": self._key, "step": step, "wall_seconds": self.wall(),
                   "cpu_seconds": self.cpu(), "state": {k: _state_of(v) for k, v in state.items()}}
        tmp = self.path.with_suffix(".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, self.path)
        self._last_save = self._clock.wall()
        if self.on_save:
            self.on_save()

    def after_step(self, step: int, state: dict[str, Any], total: int) -> None:
        """Save when the interval has passed or a stop was requested (then raise
        :class:`TrainingInterrupted`); ``step`` steps of ``total`` are done."""
        stop = stop_requested() or ("stop_at" if self.stop_at is not None and step >= self.stop_at else None)
        if step >= total:
            return
        if stop or self._clock.wall() - self._last_save >= self.every_seconds:
            self.save(step, state)
        if stop:
            raise TrainingInterrupted(f"stopped ({stop}) after step {step} of {total}; "
                                      f"checkpoint {self.path}")

    def discard(self) -> None:
        """Delete the checkpoint (its loop finished and its result was saved)."""
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class CheckpointPolicy:
    """Where and how often the loops of one training run checkpoint.

    ``stop_at`` maps a loop name to a step after which it stops as on SIGTERM
    (to exercise resuming: tests, or trying it by hand).
    """

    directory: Path
    every_seconds: float = 300.0
    stop_at: dict[str, int] = field(default_factory=dict)
    on_save: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        if not self.every_seconds > 0:
            raise ValueError(f"checkpoint interval must be > 0 seconds, got {self.every_seconds}")

    def loop(self, name: str, fingerprint: dict[str, Any]) -> LoopCheckpoint:
        """The checkpoint of loop ``name`` (file ``DIRECTORY/NAME.pt``)."""
        return LoopCheckpoint(Path(self.directory) / f"{name}.pt", fingerprint, self.every_seconds,
                              self.stop_at.get(name), self.on_save)

    def existing(self) -> list[Path]:
        """Checkpoint files present now."""
        d = Path(self.directory)
        return sorted(d.glob("*.pt")) if d.is_dir() else []
