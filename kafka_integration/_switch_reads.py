"""The switch planner's reads of Kafka: look-ups and scans of many partitions at once, MirrorMaker's offset syncs.

:mod:`.switch` decides; this reads. Each scan assigns every partition it needs to one consumer
and reads them together (a partition paused once done), not partition by partition: a plan of
1,000 partitions is a handful of requests, not thousands.
"""

from __future__ import annotations

import collections
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from offsetstore.core.types import RecordFingerprint, TopicPartition
from offsetstore.kafka_integration.fingerprints import digest

if TYPE_CHECKING:
    import confluent_kafka

#: MirrorMaker 2's offset-syncs topics: ``mm2-offset-syncs.<cluster alias>.internal``.
OFFSET_SYNCS_PREFIX = "mm2-offset-syncs."


@contextmanager
def reader(config: Mapping[str, Any]) -> Iterator[confluent_kafka.Consumer]:
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


def scan(
    consumer: confluent_kafka.Consumer,
    starts: Mapping[TopicPartition, int],
    timeout: float,
    take: Callable[[TopicPartition, confluent_kafka.Message], bool],
    *,
    ends: Mapping[TopicPartition, int] | None = None,
) -> set[TopicPartition]:
    """Reads the partitions from ``starts`` together, each until ``take(tp, message)`` says it is done.

    A partition is done too at its end-of-partition event or, with ``ends``, once the consumer's
    position reaches its log end (past the last record only markers or aborted records may
    remain, and no end-of-partition event may come for them: seen on A's transactional topic).
    Returns the partitions not done when ``timeout`` seconds passed with no record read.
    """
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaPartition

    open_ = set(starts)
    consumer.assign([KafkaPartition(tp.topic, tp.partition, at) for tp, at in starts.items()])
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
                    done.append(tp)
                    continue
                deadline = time.monotonic() + timeout
                if take(tp, m):
                    done.append(tp)
            if ends is not None:
                for kp in consumer.position([KafkaPartition(tp.topic, tp.partition) for tp in open_]):
                    if kp.offset >= ends[TopicPartition(kp.topic, kp.partition)]:
                        done.append(TopicPartition(kp.topic, kp.partition))
            if done:
                open_.difference_update(done)
                consumer.pause([KafkaPartition(tp.topic, tp.partition) for tp in done])
    finally:
        # A pause outlives the assignment in librdkafka: the next read of the partition would get nothing.
        consumer.resume([KafkaPartition(tp.topic, tp.partition) for tp in starts])
        consumer.unassign()
    return open_


def find_records(
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

    def take(tp: TopicPartition, m: confluent_kafka.Message) -> bool:
        fp, seen = wanted[tp], state[tp]
        seen[2] += 1
        if m.timestamp()[1] == fp.timestamp_ms and digest(m.key(), m.value(), m.headers()) == fp.digest:
            seen[0] = m.offset() if seen[0] is None else seen[0]
            seen[1] += 1
        elif seen[0] is not None and m.timestamp()[1] != fp.timestamp_ms:
            return True  # past the record and any copy of it with the same timestamp
        return seen[2] >= scan_limit

    scan(b, starts, timeout, take)
    for tp, (at, copies, _) in state.items():
        result[tp] = None if at is None else (at, copies)
    return result


def offset_for_time(
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


def read(
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


def offset_syncs(consumer: confluent_kafka.Consumer, timeout: float) -> dict[TopicPartition, list[tuple[int, int]]]:
    """MirrorMaker 2's offset syncs found on this cluster: per upstream partition, (upstream, downstream) pairs."""
    found: dict[TopicPartition, list[tuple[int, int]]] = collections.defaultdict(list)
    topics = [t for t in consumer.list_topics(timeout=timeout).topics if t.startswith(OFFSET_SYNCS_PREFIX)]
    for topic in topics:
        for m in read(consumer, TopicPartition(topic, 0), 0, 10_000_000, timeout):
            parsed = parse_sync(m.key(), m.value())
            if parsed is not None:
                tp, upstream, downstream = parsed
                found[tp].append((upstream, downstream))
    return found


def parse_sync(key: bytes | None, value: bytes | None) -> tuple[TopicPartition, int, int] | None:
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


def digests(
    consumer: confluent_kafka.Consumer, starts: Mapping[TopicPartition, int], timeout: float
) -> dict[TopicPartition, collections.Counter[bytes]]:
    """Per partition, the digests of its committed records from its start to its log end as it is now: one scan of all."""
    found: dict[TopicPartition, collections.Counter[bytes]] = {tp: collections.Counter() for tp in starts}
    ends = log_ends(consumer, starts, timeout)
    open_ = {tp for tp, at in starts.items() if at < ends[tp]}
    if not open_:
        return found

    def take(tp: TopicPartition, m: confluent_kafka.Message) -> bool:
        found[tp][digest(m.key(), m.value(), m.headers())] += 1
        return m.offset() + 1 >= ends[tp]

    open_ = scan(consumer, {tp: starts[tp] for tp in open_}, timeout, take, ends=ends)
    if open_:
        raise ValueError(f"{len(open_)} partitions not read to their end within {timeout} s of no progress")
    return found


def log_ends(
    consumer: confluent_kafka.Consumer, partitions: Iterable[TopicPartition], timeout: float
) -> dict[TopicPartition, int]:
    """Each partition's log end (high watermark) as it is now."""
    from confluent_kafka import TopicPartition as KafkaPartition

    return {
        tp: consumer.get_watermark_offsets(KafkaPartition(tp.topic, tp.partition), timeout=timeout)[1]
        for tp in partitions
    }
