"""Strict loading of LlamaGen-layout checkpoints from a local path (weights are never downloaded).

A checkpoint is a ``torch.save`` file read with ``weights_only=True``: either a
dict holding the state dict under ``"model"`` (LlamaGen's training
checkpoints) or a bare state dict. ``torch.compile`` prefixes (``_orig_mod.``)
are stripped. Every expected tensor must be present with its exact shape and
finite values; anything else is an error that names the offending tensors.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

COMPILE_PREFIX = "_orig_mod."


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a checkpoint file and return its state dict (``model`` key or bare), prefixes stripped."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist (weights are never downloaded: pass a file)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
        raise ValueError(f"checkpoint {path} is corrupt or not a torch checkpoint: {err}") from err
    if not isinstance(obj, Mapping):
        raise ValueError(f"checkpoint {path} holds a {type(obj).__name__}, not a state dict")
    state = obj["model"] if "model" in obj else obj
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(
            f"checkpoint {path} has neither a 'model' state dict nor bare tensors (top-level keys: "
            f"{sorted(map(str, obj))[:8]})"
        )
    return {k.replace(COMPILE_PREFIX, ""): v for k, v in state.items()}


def check_state_dict(
    state: Mapping[str, torch.Tensor],
    expected: Mapping[str, tuple[int, ...]],
    *,
    optional: Mapping[str, tuple[int, ...] | None] | None = None,
    source: str = "checkpoint",
) -> None:
    """Raise ``ValueError`` naming missing, unexpected, mis-shaped or non-finite tensors.

    ``optional`` names tensors that may be absent (with a shape to check, or
    ``None`` for any shape), e.g. LlamaGen's ``freqs_cis`` buffer.
    """
    optional = optional or {}
    missing = sorted(k for k in expected if k not in state)
    unexpected = sorted(k for k in state if k not in expected and k not in optional)
    shapes = {**expected, **{k: s for k, s in optional.items() if s is not None}}
    wrong = sorted(
        f"{k}: {tuple(state[k].shape)} in the file, {tuple(shapes[k])} expected"
        for k in state if k in shapes and tuple(state[k].shape) != tuple(shapes[k])
    )
    problems = []
    if missing:
        problems.append(f"missing tensors {_short(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {_short(unexpected)}")
    if wrong:
        problems.append(f"mis-shaped tensors [{'; '.join(wrong[:8])}{' ...' if len(wrong) > 8 else ''}]")
    if problems:
        raise ValueError(f"{source} does not match the model: " + ", ".join(problems))
    bad = sorted(k for k in expected if state[k].is_floating_point() and not torch.isfinite(state[k]).all())
    if bad:
        raise ValueError(f"{source} has NaN or infinite values in {_short(bad)}")


def _short(names: list[str]) -> str:
    return str(names[:12])[:-1] + (f", ... ({len(names)} in all)]" if len(names) > 12 else "]")


def expected_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Shapes of a module's persistent state (what a checkpoint must hold)."""
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def load_state(
    module: nn.Module,
    state: Mapping[str, torch.Tensor],
    *,
    optional: Mapping[str, tuple[int, ...] | None] | None = None,
    source: str = "checkpoint",
) -> None:
    """Load ``state`` into ``module`` after :func:`check_state_dict` (optional tensors are dropped)."""
    check_state_dict(state, expected_shapes(module), optional=optional, source=source)
    module.load_state_dict({k: v for k, v in state.items() if k not in (optional or {})}, strict=True)


def load_strict(
    module: nn.Module,
    path: str | Path,
    *,
    optional: Mapping[str, tuple[int, ...] | None] | None = None,
) -> None:
    """Read ``path`` and load it into ``module`` strictly (:func:`load_state`)."""
    load_state(module, read_state_dict(path), optional=optional, source=f"checkpoint {path}")
