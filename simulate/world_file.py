"""World files: a latent-field world's parameters in a TOML file, named by its path wherever a preset's
name is taken (``relaxspec simulate``'s ``worlds``, ``world-stats``, ``relaxspec.simulate(...)``,
:meth:`simulate.worlds.LatentWorld.preset`).

A world file holds one table ``[world]`` of :class:`simulate.world_params.LatentParams` fields (every
field optional: a missing one takes LatentParams' default; unknown keys and values of the wrong type are
refused) and, from ``relaxspec fit``, a table ``[fit]``: what the fit matched and how well (read back as
plain data, never used to build the world)::

    [world]
    vocab_size = 512
    beta = 27.936
    ...
    [fit]
    sources = ["run.trace"]
    ...

A name is a world file when it ends in ``.toml``; a relative path is read from the working directory.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from relaxspec.simulate.world_params import PRESETS, LatentParams

WORLD_SUFFIX = ".toml"
_TABLES = ("world", "fit")
_KINDS = {"int": (int, "an integer"), "float": (float, "a number"), "str": (str, "a string")}


def is_world_file(name: object) -> bool:
    """Whether ``name`` names a world file (a string or path ending in ``.toml``) rather than a preset."""
    return isinstance(name, (str, Path)) and str(name).endswith(WORLD_SUFFIX)


def params_from_dict(table: object, source: str = "world") -> LatentParams:
    """:class:`LatentParams` from a ``[world]`` table, each key checked (name, type, then the value by
    LatentParams itself); a ``ValueError`` names ``source`` and the key."""
    if not isinstance(table, dict):
        raise ValueError(f"{source}: [world] must be a table of world parameters, got {table!r}")
    known = {f.name: f.type for f in fields(LatentParams)}
    bad = sorted(set(table) - set(known))
    if bad:
        raise ValueError(f"{source}: unknown world parameters {bad}; allowed: {sorted(known)}")
    values = {}
    for key, val in table.items():
        kind, what = _KINDS[known[key]]
        ok = isinstance(val, str) if kind is str else (
            not isinstance(val, bool) and isinstance(val, int if kind is int else (int, float)))
        if not ok:
            raise ValueError(f"{source}: world parameter {key} must be {what}, got {val!r}")
        values[key] = kind(val)  # a float written as a TOML integer (2) is the same setting as 2.0
    try:
        return LatentParams(**values)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from err


def read_world_file(path: str | Path) -> tuple[LatentParams, dict[str, Any]]:
    """The parameters of the world file at ``path`` and its ``[fit]`` table ({} when it has none); a
    ``ValueError`` in one line naming the file when it cannot be read or holds a bad value."""
    path = Path(path)
    try:
        d = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as err:
        raise ValueError(f"cannot read world file {path}: {err.strerror or err}") from err
    except UnicodeDecodeError:
        raise ValueError(f"world file {path} is not UTF-8 text, so not a TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"world file {path} is not valid TOML: {err}") from err
    bad = sorted(set(d) - set(_TABLES))
    if bad:
        raise ValueError(f"world file {path}: unknown keys {bad}; a world file holds [world] and, from "
                         "relaxspec fit, [fit]")
    if "world" not in d:
        raise ValueError(f"world file {path} has no [world] table")
    fit = d.get("fit", {})
    if not isinstance(fit, dict):
        raise ValueError(f"world file {path}: fit must be a table ([fit]), got {fit!r}")
    return params_from_dict(d["world"], f"world file {path}"), fit


def world_params(name: str | Path) -> LatentParams:
    """The parameters a world name stands for: a preset of :data:`PRESETS` or a world file's path."""
    if isinstance(name, str) and name in PRESETS:
        return PRESETS[name]
    if is_world_file(name):
        return read_world_file(name)[0]
    raise ValueError(f"unknown world preset {str(name)!r}; the presets are {', '.join(PRESETS)}, or a world "
                     f"file (a path ending in {WORLD_SUFFIX}, written by relaxspec fit)")


LATER_FIELDS = {"lag1_noise": 0.0}
"""Parameters added after world files existed, with the value that leaves a world as it was: left out
of :func:`params_sha256` at that value, so a world written before them keeps its identity (a resumed
sweep does not rerun it)."""


def params_sha256(params: LatentParams) -> str:
    """SHA-256 of the parameters (canonical JSON, :data:`LATER_FIELDS` at their neutral value left out): a
    world file's identity in a sweep's rows (its ``[fit]`` report and layout do not change it)."""
    table = {k: v for k, v in asdict(params).items() if LATER_FIELDS.get(k, object()) != v}
    return hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to a world file")


def _toml_tables(prefix: str, table: dict[str, Any]) -> list[str]:
    """Lines of ``[prefix]`` (scalars and lists) then its sub-tables, recursively."""
    lines = [f"[{prefix}]"]
    subs = []
    for key, val in table.items():
        if isinstance(val, dict):
            subs.append((key, val))
        else:
            lines.append(f"{key} = {_toml_value(val)}")
    for key, val in subs:
        lines += [""] + _toml_tables(f"{prefix}.{key}", val)
    return lines


def world_file_text(params: LatentParams, fit: dict[str, Any] | None = None, comment: str = "") -> str:
    """The TOML text of a world file (``[world]`` with every field, then ``[fit]``); ``comment`` lines go
    on top as TOML comments."""
    head = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines = head + _toml_tables("world", asdict(params))
    if fit:
        lines += [""] + _toml_tables("fit", fit)
    return "\n".join(lines) + "\n"


def write_world_file(path: str | Path, params: LatentParams, fit: dict[str, Any] | None = None,
                     comment: str = "") -> Path:
    """Write a world file (:func:`world_file_text`), check that it reads back as ``params``; its path."""
    path = Path(path)
    if not is_world_file(path):
        raise ValueError(f"a world file's name ends in {WORLD_SUFFIX}, got {str(path)!r}")
    text = world_file_text(params, fit, comment)
    if params_from_dict(tomllib.loads(text)["world"], str(path)) != params:  # guards the writer
        raise AssertionError("a world file did not read back as the parameters written")
    path.write_text(text, encoding="utf-8")
    return path
