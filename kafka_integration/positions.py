"""Where a consumer starts reading: the stored offsets, applied on assignment instead of Kafka's commits."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import EARLIEST, TopicPartition

if TYPE_CHECKING:
    import confluent_kafka
    from sqlalchemy import Engine

__all__ = ["StoredPositions", "consumer_config"]

log = logging.getLogger("offsetstore.kafka_integration")

# librdkafka's logical offsets (confluent_kafka.OFFSET_BEGINNING / OFFSET_END); the same
# numbers as the store's sentinels, named here so the mapping below reads as one.
_OFFSET_BEGINNING = -2
_OFFSET_END = -1

_RESETS = {
    "earliest": _OFFSET_BEGINNING,
    "smallest": _OFFSET_BEGINNING,
    "beginning": _OFFSET_BEGINNING,
    "latest": _OFFSET_END,
    "largest": _OFFSET_END,
    "end": _OFFSET_END,
}

_OFF = ("enable.auto.commit", "enable.auto.offset.store")


def consumer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a confluent-kafka consumer ``config`` with Kafka's own offset commits off.

    Raises ValueError if ``config`` turns either of ``enable.auto.commit`` or
    ``enable.auto.offset.store`` on: positions live in the store, and a second set of
    commits in Kafka would only mislead whoever reads them.
    """
    for key in _OFF:
        if str(config.get(key, "false")).lower() not in ("false", "0"):
            raise ValueError(f"{key} must be off: the offset store, not Kafka, keeps the positions")
    return {**config, **dict.fromkeys(_OFF, False)}


def _reset_offset(auto_offset_reset: str) -> int | None:
    if auto_offset_reset == "error":
        return None
    try:
        return _RESETS[auto_offset_reset]
    except KeyError:
        raise ValueError(
            f"auto_offset_reset must be one of {sorted([*_RESETS, 'error'])}, not {auto_offset_reset!r}"
        ) from None


