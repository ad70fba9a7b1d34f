"""Moving a group to another Kafka cluster: each partition's offset there, found as exactly as the facts allow (issue 58).

A committed offset on cluster A means nothing on cluster B, whose copy of the topic has other
offsets (transaction markers are not copied, B's log may start later, MirrorMaker may rename the
topic). :func:`plan_switch` finds, per partition, the offset on B to resume from, by the best
method the facts allow:

``exact``
    The group's writer stored a fingerprint of the record before the offset (its timestamp and a
    digest of key, value and headers, :mod:`.fingerprints`). B's time index gives the first offset
    with that timestamp or later, and a short scan from there finds the record; the target is the
    next offset. Nothing is re-read and nothing skipped.
``offset-syncs``
    MirrorMaker 2's ``mm2-offset-syncs.<alias>.internal`` topic pairs upstream offsets with
    downstream ones. From the last pair at or before the offset the target is conservative, as
    MirrorMaker's own translation is: it may re-read up to the distance to that pair, never skip.
``timestamp``
    The fingerprint's timestamp alone (the record was not found on B): the first record on B at
    that time or later. Conservative, re-reads unknown.
``identity``
    Offset-preserving replication (asked for with ``offset_preserving``): the same offset.

A partition none of them places has no target, and a switch refuses to run until it has one.
With A reachable (``source``), the plan also counts per partition the records A holds past the
group's offset that B lacks (``missing``): replication that has not caught up, or never will.
With A unreachable (a failover), it names the gap it can know from the last log end of A the store
saw (the watermark a consumer on A reported, in the group's description): that end minus the offset
on A that B's end corresponds to, where an exact placement ties the two (the fingerprinted record
is at ``source_offset - 1`` on A and ``target_offset - 1`` on B, and B's copy has no control
records). It is the gap A held when that end was seen: equal to the loss when it was seen after the
last acknowledged write, less when A was written after it. On a transactional topic the markers
and aborted records after B's end take offsets too, so there it is a bound in offsets.
The switch itself is one ResetOffsets with ``to_offsets`` and ``switch_to_cluster_id``: fenced,
recorded as CHANGE_KIND_SWITCH, and it binds the group to B.
"""

from __future__ import annotations

import collections
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from offsetstore.core.types import GroupDescription, PartitionStatus, RecordFingerprint, TopicPartition
from offsetstore.kafka_integration._messages import kafka_cluster_id
from offsetstore.kafka_integration.fingerprints import digest

if TYPE_CHECKING:
    import confluent_kafka

__all__ = ["PartitionSwitch", "SwitchPlan", "plan_switch", "topic_mapper"]

#: The methods, best first.
METHODS = ("exact", "offset-syncs", "timestamp", "identity")
#: MirrorMaker 2's offset-syncs topics: ``mm2-offset-syncs.<cluster alias>.internal``.
OFFSET_SYNCS_PREFIX = "mm2-offset-syncs."


@dataclass(frozen=True)
class PartitionSwitch:
    """One partition's move: where the group is on A and where it resumes on B."""

    topic: str
    partition: int
    #: The topic's name on B (a replication policy may rename it).
    target_topic: str
    #: The group's offset on A.
    source_offset: int
    #: The offset to resume from on B; -1 when no method placed it.
    target_offset: int
    #: The method that placed it (:data:`METHODS`), or "none".
    method: str
    #: At most this many records are read again on B; None: not known (a conservative method).
    rereads: int | None
    #: Records A holds past ``source_offset`` that B lacks; None: not counted (A not asked).
    missing: int | None = None
    #: Why a better method did not apply, or what else is worth saying.
    note: str = ""
    #: How ``missing`` was had: "read" (A and B read past the offsets, by digest), "watermark" (A unreachable: from
    #: ``known_log_end``, A's last log end the store saw), or "" (not counted).
    missing_basis: str = ""
    #: A's last log end the store saw (a reported watermark), where ``missing`` comes from it.
    known_log_end: int | None = None


