"""Checks of a sweep config's values (:class:`relaxspec.sweep.SweepConfig`): TOML types, tables, the
``[world_overrides]`` keys, and grid lists that name one value twice."""

from __future__ import annotations

import dataclasses

from relaxspec.simulate.world_file import world_params
from relaxspec.simulate.worlds import LatentParams


def no_repeats(key: str, written: list, values: list, source: str) -> None:
    """Refuse a grid list naming one value twice (``values``: canonical, ``written``: as in the config),
    which would run and write its configurations twice."""
    first: dict[str, object] = {}
    for raw, value in zip(written, values, strict=True):
        name = str(value)
        if name in first:
            raise ValueError(f"{source}: {key} lists {name} twice ({first[name]!r}, {raw!r}): each "
                             "configuration runs once")
        first[name] = raw


def is_int(v: object) -> bool:
    """An integer that is not a bool (TOML integers)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: object) -> bool:
    """An integer or float that is not a bool (TOML numbers)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def table(d: dict, key: str, source: str) -> dict:
    """The optional table ``d[key]`` ({} when absent), else a ``ValueError``."""
    val = d.get(key, {})
    if not isinstance(val, dict):
        raise ValueError(f"{source}: {key} must be a table ([{key}]), got {val!r}")
    return val


def world_overrides(over: object, worlds: list[str], source: str) -> dict:
    """``[world_overrides]`` checked key by key against :class:`LatentParams` (names, types, then the
    values, by building every world's parameters)."""
    over = table({"world_overrides": over}, "world_overrides", source)
    fields = {f.name: f for f in dataclasses.fields(LatentParams)}
    bad = set(over) - set(fields)
    if bad:
        raise ValueError(f"{source}: unknown world_overrides {sorted(bad)}; allowed: {sorted(fields)}")
    for key, val in over.items():
        kind = type(fields[key].default)
        ok = {int: is_int, float: is_number, str: lambda v: isinstance(v, str)}[kind](val)
        if not ok:
            what = {int: "an integer", float: "a number", str: "a string"}[kind]
            raise ValueError(f"{source}: world_overrides.{key} must be {what}, got {val!r}")
    # each value as its field's type: a float written as a TOML integer (2) is the same setting as 2.0
    over = {key: type(fields[key].default)(val) for key, val in over.items()}
    for w in worlds:
        try:
            dataclasses.replace(world_params(w), **over)
        except ValueError as err:
            raise ValueError(f"{source}: world_overrides for world {w!r}: {err}") from err
    return over
