"""Plain Python values of the offsetstore v1 contract, shared by the client and the server."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Generic, Literal, NamedTuple, TypeVar

__all__ = [
    "Boundary",
    "ChangeKind",
    "CommittedOffset",
    "FetchResult",
    "GroupDescription",
    "RecordFingerprint",
    "GroupStatus",
    "GroupSummary",
    "LagSecondsStatus",
    "Mode",
    "OffsetChange",
    "OffsetCommit",
    "OffsetOutOfRange",
    "Page",
    "PartitionStatus",
    "ResetRequest",
    "ResetResult",
    "TopicPartition",
    "TopicSummary",
    "Topics",
    "Watermark",
    "NO_OFFSET",
    "EARLIEST",
    "LATEST",
]

#: The most one FetchOffsets or DescribeGroup answer holds (``--max-response-bytes``, its default); larger
#: answers come in pages. Serialising a page holds the interpreter lock that every RPC thread
#: shares: ~1 ms for 1 MiB, ~6 ms for 4 MiB (Kafka's max.partition.fetch.bytes is 1 MiB too).
MAX_RESPONSE_BYTES = 2**20
#: Offset of a partition that has none (Kafka's convention).
NO_OFFSET = -1
#: Sentinel stored by a reset to the earliest offset when no watermark is known.
EARLIEST = -2
#: Sentinel stored by a reset to the latest offset when no watermark is known.
LATEST = -1

#: How a sink writes its rows: appends them, or upserts them on the table's key.
Mode = Literal["append", "upsert"]

#: What a call accepts as a selection of topics and partitions: None (everything),
#: {topic: partitions} (no partitions = all of that topic), or an iterable of topic
#: names and/or (topic, partition) pairs.
Topics = Mapping[str, Iterable[int]] | Iterable[str | tuple[str, int]] | None


class Boundary(enum.IntEnum):
    """Either end of a partition's log (values match the proto enum)."""

    EARLIEST = 1
    LATEST = 2


class ChangeKind(enum.IntEnum):
    """What produced a history entry (values match the proto enum)."""

    COMMIT = 1
    RESET = 2
    DELETE = 3
    #: Retention removed an idle group's offsets.
    EXPIRE = 4
    #: A reset that took positions over from another system (its ``source`` says which).
    ADOPT = 5
    #: A position observed in a pipeline that keeps its own (ObserveOffsets; ``source`` says where).
    OBSERVED = 6
    #: A reset that moved the group to another Kafka cluster (its ``source`` names both cluster ids).
    SWITCH = 7


class LagSecondsStatus(enum.IntEnum):
    """Whether a partition's ``lag_seconds`` is known, and why not (values match the proto enum)."""

    #: An older server that does not compute it.
    UNSPECIFIED = 0
    KNOWN = 1
    #: No log end of the partition was sampled (no watermark reported since samples began).
    NO_SAMPLES = 2
    #: The offset is a sentinel (-2/-1) whose log start or end is not known.
    OFFSET_UNKNOWN = 3
    #: The offset is past the known log end: its lag is unknown too, until a newer log end.
    PAST_LOG_END = 4


class GroupStatus(enum.IntEnum):
    """The verdict on a partition, and on a group as its worst partition (values match the proto enum).

    The rules are ``offsetstore.storage.status``'s; docs/operations.md says what to do about each.
    """

    #: An older server that does not judge.
    UNSPECIFIED = 0
    #: Consuming, and keeping up.
    OK = 1
    #: Caught up, and no commit for a while (a quiet topic): never an alarm.
    IDLE = 2
    #: Lag growing over the window: consuming slower than the log grows.
    LAGGING = 3
    #: Commits arrive but the offset does not move while there is lag.
    STALLED = 4
    #: No commit for the window while the log end moved past the offset.
    STOPPED = 5
    #: The offset is below the log start: records deleted before they were read.
    LOST = 6
    #: The offset is past a log end observed after the commit: an anomaly.
    PAST_END = 7
    #: No log end known, or none newer than the commit where the verdict depends on it:
    #: no verdict yet (the reason says what is missing and how old the log end is).
    UNCONFIRMED = 8