@dataclass(frozen=True)
class SwitchPlan:
    """A group's switch from cluster ``from_cluster_id`` to ``to_cluster_id``, per partition."""

    group_id: str
    #: The group's generation the plan was made at: the switch applies only while it is current.
    generation: int
    from_cluster_id: str
    to_cluster_id: str
    partitions: list[PartitionSwitch] = field(default_factory=list)

    @property
    def to_offsets(self) -> dict[TopicPartition, int]:
        """The targets on B, for ResetOffsets' ``to_offsets``."""
        return {TopicPartition(p.target_topic, p.partition): p.target_offset for p in self.partitions}

    @property
    def unplaced(self) -> list[PartitionSwitch]:
        return [p for p in self.partitions if p.target_offset < 0]

    @property
    def source(self) -> str:
        """What the history records beside both cluster ids: the methods used."""
        used = collections.Counter(p.method for p in self.partitions)
        return "methods " + ", ".join(f"{m} x{used[m]}" for m in (*METHODS, "none") if used[m])


def topic_mapper(
    topic_map: Mapping[str, str] | None = None, policy: str = "identity", source_alias: str = ""
) -> Callable[[str], str]:
    """A topic's name on B: an explicit map first, else MirrorMaker 2's ``default`` (``alias.topic``) or ``identity`` policy."""
    explicit = dict(topic_map or {})
    if policy not in ("default", "identity"):
        raise ValueError(f"unknown replication policy {policy!r}: default or identity")
    if policy == "default" and not source_alias:
        raise ValueError("the default replication policy needs the source cluster's alias")

    def name(topic: str) -> str:
        if topic in explicit:
            return explicit[topic]
        return f"{source_alias}.{topic}" if policy == "default" else topic

    return name


def plan_switch(
    description: GroupDescription,
    target: Mapping[str, Any],
    *,
    source: Mapping[str, Any] | None = None,
    topic_name: Callable[[str], str] = lambda t: t,
    offset_preserving: bool = False,
    scan_limit: int = 10_000,
    wait_seconds: float = 0.0,
    timeout: float = 10.0,
) -> SwitchPlan:
    """Each partition of ``description`` placed on cluster ``target`` (a confluent-kafka client config).

    ``source``, cluster A's client config when A is reachable, lets the plan count the records B
    lacks and read offset syncs kept on A (MirrorMaker's default). Without it the gap is named from
    A's last log end the store saw (each partition's watermark in ``description``), where it can be. ``wait_seconds`` waits that long
    at most for a fingerprinted record that B does not hold yet (replication catching up).
    """
    with _reader(target) as b:
        to_cluster = kafka_cluster_id(b, timeout)
        syncs = _offset_syncs(b, timeout)
        if source is not None:
            with _reader(source) as a:
                for key, pairs in _offset_syncs(a, timeout).items():
                    syncs.setdefault(key, pairs)
        moves = []
        for p in description.partitions:
            tp_b = TopicPartition(topic_name(p.topic), p.partition)
            moves.append(
                _place(
                    b,
                    p.topic,
                    p.partition,
                    tp_b,
                    p.offset,
                    p.fingerprint,
                    syncs,
                    offset_preserving,
                    scan_limit,
                    wait_seconds,
                    timeout,
                )  # fmt: skip
            )
        if source is not None:
            with _reader(source) as a:
                moves = [_count_missing(a, b, m, timeout) for m in moves]
        else:
            moves = [_gap_from_watermark(b, m, p, timeout) for m, p in zip(moves, description.partitions, strict=True)]
    return SwitchPlan(description.group_id, description.generation, description.kafka_cluster_id, to_cluster, moves)


