"""The server-side watermark reader against hostile tenants (issue 47, M2 and L1), on Apache Kafka.

M2: a tenant storing 20,000 partitions of a topic Kafka does not have, in its own watched
group, took the reader's rounds (one round-robin over every partition) and made rounds fail
whole as *broker* failures: another tenant's watermarks were refreshed one round in three.
L1: a tenant refused ReportWatermarks on another tenant's topic committed a partition of it
into its own watched group, and the reader fetched and stored that topic's watermarks with
the server's Kafka credentials.
"""

from __future__ import annotations

import uuid

from prometheus_client import CollectorRegistry

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import TopicPartition
from offsetstore.kafka_integration.local_kafka import KafkaCluster
from offsetstore.runtime.store import Store
from offsetstore.server.auth import AuthConfig
from offsetstore.server.kafka_watermarks import KafkaWatermarks, TopicPolicy
from offsetstore.storage import read_watermarks
from tests.fixtures.fix_kafka import produce

#: The squatting tenant's partitions: two commits of the most a request may hold.
SQUATTED = 20_000


def _reader(store: Store, bootstrap: str, prefix: str, **kwargs: object) -> KafkaWatermarks:
    marks = KafkaWatermarks(store, bootstrap, [prefix], registry=CollectorRegistry(), request_seconds=2, **kwargs)
    return marks.start_client()


def _failures(marks: KafkaWatermarks, reason: str) -> float:
    return marks.registry.get_sample_value("offsetstore_kafka_watermarks_failures_total", {"reason": reason}) or 0


def test_a_tenants_unknown_topic_neither_starves_another_group_nor_counts_as_a_broker_failure(
    broker: KafkaCluster, store: Store, client: OffsetStoreClient
) -> None:
    prefix = f"w-{uuid.uuid4().hex[:8]}-"
    victim_topic = f"v-{uuid.uuid4().hex[:8]}"
    broker.create_topic(victim_topic, 2)
    produce(broker.bootstrap, victim_topic, 2, 3)
    client.commit_offsets(f"{prefix}victim", {(victim_topic, 0): 1, (victim_topic, 1): 1})
    # Sorted before the victim's topic: the old round-robin met it first.
    missing = f"a-missing-{uuid.uuid4().hex[:8]}"
    for start in (0, SQUATTED // 2):
        client.commit_offsets(f"{prefix}squatter", {(missing, p): 1 for p in range(start, start + SQUATTED // 2)})
    marks = _reader(store, broker.bootstrap, prefix)

    rounds = [marks.round() for _ in range(3)]
    refreshed = sum(1 for stored in rounds if stored == 2)
    print(
        f"\nvictim refreshed in {refreshed} of 3 rounds ({rounds}); failures: broker {_failures(marks, 'broker'):g}, "
        f"topic {_failures(marks, 'topic'):g}, partition {_failures(marks, 'partition'):g}"
    )
    assert rounds == [2, 2, 2]  # the victim's two partitions every round, the squatter's never asked
    assert _failures(marks, "broker") == 0
    assert _failures(marks, "topic") == 1  # found missing once, then remembered and skipped
    stored = store.run(read_watermarks, [TopicPartition(victim_topic, 0), TopicPartition(missing, 0)])
    assert set(stored) == {(victim_topic, 0)}


def test_the_reader_reads_only_topics_a_groups_principals_may_report(
    broker: KafkaCluster, store: Store, client: OffsetStoreClient
) -> None:
    run = uuid.uuid4().hex[:8]
    prefix = f"w-{run}-"
    theirs, mine = f"vt-{run}", f"at-{run}"
    for topic in (theirs, mine):
        broker.create_topic(topic, 1)
        produce(broker.bootstrap, topic, 1, 4)
    config = AuthConfig.parse(
        f"""
        [principals.victim]
        token_sha256 = []
        grants = [{{ prefix = "{prefix}v", permissions = ["commit"] }}, {{ topic_prefix = "vt-", permissions = ["commit"] }}]

        [principals.attacker]
        token_sha256 = []
        grants = [{{ prefix = "{prefix}a", permissions = ["commit"] }}, {{ topic_prefix = "at-", permissions = ["commit"] }}]

        [principals.operator]   # a global admin: may commit anywhere and report anything, decides nothing here
        token_sha256 = []
        grants = [{{ prefix = "", permissions = ["admin"] }}]
        """
    )
    # The attacker may not report the victim's topic: it names it in a group of its own instead.
    client.commit_offsets(f"{prefix}a-1", {(theirs, 0): 1, (mine, 0): 1})
    marks = _reader(store, broker.bootstrap, prefix, topics=TopicPolicy(principals=config.principals.values()))
    assert marks.round() == 1
    stored = store.run(read_watermarks, [TopicPartition(theirs, 0), TopicPartition(mine, 0)])
    assert set(stored) == {(mine, 0)}, "the victim's topic was read with the server's credentials"

    # The victim's own group reads its topic; an operator's list decides instead where given.
    client.commit_offsets(f"{prefix}v-1", {(theirs, 0): 1})
    assert marks.round() == 2
    listed = _reader(store, broker.bootstrap, prefix, topics=TopicPolicy(topic_prefixes=["at-"]))
    assert listed.round() == 1