class TopicPartition(NamedTuple):
    """A partition of a topic; a tuple, so ``offsets[("orders", 0)]`` works."""

    topic: str
    partition: int


@dataclass(frozen=True)
class OffsetCommit:
    """One partition's offset to commit; ``expected_offset`` makes it a compare-and-set."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""
    expected_offset: int | None = None


@dataclass(frozen=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str = ""
    commit_time: datetime | None = None


@dataclass(frozen=True)
class OffsetChange:
    topic: str
    partition: int
    previous_offset: int
    new_offset: int
    kind: ChangeKind
    generation: int
    change_time: datetime | None = None
    actor: str = ""
    #: Where an adoption's offsets came from; empty for every other change.
    source: str = ""


@dataclass(frozen=True)
class OffsetOutOfRange:
    """A reset's offset outside its partition's known [log start, log end]."""

    topic: str
    partition: int
    #: The offset the reset asked for.
    offset: int
    #: The bound it passed: the log start (offset below it) or the log end (above it).
    bound: int
    #: Whether the reset sets `bound` (clamp) rather than `offset`.
    clamped: bool = False


@dataclass(frozen=True)
class Watermark:
    """A partition's log watermarks as a client observed them; ``log_start_offset`` -1: not observed."""

    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    generation: int
    partition_count: int
    last_commit_time: datetime | None
    total_lag: int
    #: The group's positions are observed (a pipeline keeps its own), not committed here.
    observed: bool = False
    #: Where its latest observed positions were read; empty unless observed.
    observed_source: str = ""
    #: Partitions whose position its source no longer has (a Kafka group's offsets expired or deleted).
    observed_lost_partitions: int = 0


@dataclass(frozen=True)
class TopicSummary:
    """One topic of a group: how many of its partitions have an offset, the latest commit, the total lag."""

    topic: str
    partition_count: int
    last_commit_time: datetime | None
    #: -1 unless every partition's log end is known.
    total_lag: int


@dataclass(frozen=True)
class ExpiredGroup:
    """A group whose offsets expired (or would, in a preview) for being idle."""

    group_id: str
    generation: int
    partition_count: int
    #: The group's latest commit, join or reset.
    last_active_time: datetime | None


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_time: datetime | None
    log_end_offset: int
    lag: int
    #: The offset is past the known log end: an anomaly, and ``lag`` is -1.
    offset_past_log_end: bool = False
    #: The reported log start; -1 when unknown.
    log_start_offset: int = -1
    #: Seconds since the log end passed the offset (storage/lag.py); 0 when caught up, -1 when unknown.
    lag_seconds: float = -1.0
    #: Whether ``lag_seconds`` is known, and why not.
    lag_seconds_status: LagSecondsStatus = LagSecondsStatus.UNSPECIFIED
    #: The verdict on the partition (storage/status.py) and its one-line reason.
    status: GroupStatus = GroupStatus.UNSPECIFIED
    status_reason: str = ""
    #: When the log end (and start) were observed; None when no watermark is known.
    watermark_time: datetime | None = None
    #: (time, lag in seconds) at each log end sample, oldest first; asked for with ``lag_history``.
    lag_history: tuple[tuple[datetime, float], ...] = ()
    #: The record just before ``offset`` as its writer saw it; None when none was stored (issue 58).
    fingerprint: RecordFingerprint | None = None


