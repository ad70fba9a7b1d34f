"""Observed Kafka groups: the supervisor records the offsets Kafka's consumer groups commit, as observed groups.

A consumer group that commits to Kafka keeps its positions there, where offsets.retention may
expire them and nobody keeps their history. With ``--observe-kafka-groups PREFIX,..`` (and the
watermark reader's ``--watermarks-kafka-bootstrap`` and ``--watermarks-kafka-config``), the
supervising process (once, not each serving process) lists Kafka's groups with those prefixes
every ``--observe-kafka-interval`` and reads their committed offsets (AdminClient
``list_consumer_groups`` and ``list_consumer_group_offsets``). Each lands in the observed group of
the same id (:func:`~offsetstore.storage.observe_offsets`, source ``kafka:<cluster id>/<group>``,
actor ``offsetstore``): only positions that moved are written, each a CHANGE_KIND_OBSERVED
history entry. The watermark reader watches the same prefixes, so observed groups get lag, lag
in seconds and their verdict; a group that stops committing reads STOPPED.

A partition whose committed offset Kafka no longer has (expired, ``kafka-consumer-groups
--delete-offsets``, a group deleted) while the store has its position is sent as lost: the
group is flagged (``observed_lost_partitions``), its last observed position kept for ``groups
export --to-kafka-group``.

Fair as the watermark reader is (:mod:`.kafka_watermarks`): a round writes at most
``--watermarks-kafka-max-partitions`` positions, shared between the groups it reads, each group
its share from a cursor of its own (a group of 20,000 partitions takes its share a round, never
another group's); beyond that many groups, the groups rotate. A group the store has as
committed (its writers commit to offsetstore) is never overwritten: it is skipped and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from offsetstore.core.errors import GroupCommittedError, OffsetStoreError
from offsetstore.core.types import OffsetCommit, TopicPartition
from offsetstore.runtime.store import Store
from offsetstore.server._kafka_rounds import KafkaRounds
from offsetstore.storage.observe import observed_group_ids
from offsetstore.storage.validate import MAX_PARTITIONS

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = ["KafkaGroupObserver", "kafka_source"]

log = logging.getLogger(__name__)

#: Seconds one request waits for Kafka's answer.
REQUEST_SECONDS = 10.0
#: The history's actor of an observed Kafka position.
ACTOR = "offsetstore"


def kafka_source(cluster_id: str, group: str) -> str:
    """The source of a Kafka group's observed positions: ``kafka:<cluster id>/<group>``."""
    return f"kafka:{cluster_id}/{group}"


