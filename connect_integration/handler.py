"""The exactly-once change handler: a source transaction's change rows and its position in one PostgreSQL transaction."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from offsetstore import storage
from offsetstore.connect_integration.positions import metadata_of, topic_of
from offsetstore.core.types import OffsetCommit, TopicPartition
from offsetstore.sink.batch_write import BatchOutcome, SinkTarget, deliver_batch

__all__ = ["CHANGE_COLUMNS", "TRANSACTION_SCHEMA", "ChangeWriter", "Delivery", "change_table_sql"]

log = logging.getLogger("offsetstore.connect_integration")

#: The value schema of Debezium's transaction metadata events (BEGIN, END).
TRANSACTION_SCHEMA = "io.debezium.connector.common.TransactionMetadataValue"

#: The columns a change row has, after the coordinates ``topic``, ``partition``, ``offset``.
CHANGE_COLUMNS = ("lsn", "tx_id", "op", "source_table", "key", "before", "after", "ts_ms")


def change_table_sql(table: str) -> str:
    """A ``CREATE TABLE`` for change rows as :class:`ChangeWriter` writes them (``table`` as given, unquoted)."""
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ("
        'topic text NOT NULL, "partition" integer NOT NULL, "offset" bigint NOT NULL, '
        "lsn bigint NOT NULL, tx_id bigint, op text NOT NULL, source_table text, "
        'key text, "before" text, "after" text, ts_ms bigint)'
    )


@dataclass
class Delivery:
    """What one handled batch of engine events wrote (None fields: nothing of that kind)."""

    transactions: int = 0
    outcome: BatchOutcome | None = None
    #: The next offset committed per source partition (commit LSN + 1 of its last transaction).
    committed: dict[TopicPartition, int] = field(default_factory=dict)


def _py(value: Any) -> Any:
    """A Java value of a source partition or offset map as a Python one."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    name = type(value).__name__
    if name in ("java.lang.Long", "java.lang.Integer", "java.lang.Short", "java.lang.Byte"):
        return int(value)
    if name == "java.lang.Boolean":
        return bool(value)
    if name in ("java.lang.Double", "java.lang.Float"):
        return float(value)
    return str(value)


def java_map(m: Any) -> dict[str, Any]:
    """A ``java.util.Map`` of a SourceRecord (partition, offset) as a dict."""
    if m is None:
        return {}
    return {str(k): _py(m.get(k)) for k in m.keySet()}


