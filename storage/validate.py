"""Input checks of the contract's error table, run before anything touches the database.

Each check reports into a :class:`Violations`, so one request's error names every bad
field found (up to :data:`MAX_VIOLATIONS`), not just the first. Called without one, a
check raises its own findings at once.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from offsetstore.core.errors import FieldViolation, InvalidArgumentError
from offsetstore.core.types import OffsetCommit, RecordFingerprint, TopicPartition, Watermark

MAX_GROUP_ID_BYTES = 255
MAX_TOPIC_CHARS = 249
MAX_METADATA_BYTES = 4096
#: The longest Kafka cluster id a join or a switch takes, in bytes (Kafka's are 22 characters).
MAX_CLUSTER_ID_BYTES = 255
#: A record fingerprint's digest: the first 16 bytes of a SHA-256 (kafka_integration/fingerprints.py).
DIGEST_BYTES = 16
MAX_PARTITIONS = 10_000
#: The SQL API's commit_offsets arrays (docs/sql.md): a partition may repeat there (each
#: written record's offset + 1), so they may be longer than MAX_PARTITIONS, but are bounded
#: before anything walks them, as the gRPC API counts a request's entries before decoding.
MAX_SQL_ELEMENTS = 10 * MAX_PARTITIONS
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100
MAX_VIOLATIONS = 100
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_TOPIC = re.compile(r"[A-Za-z0-9._-]+")

#: A topic selection as the storage core takes it: (topic, partitions), no partitions = all.
Selection = tuple[str, tuple[int, ...]]


class Violations:
    """The bad fields of one request, in the order found; at most :data:`MAX_VIOLATIONS` are kept."""

    def __init__(self) -> None:
        self.found: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        if len(self.found) < MAX_VIOLATIONS:
            self.found.append(FieldViolation(field, description))

    @property
    def full(self) -> bool:
        """No more will be kept: loops over request entries may stop."""
        return len(self.found) >= MAX_VIOLATIONS

    def raise_if_any(self) -> None:
        if not self.found:
            return
        first = self.found[0]
        more = f" (and {len(self.found) - 1} more)" if len(self.found) > 1 else ""
        raise InvalidArgumentError(f"{first.field}: {first.description}{more}", violations=self.found)


@contextlib.contextmanager
def _collecting(violations: Violations | None) -> Iterator[Violations]:
    """The caller's collection, or one of our own that raises when the check is done."""
    own = Violations() if violations is None else violations
    yield own
    if violations is None:
        own.raise_if_any()


def _text_ok(value: str, max_bytes: int) -> bool:
    try:
        return "\x00" not in value and len(value.encode("utf-8")) <= max_bytes
    except UnicodeEncodeError:
        return False


def _text(value: str, field: str, max_bytes: int, v: Violations) -> None:
    # PostgreSQL text cannot hold NUL; refuse it here rather than fail in the driver.
    if "\x00" in value:
        v.add(field, "must not contain NUL characters")
        return
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        v.add(field, "must be valid UTF-8")
        return
    if size > max_bytes:
        v.add(field, f"must be at most {max_bytes} bytes")


def text(value: str, field: str, max_bytes: int, *, violations: Violations | None = None) -> None:
    """Free text stored as is (an adoption's source): no NUL, valid UTF-8, at most ``max_bytes``."""
    with _collecting(violations) as v:
        _text(value, field, max_bytes, v)


def group_id(value: str, field: str = "group_id", *, violations: Violations | None = None) -> None:
    with _collecting(violations) as v:
        if not value:
            v.add(field, "must not be empty")
        else:
            _text(value, field, MAX_GROUP_ID_BYTES, v)


def member_id(value: str, field: str = "member_id", *, violations: Violations | None = None) -> None:
    with _collecting(violations) as v:
        _text(value, field, MAX_GROUP_ID_BYTES, v)


def prefix(value: str, field: str = "prefix", *, violations: Violations | None = None) -> None:
    """A group id prefix: any text a group id could start with."""
    with _collecting(violations) as v:
        _text(value, field, MAX_GROUP_ID_BYTES, v)


