"""Shipped weights: one safetensors file and one JSON card per trained component.

A component ``name`` in a weights folder is ``name.safetensors`` plus
``name.json``. The card records what the weights are and how they were made:
the model config, the data, the command that trained them, the training time
and the measured metrics, and the SHA-256 of the weights file so that a
truncated or altered file is detected before use. The card is written last,
so a component whose card exists and matches its weights is finished
(``train-mini`` skips it on resume).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"
# The shipped models' folders: the first model (512 codes) and the many-code one (mini/ambiguous_model.py).
MODEL_DIRS = {"mini": WEIGHTS_DIR, "ambiguous": WEIGHTS_DIR / "ambiguous"}
CARD_VERSION = 1
CARD_FIELDS = ("component", "config", "data", "training_command", "training_seconds", "metrics",
               "weights_file", "weights_sha256", "storage_dtype", "n_parameters")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def weights_path(directory: Path, name: str) -> Path:
    """The safetensors file of component ``name``."""
    return Path(directory) / f"{name}.safetensors"


def card_path(directory: Path, name: str) -> Path:
    """The JSON card of component ``name``."""
    return Path(directory) / f"{name}.json"


def save_component(
    directory: Path,
    name: str,
    state: dict[str, torch.Tensor],
    card: dict[str, Any],
    storage_dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """Write ``name.safetensors`` (floating tensors cast to ``storage_dtype``) and then its card.

    ``card`` must hold ``config``, ``data``, ``training_command``,
    ``training_seconds`` and ``metrics``; the file name, hash, storage dtype,
    parameter count and software versions are added here. Returns the full card.
    """
    missing = [k for k in ("config", "data", "training_command", "training_seconds", "metrics")
               if k not in card]
    if missing:
        raise ValueError(f"card of {name} lacks {missing}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: (v.detach().to(storage_dtype) if v.is_floating_point() else v.detach()).contiguous().cpu()
        for k, v in state.items()
    }
    wpath = weights_path(directory, name)
    tmp = wpath.with_suffix(".safetensors.tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, wpath)
    full = {
        "component": name,
        **card,
        "weights_file": wpath.name,
        "weights_sha256": _sha256(wpath),
        "storage_dtype": str(storage_dtype).removeprefix("torch."),
        "n_parameters": int(sum(t.numel() for t in tensors.values())),
        "software": {"python": platform.python_version(), "torch": torch.__version__},
        "card_version": CARD_VERSION,
    }
    cpath = card_path(directory, name)
    tmp = cpath.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(full, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, cpath)
    return full


def read_card(directory: Path, name: str) -> dict[str, Any]:
    """The validated JSON card of component ``name``.

    Raises
    ------
    FileNotFoundError
        If the weights folder or the card is missing (the message names the path).
    ValueError
        If ``directory`` is not a folder, or the card is malformed.
    """
    if not Path(directory).exists():
        raise FileNotFoundError(f"weights folder {directory} does not exist")
    if not Path(directory).is_dir():
        raise ValueError(f"weights folder {directory} is not a folder")
    cpath = card_path(directory, name)
    if not cpath.is_file():
        raise FileNotFoundError(f"card {cpath} of component {name!r} is missing")
    try:
        card = json.loads(cpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"card {cpath} is not valid JSON: {err}") from err
    if not isinstance(card, dict):
        raise ValueError(f"card {cpath} must hold a JSON object")
    missing = [k for k in CARD_FIELDS if k not in card]
    if missing:
        raise ValueError(f"card {cpath} lacks fields {missing}")
    if card["component"] != name:
        raise ValueError(f"card {cpath} describes component {card['component']!r}, not {name!r}")
    return card


def load_component(directory: Path, name: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Load component ``name``: its tensors (floating ones as float32) and its card.

    Raises
    ------
    FileNotFoundError
        If the weights or the card are missing.
    ValueError
        If the card is malformed, or the weights file does not match the
        card's SHA-256 or is not a readable safetensors file.
    """
    card = read_card(directory, name)
    wpath = weights_path(directory, name)
    if not wpath.is_file():
        raise FileNotFoundError(f"weights {wpath} of component {name!r} are missing")
    digest = _sha256(wpath)
    if digest != card["weights_sha256"]:
        raise ValueError(f"weights file {wpath} is corrupt or altered: SHA-256 {digest[:12]}... "
                         f"differs from its card's {str(card['weights_sha256'])[:12]}...")
    try:
        tensors = load_file(str(wpath))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"weights file {wpath} is not a valid safetensors file: {err}") from err
    return {k: (v.float() if v.is_floating_point() else v) for k, v in tensors.items()}, card


def component_done(directory: Path, name: str) -> bool:
    """Whether ``name`` has a valid card whose hash matches its weights file."""
    try:
        card = read_card(directory, name)
    except (FileNotFoundError, ValueError):
        return False
    wpath = weights_path(directory, name)
    return wpath.is_file() and _sha256(wpath) == card["weights_sha256"]


def load_state_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """``module.load_state_dict`` that names missing, unexpected and mis-shaped tensors of ``what``."""
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shaped = sorted(f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
                    for k in set(own) & set(state) if state[k].shape != own[k].shape)
    if missing or unexpected or shaped:
        raise ValueError(f"{what} does not fit its model: missing {missing}, unexpected {unexpected}, "
                         f"mis-shaped {shaped}")
    module.load_state_dict(state)