class ChangeWriter:
    """Writes Debezium's change events and their positions exactly once, one source transaction at a time.

    The engine must emit transaction metadata (``provide.transaction.metadata=true``) in JSON
    (``format="json"``, schemas off): a transaction's rows are held until its END event and
    then written, with its position, in one PostgreSQL transaction through the sinks' rule
    (:func:`offsetstore.sink.batch_write.deliver_batch`): every row's ``offset`` is its
    transaction's commit LSN, rows below the stored offset are skipped as delivered, and the
    stored offset becomes the commit LSN + 1, its metadata the engine's map at the END event.
    A transaction whose END has not arrived is never written: after a crash the engine resumes
    before it and sends it again whole. Writes carry ``generation``; a writer fenced by a newer
    one or by a reset raises :class:`~offsetstore.client.StaleGenerationError` and writes nothing.
    """

    def __init__(
        self, engine: Engine, group_id: str, table: str | tuple[str, str], *, generation: int, actor: str
    ) -> None:
        self.engine = engine
        self.group_id = group_id
        self.generation = generation
        self.actor = actor
        self.target = SinkTarget(table, "append", (), None)
        #: Rows of the transaction under way (no END yet), held across batches.
        self._open: list[dict[str, Any]] = []

    def handle(self, events: Sequence[Any]) -> Delivery:
        """Writes every transaction of ``events`` that ends in them; keeps the rows of one that does not."""
        ready: list[dict[str, Any]] = []
        positions: dict[str, tuple[dict[str, Any], dict[str, Any], int]] = {}
        transactions = 0
        for event in events:
            record = event.sourceRecord()
            schema = record.valueSchema()
            value = event.value()
            if schema is not None and str(schema.name()) == TRANSACTION_SCHEMA:
                if value is None or json.loads(str(value)).get("status") != "END":
                    continue
                if not self._open:
                    # No captured change (other tables' transactions, this writer's own when the
                    # source is the store's database): no position to move, and no write to feed back.
                    continue
                partition = java_map(record.sourcePartition())
                offset = java_map(record.sourceOffset())
                commit_lsn = int(offset["lsn_commit"])
                for row in self._open:
                    row["offset"] = commit_lsn
                ready.extend(self._open)
                self._open = []
                positions[topic_of(partition)] = (partition, offset, commit_lsn + 1)
                transactions += 1
                continue
            if value is None or schema is None or not str(schema.name()).endswith(".Envelope"):
                # A tombstone (the delete before it is the change), a heartbeat, a logical
                # decoding message: no row of a captured table.
                continue
            key = event.key()
            self._open.append(self._row(record, str(value), None if key is None else str(key)))
        if not positions:
            return Delivery()
        return self._write(ready, positions, transactions)

    def _row(self, record: Any, value: str, key: str | None) -> dict[str, Any]:
        change = json.loads(value)
        offset = java_map(record.sourceOffset())
        source = change.get("source") or {}
        table = ".".join(str(source[k]) for k in ("schema", "table") if source.get(k)) or str(record.topic())
        return {
            "topic": topic_of(java_map(record.sourcePartition())),
            "partition": 0,
            "offset": -1,  # the commit LSN, known at the transaction's END
            "lsn": int(offset.get("lsn", source.get("lsn") or 0)),
            "tx_id": offset.get("txId", source.get("txId")),
            "op": change.get("op"),
            "source_table": table,
            "key": key,  # JSON, as the engine's key converter wrote it
            "before": None if change.get("before") is None else json.dumps(change["before"]),
            "after": None if change.get("after") is None else json.dumps(change["after"]),
            "ts_ms": change.get("ts_ms"),
        }

    def _write(
        self,
        rows: list[dict[str, Any]],
        positions: Mapping[str, tuple[dict[str, Any], dict[str, Any], int]],
        transactions: int,
    ) -> Delivery:
        import pyarrow as pa

        # One source partition per engine in practice (PostgreSQL's); each keeps its own metadata.
        delivery = Delivery(transactions=transactions)
        with self.engine.begin() as conn:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_topic.setdefault(row["topic"], []).append(row)
            for topic, (partition, offset, next_offset) in sorted(positions.items()):
                metadata = metadata_of(partition, offset, next_offset)
                mine = by_topic.get(topic, [])
                if mine:
                    table = pa.Table.from_pylist(mine, schema=_schema())
                    outcome = deliver_batch(
                        conn,
                        self.target,
                        table,
                        group_id=self.group_id,
                        generation=self.generation,
                        actor=self.actor,
                        metadata=metadata,
                    )
                    delivery.outcome = outcome
                    delivery.committed.update(outcome.committed)
                else:
                    # A position without rows of its own (they were in another source partition's).
                    stored = storage.lock_offsets(conn, self.group_id, generation=self.generation)
                    have = stored.get(TopicPartition(topic, 0))
                    if have is None or have < 0 or next_offset > have:
                        storage.commit_offsets(
                            conn,
                            self.group_id,
                            [OffsetCommit(topic, 0, next_offset, metadata)],
                            generation=self.generation,
                            actor=self.actor,
                        )
                        delivery.committed[TopicPartition(topic, 0)] = next_offset
        return delivery


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("lsn", pa.int64()),
            ("tx_id", pa.int64()),
            ("op", pa.string()),
            ("source_table", pa.string()),
            ("key", pa.string()),
            ("before", pa.string()),
            ("after", pa.string()),
            ("ts_ms", pa.int64()),
        ]
    )
