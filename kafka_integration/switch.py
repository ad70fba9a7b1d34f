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
The switch itself is one ResetOffsets with ``to_offsets`` and ``switch_to_cluster_id``: fenced,
recorded as CHANGE_KIND_SWITCH, and it binds the group to B.
"""

from __future__ import annotations

import collections
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from offsetstore.core.types import GroupDescription, RecordFingerprint, TopicPartition
from offsetstore.kafka_integration._messages import kafka_cluster_id
from offsetstore.kafka_integration.fingerprints import digest

if TYPE_CHECKING:
    import confluent_kafka

__all__ = ["PartitionSwitch", "SwitchPlan", "SwitchPlanner", "plan_switch", "topic_mapper"]

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
    lacks and read offset syncs kept on A (MirrorMaker's default). ``wait_seconds`` waits that long
    at most for a fingerprinted record that B does not hold yet (replication catching up).
    """
    with SwitchPlanner(target, source=source, topic_name=topic_name, offset_preserving=offset_preserving,
                       scan_limit=scan_limit, wait_seconds=wait_seconds, timeout=timeout) as planner:  # fmt: skip
        return planner.plan(description)


class SwitchPlanner:
    """:func:`plan_switch` for many groups: B's (and A's) clients, B's cluster id and the offset syncs read once.

    A context manager; :meth:`plan` plans one group. The offset syncs are those read on entry:
    a planner kept open long plans by older syncs (conservative still, with larger bounds).
    """

    def __init__(
        self,
        target: Mapping[str, Any],
        *,
        source: Mapping[str, Any] | None = None,
        topic_name: Callable[[str], str] = lambda t: t,
        offset_preserving: bool = False,
        scan_limit: int = 10_000,
        wait_seconds: float = 0.0,
        timeout: float = 10.0,
    ) -> None:
        self.target, self.source = target, source
        self.topic_name = topic_name
        self.offset_preserving = offset_preserving
        self.scan_limit, self.wait_seconds, self.timeout = scan_limit, wait_seconds, timeout
        self.to_cluster_id = ""
        self._stack = ExitStack()
        self._b: confluent_kafka.Consumer | None = None
        self._a: confluent_kafka.Consumer | None = None
        self._syncs: dict[TopicPartition, list[tuple[int, int]]] = {}

    def __enter__(self) -> SwitchPlanner:
        with ExitStack() as stack:
            self._b = b = stack.enter_context(_reader(self.target))
            self.to_cluster_id = kafka_cluster_id(b, self.timeout)
            self._syncs = _offset_syncs(b, self.timeout)
            if self.source is not None:
                self._a = a = stack.enter_context(_reader(self.source))
                for key, pairs in _offset_syncs(a, self.timeout).items():
                    self._syncs.setdefault(key, pairs)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self._a = self._b = None

    def plan(self, description: GroupDescription) -> SwitchPlan:
        """Each partition of ``description`` placed on B."""
        b, a = self._b, self._a
        assert b is not None, "enter the planner first"
        targets = [TopicPartition(self.topic_name(p.topic), p.partition) for p in description.partitions]
        # Every fingerprinted record looked up at once: one time-index request, one scan of all partitions.
        wanted = {
            tp_b: p.fingerprint
            for p, tp_b in zip(description.partitions, targets, strict=True)
            if p.offset >= 0 and p.fingerprint is not None
        }
        found = _find_records(b, wanted, self.scan_limit, self.timeout)
        deadline = time.monotonic() + self.wait_seconds
        while any(v is None for v in found.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            missing = {tp: wanted[tp] for tp, v in found.items() if v is None}
            found.update(_find_records(b, missing, self.scan_limit, self.timeout))
        moves = [
            _place(
                b,
                p.topic,
                p.partition,
                tp_b,
                p.offset,
                p.fingerprint,
                found.get(tp_b),
                self._syncs,
                self.offset_preserving,
                self.scan_limit,
                self.timeout,
            )  # fmt: skip
            for p, tp_b in zip(description.partitions, targets, strict=True)
        ]
        if a is not None:
            moves = _count_missing(a, b, moves, self.timeout)
        return SwitchPlan(
            description.group_id, description.generation, description.kafka_cluster_id, self.to_cluster_id, moves
        )


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
    found: tuple[int, int] | None,
    syncs: Mapping[TopicPartition, list[tuple[int, int]]],
    offset_preserving: bool,
    scan_limit: int,
    timeout: float,
) -> PartitionSwitch:
    def move(target: int, method: str, rereads: int | None, note: str = "") -> PartitionSwitch:
        return PartitionSwitch(topic, partition, tp_b.topic, offset, target, method, rereads, None, note)

    notes = []
    if offset < 0:
        return move(offset, "identity", None, "a placeholder (-2 earliest, -1 latest) means the same on B")
    if fp is not None:
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


