"""Issue 58 over gRPC: the AtLeastOnceCommitter binds its group to the consumer's cluster and fingerprints each commit,
so that ``groups switch`` places the group on MirrorMaker 2's copy by the exact method, as it does the writer's.

On :func:`mirrored_kafka` (A's ``orders`` written with aborts and its log start moved on partition 0): A's and B's
offsets of a record differ, and the fingerprint the committer sent is what finds it on B.
"""

from __future__ import annotations

import pytest

from offsetstore.client import ClusterMismatchError, OffsetStoreClient
from offsetstore.kafka_integration import AtLeastOnceCommitter
from tests.fixtures.fix_mirror_maker import MirroredKafka

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("mirror_maker")]


def consumer_of(cluster):
    from confluent_kafka import Consumer

    return Consumer(
        cluster.client_config(
            **{
                "group.id": "unused",  # assigned, never subscribed: positions come from the store
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )
    )


def test_an_at_least_once_group_is_bound_fingerprinted_and_switched_exactly(
    mirrored_kafka: MirroredKafka, server, group_id, groups
) -> None:
    from confluent_kafka import TopicPartition as KafkaPartition

    a, b = mirrored_kafka.source, mirrored_kafka.target
    topic = mirrored_kafka.topics["orders"]
    source = mirrored_kafka.source_records(topic)
    # Each partition read up to a point inside it (the committer commits after "processing" each batch).
    stop = {p: rs[len(rs) // 2 + p].offset for p, rs in source.items()}
    on_a = consumer_of(a)
    with OffsetStoreClient(server.address, timeout=20) as client:
        committer = AtLeastOnceCommitter(client, group_id, consumer=on_a)
        try:
            on_a.assign([KafkaPartition(topic.name, p, -2) for p in range(topic.partitions)])
            pending = dict(stop)
            while pending:
                batch = [m for m in on_a.consume(50, timeout=1.0) if m.error() is None]
                batch = [m for m in batch if m.offset() <= pending.get(m.partition(), -1)]
                if batch:
                    committer.commit(batch)
                for m in batch:
                    if m.offset() == pending.get(m.partition()):
                        del pending[m.partition()]
        finally:
            on_a.close()
        described = client.describe_group(group_id)
        assert described.kafka_cluster_id == committer.cluster_id and committer.cluster_id
        assert {p.partition: (p.offset, p.fingerprint is not None) for p in described.partitions} == {
            p: (o + 1, True) for p, o in stop.items()
        }
        for status in described.partitions:
            last = next(r for r in source[status.partition] if r.offset == status.offset - 1)
            assert status.fingerprint.offset == status.offset and status.fingerprint.timestamp_ms == last.timestamp

        # A committer of B's copy is refused at its join: the group is A's until it is switched.
        on_b = consumer_of(b)
        try:
            with pytest.raises(ClusterMismatchError):
                AtLeastOnceCommitter(client, group_id, consumer=on_b).join()
        finally:
            on_b.close()
        assert client.fetch_offsets(group_id).generation == committer.generation

    argv = ["switch", group_id, "--to-bootstrap-server", b.bootstrap, "--from-bootstrap-server", a.bootstrap,
            "--replication-policy", "default", "--source-alias", "A", "--output", "json"]  # fmt: skip
    plan = groups(*argv)
    assert plan.code == 0, plan.err
    target = mirrored_kafka.target_records(topic)
    # Exact: on B, the offset after the copy of the last record the committer committed on A.
    expected = {
        p: next(r.offset for r in target[p] if r.id == next(s.id for s in source[p] if s.offset == o)) + 1
        for p, o in stop.items()
    }
    moved = {r["partition"]: r for r in plan.json()["partitions"]}
    assert {
        p: (r["target_topic"], r["method"], r["target_offset"], r["rereads_at_most"]) for p, r in moved.items()
    } == {p: (topic.remote, "exact", o, 0) for p, o in expected.items()}
    assert any(expected[p] != stop[p] + 1 for p in stop)  # A's offsets would have been wrong on B