@contextmanager
def _reader(config: Mapping[str, Any]) -> Iterator[confluent_kafka.Consumer]:
    """A consumer that never joins a group nor commits: look-ups and reads by assignment only."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **config,
            "group.id": "offsetstore-switch",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            # Reads end at the log end: do not wait there for more (librdkafka's default is 500 ms a fetch).
            "fetch.wait.max.ms": 20,
        }
    )
    try:
        yield consumer
    finally:
        consumer.close()


def _place(
    b: confluent_kafka.Consumer,
    topic: str,
    partition: int,
    tp_b: TopicPartition,
    offset: int,
    fp: RecordFingerprint | None,
    syncs: Mapping[TopicPartition, list[tuple[int, int]]],
    offset_preserving: bool,
    scan_limit: int,
    wait_seconds: float,
    timeout: float,
) -> PartitionSwitch:
    def move(target: int, method: str, rereads: int | None, note: str = "") -> PartitionSwitch:
        return PartitionSwitch(topic, partition, tp_b.topic, offset, target, method, rereads, None, note)

    notes = []
    if offset < 0:
        return move(offset, "identity", None, "a placeholder (-2 earliest, -1 latest) means the same on B")
    if fp is not None:
        deadline = time.monotonic() + wait_seconds
        while True:
            found = _find_record(b, tp_b, fp, scan_limit, timeout)
            if found is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if found is not None:
            at, copies = found
            return move(
                at + 1, "exact", copies - 1, f"{copies} identical records: the first taken" if copies > 1 else ""
            )
        notes.append(f"the fingerprinted record (timestamp {fp.timestamp_ms}) is not within {scan_limit} records on B")
    else:
        notes.append("no fingerprint stored for this offset")
    pairs = syncs.get(TopicPartition(topic, partition), [])
    before = [(u, d) for u, d in pairs if u <= offset]
    if before:
        upstream, downstream = max(before)
        if upstream == offset:
            return move(downstream, "offset-syncs", 0, "; ".join(notes))
        # Records upstream+1 .. offset-1 are somewhere after downstream: resume right after it.
        return move(downstream + 1, "offset-syncs", offset - upstream - 1, "; ".join(notes))
    if pairs:
        notes.append("every offset sync is past the offset")
    if fp is not None:
        at = _offset_for_time(b, tp_b, fp.timestamp_ms, timeout)
        return move(at, "timestamp", None, "; ".join(notes))
    if offset_preserving:
        return move(offset, "identity", 0, "; ".join(notes))
    return move(-1, "none", None, "; ".join(notes))


def _find_record(
    b: confluent_kafka.Consumer, tp: TopicPartition, fp: RecordFingerprint, scan_limit: int, timeout: float
) -> tuple[int, int] | None:
    """The offset on B of the record ``fp`` identifies and how many identical copies follow it; None: not found."""
    start = _offset_for_time(b, tp, fp.timestamp_ms, timeout, at_end=None)
    if start is None:
        return None  # no record that recent on B (yet)
    found: int | None = None
    copies = 0
    for m in _read(b, tp, start, scan_limit, timeout):
        same = m.timestamp()[1] == fp.timestamp_ms and digest(m.key(), m.value(), m.headers()) == fp.digest
        if same:
            found = m.offset() if found is None else found
            copies += 1
        elif found is not None and m.timestamp()[1] != fp.timestamp_ms:
            break  # past the record and any copy of it with the same timestamp
    return None if found is None else (found, copies)


def _offset_for_time(
    b: confluent_kafka.Consumer, tp: TopicPartition, millis: int, timeout: float, at_end: int | None = -1
) -> Any:
    """The first offset with a timestamp at or after ``millis``; where none, the log end (or ``at_end`` when None)."""
    from confluent_kafka import TopicPartition as KafkaPartition

    (answer,) = b.offsets_for_times([KafkaPartition(tp.topic, tp.partition, millis)], timeout=timeout)
    if answer.error is not None:
        raise ValueError(f"cluster B has no partition {tp.topic}:{tp.partition}: {answer.error}")
    if answer.offset >= 0:
        return answer.offset
    if at_end is None:
        return None
    return b.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=timeout)[1]


def _read(
    consumer: confluent_kafka.Consumer, tp: TopicPartition, start: int, limit: int, timeout: float
) -> Iterator[confluent_kafka.Message]:
    """At most ``limit`` committed records of ``tp`` from ``start`` to the log end as it is now."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaPartition

    end = consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=timeout)[1]
    if start >= end or limit <= 0:
        return
    consumer.assign([KafkaPartition(tp.topic, tp.partition, start)])
    read = 0
    deadline = time.monotonic() + timeout
    try:
        while read < limit and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return
                raise ValueError(f"reading {tp.topic}:{tp.partition}: {m.error()}")
            deadline = time.monotonic() + timeout
            read += 1
            yield m
            if m.offset() + 1 >= end:
                return
    finally:
        consumer.unassign()


