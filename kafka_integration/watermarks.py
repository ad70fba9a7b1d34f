"""Log watermarks as a Kafka consumer sees them (log start included), reported to the store for lag."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from offsetstore.core.types import Watermark

if TYPE_CHECKING:
    import confluent_kafka

__all__ = ["WatermarkReporter", "consumer_watermarks"]

log = logging.getLogger("offsetstore.kafka_integration")


class _Reports(Protocol):
    def report_watermarks(self, watermarks: Iterable[Watermark]) -> None: ...


def consumer_watermarks(
    consumer: confluent_kafka.Consumer,
    partitions: Iterable[tuple[str, int]] | None = None,
    *,
    timeout: float = 5.0,
) -> list[Watermark]:
    """Each partition's log start and end as the consumer knows them (default: its assignment).

    The watermarks of the consumer's last fetch response are used where it has them
    (no request: the fetch carries log start and end); only the other partitions are
    asked of the broker, one request each. The log end reported is never below the
    consumer's own position: a message it read proves the log reaches past it,
    whatever a broker answers (Tansu, for one, answers the base offset of the last
    record batch + 1).
    """
    from confluent_kafka import TopicPartition as KafkaPartition

    if partitions is None:
        partitions = [(p.topic, p.partition) for p in consumer.assignment()]
    pairs = list(partitions)
    if not pairs:
        return []
    position = {(p.topic, p.partition): p.offset for p in consumer.position([KafkaPartition(t, p) for t, p in pairs])}
    marks = []
    for topic, partition in pairs:
        tp = KafkaPartition(topic, partition)
        low, high = consumer.get_watermark_offsets(tp, cached=True)
        if low < 0 or high < 0:  # no fetch response for this partition yet
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        end = max(high, position.get((topic, partition), -1))
        marks.append(Watermark(topic, partition, min(low, end), end))
    return marks


class WatermarkReporter:
    """Reports the consumer's watermarks to the store at most every ``interval`` seconds.

    ``target`` is an :class:`~offsetstore.client.OffsetStoreClient` (over gRPC; with
    auth on, this needs a grant on each topic) or an :class:`ExactlyOnceWriter` (into
    its database). Call :meth:`maybe_report` from the poll loop; a report is one
    store write, plus one broker request per partition not fetched from yet.
    A failure is logged and retried at the next interval: lag is worth less than the
    consumer's progress.
    """

    def __init__(self, consumer: confluent_kafka.Consumer, target: _Reports, *, interval: float = 10.0) -> None:
        if interval < 0:
            raise ValueError("interval must be >= 0")
        self.consumer = consumer
        self.target = target
        self.interval = interval
        self._last: float | None = None

    def maybe_report(self) -> list[Watermark] | None:
        """Reports now if ``interval`` has passed since the last report; returns what was reported."""
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return None
        self._last = now
        return self.report()

    def report(self) -> list[Watermark] | None:
        """Reports now; None (and a log line) when the broker or the store did not answer."""
        try:
            marks = consumer_watermarks(self.consumer)
            if marks:
                self.target.report_watermarks(marks)
            return marks
        except Exception as error:  # a lag figure must not stop the consumer
            log.warning("could not report watermarks", extra={"error": type(error).__name__})
            return None
