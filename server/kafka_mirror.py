"""The server's mirror of committed offsets into a Kafka group coordinator, for the tools that read only Kafka.

Burrow, kafka-lag-exporter, kafka-ui and ``kafka-consumer-groups --describe`` read a group's
offsets from Kafka; a Spark job or a gRPC client that commits to offsetstore looks dead to
them. With ``--mirror-kafka-bootstrap`` and ``--mirror-kafka-groups PREFIX``, each serving
process copies the offsets committed to groups whose id starts with a prefix into the Kafka
group of the same id (AdminClient ``alter_consumer_group_offsets``), at most every
``--mirror-interval``, latest offset per partition.

A best-effort copy, never read back: the store stays the truth. It never slows or fails a
commit: the servicer hands the committed offsets over after the store's transaction committed
(:meth:`KafkaMirror.offer`: the latest offset of each partition is kept, under a lock held for
the copy of one commit), and a thread of its own takes them every round and talks to Kafka.
Coalescing at offer time, not a queue of commits: one tenant committing in a loop only
overwrites its own partitions' offsets, so it cannot fill a shared queue and drop another
tenant's commits (issue 34, low). What is bounded is partitions: ``MAX_PARTITIONS`` a group
and ``MAX_PENDING`` in all; a partition new past either is dropped and its commit counted. A group Kafka
refuses (it has live members: the coordinator takes offsets from outsiders only for an empty
group) or a broker that does not answer is logged (at most once a minute per group) and
counted, and its offsets wait for the group's next commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from offsetstore.core.types import CommittedOffset

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = ["KafkaMirror", "parse_prefixes"]

log = logging.getLogger(__name__)

#: Partitions (of every group) waiting for the mirror's thread at most; beyond, new ones are dropped (and counted).
MAX_PENDING = 100_000
#: Partitions a group's pending offsets hold at most (the contract's widest commit).
MAX_PARTITIONS = 10_000
#: Seconds one round waits for Kafka's answers (a broker that is down answers nothing).
REQUEST_SECONDS = 10.0
#: Seconds between two warnings about the same group.
WARN_EVERY = 60.0


def parse_prefixes(value: str) -> tuple[str, ...]:
    """``"spark-,etl."`` -> ("spark-", "etl."); empty entries are ignored."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


class KafkaMirror:
    """Copies committed offsets of matching groups into Kafka, batched, from a thread of its own.

    ``admin`` is made from ``bootstrap`` (and ``config``, extra librdkafka settings such as
    ``security.protocol``) unless given. ``registry`` receives the mirror's counters.
    """

    def __init__(
        self,
        bootstrap: str,
        prefixes: Sequence[str],
        interval: float = 5.0,
        *,
        config: Mapping[str, Any] | None = None,
        registry: CollectorRegistry | None = None,
        admin: AdminClient | None = None,
        max_pending: int = MAX_PENDING,
        request_seconds: float = REQUEST_SECONDS,
    ) -> None:
        if not prefixes:
            raise ValueError("the mirror needs at least one group prefix (--mirror-kafka-groups)")
        if interval <= 0:
            raise ValueError("the mirror interval must be above 0")
        self.prefixes = tuple(prefixes)
        self.interval = interval
        self.request_seconds = request_seconds
        self._settings: dict[str, str | int | float | bool] = {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(request_seconds * 1000),
            # librdkafka would print every failed connection to stderr, once a second while a
            # broker is down; the mirror logs its failures itself, at most once a minute a group.
            "log_level": 2,
        }
        self._settings.update(config or {})
        self._admin = admin
        self.max_pending = max_pending
        # group -> (topic, partition) -> latest offset; written by offer(), swapped out by each round.
        self._offered: dict[str, dict[tuple[str, int], int]] = {}
        self._offered_count = 0
        self._offered_lock = threading.Lock()
        self._warned: dict[str, float] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.registry = registry = registry if registry is not None else CollectorRegistry()
        self.mirrored = Counter(
            "offsetstore_kafka_mirror_offsets",
            "Partition offsets the Kafka mirror wrote to a group coordinator.",
            registry=registry,
        )
        self.failures = Counter(
            "offsetstore_kafka_mirror_failures",
            "Group writes the Kafka mirror could not make (broker unreachable, group with live members, ...).",
            registry=registry,
        )
        self.dropped = Counter(
            "offsetstore_kafka_mirror_dropped_commits",
            "Commits of which the Kafka mirror dropped partitions: as many partitions as it holds were pending.",
            registry=registry,
        )

    def wants(self, group_id: str) -> bool:
        return group_id.startswith(self.prefixes)

    def offer(self, group_id: str, committed: Sequence[CommittedOffset]) -> None:
        """Hands a commit's offsets to the mirror; never blocks, never raises (call it after the commit)."""
        if not committed or not self.wants(group_id):
            return
        dropped = False
        with self._offered_lock:
            offsets = self._offered.setdefault(group_id, {})
            for c in committed:
                key = (c.topic, c.partition)
                if key not in offsets:
                    if len(offsets) >= MAX_PARTITIONS or self._offered_count >= self.max_pending:
                        dropped = True
                        continue
                    self._offered_count += 1
                offsets[key] = c.offset
        if dropped:
            self.dropped.inc()

    def start(self) -> KafkaMirror:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._settings)
        self._thread = threading.Thread(target=self._loop, name="offsetstore-kafka-mirror", daemon=True)
        self._thread.start()
        log.info("kafka mirror started", extra={"prefixes": ",".join(self.prefixes), "interval": self.interval})
        return self

    def stop(self) -> None:
        """Mirrors what is pending (one last round) and stops the thread."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.request_seconds + 10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval):
            self._round()
        self._round()

    def _take(self) -> dict[str, dict[tuple[str, int], int]]:
        with self._offered_lock:
            taken, self._offered, self._offered_count = self._offered, {}, 0
        return taken

    def _round(self) -> None:
        """One batch: each pending group in one request, all of them in flight together."""
        batch = self._take()
        if not batch:
            return
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        futures: dict[str, Any] = {}
        for group_id, offsets in batch.items():
            # Sentinels (-2/-1 of a reset without watermarks) have no Kafka equivalent to write.
            partitions = [TopicPartition(t, p, o) for (t, p), o in offsets.items() if o >= 0]
            if not partitions:
                continue
            try:
                # One group a request: what the admin API takes.
                assert self._admin is not None, "start() first"
                (futures[group_id],) = self._admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group_id, partitions)], request_timeout=self.request_seconds
                ).values()
            except Exception as error:  # a bad argument, a closed client: this group fails, the others go on
                self._failed(group_id, error)
        for group_id, future in futures.items():
            try:
                result = future.result(timeout=self.request_seconds + 5)
                errors = [tp for tp in result.topic_partitions if tp.error is not None]
                if errors:
                    raise RuntimeError(f"{len(errors)} partitions refused, first: {errors[0].error}")
                self.mirrored.inc(len(result.topic_partitions))
            except Exception as error:
                self._failed(group_id, error)

    def _failed(self, group_id: str, error: BaseException) -> None:
        self.failures.inc()
        now = time.monotonic()
        if now - self._warned.get(group_id, -WARN_EVERY) >= WARN_EVERY:
            self._warned[group_id] = now
            log.warning("kafka mirror could not write the group's offsets: %s", error, extra={"group_id": group_id})