def topic(value: str, field: str, *, violations: Violations | None = None) -> None:
    with _collecting(violations) as v:
        if not value:
            v.add(field, "must not be empty")
        elif len(value) > MAX_TOPIC_CHARS:
            v.add(field, f"must be at most {MAX_TOPIC_CHARS} characters")
        elif not _TOPIC.fullmatch(value):
            v.add(field, "may contain only ASCII letters, digits, '.', '_' and '-'")


def partition(value: int, field: str, *, violations: Violations | None = None) -> None:
    with _collecting(violations) as v:
        if not 0 <= value <= INT32_MAX:
            v.add(field, "must be >= 0")


def generation(value: int, field: str = "generation", *, violations: Violations | None = None) -> None:
    with _collecting(violations) as v:
        if not 0 <= value <= INT64_MAX:
            v.add(field, "must be >= 0")


def _too_many(n: int, field: str, v: Violations) -> bool:
    if n > MAX_PARTITIONS:
        v.add(field, f"at most {MAX_PARTITIONS} partitions in one request")
        return True
    return False


def _plainly_valid(values: Sequence[Any], low: int) -> bool:
    """Whether every entry of a commit or report is valid, judged over the whole list at once.

    A 10,000-partition request is checked in a few milliseconds this way; only a request
    that fails it is walked entry by entry, to name each bad field.
    """
    if not values:
        return True
    partitions = [e.partition for e in values]
    offsets = [e.offset if hasattr(e, "offset") else e.log_end_offset for e in values]
    return (
        all(_valid_topic(t) for t in {e.topic for e in values})
        and 0 <= min(partitions)
        and max(partitions) <= INT32_MAX
        and low <= min(offsets)
        and max(offsets) <= INT64_MAX
        and len({(e.topic, e.partition) for e in values}) == len(values)
    )


def valid_topic(value: object) -> bool:
    """Whether ``value`` is a topic name a request may carry."""
    return isinstance(value, str) and _valid_topic(value)


@functools.lru_cache(maxsize=4096)
def _valid_topic(value: str) -> bool:
    return bool(value) and len(value) <= MAX_TOPIC_CHARS and _TOPIC.fullmatch(value) is not None


def commits(values: Sequence[OffsetCommit], field: str = "offsets", *, violations: Violations | None = None) -> None:
    with _collecting(violations) as v:
        if _too_many(len(values), field, v):
            return
        if (
            _plainly_valid(values, 0)
            and all(c.expected_offset is None or -1 <= c.expected_offset <= INT64_MAX for c in values)
            and all(not c.metadata or _text_ok(c.metadata, MAX_METADATA_BYTES) for c in values)
        ):
            return
        seen: set[tuple[str, int]] = set()
        for i, c in enumerate(values):
            if v.full:
                return
            at = f"{field}[{i}]"
            topic(c.topic, f"{at}.topic", violations=v)
            partition(c.partition, f"{at}.partition", violations=v)
            if not 0 <= c.offset <= INT64_MAX:
                v.add(f"{at}.offset", "must be >= 0")
            _text(c.metadata, f"{at}.metadata", MAX_METADATA_BYTES, v)
            if c.expected_offset is not None and not -1 <= c.expected_offset <= INT64_MAX:
                v.add(f"{at}.expected_offset", "must be >= 0, or -1 for 'no offset stored yet'")
            key = (c.topic, c.partition)
            if key in seen:
                v.add(f"{at}.partition", f"partition {c.topic}:{c.partition} appears twice")
            seen.add(key)


