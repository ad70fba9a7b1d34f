"""Input checks of the contract's error table, run before anything touches the database."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from offsetstore.client.errors import InvalidArgumentError
from offsetstore.client.types import OffsetCommit, TopicPartition, Watermark

MAX_GROUP_ID_BYTES = 255
MAX_TOPIC_CHARS = 249
MAX_METADATA_BYTES = 4096
MAX_PARTITIONS = 10_000
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_TOPIC = re.compile(r"[A-Za-z0-9._-]+")

#: A topic selection as the storage core takes it: (topic, partitions), no partitions = all.
Selection = tuple[str, tuple[int, ...]]


def _bad(field: str, description: str) -> InvalidArgumentError:
    return InvalidArgumentError.field(field, description)


def _text(value: str, field: str, max_bytes: int) -> None:
    # PostgreSQL text cannot hold NUL; refuse it here rather than fail in the driver.
    if "\x00" in value:
        raise _bad(field, "must not contain NUL characters")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise _bad(field, "must be valid UTF-8") from None
    if size > max_bytes:
        raise _bad(field, f"must be at most {max_bytes} bytes")


def group_id(value: str, field: str = "group_id") -> None:
    if not value:
        raise _bad(field, "must not be empty")
    _text(value, field, MAX_GROUP_ID_BYTES)


def member_id(value: str, field: str = "member_id") -> None:
    _text(value, field, MAX_GROUP_ID_BYTES)


def prefix(value: str, field: str = "prefix") -> None:
    """A group id prefix: any text a group id could start with."""
    _text(value, field, MAX_GROUP_ID_BYTES)


def topic(value: str, field: str) -> None:
    if not value:
        raise _bad(field, "must not be empty")
    if len(value) > MAX_TOPIC_CHARS:
        raise _bad(field, f"must be at most {MAX_TOPIC_CHARS} characters")
    if not _TOPIC.fullmatch(value):
        raise _bad(field, "may contain only ASCII letters, digits, '.', '_' and '-'")


def partition(value: int, field: str) -> None:
    if not 0 <= value <= INT32_MAX:
        raise _bad(field, "must be >= 0")


def _count(n: int, field: str) -> None:
    if n > MAX_PARTITIONS:
        raise _bad(field, f"at most {MAX_PARTITIONS} partitions in one request")


def commits(values: Sequence[OffsetCommit], field: str = "offsets") -> None:
    _count(len(values), field)
    seen: set[tuple[str, int]] = set()
    for i, c in enumerate(values):
        at = f"{field}[{i}]"
        topic(c.topic, f"{at}.topic")
        partition(c.partition, f"{at}.partition")
        if not 0 <= c.offset <= INT64_MAX:
            raise _bad(f"{at}.offset", "must be >= 0")
        _text(c.metadata, f"{at}.metadata", MAX_METADATA_BYTES)
        if c.expected_offset is not None and not -1 <= c.expected_offset <= INT64_MAX:
            raise _bad(f"{at}.expected_offset", "must be >= 0, or -1 for 'no offset stored yet'")
        key = (c.topic, c.partition)
        if key in seen:
            raise _bad(f"{at}.partition", f"partition {c.topic}:{c.partition} appears twice")
        seen.add(key)


def selections(
    values: Mapping[str, Iterable[int]] | Iterable[tuple[str, Iterable[int]]] | None,
    field: str = "topics",
) -> list[Selection]:
    """Checks topic selections and returns them as a list of (topic, partitions)."""
    if values is None:
        return []
    pairs = values.items() if isinstance(values, Mapping) else values
    out: list[Selection] = []
    whole: set[str] = set()
    seen: set[tuple[str, int]] = set()
    total = 0
    for i, (name, parts) in enumerate(pairs):
        at = f"{field}[{i}]"
        topic(name, f"{at}.topic")
        parts = tuple(parts)
        total += max(len(parts), 1)
        _count(total, field)
        if not parts:
            if name in whole or any(t == name for t, _ in seen):
                raise _bad(f"{at}.topic", f"topic {name} is selected twice")
            whole.add(name)
        for j, p in enumerate(parts):
            partition(p, f"{at}.partitions[{j}]")
            if (name, p) in seen or name in whole:
                raise _bad(f"{at}.partitions[{j}]", f"partition {name}:{p} is selected twice")
            seen.add((name, p))
        out.append((name, parts))
    return out


def watermarks(values: Sequence[Watermark], field: str = "watermarks") -> None:
    _count(len(values), field)
    seen: set[tuple[str, int]] = set()
    for i, w in enumerate(values):
        at = f"{field}[{i}]"
        topic(w.topic, f"{at}.topic")
        partition(w.partition, f"{at}.partition")
        if not 0 <= w.log_start_offset <= INT64_MAX:
            raise _bad(f"{at}.log_start_offset", "must be >= 0")
        if not w.log_start_offset <= w.log_end_offset <= INT64_MAX:
            raise _bad(f"{at}.log_end_offset", "must be >= log_start_offset")
        key = TopicPartition(w.topic, w.partition)
        if key in seen:
            raise _bad(f"{at}.partition", f"partition {w.topic}:{w.partition} appears twice")
        seen.add(key)


def page_size(value: int, field: str = "page_size") -> int:
    """The page size to use: 0 means the default, larger than the maximum is cut to it."""
    if value < 0:
        raise _bad(field, "must be >= 0")
    return min(value or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
