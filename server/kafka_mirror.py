"""The server's mirror of committed offsets into a Kafka group coordinator, for the tools that read only Kafka.

Burrow, kafka-lag-exporter, kafka-ui and ``kafka-consumer-groups --describe`` read a group's
offsets from Kafka; a Spark job or a gRPC client that commits to offsetstore looks dead to
them. With ``--mirror-kafka-bootstrap`` and ``--mirror-kafka-groups PREFIX``, each serving
process copies the offsets committed to groups whose id starts with a prefix into the Kafka
group of the same id (AdminClient ``alter_consumer_group_offsets``), at most every
``--mirror-interval``, latest offset per partition.

A best-effort copy, never read back: the store stays the truth. It never slows or fails a
commit: the servicer hands the committed offsets over after the store's transaction committed
(:meth:`KafkaMirror.offer`: a ``put_nowait`` on a bounded queue, a commit dropped and counted
when it is full), and a thread of its own drains the queue and talks to Kafka. A group Kafka
refuses (it has live members: the coordinator takes offsets from outsiders only for an empty
group) or a broker that does not answer is logged (at most once a minute per group) and
counted, and its offsets wait for the group's next commit.
"""

from __future__ import annotations

import logging
import queue
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

#: Commits waiting for the mirror's thread at most; beyond, a commit is dropped (and counted).
QUEUE_COMMITS = 10_000
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
        queue_commits: int = QUEUE_COMMITS,
        request_seconds: float = REQUEST_SECONDS,
    ) -> None:
        if not prefixes:
            raise ValueError("the mirror needs at least one group prefix (--mirror-kafka-groups)")
        if interval <= 0:
            raise ValueError("the mirror interval must be above 0")
        self.prefixes = tuple(prefixes)
        self.interval = interval
        self.request_seconds = request_seconds
        self._settings = {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(request_seconds * 1000),
            # librdkafka would print every failed connection to stderr, once a second while a
            # broker is down; the mirror logs its failures itself, at most once a minute a group.
            "log_level": 2,
        }
        self._settings.update(config or {})
        self._admin = admin
        self._queue: queue.Queue[tuple[str, Sequence[CommittedOffset]]] = queue.Queue(queue_commits)
        self._pending: dict[str, dict[tuple[str, int], int]] = {}
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
            "Commits the Kafka mirror dropped because its queue was full.",
            registry=registry,
        )

    def wants(self, group_id: str) -> bool:
        return group_id.startswith(self.prefixes)

    def offer(self, group_id: str, committed: Sequence[CommittedOffset]) -> None:
        """Hands a commit's offsets to the mirror; never blocks, never raises (call it after the commit)."""
        if not committed or not self.wants(group_id):
            return
        try:
            self._queue.put_nowait((group_id, committed))
        except queue.Full:
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
        """Mirrors what is queued (one last round) and stops the thread."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.request_seconds + 10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval):
            self._round()
        self._round()

    def _drain(self) -> None:
        while True:
            try:
                group_id, committed = self._queue.get_nowait()
            except queue.Empty:
                return
            offsets = self._pending.setdefault(group_id, {})
            for c in committed:
                if len(offsets) >= MAX_PARTITIONS and (c.topic, c.partition) not in offsets:
                    break
                offsets[(c.topic, c.partition)] = c.offset

    def _round(self) -> None:
        """One batch: each pending group in one request, all of them in flight together."""
        self._drain()
        if not self._pending:
            return
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        batch, self._pending = self._pending, {}
        futures: dict[str, Any] = {}
        for group_id, offsets in batch.items():
            # Sentinels (-2/-1 of a reset without watermarks) have no Kafka equivalent to write.
            partitions = [TopicPartition(t, p, o) for (t, p), o in offsets.items() if o >= 0]
            if not partitions:
                continue
            try:
                # One group a request: what the admin API takes.
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