def fingerprints(
    values: Sequence[tuple[TopicPartition, RecordFingerprint]],
    commits: Sequence[OffsetCommit],
    field: str = "fingerprints",
    *,
    violations: Violations | None = None,
) -> None:
    """A commit's fingerprints: at most one per partition of ``commits``, each of that entry's offset.

    Nothing else would tell a fingerprint of another offset's record from the right one, and a
    switch trusts it to place the group on another cluster.
    """
    with _collecting(violations) as v:
        if _too_many(len(values), field, v):
            return
        committed = {(c.topic, c.partition): c.offset for c in commits}
        seen: set[tuple[str, int]] = set()
        for i, (tp, fp) in enumerate(values):
            if v.full:
                return
            at = f"{field}[{i}]"
            key = (tp.topic, tp.partition)
            offset = committed.get(key)
            if offset is None:
                v.add(f"{at}.partition", f"{tp.topic}:{tp.partition} is not among the offsets committed")
            elif key in seen:
                v.add(f"{at}.partition", f"partition {tp.topic}:{tp.partition} appears twice")
            elif fp.offset != offset or offset < 1:
                v.add(f"{at}.fingerprint.offset", f"must be the offset committed ({offset}), and at least 1")
            seen.add(key)
            if not 0 <= fp.timestamp_ms <= INT64_MAX:
                v.add(f"{at}.fingerprint.timestamp_ms", "must be >= 0")
            if len(fp.digest) != DIGEST_BYTES:
                v.add(f"{at}.fingerprint.digest", f"must be {DIGEST_BYTES} bytes")


def cluster_id(value: str, field: str = "kafka_cluster_id", *, violations: Violations | None = None) -> None:
    """A Kafka cluster id: no NUL, valid UTF-8, at most :data:`MAX_CLUSTER_ID_BYTES`."""
    with _collecting(violations) as v:
        _text(value, field, MAX_CLUSTER_ID_BYTES, v)


def selections(
    values: Mapping[str, Iterable[int]] | Iterable[tuple[str, Iterable[int]]] | None,
    field: str = "topics",
    *,
    violations: Violations | None = None,
) -> list[Selection]:
    """Checks topic selections and returns them as a list of (topic, partitions)."""
    if values is None:
        return []
    pairs = values.items() if isinstance(values, Mapping) else values
    out: list[Selection] = []
    whole: set[str] = set()
    seen: set[tuple[str, int]] = set()
    total = 0
    with _collecting(violations) as v:
        for i, (name, parts) in enumerate(pairs):
            if v.full:
                break
            at = f"{field}[{i}]"
            topic(name, f"{at}.topic", violations=v)
            parts = tuple(parts)
            total += max(len(parts), 1)
            if _too_many(total, field, v):
                break
            if not parts:
                if name in whole or any(t == name for t, _ in seen):
                    v.add(f"{at}.topic", f"topic {name} is selected twice")
                whole.add(name)
            for j, p in enumerate(parts):
                partition(p, f"{at}.partitions[{j}]", violations=v)
                if (name, p) in seen or name in whole:
                    v.add(f"{at}.partitions[{j}]", f"partition {name}:{p} is selected twice")
                seen.add((name, p))
            out.append((name, parts))
    return out


def watermarks(values: Sequence[Watermark], field: str = "watermarks", *, violations: Violations | None = None) -> None:
    """A log start of -1 means "not observed"; every other value must be a real offset."""
    with _collecting(violations) as v:
        if _too_many(len(values), field, v):
            return
        if _plainly_valid(values, 0) and all(
            -1 <= w.log_start_offset <= INT64_MAX and max(w.log_start_offset, 0) <= w.log_end_offset for w in values
        ):
            return
        seen: set[tuple[str, int]] = set()
        for i, w in enumerate(values):
            if v.full:
                return
            at = f"{field}[{i}]"
            topic(w.topic, f"{at}.topic", violations=v)
            partition(w.partition, f"{at}.partition", violations=v)
            if not -1 <= w.log_start_offset <= INT64_MAX:
                v.add(f"{at}.log_start_offset", "must be >= 0, or -1 for 'not observed'")
            elif not max(w.log_start_offset, 0) <= w.log_end_offset <= INT64_MAX:
                v.add(f"{at}.log_end_offset", "must be >= 0 and >= log_start_offset")
            key = TopicPartition(w.topic, w.partition)
            if key in seen:
                v.add(f"{at}.partition", f"partition {w.topic}:{w.partition} appears twice")
            seen.add(key)


def page_size(value: int, field: str = "page_size", *, violations: Violations | None = None) -> int:
    """The page size to use: 0 means the default, larger than the maximum is cut to it."""
    with _collecting(violations) as v:
        if value < 0:
            v.add(field, "must be >= 0")
    return min(max(value, 0) or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
