"""Server-side watermarks: the supervisor reads log starts and ends from Kafka for the groups it is told to watch.

A consumer that dies stops reporting watermarks, and one on the SQL API never reports any:
its lag freezes, or is unknown. With ``--watermarks-kafka-bootstrap`` and
``--watermarks-kafka-groups PREFIX,..``, the supervising process (once, not each serving
process) reads, every ``--watermarks-kafka-interval``, the log start and the last stable
offset (``isolation.level=read_committed``: a transaction's commit marker is no phantom lag
of 1, and an open transaction's records are not lag yet) of the partitions stored by live
groups of those prefixes, at most ``--watermarks-kafka-max-partitions`` a round, shared
between the groups (each group round-robin over its own partitions: one tenant's huge group
takes its share, never another group's), of the topics the topic policy allows (the topics
the group's principals may report, or ``--watermarks-kafka-topics``: :mod:`.kafka_topics`),
and stores them through the very path
of reported watermarks (:func:`~offsetstore.storage.report_watermarks`: samples, lag, lag in
seconds, the verdict). The time of an observation is the database's, taken just before Kafka
is asked: a log end read at that time is at least the log end then, so the verdict may compare
a commit older than it with it. The newer observation wins over a consumer's report.

Faults never reach a commit: the reader runs in the supervisor on a connection pool of its
own, and Kafka's answers are waited for there only. A broker that is down, a topic Kafka does
not have (skipped for a minute, never asked with the others), a partition count that shrank:
the partition keeps its last known watermark (its age shows in
DescribeGroup's ``watermark_time`` and turns the verdict UNCONFIRMED where it matters), the
failure is counted (``offsetstore_kafka_watermarks_failures_total{reason}``) and logged at
most once a minute per reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from offsetstore.core.types import TopicPartition, Watermark
from offsetstore.runtime.store import Store
from offsetstore.server._kafka_rounds import KafkaRounds
from offsetstore.server.kafka_topics import TopicPolicy
from offsetstore.storage import report_watermarks
from offsetstore.storage.watched import watched_groups, watched_partitions_of
from offsetstore.storage.watermarks import database_time

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = ["KafkaWatermarks", "TopicPolicy", "read_client_config"]

log = logging.getLogger(__name__)

#: Seconds one request waits for Kafka's answer.
REQUEST_SECONDS = 10.0
#: Seconds a topic Kafka does not have is skipped (at least 10 rounds).
UNKNOWN_TOPIC_SECONDS = 60.0
#: Groups whose place in their partitions the reader remembers at most.
MAX_CURSORS = 100_000


def read_client_config(path: Path | None) -> dict[str, str]:
    """librdkafka settings from a properties file (``key=value`` lines, ``#`` comments), as Kafka's ``--command-config``.

    Where the security settings go: ``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
    ``sasl.password``, ``ssl.ca.location``, ...
    """
    if path is None:
        return {}
    text = path.read_text()
    mode = path.stat().st_mode
    if mode & 0o077:
        # It may hold sasl.password or a key's password: the server's alone, as the tokens file is.
        log.warning(
            "the Kafka client config %s can be read by its group or by everyone (mode %03o); chmod 600 it",
            path,
            mode & 0o777,
        )
    config: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: expected key=value")
        config[key.strip()] = value.strip()
    return config


class KafkaWatermarks(KafkaRounds):
    """Reads watched partitions' watermarks from Kafka into the store, from a thread of its own."""

    thread_name = "offsetstore-kafka-watermarks"
    label = "kafka watermarks"

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
        topics: TopicPolicy | None = None,
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
        super().__init__(admin)
        self._own_admin = admin is None
        self.topics = topics if topics is not None else TopicPolicy()
        self._group_after: str | None = None
        self._cursors: dict[str, TopicPartition] = {}  # group -> the last partition read of it
        self._unknown: dict[str, float] = {}  # topic Kafka lacks -> until when it is skipped (time.monotonic())
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
            "Failures of the server's Kafka watermark reader: a round Kafka did not answer (broker), a topic it does "
            "not have (topic: skipped for a while), a partition it refused (partition: shrunk partition count), "
            "a round the store refused (store).",
            labelnames=("reason",),
            registry=registry,
        )
        registry.register(_Age(self))

    def start(self) -> KafkaWatermarks:
        self.start_rounds()
        log.info(
            "kafka watermarks reader started",
            extra={"prefixes": ",".join(self.prefixes), "interval": self.interval, "max": self.max_partitions},
        )
        return self

    def round(self) -> int:
        """One round: each watched group's next partitions (fair per group), their watermarks from Kafka, into the store.

        Returns how many watermarks it stored.
        """
        wanted = self._next_partitions()
        if not wanted:
            return 0
        partitions = self._known(wanted)
        if not partitions:
            return 0
        at = self.store.run(database_time)
        found = self._ask(partitions)
        if found:
            self.store.run(report_watermarks, found, at=at)
            self.read.inc(len(found))
            self._last_success = time.monotonic()
        return len(found)

    def _next_partitions(self) -> list[TopicPartition]:
        """This round's partitions: ``max_partitions`` shared between the watched groups, those the topic policy allows.

        Each group has a cursor of its own: a group of 20,000 partitions takes its share a
        round, as a group of two takes its two (before, one round-robin over every partition
        let a big group hold the rounds). Beyond ``max_partitions`` groups, the groups rotate.
        """
        group_ids = self.store.run(watched_groups, self.prefixes, self._group_after, self.max_partitions)
        self._group_after = group_ids[-1] if len(group_ids) == self.max_partitions else None
        if not group_ids:
            return []
        share = max(1, self.max_partitions // len(group_ids))
        cursors = {g: self._cursors[g] for g in group_ids if g in self._cursors}
        pages = self.store.run(watched_partitions_of, group_ids, cursors, share)
        if len(self._cursors) > MAX_CURSORS:  # groups gone since: start them over rather than keep them all
            self._cursors.clear()
        wanted: set[TopicPartition] = set()
        for group_id, page in pages.items():
            if len(page) == share:
                self._cursors[group_id] = page[-1]
            else:  # the group's end: it starts over next round
                self._cursors.pop(group_id, None)
            wanted.update(tp for tp in page if self.topics.allows(group_id, tp.topic))
        return sorted(wanted)

    def _known(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        """``partitions`` of topics Kafka has, and within their partition counts; a topic it lacks is skipped for a while.

        A missing topic is the tenant's (a typo, a topic deleted, a group that names anything):
        counted as ``topic`` and remembered for :data:`UNKNOWN_TOPIC_SECONDS`, never a broker
        failure, and never in the request that asks Kafka for the others.
        """
        now = time.monotonic()
        self._unknown = {t: until for t, until in self._unknown.items() if until > now}
        asked = [tp for tp in partitions if tp.topic not in self._unknown]
        if not asked:
            return []
        assert self._admin is not None, "start() first"
        try:
            # Every topic's metadata: asking for one by name may create it where auto-creation is on.
            metadata = self._admin.list_topics(timeout=self.request_seconds)
        except Exception as error:
            self._failed("broker", error)
            return []
        counts = {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}
        missing = sorted({tp.topic for tp in asked if tp.topic not in counts})
        if missing:
            remembered = max(UNKNOWN_TOPIC_SECONDS, 10 * self.interval)
            self._unknown.update((t, now + remembered) for t in missing)
            self.failures.labels("topic").inc(len(missing))
            self._warn(
                "topic",
                f"kafka has no topic {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                f"({len(missing)} in all): skipped for {remembered:g} s, their last known watermarks stay",
            )
        beyond = [tp for tp in asked if tp.topic in counts and tp.partition >= counts[tp.topic]]
        if beyond:
            self.failures.labels("partition").inc(len(beyond))
            self._warn(
                "partition",
                f"kafka knows no such partition (partition count shrunk?) for {len(beyond)}: "
                f"{', '.join(f'{tp.topic}:{tp.partition}' for tp in beyond[:5])}; their last known watermarks stay",
            )
        return [tp for tp in asked if tp.topic in counts and tp.partition < counts[tp.topic]]

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
                self._renew_client()
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
            # The last stable offset, so that a transaction's commit marker is no lag and an open
            # transaction's records (from its first offset, which may be the log start) are no lag yet.
            end = stable
            found.append(Watermark(tp.topic, tp.partition, min(start, end), end))
        return found

    def _renew_client(self) -> None:
        # After a broker restart, librdkafka's admin client keeps asking with the partitions' old
        # leader epochs and Apache Kafka answers FENCED_LEADER_EPOCH for good: a fresh client next round.
        if self._own_admin:
            self._admin = None
            self.start_client()

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
