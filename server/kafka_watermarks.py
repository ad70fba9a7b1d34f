"""Server-side watermarks: the supervisor reads log starts and ends from Kafka for the groups it is told to watch.

A consumer that dies stops reporting watermarks, and one on the SQL API never reports any:
its lag freezes, or is unknown. With ``--watermarks-kafka-bootstrap`` and
``--watermarks-kafka-groups PREFIX,..``, the supervising process (once, not each serving
process) reads, every ``--watermarks-kafka-interval``, the log start and the last stable
offset (``isolation.level=read_committed``: a transaction's commit marker is no phantom lag
of 1, and an open transaction's records are not lag yet) of every partition stored by a live
group of those prefixes, at most ``--watermarks-kafka-max-partitions`` a round (round-robin
beyond: the next round starts where this one stopped), and stores them through the very path
of reported watermarks (:func:`~offsetstore.storage.report_watermarks`: samples, lag, lag in
seconds, the verdict). The time of an observation is the database's, taken just before Kafka
is asked: a log end read at that time is at least the log end then, so the verdict may compare
a commit older than it with it. The newer observation wins over a consumer's report.

Faults never reach a commit: the reader runs in the supervisor on a connection pool of its
own, and Kafka's answers are waited for there only. A broker that is down, a topic deleted, a
partition count that shrank: the partition keeps its last known watermark (its age shows in
DescribeGroup's ``watermark_time`` and turns the verdict UNCONFIRMED where it matters), the
failure is counted (``offsetstore_kafka_watermarks_failures_total{reason}``) and logged at
most once a minute per reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from offsetstore.core.types import TopicPartition, Watermark
from offsetstore.runtime.store import Store
from offsetstore.storage import report_watermarks
from offsetstore.storage.watched import watched_partitions
from offsetstore.storage.watermarks import database_time

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = ["KafkaWatermarks", "read_client_config"]

log = logging.getLogger(__name__)

#: Seconds one request waits for Kafka's answer.
REQUEST_SECONDS = 10.0
#: Seconds between two warnings of the same reason.
WARN_EVERY = 60.0


def read_client_config(path: Path | None) -> dict[str, str]:
    """librdkafka settings from a properties file (``key=value`` lines, ``#`` comments), as Kafka's ``--command-config``.

    Where the security settings go: ``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
    ``sasl.password``, ``ssl.ca.location``, ...
    """
    if path is None:
        return {}
    config: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: expected key=value")
        config[key.strip()] = value.strip()
    return config


class KafkaWatermarks:
    """Reads watched partitions' watermarks from Kafka into the store, from a thread of its own."""

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
            raise ValueError("server-side watermarks need at least one group prefix (--watermarks-kafka-groups)")
        if interval <= 0 or max_partitions < 1:
            raise ValueError("the watermarks interval must be above 0 and the partitions per round at least 1")
        self.store = store
        self.prefixes = tuple(prefixes)
        self.interval = interval
        self.max_partitions = max_partitions
        self.request_seconds = request_seconds
        self._settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(request_seconds * 1000),
            "log_level": 2,  # the reader logs its failures itself, once a minute
        }
        self._settings.update(config or {})
        self._admin = admin
        self._after: TopicPartition | None = None
        self._warned: dict[str, float] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_success: float | None = None
        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry
        self.read = Counter(
            "offsetstore_kafka_watermarks_read",
            "Partition watermarks the server read from Kafka and stored.",
            registry=registry,
        )
        self.failures = Counter(
            "offsetstore_kafka_watermarks_failures",
            "Failures of the server's Kafka watermark reader: a round Kafka did not answer (broker), a partition it "
            "refused (partition: deleted topic, shrunk partition count), a round the store refused (store).",
            labelnames=("reason",),
            registry=registry,
        )
        registry.register(_Age(self))

    def start_client(self) -> KafkaWatermarks:
        """Makes the Kafka client (no thread: :meth:`round` runs when called)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._settings)
        return self

    def start(self) -> KafkaWatermarks:
        self.start_client()
        self._thread = threading.Thread(target=self._loop, name="offsetstore-kafka-watermarks", daemon=True)
        self._thread.start()
        log.info(
            "kafka watermarks reader started",
            extra={"prefixes": ",".join(self.prefixes), "interval": self.interval, "max": self.max_partitions},
        )
        return self

    def stop(self, wait: float = 2.0) -> None:
        """Stops the rounds; waits ``wait`` seconds at most (a round waiting for a broker that is down is
        abandoned: its thread is a daemon, and a watermark it did not store is read again next time)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(wait)
            self._thread = None

    def _loop(self) -> None:
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                self.round()
            except Exception as error:  # the store is down: the next round tries again
                self._failed("store", error)
            self._stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def round(self) -> int:
        """One round: the next partitions (round-robin), their watermarks from Kafka, into the store; how many stored."""
        partitions = self.store.run(watched_partitions, self.prefixes, self._after, self.max_partitions)
        # A short page is the end of the list: the next round starts from the beginning.
        self._after = partitions[-1] if len(partitions) == self.max_partitions else None
        if not partitions:
            return 0
        at = self.store.run(database_time)
        found = self._ask(partitions)
        if found:
            self.store.run(report_watermarks, found, at=at)
            self.read.inc(len(found))
            self._last_success = time.monotonic()
        return len(found)

    def _ask(self, partitions: Sequence[TopicPartition]) -> list[Watermark]:
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as KafkaPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # exported, not declared so

        assert self._admin is not None, "start() first"
        answers: dict[str, dict[TopicPartition, int]] = {}
        asked = (
            # confluent-kafka leaves OffsetSpec unannotated.
            ("start", OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED),  # type: ignore[no-untyped-call]
            ("stable", OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),  # type: ignore[no-untyped-call]
            ("high", OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),  # type: ignore[no-untyped-call]
        )
        for name, spec, isolation in asked:
            try:
                futures = self._admin.list_offsets(
                    {KafkaPartition(tp.topic, tp.partition): spec for tp in partitions},
                    isolation_level=isolation,
                    request_timeout=self.request_seconds,
                )
            except Exception as error:
                self._failed("broker", error)
                return []
            got: dict[TopicPartition, int] = {}
            refused: list[str] = []
            unanswered: list[BaseException] = []
            for kp, future in futures.items():
                try:
                    got[TopicPartition(kp.topic, kp.partition)] = future.result(timeout=self.request_seconds + 5).offset
                except Exception as error:
                    if _partition_unknown(error):
                        refused.append(f"{kp.topic}:{kp.partition}")
                    else:
                        unanswered.append(error)
            if unanswered:
                self.failures.labels("broker").inc()
                self._warn("broker", f"kafka did not answer for {len(unanswered)} partitions: {unanswered[0]}")
                if not got:
                    return []
            if refused and name == "start":
                self.failures.labels("partition").inc(len(refused))
                self._warn(
                    "partition",
                    f"kafka knows no such partition (topic deleted, partition count shrunk?) for {len(refused)}: "
                    f"{', '.join(refused[:5])}; their last known watermarks stay",
                )
            answers[name] = got
        found = []
        for tp in sorted(answers["start"].keys() & answers["stable"].keys() & answers["high"].keys()):
            start, stable, high = answers["start"][tp], answers["stable"][tp], answers["high"][tp]
            if min(start, stable, high) < 0:
                continue
            # The last stable offset, so that a transaction's commit marker is no lag. Tansu answers
            # 0 for it while a transaction is open (Kafka: the open transaction's first offset): a
            # stable offset at the log start below the high watermark reads as the high watermark
            # (an open transaction's records count as lag meanwhile, never as an anomaly).
            end = stable if stable > start or stable == high else high
            found.append(Watermark(tp.topic, tp.partition, min(start, end), end))
        return found

    def _failed(self, reason: str, error: BaseException) -> None:
        self.failures.labels(reason).inc()
        self._warn(reason, str(error))

    def _warn(self, reason: str, message: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(reason, -WARN_EVERY) >= WARN_EVERY:
            self._warned[reason] = now
            log.warning("kafka watermarks: %s", message, extra={"reason": reason})

    def seconds_since_success(self) -> float | None:
        """Seconds since the last round that stored watermarks; None before the first."""
        return None if self._last_success is None else time.monotonic() - self._last_success


def _partition_unknown(error: BaseException) -> bool:
    """Kafka's answer that the partition does not exist (a deleted topic, a partition count that shrank)."""
    from confluent_kafka import KafkaError, KafkaException

    if not isinstance(error, KafkaException) or not error.args or not isinstance(error.args[0], KafkaError):
        return False
    code = error.args[0].code()
    return code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)


class _Age(Collector):
    """``offsetstore_kafka_watermarks_age_seconds``: how old the newest watermarks read from Kafka are."""

    def __init__(self, reader: KafkaWatermarks) -> None:
        self.reader = reader

    def describe(self) -> list[Any]:
        return list(self.collect())

    def collect(self) -> list[Any]:
        family = GaugeMetricFamily(
            "offsetstore_kafka_watermarks_age_seconds",
            "Seconds since the server last stored watermarks read from Kafka (absent before the first round): "
            "growing while the broker is down, the last known watermarks aging with it.",
        )
        age = self.reader.seconds_since_success()
        if age is not None:
            family.add_metric([], age)
        return [family]
