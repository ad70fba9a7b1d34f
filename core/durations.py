"""Durations as operators write them: ``90s``, ``15m``, ``12h``, ``7d`` (or ``1d12h``) or plain seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

__all__ = ["format_duration", "parse_duration"]

# Lower case only: "1M" could be read as a month.
_SHORT = re.compile(r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?")


def parse_duration(text: str) -> timedelta:
    """``"90s"`` -> 90 seconds, ``"7d"`` -> 7 days, ``"3600"`` -> one hour; ValueError for anything else."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        match = _SHORT.fullmatch(value)
        if not value or match is None:
            raise ValueError(
                f"invalid duration {text!r}: write 90s, 15m, 12h, 7d (or 1d12h) or plain seconds"
            ) from None
        parts = {k: float(v or 0) for k, v in match.groupdict().items()}
        seconds = parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid duration {text!r}: must be a finite number of seconds >= 0")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration {text!r} is too long") from None


def format_duration(value: timedelta | float) -> str:
    """The shortest exact form ``parse_duration`` reads back: ``7d``, ``90s``, ``1d12h``; ``0`` for none."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds == 0:
        return "0"
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest, out = int(seconds), ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            out += f"{count}{unit}"
    return out
