"""``offsetstore serve``'s flags, made from the settings' declarations (``server/settings.py``): one source for both."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offsetstore.core.durations import parse_duration
from offsetstore.server.settings import SettingFields, env_name, kinds

_TYPES: dict[type, Callable[[str], Any]] = {int: int, float: float, Path: Path}


def flag_name(field: dataclasses.Field[Any]) -> str:
    """The flag of a setting: ``--<name-with-dashes>`` unless its declaration names another."""
    declared: str | None = field.metadata["flag"]
    return declared or "--" + field.name.replace("_", "-")


def shown_default(field: dataclasses.Field[Any]) -> str:
    """The default as the help prints it (a duration as an operator writes it)."""
    if field.metadata["shown"] is not None:
        return str(field.metadata["shown"])
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value == "":
        return "empty"
    if field.metadata["duration"]:
        return _duration_text(float(value))
    return str(value)


def add_serve_flags(parser: argparse.ArgumentParser, names: tuple[str, ...] | None = None) -> None:
    """One flag per setting, in declaration order; a flag not given is None, so the environment and default apply.

    ``names``: only these settings' flags (``migrate`` takes the few that concern it), the same as serve's.
    """
    groups: dict[str, Any] = {}
    fields = dataclasses.fields(SettingFields)
    if names is not None:
        unknown = set(names) - {field.name for field in fields}
        if unknown:
            raise ValueError(f"no such setting: {', '.join(sorted(unknown))}")
        fields = tuple(field for field in fields if field.name in names)
    for field in fields:
        meta = field.metadata
        where: Any = parser
        if meta["group"] is not None:
            where = groups.get(meta["group"]) or groups.setdefault(
                meta["group"], parser.add_argument_group(meta["group"])
            )
        env = env_name(field.name)
        help_ = (meta["flag_help"] or meta["help"]).replace("``", "").replace("%", "%%")
        options: dict[str, Any] = {"dest": field.name, "default": None}
        kind, _ = kinds()[field.name]
        if kind is bool and meta["choices"] is None:
            # A switch: it flips the default; the variable takes 1/0, true/false, yes/no, on/off.
            options.update(action="store_const", const=not field.default)
            turns = "off" if field.default else "on"
            help_ += f" (default {shown_default(field)}: this flag turns it {turns}; env {env}=1/0)"
        else:
            if meta["choices"] is not None:
                options["choices"] = meta["choices"]
            elif meta["duration"]:
                options.update(type=_duration, metavar=meta["metavar"] or "DURATION")
            elif meta["auto"]:
                options["type"] = _count_or_auto
            elif kind in _TYPES:
                options["type"] = _TYPES[kind]
            if meta["metavar"] is not None:
                options["metavar"] = meta["metavar"]
            help_ += f" (default {shown_default(field)}; env {env})"
        where.add_argument(flag_name(field), help=help_, **options)


def _duration(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_duration.__name__ = "duration"


def _count_or_auto(text: str) -> int:
    if text.strip().lower() == "auto":
        return os.cpu_count() or 1
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, got {text!r}") from None


def _duration_text(seconds: float) -> str:
    """``604800.0`` -> ``7d``, ``300.0`` -> ``5m``, ``0.0`` -> ``0``: the largest unit that divides it."""
    if seconds == 0:
        return "0"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
