"""What the groups commands' option values mean: topics and partitions, durations, instants, numbers.

Each parser raises argparse.ArgumentTypeError, so argparse reports a bad value as a usage error.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from offsetstore.core.durations import parse_duration
from offsetstore.core.types import GroupStatus

TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# ASCII digits only: int() also takes other scripts' digits (١٢٣, fullwidth １２３), "1_000" and
# blanks around, none of which an offset written by a tool (or read back by one) looks like.
_INTEGER = re.compile(r"-?[0-9]{1,20}")
DIGITS_RULE = "write it in ASCII digits 0-9 (no separators)"


def ascii_int(text: str) -> int | None:
    """``text`` as an integer when it is an optional minus and ASCII digits 0-9 only; else None."""
    return int(text) if _INTEGER.fullmatch(text) else None


def parse_topic_spec(spec: str) -> tuple[str, tuple[int, ...]]:
    """``orders`` -> ("orders", ()) (the whole topic); ``orders:0,1`` -> ("orders", (0, 1))."""
    topic, colon, parts = spec.partition(":")
    if not TOPIC.fullmatch(topic):
        raise argparse.ArgumentTypeError(
            f"invalid topic {spec!r}: a topic is 1 to 249 of the characters A-Z a-z 0-9 . _ - "
            "(write TOPIC or TOPIC:P,P,...)"
        )
    if not colon:
        return topic, ()
    partitions: set[int] = set()
    for item in parts.split(","):
        item = item.strip()
        if not item.isascii() or not item.isdigit() or int(item) > INT32_MAX:
            raise argparse.ArgumentTypeError(
                f"invalid partition {item!r} in {spec!r}: partitions are integers >= 0 (write TOPIC:0,1,2)"
            )
        partitions.add(int(item))
    return topic, tuple(sorted(partitions))


def merge_topic_specs(specs: Iterable[tuple[str, tuple[int, ...]]]) -> dict[str, list[int]]:
    """The client's topic selection of repeated --topic options; an empty list is the whole topic."""
    whole: set[str] = set()
    merged: dict[str, set[int]] = {}
    for topic, partitions in specs:
        merged.setdefault(topic, set()).update(partitions)
        if not partitions:
            whole.add(topic)
    # A whole topic wins over some of its partitions: the operator asked for all of them.
    return {topic: [] if topic in whole else sorted(parts) for topic, parts in merged.items()}


def parse_by_duration(text: str) -> timedelta:
    """A duration as kafka writes it (``PT1H30M``, ``P1D``) or shortly (``90s``, ``15m``, ``2h``, ``1d``).

    Every duration option of the groups commands takes these forms, and refuses a bare number: "7"
    could be meant as seconds or days, and a look-back or an expiry of the wrong length is costly.
    """
    try:
        duration = parse_duration(text, iso=True)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    try:
        # A look-back goes back from now: it must not go back before the year 1.
        datetime.now(UTC) - duration
    except OverflowError:
        raise argparse.ArgumentTypeError(f"duration {text!r} is too long") from None
    return duration


def parse_idle_for(text: str) -> timedelta:
    """An idle time above zero, in parse_by_duration's forms: ``90s``, ``15m``, ``12h``, ``7d``, ``P7D``."""
    value = parse_by_duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"invalid idle time {text!r}: must be above zero")
    return value


def parse_datetime(text: str) -> datetime:
    """An ISO 8601 instant as kafka-consumer-groups takes it; without a UTC offset it is UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid date-time {text!r}: write ISO 8601, e.g. 2024-01-31T10:00:00.000, "
            "2024-01-31T10:00:00Z or 2024-01-31T12:00:00+02:00 (no offset means UTC)"
        ) from None
    if value.tzinfo is None:
        # kafka-consumer-groups reads a time without an offset as UTC; so do we.
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def nonnegative_int(text: str) -> int:
    value = ascii_int(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}: {DIGITS_RULE}")
    if not 0 <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def int64(text: str) -> int:
    value = ascii_int(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}: {DIGITS_RULE}")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text} is out of range")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


#: The verdicts ``--state`` takes, worst first, as the CLI prints them.
STATUS_NAMES = ("LOST", "PAST_END", "STOPPED", "STALLED", "LAGGING", "UNCONFIRMED", "OK", "IDLE")


def parse_statuses(value: str) -> frozenset[GroupStatus]:
    """``LAGGING,stopped``: the verdicts named (any case); empty: all of them."""
    names = [n.strip().upper() for n in value.split(",") if n.strip()]
    known = {s.name: s for s in GroupStatus if s != GroupStatus.UNSPECIFIED}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown status {', '.join(unknown)}; one of {', '.join(known)}")
    return frozenset(known[n] for n in names) if names else frozenset(known.values())