@dataclass(frozen=True)
class RecordFingerprint:
    """What identifies the record just before a committed ``offset``: its timestamp and a digest of its contents."""

    #: The committed offset the record precedes (the record's offset + 1).
    offset: int
    #: The record's timestamp in milliseconds since the epoch.
    timestamp_ms: int
    #: The first 16 bytes of the SHA-256 of its key, value and headers (:mod:`offsetstore.kafka_integration.fingerprints`).
    digest: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    generation: int
    partitions: list[PartitionStatus] = field(default_factory=list)
    #: Resets and deletes the group id has had (kept across deletes).
    reset_count: int = 0
    #: The member id and peer address of the latest JoinGroup; empty when unknown.
    member_id: str = ""
    member_host: str = ""
    #: Set when the partitions continue on another page (ask with page_token); empty on the last.
    next_page_token: str = ""
    #: The latest creation, join or reset of the group (commits show in the partitions' commit_time).
    active_time: datetime | None = None
    #: The group's verdict: its worst partition's, over every partition (not only this page).
    status: GroupStatus = GroupStatus.UNSPECIFIED
    status_reason: str = ""
    #: The group's positions are observed (a pipeline keeps its own): commits to it are refused.
    observed: bool = False
    #: Where its latest observed positions were read; empty unless observed.
    observed_source: str = ""
    #: Partitions whose position its source no longer has; their last observed positions are kept here.
    observed_lost_partitions: int = 0
    #: Since when some are lost; None when none is.
    observed_lost_time: datetime | None = None
    #: The Kafka cluster id the group is bound to; empty when it is bound to none.
    kafka_cluster_id: str = ""


@dataclass(frozen=True)
class FetchResult:
    """Committed offsets keyed by (topic, partition), and the group's generation."""

    offsets: dict[TopicPartition, CommittedOffset]
    generation: int
    #: Set when the offsets continue on another page (ask with page_token); empty on the last.
    next_page_token: str = ""


@dataclass(frozen=True)
class ResetRequest:
    """One reset of a group's offsets: which partitions, to which target, and whether for real.

    The target is one of `to_offset`, `shift_by`, `to_boundary`, `to_commit_time` and `to_offsets`, the
    contract's oneof; `targets` says which were given, so that whoever decides can refuse
    none or two with its own words.
    """

    group_id: str
    #: The named partitions, and in a whole topic those the group has offsets for.
    topics: Topics | Iterable[tuple[str, Iterable[int]]] = None
    #: Every topic the group has offsets for, instead of `topics`.
    all_topics: bool = False
    #: Exactly this offset, on every selected partition.
    to_offset: int | None = None
    #: Each offset moved by this (negative allowed), floored at 0, capped at the known log end.
    shift_by: int | None = None
    #: The log start or end where a watermark is known, else its placeholder (-2 or -1).
    to_boundary: Boundary | None = None
    #: Each partition's offset as the group had committed it at this instant.
    to_commit_time: datetime | None = None
    #: Say what would change, and change nothing.
    dry_run: bool = False
    #: Apply (or preview) only while the group is at this generation, e.g. the one a preview answered.
    expected_generation: int | None = None
    #: Set an offset outside the known [log start, log end] to the nearer bound instead.
    clamp: bool = False
    #: A different offset per partition (-2/-1 resolve as `to_boundary` does); these partitions
    #: are the selection, which a client fills in as `topics`.
    to_offsets: Mapping[TopicPartition, int] | None = None
    #: Where the offsets came from: a reset with a source is an adoption (CHANGE_KIND_ADOPT).
    source: str = ""
    #: The Kafka cluster id the group moves to: the reset is a switch (CHANGE_KIND_SWITCH) that
    #: rebinds the group to it; the history's source names the cluster it left and this one.
    switch_to_cluster_id: str = ""

    @property
    def targets(self) -> dict[str, Any]:
        """The targets given, by field name."""
        return {name: value for name in _RESET_TARGETS if (value := getattr(self, name)) is not None}

    def keywords(self) -> dict[str, Any]:
        """The request as the keywords of the clients' ``reset_offsets`` (all fields but ``group_id``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "group_id"}


_RESET_TARGETS = ("to_offset", "shift_by", "to_boundary", "to_commit_time", "to_offsets")


@dataclass(frozen=True)
class ResetResult:
    changes: list[OffsetChange]
    generation: int
    dry_run: bool
    #: The selected offsets outside their known log range (set as asked unless clamped).
    out_of_range: list[OffsetOutOfRange] = field(default_factory=list)


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; ``next_page_token`` is empty on the last page."""

    items: list[T]
    next_page_token: str = ""