def _offset_syncs(consumer: confluent_kafka.Consumer, timeout: float) -> dict[TopicPartition, list[tuple[int, int]]]:
    """MirrorMaker 2's offset syncs found on this cluster: per upstream partition, (upstream, downstream) pairs."""
    found: dict[TopicPartition, list[tuple[int, int]]] = collections.defaultdict(list)
    topics = [t for t in consumer.list_topics(timeout=timeout).topics if t.startswith(OFFSET_SYNCS_PREFIX)]
    for topic in topics:
        for m in _read(consumer, TopicPartition(topic, 0), 0, 10_000_000, timeout):
            parsed = _parse_sync(m.key(), m.value())
            if parsed is not None:
                tp, upstream, downstream = parsed
                found[tp].append((upstream, downstream))
    return found


def _parse_sync(key: bytes | None, value: bytes | None) -> tuple[TopicPartition, int, int] | None:
    """An OffsetSync record: key (topic: int16 length + UTF-8, partition: int32), value (upstream, downstream: int64)."""
    if key is None or value is None or len(key) < 6 or len(value) < 16:
        return None
    (n,) = struct.unpack_from(">h", key)
    if len(key) < 2 + n + 4:
        return None
    topic = key[2 : 2 + n].decode()
    (partition,) = struct.unpack_from(">i", key, 2 + n)
    upstream, downstream = struct.unpack_from(">qq", value)
    return TopicPartition(topic, partition), upstream, downstream


def _count_missing(
    a: confluent_kafka.Consumer, b: confluent_kafka.Consumer, move: PartitionSwitch, timeout: float
) -> PartitionSwitch:
    """``move`` with the records A holds past the group's offset that B lacks past the target, counted by digest."""
    if move.source_offset < 0 or move.target_offset < 0:
        return move
    on_a = collections.Counter(
        digest(m.key(), m.value(), m.headers())
        for m in _read(a, TopicPartition(move.topic, move.partition), move.source_offset, 10_000_000, timeout)
    )
    on_b = collections.Counter(
        digest(m.key(), m.value(), m.headers())
        for m in _read(b, TopicPartition(move.target_topic, move.partition), move.target_offset, 10_000_000, timeout)
    )
    missing = sum((on_a - on_b).values())
    return PartitionSwitch(**{**move.__dict__, "missing": missing, "missing_basis": "read"})


def _gap_from_watermark(
    b: confluent_kafka.Consumer, move: PartitionSwitch, status: PartitionStatus, timeout: float
) -> PartitionSwitch:
    """``move`` with the records A held past B's end, from A's last log end the store saw; as it was where unknown.

    Only an exact placement ties an offset on A to one on B: B's records from ``target_offset`` on are
    A's from ``source_offset`` on, one for one (B's copy has no control records), so B's end is A's
    ``source_offset + (B's end - target_offset)``.
    """
    from confluent_kafka import TopicPartition as KafkaPartition

    if status.watermark_time is None or status.log_end_offset < 0:
        return _noted(move, "A unreachable and no log end of A reported to the store: the gap is not known")
    if move.method != "exact":
        return _noted(move, "A unreachable and the record is not placed exactly: the gap is not known")
    end_b = b.get_watermark_offsets(KafkaPartition(move.target_topic, move.partition), timeout=timeout)[1]
    at_a = move.source_offset + max(0, end_b - move.target_offset)
    gap = max(0, status.log_end_offset - at_a)
    seen = f"A's log end {status.log_end_offset} seen {status.watermark_time.isoformat(timespec='seconds')}"
    return PartitionSwitch(
        **{
            **_noted(move, f"{seen}; B ends at A's {at_a}").__dict__,
            "missing": gap,
            "missing_basis": "watermark",
            "known_log_end": status.log_end_offset,
        }
    )


def _noted(move: PartitionSwitch, note: str) -> PartitionSwitch:
    return PartitionSwitch(**{**move.__dict__, "note": "; ".join(n for n in (move.note, note) if n)})
