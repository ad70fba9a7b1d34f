"""Seconds to plan an exact switch of a 1,000-partition group from cluster A to cluster B (issue 58's bench).

Starts two single-broker Apache Kafka clusters (the tests' local KRaft brokers), creates
``--topics`` topics of ``--partitions`` partitions each on both, writes ``--records`` records a
partition on A (keys, values, a header), and copies them to B with a copy loop of its own
(consume A, produce to B with the same key, value, headers and timestamp): MirrorMaker 2 would
take minutes to start and copy 1,000 partitions on this machine, and the planner reads only B's
records, which this loop makes as MirrorMaker would (the same contents and timestamps). B's copy
of each partition starts a few records later than A's (as a log start moved on A before
replication would), so A's and B's offsets differ everywhere.

The group: for each partition an offset on A somewhere in the middle and the fingerprint of the
record before it, as the Kafka recipe's writer stores them. It is built in memory (no store):
the bench times :func:`~offsetstore.kafka_integration.switch.plan_switch` alone, the part that
reads Kafka; the execute is one ResetOffsets of 1,000 partitions, timed by the commit benches.
Each repeat plans the same group again (B's pages are in the page cache after the first: the
first repeat's time is the cold one). Checks every target against the copy loop's own map.

``--with-source`` passes A's config too, as ``groups switch --from-bootstrap-server`` does: the
plan then also reads every record past the group's offset on A and on B to count what B lacks.

Prints the plan's seconds per repeat and their median; the goal is 30 s or less.

Usage: ``python bench/switch_plan.py [--topics 4] [--partitions 250] [--records 20] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=250, help="partitions a topic")
    parser.add_argument("--records", type=int, default=20, help="records a partition on A")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--with-source", action="store_true", help="pass A too (--from-bootstrap-server): the plan counts what B lacks"
    )
    args = parser.parse_args()

    from offsetstore.kafka_integration.local_kafka import KafkaCluster

    with KafkaCluster(heap="384m") as a, KafkaCluster(heap="384m") as b:
        started = time.monotonic()
        topics = [f"bench-{uuid.uuid4().hex[:6]}-{i}" for i in range(args.topics)]
        for t in topics:
            a.create_topic(t, args.partitions)
            b.create_topic(t, args.partitions)
        _write(a, topics, args.partitions, args.records)
        expected, description = _copy(a, b, topics, args.partitions, args.records)
        print(
            f"set-up: {len(expected)} partitions over {len(topics)} topics, {args.records} records each, "
            f"in {time.monotonic() - started:.1f} s"
        )
        from offsetstore.kafka_integration.switch import plan_switch

        seconds = []
        for i in range(args.repeats):
            started = time.perf_counter()
            plan = plan_switch(description, b.client_config(), source=a.client_config() if args.with_source else None)
            seconds.append(time.perf_counter() - started)
            got = {(p.topic, p.partition): (p.target_offset, p.method) for p in plan.partitions}
            want = {tp: (o, "exact") for tp, o in expected.items()}
            assert got == want, f"{sum(got[k] != want[k] for k in want)} partitions planned wrong"
            missing = {p.missing for p in plan.partitions}
            assert missing == ({0} if args.with_source else {None}), missing
            print(f"repeat {i + 1}: planned {len(plan.partitions)} partitions exactly in {seconds[-1]:.2f} s")
        print(f"plan of {len(expected)} partitions: median {statistics.median(seconds):.2f} s (goal: <= 30 s)")


def _write(a, topics: list[str], partitions: int, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(a.producer_config(**{"linger.ms": 20}))
    for t in topics:
        for p in range(partitions):
            for r in range(records):
                producer.produce(t, value=f"{t}/{p}/{r}".encode(), key=str(r % 7).encode(), partition=p,
                                 headers=[("n", str(r).encode())])  # fmt: skip
            producer.poll(0)
    assert producer.flush(60) == 0


def _copy(a, b, topics: list[str], partitions: int, records: int):
    """Copies A to B (each partition from a few records in), and returns the exact targets and the group to plan."""
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka import TopicPartition as KafkaPartition

    from offsetstore.core.types import GroupDescription, PartitionStatus
    from offsetstore.kafka_integration.fingerprints import fingerprint

    skip = {(t, p): (p + i) % 5 for i, t in enumerate(topics) for p in range(partitions)}  # B's copy starts later
    at_a = {tp: skip[tp] + 1 + (tp[1] * 7 % (records - skip[tp] - 1)) for tp in skip}  # the group's offset on A
    consumer = Consumer(a.client_config(**{"group.id": "bench-copy", "enable.partition.eof": True}))
    producer = Producer(b.producer_config(**{"linger.ms": 20}))
    consumer.assign([KafkaPartition(t, p, skip[t, p]) for t, p in skip])
    open_, fingerprints = set(skip), {}
    deadline = time.monotonic() + 300
    while open_ and time.monotonic() < deadline:
        for m in consumer.consume(1000, timeout=0.5):
            tp = (m.topic(), m.partition())
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    open_.discard(tp)
                continue
            producer.produce(m.topic(), value=m.value(), key=m.key(), partition=m.partition(),
                             headers=m.headers(), timestamp=m.timestamp()[1])  # fmt: skip
            if m.offset() + 1 == at_a[tp]:
                fingerprints[tp] = fingerprint(m)
        producer.poll(0)
    assert not open_, f"{len(open_)} partitions not copied"
    assert producer.flush(60) == 0
    consumer.close()
    # On B partition tp's record at A-offset o is at o - skip: the group resumes there.
    expected = {tp: at_a[tp] - skip[tp] for tp in skip}
    description = GroupDescription(
        "bench-switch",
        1,
        [
            PartitionStatus(t, p, at_a[t, p], "", None, records, records - at_a[t, p], fingerprint=fingerprints[t, p])
            for t, p in sorted(skip)
        ],
        kafka_cluster_id="A",
    )
    return expected, description


if __name__ == "__main__":
    main()