class StoredPositions:
    """Seeks assigned partitions to the group's stored offsets: a rebalance helper and an ``assign()``.

    Parameters
    ----------
    store : OffsetStoreClient or sqlalchemy.Engine
        Where the offsets are read: the gRPC service, or the store's database directly
        (what an exactly-once consumer already connects to, e.g.
        ``ExactlyOnceWriter.engine``).
    group_id : str
        The offset store's consumer group.
    auto_offset_reset : {"earliest", "latest", "error"}, default "latest"
        Where a partition with no stored offset starts. Give the consumer's own
        ``auto.offset.reset`` (librdkafka's aliases ``smallest``/``beginning`` and
        ``largest``/``end`` are accepted too). ``"error"`` raises LookupError.
    cooperative : bool, default False
        True when the consumer's ``partition.assignment.strategy`` is
        ``cooperative-sticky`` or its ``group.protocol`` is ``consumer`` (KIP-848):
        assignments are then incremental, and an eager ``assign()`` is refused.

    Notes
    -----
    Mapping of a stored offset to the position the consumer seeks to:

    ===================  ===========================================
    stored               position
    ===================  ===========================================
    ``n >= 0``           ``n`` (the next offset to read)
    ``-2`` (earliest)    the beginning of the log (``OFFSET_BEGINNING``)
    ``-1`` (latest)      the end of the log (``OFFSET_END``)
    none                 ``auto_offset_reset``
    ===================  ===========================================

    Kafka's committed offsets are never read: a partition with no stored offset goes
    to ``auto_offset_reset`` even where Kafka has a commit for the group. Build the
    consumer with :func:`consumer_config` so that none are written either.

    Use ``on_assign`` / ``on_revoke`` with ``Consumer.subscribe``, or :meth:`assign`
    for a consumer that picks its partitions itself. :meth:`rewind` seeks the current
    assignment back to the stored offsets, which is what a consumer does after a
    write failed and it means to carry on instead of restarting.

    The helper runs inside ``poll()``/``consume()`` (where confluent-kafka calls the
    callbacks); an error reading the store propagates out of that call.

    Examples
    --------
    >>> positions = StoredPositions(client, "orders-etl", auto_offset_reset="earliest")
    >>> consumer.subscribe(["orders"], on_assign=positions.on_assign, on_revoke=positions.on_revoke)
    """

    def __init__(
        self,
        store: OffsetStoreClient | Engine,
        group_id: str,
        *,
        auto_offset_reset: str = "latest",
        cooperative: bool = False,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("group_id must be a non-empty string")
        self._reset = _reset_offset(auto_offset_reset)
        self.store = store
        self.group_id = group_id
        self.cooperative = cooperative
        #: The stored offset of each partition as last read (None: none stored).
        self.stored: dict[TopicPartition, int | None] = {}

    def fetch(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int | None]:
        """The stored offset of each partition (sentinels included), None where none is stored."""
        wanted = [TopicPartition(t, p) for t, p in partitions]
        if not wanted:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in wanted:
            topics.setdefault(tp.topic, []).append(tp.partition)
        if isinstance(self.store, OffsetStoreClient):
            result = self.store.fetch_offsets(self.group_id, topics)
        else:
            from offsetstore import storage

            with self.store.connect() as conn:
                result = storage.fetch_offsets(conn, self.group_id, topics)
        out: dict[TopicPartition, int | None] = {}
        for tp in wanted:
            found = result.offsets.get(tp)
            # FetchOffsets answers a named partition with no offset as -1, like the LATEST
            # sentinel; only a stored one has a commit time.
            out[tp] = found.offset if found is not None and found.commit_time is not None else None
        return out

    def positions(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """The librdkafka offset each partition starts at (see the table in the class notes)."""
        stored = self.fetch(partitions)
        out = {}
        for tp, offset in stored.items():
            if offset is not None:
                # n >= 0, and the sentinels -2 / -1, which are librdkafka's logical offsets too.
                out[tp] = offset if offset >= 0 else (_OFFSET_BEGINNING if offset == EARLIEST else _OFFSET_END)
            elif self._reset is None:
                raise LookupError(f"no stored offset for {tp.topic}[{tp.partition}] and auto_offset_reset='error'")
            else:
                out[tp] = self._reset
        self.stored.update(stored)
        return out

    def assign(self, consumer: confluent_kafka.Consumer, partitions: Iterable[tuple[str, int]]) -> None:
        """Assigns ``partitions`` (pairs or confluent-kafka TopicPartitions) at their stored positions."""
        consumer.assign(self._placed(partitions))

    def on_assign(self, consumer: confluent_kafka.Consumer, partitions: list[Any]) -> None:
        """``subscribe(on_assign=...)``: starts every newly assigned partition at its stored position."""
        placed = self._placed(partitions)
        log.info(
            "assigned at stored positions",
            extra={"group_id": self.group_id, "partitions": [(p.topic, p.partition, p.offset) for p in placed]},
        )
        if self.cooperative:
            consumer.incremental_assign(placed)
        else:
            consumer.assign(placed)

    def on_revoke(self, consumer: confluent_kafka.Consumer, partitions: list[Any]) -> None:
        """``subscribe(on_revoke=...)``: gives the partitions up; nothing is committed to Kafka.

        The writers commit with every batch, and confluent-kafka calls this from inside
        ``poll()``, after the application handled what the previous poll returned.
        """
        if self.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def rewind(self, consumer: confluent_kafka.Consumer) -> None:
        """Seeks every assigned partition back to its stored position (after a failed write)."""
        from confluent_kafka import TopicPartition as KafkaPartition

        for tp, offset in self.positions((p.topic, p.partition) for p in consumer.assignment()).items():
            consumer.seek(KafkaPartition(tp.topic, tp.partition, offset))

    def _placed(self, partitions: Iterable[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition as KafkaPartition

        pairs = [(p.topic, p.partition) if hasattr(p, "topic") else (p[0], p[1]) for p in partitions]
        offsets = self.positions(pairs)
        return [KafkaPartition(t, p, offsets[TopicPartition(t, p)]) for t, p in pairs]