def _find_records(
    b: confluent_kafka.Consumer,
    wanted: Mapping[TopicPartition, RecordFingerprint],
    scan_limit: int,
    timeout: float,
) -> dict[TopicPartition, tuple[int, int] | None]:
    """Per partition, the offset on B of the record its fingerprint identifies and how many identical copies follow it.

    None where it is not within ``scan_limit`` records of the first at its timestamp. One
    ``offsets_for_times`` for every partition, then one scan of them all together: a partition
    is paused once its record (and any copy) is passed, at its end, or at ``scan_limit``.
    """
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaPartition

    result: dict[TopicPartition, tuple[int, int] | None] = dict.fromkeys(wanted)
    if not wanted:
        return result
    answers = b.offsets_for_times(
        [KafkaPartition(tp.topic, tp.partition, fp.timestamp_ms) for tp, fp in wanted.items()], timeout=timeout
    )
    starts = {}
    for answer in answers:
        if answer.error is not None:
            raise ValueError(f"cluster B has no partition {answer.topic}:{answer.partition}: {answer.error}")
        if answer.offset >= 0:  # else no record that recent on B (yet)
            starts[TopicPartition(answer.topic, answer.partition)] = answer.offset
    if not starts or scan_limit <= 0:
        return result
    state = {tp: [None, 0, 0] for tp in starts}  # found offset, copies, records read
    open_ = set(starts)
    b.assign([KafkaPartition(tp.topic, tp.partition, at) for tp, at in starts.items()])
    deadline = time.monotonic() + timeout
    try:
        while open_ and time.monotonic() < deadline:
            done = []
            for m in b.consume(1000, timeout=0.5):
                tp = TopicPartition(m.topic(), m.partition())
                if tp not in open_:
                    continue
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise ValueError(f"reading {tp.topic}:{tp.partition}: {m.error()}")
                    done.append(tp)
                    continue
                deadline = time.monotonic() + timeout
                fp, seen = wanted[tp], state[tp]
                seen[2] += 1
                if m.timestamp()[1] == fp.timestamp_ms and digest(m.key(), m.value(), m.headers()) == fp.digest:
                    seen[0] = m.offset() if seen[0] is None else seen[0]
                    seen[1] += 1
                elif seen[0] is not None and m.timestamp()[1] != fp.timestamp_ms:
                    done.append(tp)  # past the record and any copy of it with the same timestamp
                    continue
                if seen[2] >= scan_limit:
                    done.append(tp)
            if done:
                open_.difference_update(done)
                b.pause([KafkaPartition(tp.topic, tp.partition) for tp in done])
    finally:
        # A pause outlives the assignment in librdkafka: the next read of the partition would get nothing.
        b.resume([KafkaPartition(tp.topic, tp.partition) for tp in starts])
        b.unassign()
    for tp, (at, copies, _) in state.items():
        result[tp] = None if at is None else (at, copies)
    return result


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
    a: confluent_kafka.Consumer, b: confluent_kafka.Consumer, moves: list[PartitionSwitch], timeout: float
) -> list[PartitionSwitch]:
    """``moves`` with the records A holds past the group's offset that B lacks past the target, counted by digest."""
    placed = [m for m in moves if m.source_offset >= 0 and m.target_offset >= 0]
    on_a = _digests(a, {TopicPartition(m.topic, m.partition): m.source_offset for m in placed}, timeout)
    on_b = _digests(b, {TopicPartition(m.target_topic, m.partition): m.target_offset for m in placed}, timeout)
    counted = {
        id(m): sum(
            (on_a[TopicPartition(m.topic, m.partition)] - on_b[TopicPartition(m.target_topic, m.partition)]).values()
        )
        for m in placed
    }
    return [PartitionSwitch(**{**m.__dict__, "missing": counted[id(m)]}) if id(m) in counted else m for m in moves]


def _digests(
    consumer: confluent_kafka.Consumer, starts: Mapping[TopicPartition, int], timeout: float
) -> dict[TopicPartition, collections.Counter[bytes]]:
    """Per partition, the digests of its committed records from its start to its log end as it is now: one scan of all."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaPartition

    found: dict[TopicPartition, collections.Counter[bytes]] = {tp: collections.Counter() for tp in starts}
    ends = {
        tp: consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=timeout)[1] for tp in starts
    }
    open_ = {tp for tp, at in starts.items() if at < ends[tp]}
    if not open_:
        return found
    consumer.assign([KafkaPartition(tp.topic, tp.partition, starts[tp]) for tp in open_])
    deadline = time.monotonic() + timeout
    try:
        while open_ and time.monotonic() < deadline:
            done = []
            for m in consumer.consume(1000, timeout=0.5):
                tp = TopicPartition(m.topic(), m.partition())
                if tp not in open_:
                    continue
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        raise ValueError(f"reading {tp.topic}:{tp.partition}: {m.error()}")
                    done.append(tp)  # the last record's offset is below the end: markers past it
                    continue
                deadline = time.monotonic() + timeout
                found[tp][digest(m.key(), m.value(), m.headers())] += 1
                if m.offset() + 1 >= ends[tp]:
                    done.append(tp)
            # Past the last record only markers or aborted records may remain, and no end-of-partition
            # event may come for them (seen on A's transactional topic): the position says it is read.
            for kp in consumer.position([KafkaPartition(tp.topic, tp.partition) for tp in open_]):
                if kp.offset >= ends[TopicPartition(kp.topic, kp.partition)]:
                    done.append(TopicPartition(kp.topic, kp.partition))
            if done:
                open_.difference_update(done)
                consumer.pause([KafkaPartition(tp.topic, tp.partition) for tp in done])
    finally:
        consumer.resume([KafkaPartition(tp.topic, tp.partition) for tp in starts if starts[tp] < ends[tp]])
        consumer.unassign()
    if open_:
        raise ValueError(f"{len(open_)} partitions not read to their end within {timeout} s of no progress")
    return found
