"""The exactly-once writer: polled messages' rows and their offsets in one PostgreSQL transaction."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine

from offsetstore import storage
from offsetstore.core.errors import StaleGenerationError
from offsetstore.core.types import Mode, Watermark
from offsetstore.kafka_integration._messages import default_member_id, kafka_cluster_id, refuse_errors
from offsetstore.kafka_integration.fingerprints import last_fingerprints
from offsetstore.kafka_integration.mirror import ConsumerMirror
from offsetstore.sink.batch_write import BatchOutcome, SinkTarget, deliver_batch
from offsetstore.sink.sql import COORDINATES
from offsetstore.storage.clusters import bind_cluster, write_fingerprints
from offsetstore.storage.engine import create_engine

if TYPE_CHECKING:
    import confluent_kafka
    import pyarrow as pa

__all__ = ["ExactlyOnceWriter", "Mode"]

log = logging.getLogger("offsetstore.kafka_integration")


class ExactlyOnceWriter:
    """Writes each batch of polled messages and their offsets in one transaction of the store's database.

    Parameters
    ----------
    database_url : str or sqlalchemy.Engine
        The offset store's PostgreSQL database (SQLAlchemy or libpq URL); the target
        table lives in it too. An Engine from
        :func:`offsetstore.storage.engine.create_engine` may be given instead.
    group_id : str
        The consumer group whose offsets the writer commits.
    table : str or tuple of (str, str)
        The target table: ``"orders"``, ``"public.orders"`` or ``(schema, table)``.
    mode : {"append", "upsert"}, default "append"
        ``"append"`` inserts every new row (COPY); ``"upsert"`` inserts or, on a
        conflict on ``key_columns``, updates the other written columns.
    key_columns : sequence of str, optional
        The upsert's key; required for, and only for, ``mode="upsert"``.
    columns : sequence of str, optional
        The columns written, by name. Default: every column of the rows plus
        ``topic``, ``partition`` and ``offset``, which come from the messages (the
        rows must not carry them).
    member_id : str, optional
        Recorded when the writer joins the group and as the actor of its commits.
        Default: ``"kafka:<host>:<pid>"``.
    mirror_to_kafka : confluent_kafka.Consumer, optional
        After each transaction it commits, the writer commits the same offsets through this
        consumer, asynchronously, into its Kafka group: a best-effort copy for the tools that
        read ``__consumer_offsets`` (:class:`~offsetstore.kafka_integration.mirror.ConsumerMirror`).
        A write that joins the caller's transaction (``conn=``) is not mirrored by itself:
        call :meth:`mirror` with its outcome after committing.
    consumer : confluent_kafka.Consumer, optional
        The consumer the messages come from. Its cluster id (from metadata) binds the group at
        :meth:`join`: a group bound to another cluster refuses the writer with
        :class:`offsetstore.client.ClusterMismatchError` (move it with ``offsetstore groups
        switch``); a group bound to none (an older one) is bound now. With it, each write also
        stores the fingerprint of the record before each committed offset (its timestamp and a
        digest of key, value and headers), which ``groups switch`` finds on another cluster: one
        more statement in the write's transaction. Without it the writer binds, checks and
        fingerprints nothing.

    Notes
    -----
    Call protocol. :meth:`write` takes the messages of one ``poll``/``consume`` and
    one row per message, derived from it. In one transaction it locks the group
    (checking the generation), drops the messages below their partition's stored
    offset (already delivered), writes the rows of the others, and commits
    ``max(offset) + 1`` per partition (with a ``consumer``, also the fingerprint of the record
    before it: what a switch to another cluster finds) through the storage core the gRPC server and the
    Spark sink use (:func:`offsetstore.sink.batch_write.deliver_batch`). A stored
    sentinel (-2 earliest, -1 latest) skips nothing. A crash anywhere leaves either
    the rows and the offsets or neither; on restart the consumer seeks to the stored
    offsets (:class:`StoredPositions`), so each message lands exactly once.

    Fencing. :meth:`join` (called by the first :meth:`write` if not before) moves the
    group's generation on; every write carries the generation joined. Once another
    writer joined the group, or an operator reset or deleted its offsets, a write
    raises :class:`offsetstore.client.StaleGenerationError` and writes nothing. A
    fenced consumer should stop (or :meth:`join` again and rewind to the stored
    offsets, if taking the group back is what is wanted).

    After any other failed write the consumer's position is past messages that were
    not written: rewind (``StoredPositions.rewind``) or restart before polling on.

    Examples
    --------
    >>> writer = ExactlyOnceWriter(url, "orders-etl", "public.orders", columns=("id", "amount"))
    >>> batch = consumer.consume(500, timeout=1.0)
    >>> writer.write(batch, [json.loads(m.value()) for m in batch])
    """

    def __init__(
        self,
        database_url: str | Engine,
        group_id: str,
        table: str | tuple[str, str],
        *,
        mode: Mode = "append",
        key_columns: Sequence[str] = (),
        columns: Sequence[str] | None = None,
        member_id: str | None = None,
        mirror_to_kafka: confluent_kafka.Consumer | None = None,
        consumer: confluent_kafka.Consumer | None = None,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("group_id must be a non-empty string")
        self.group_id = group_id
        self.member_id = member_id or default_member_id()
        # Built here, so bad options fail now rather than at the first batch.
        self.target = SinkTarget(table, mode, key_columns, columns)
        self._owns_engine = not isinstance(database_url, Engine)
        # One connection is all a consumer loop uses; a second serves reads beside an open write.
        self.engine = create_engine(database_url, pool_size=2) if self._owns_engine else database_url
        self._generation: int | None = None
        self.kafka_mirror = ConsumerMirror(mirror_to_kafka) if mirror_to_kafka is not None else None
        self.consumer = consumer
        self.cluster_id: str | None = None

    def __repr__(self) -> str:
        return f"ExactlyOnceWriter(group_id={self.group_id!r}, generation={self._generation})"

    @property
    def generation(self) -> int | None:
        """The generation joined; None before :meth:`join`."""
        return self._generation

    def join(self) -> int:
        """Joins the group: a new generation that fences every writer of an older one.

        With a ``consumer``, the join also binds the group to the consumer's Kafka cluster, or
        raises :class:`offsetstore.client.ClusterMismatchError` (joining nothing) when the group
        is bound to another. A switch moves the generation on, so checking here covers every write.
        """
        if self.consumer is not None and self.cluster_id is None:
            self.cluster_id = kafka_cluster_id(self.consumer)
        with self.engine.begin() as conn:
            generation = storage.join_group(conn, self.group_id, self.member_id)
            if self.cluster_id is not None:
                bind_cluster(conn, self.group_id, self.cluster_id)
        self._generation = generation
        log.info(
            "joined group",
            extra={
                "group_id": self.group_id,
                "generation": self._generation,
                "member": self.member_id,
                "cluster_id": self.cluster_id,
            },
        )
        return self._generation

    def check_fenced(self) -> None:
        """Raises :class:`~offsetstore.client.StaleGenerationError` if the group moved past this writer's generation.

        A write notices a reset or a newer writer by itself; an idle consumer writes
        nothing, so call this between empty polls to stop as soon as an operator resets
        the group, not at the next record. Nothing to check before :meth:`join`.
        """
        if self._generation is None:
            return
        with self.engine.connect() as conn:
            current = storage.group_generation(conn, self.group_id)
        if current != self._generation:
            raise StaleGenerationError(
                f"generation {self._generation} of group {self.group_id!r} is stale; the current generation is {current}",
                metadata={"group_id": self.group_id, "current_generation": str(current)},
            )

    def write(
        self,
        messages: Sequence[confluent_kafka.Message],
        rows: Sequence[Mapping[str, Any]] | pa.Table,
        *,
        conn: Connection | None = None,
        metadata: str = "",
    ) -> BatchOutcome | None:
        """Writes the rows of ``messages`` and commits their offsets; None when there are no messages.

        Parameters
        ----------
        messages : sequence of confluent_kafka.Message
            What ``consume()`` (or a series of ``poll()``) returned; messages that carry
            an error are refused, filter them first.
        rows : sequence of mappings, or pyarrow.Table
            Row ``i`` derived from message ``i``: as many rows as messages.
        conn : sqlalchemy.Connection, optional
            A connection with a transaction the caller began and will commit: the
            write joins it, so other statements can share its atomicity. Default:
            the writer's own transaction, committed before returning.
        metadata : str, optional
            Stored with each partition's committed offset.

        Raises
        ------
        offsetstore.client.StaleGenerationError
            The writer was fenced; nothing was written.
        ValueError
            Bad input (an errored message, a row count that does not match); nothing
            was written.
        """
        if not messages:
            return None
        table = self.arrow_rows(messages, rows)
        if self._generation is None:
            self.join()
        assert self._generation is not None
        if conn is not None:
            return self._deliver(conn, messages, table, metadata)
        with self.engine.begin() as own:
            outcome = self._deliver(own, messages, table, metadata)
        self.mirror(outcome)  # committed: only now may Kafka see the offsets
        return outcome

    def _deliver(
        self, conn: Connection, messages: Sequence[confluent_kafka.Message], table: pa.Table, metadata: str
    ) -> BatchOutcome:
        assert self._generation is not None
        outcome = deliver_batch(
            conn,
            self.target,
            table,
            metadata=metadata,
            group_id=self.group_id,
            generation=self._generation,
            actor=self.member_id,
        )
        if self.consumer is not None:
            # In the same transaction as the offsets: a fingerprint is never of another offset's record.
            write_fingerprints(conn, self.group_id, last_fingerprints(messages, outcome.committed))
        return outcome

    def mirror(self, outcome: BatchOutcome | None) -> None:
        """Copies the offsets ``outcome`` committed into Kafka, if the writer mirrors (``mirror_to_kafka``)."""
        if self.kafka_mirror is not None and outcome is not None and outcome.committed:
            self.kafka_mirror.commit(outcome.committed)

    def arrow_rows(
        self, messages: Sequence[confluent_kafka.Message], rows: Sequence[Mapping[str, Any]] | pa.Table
    ) -> pa.Table:
        """The rows as an Arrow table with the messages' ``topic``, ``partition`` and ``offset`` added."""
        import pyarrow as pa

        refuse_errors(messages)
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows))
        if data.num_rows != len(messages):
            raise ValueError(f"{data.num_rows} rows for {len(messages)} messages: give one row per message")
        if clash := [c for c in COORDINATES if c in data.column_names]:
            raise ValueError(f"rows must not carry {clash}: they come from the messages")
        coordinates = [
            pa.array([m.topic() for m in messages], pa.string()),
            pa.array([m.partition() for m in messages], pa.int32()),
            pa.array([m.offset() for m in messages], pa.int64()),
        ]
        return pa.Table.from_arrays([*coordinates, *data.columns], names=[*COORDINATES, *data.column_names])

    def report_watermarks(self, watermarks: Iterable[Watermark]) -> None:
        """Stores watermarks (see :func:`consumer_watermarks`) in a transaction of their own."""
        with self.engine.begin() as conn:
            storage.report_watermarks(conn, list(watermarks))

    def close(self) -> None:
        """Releases the database connections (of an engine the writer created)."""
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> ExactlyOnceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