class KafkaGroupObserver(KafkaRounds):
    """Reads Kafka groups' committed offsets into observed groups of the store, from a thread of its own."""

    thread_name = "offsetstore-kafka-groups"
    label = "kafka group observer"

    def __init__(
        self,
        store: Store,
        bootstrap: str,
        prefixes: Sequence[str],
        interval: float = 5.0,
        max_partitions: int = 10_000,
        *,
        config: Mapping[str, Any] | None = None,
        registry: CollectorRegistry | None = None,
        admin: AdminClient | None = None,
        request_seconds: float = REQUEST_SECONDS,
    ) -> None:
        if not prefixes:
            raise ValueError("observing Kafka groups needs at least one group prefix (--observe-kafka-groups)")
        if interval <= 0 or max_partitions < 1:
            raise ValueError("the observer's interval must be above 0 and the partitions per round at least 1")
        self.store = store
        self.prefixes = tuple(prefixes)
        self.interval = interval
        self.max_partitions = max_partitions
        self.request_seconds = request_seconds
        self._settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(request_seconds * 1000),
            "log_level": 2,  # the observer logs its failures itself, once a minute
        }
        self._settings.update(config or {})
        super().__init__(admin)
        self._cluster: str | None = None
        self._group_after: str | None = None
        self._cursors: dict[str, TopicPartition] = {}  # group -> the last partition written of it
        registry = registry if registry is not None else CollectorRegistry()
        self.changed = Counter(
            "offsetstore_kafka_groups_observed_positions",
            "Positions of Kafka groups the server observed moving and recorded (CHANGE_KIND_OBSERVED).",
            registry=registry,
        )
        self.failures = Counter(
            "offsetstore_kafka_groups_failures",
            "Failures of the server's Kafka group observer: a round Kafka did not answer (broker), a group the store "
            "has as committed, never overwritten (committed), a round the store refused (store).",
            labelnames=("reason",),
            registry=registry,
        )

    def start(self) -> KafkaGroupObserver:
        self.start_rounds()
        log.info(
            "kafka group observer started",
            extra={"prefixes": ",".join(self.prefixes), "interval": self.interval, "max": self.max_partitions},
        )
        return self

    def round(self) -> int:
        """One round: this round's groups, their committed offsets from Kafka, their moves into the store.

        Returns how many positions changed.
        """
        cluster = self._cluster_id()
        listed = self._kafka_groups()
        if cluster is None or listed is None:
            return 0
        source_prefix = kafka_source(cluster, "")
        # Groups observed from this cluster that Kafka no longer lists (deleted, or every offset expired).
        known = self.store.run(observed_group_ids, self.prefixes, source_prefix)
        gone = sorted(set(known) - set(listed))
        groups = sorted(set(listed))
        if self._group_after is not None:
            groups = [g for g in groups if g > self._group_after] + [g for g in groups if g <= self._group_after]
        groups = groups[: self.max_partitions]
        self._group_after = groups[-1] if len(listed) > self.max_partitions else None
        share = max(1, self.max_partitions // max(1, len(groups)))
        changed = 0
        for group in [*gone, *groups]:
            committed = {} if group in gone else self._committed(group)
            if committed is None:
                continue
            try:
                changed += self._observe(group, committed, cluster, share)
            except Exception as error:  # one group's failure (the store's answer) is not the others'
                self._failed("store", error)
        return changed

    def _observe(self, group: str, committed: dict[TopicPartition, tuple[int, str]], cluster: str, share: int) -> int:
        """Records ``share`` of the group's positions from its cursor on, and the ones Kafka lost."""
        stored = set(self.store.fetch_offsets(group).offsets)
        # One call takes 10,000 partitions of each: a group wider than that that Kafka lost is flagged by its
        # first 10,000 (its count capped there), and a page is never wider, whatever --watermarks-kafka-max-partitions.
        lost = sorted(stored - committed.keys())[:MAX_PARTITIONS]
        share = min(share, MAX_PARTITIONS)
        ordered = sorted(committed)
        after = self._cursors.get(group)
        start = 0 if after is None else next((i for i, tp in enumerate(ordered) if tp > after), len(ordered))
        page = ordered[start : start + share]
        if start + share < len(ordered):
            self._cursors[group] = page[-1]
        else:  # the group's end: it starts over next round
            self._cursors.pop(group, None)
        positions = [OffsetCommit(tp.topic, tp.partition, committed[tp][0], committed[tp][1]) for tp in page]
        if not positions and not lost:  # no offset in Kafka, none stored: nothing to record, not even the mark
            return 0
        try:
            moved = self.store.observe_offsets(
                group, positions, source=kafka_source(cluster, group), actor=ACTOR, lost=lost
            )
        except GroupCommittedError:
            self.failures.labels("committed").inc()
            self._warn(
                "committed",
                f"kafka group {group} has a group of the same id committed to offsetstore: not observed "
                "(its writers' positions are never overwritten)",
            )
            return 0
        except OffsetStoreError as error:  # this group's, counted and said: the round goes on to the other groups
            self._failed("store", error)
            return 0
        self.changed.inc(moved)
        return moved

    def _cluster_id(self) -> str | None:
        if self._cluster is None:
            assert self._admin is not None, "start() first"
            try:
                described = self._admin.describe_cluster(request_timeout=self.request_seconds)
                self._cluster = described.result(timeout=self.request_seconds + 5).cluster_id
            except Exception as error:
                self._failed("broker", error)
        return self._cluster

    def _kafka_groups(self) -> list[str] | None:
        """Kafka's consumer groups whose ids start with a prefix; None when Kafka did not answer."""
        assert self._admin is not None, "start() first"
        try:
            found = self._admin.list_consumer_groups(request_timeout=self.request_seconds)
            listing = found.result(timeout=self.request_seconds + 5)
        except Exception as error:
            self._failed("broker", error)
            return None
        return sorted(g.group_id for g in listing.valid if g.group_id.startswith(self.prefixes))

    def _committed(self, group: str) -> dict[TopicPartition, tuple[int, str]] | None:
        """The group's committed offsets and their metadata; None when Kafka did not answer."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        assert self._admin is not None, "start() first"
        try:
            futures = self._admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.request_seconds
            )
            answer = futures[group].result(timeout=self.request_seconds + 5)
        except Exception as error:
            self._failed("broker", error)
            return None
        return {
            TopicPartition(p.topic, p.partition): (p.offset, p.metadata or "")
            for p in answer.topic_partitions
            if p.error is None and p.offset >= 0
        }
