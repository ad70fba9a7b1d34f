"""Durations as operators write them: ``90s``, ``15m``, ``12h``, ``7d`` (or ``1d12h``) or plain seconds.

With ``iso=True``, as kafka-consumer-groups' ``--by-duration`` takes them: also ISO 8601's
``PT1H30M``, ``P1D``, and never a bare number.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

__all__ = ["format_duration", "parse_duration"]

# Lower case only: "1M" could be read as a month.
_SHORT = re.compile(r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?")
# java.time.Duration.parse's PnDTnHnMn.nS, which kafka-consumer-groups --by-duration takes.
_ISO = re.compile(r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:[.,]\d{1,9})?)S)?)?", re.I)
_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str, *, iso: bool = False) -> timedelta:
    """``"90s"`` -> 90 seconds, ``"7d"`` -> 7 days, ``"3600"`` -> one hour; ValueError for anything else.

    With `iso`, ``"PT1H30M"`` and ``"P1D"`` too, and ``"3600"`` is refused: a look-back of "7"
    could be meant as seconds or days, and going back the wrong amount is costly.
    """
    value = text.strip()
    if iso:
        return _iso_or_short(text, value)
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


def _iso_or_short(text: str, value: str) -> timedelta:
    if _BARE_NUMBER.fullmatch(value):
        raise ValueError(
            f"invalid duration {text!r}: give a unit, e.g. {value}s, {value}m, {value}h, {value}d or PT{value}S"
        )
    match = _ISO.fullmatch(value) or _SHORT.fullmatch(value)
    # Both patterns match strings with no number at all ("", "P", "PT"); so does "P1DT". Beside
    # ISO 8601 the short form's seconds are whole, as --by-duration has always taken them.
    if (
        match is None
        or not any(match.groupdict().values())
        or value.upper().endswith("T")
        or (match.re is _SHORT and "." in value)
    ):
        raise ValueError(f"invalid duration {text!r}: write PnDTnHnMnS (e.g. PT1H30M, P1D) or 90s, 15m, 2h, 1d")
    parts = match.groupdict()
    try:
        return timedelta(
            days=int(parts["d"] or 0),
            hours=int(parts["h"] or 0),
            minutes=int(parts["m"] or 0),
            seconds=float((parts["s"] or "0").replace(",", ".")),
        )
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
