"""The driver's write path: the batch collected as Arrow and COPYed inside the one transaction that commits its offsets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from offsetstore.core.types import RecordFingerprint, TopicPartition
from offsetstore.sink.batch_write import BatchOutcome, deliver_batch
from offsetstore.spark_integration import _faults
from offsetstore.spark_integration._fingerprints import committed_only
from offsetstore.storage.clusters import write_fingerprints

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from offsetstore.spark_integration.sink import ExactlyOnceSink


def collect_on_driver(sink: ExactlyOnceSink, frame: DataFrame) -> pa.Table | None:
    """The batch as Arrow when the driver writes it; None when the executors do.

    ``"auto"`` collects at most ``executor_threshold + 1`` rows: if that many
    came, the batch is too big for the driver and is left to the executors, so
    the driver never holds more, whatever the batch (a previous batch's size says
    nothing about this one's).
    """
    if sink.write_path == "executors":
        return None
    if sink.write_path == "driver":
        return frame.toArrow()
    head = frame.limit(sink.executor_threshold + 1).toArrow()
    return head if head.num_rows <= sink.executor_threshold else None


def write_from_driver(
    sink: ExactlyOnceSink,
    conn: Connection,
    data: pa.Table,
    batch_id: int,
    *,
    generation: int,
    actor: str,
    metadata: str,
    fingerprints: Mapping[TopicPartition, RecordFingerprint] | None = None,
) -> BatchOutcome:
    """Writes the collected batch and commits its offsets in one transaction (:func:`~offsetstore.sink.batch_write.deliver_batch`).

    The ``fingerprints`` of the offsets it commits are stored in that transaction too.
    """
    with conn.begin():
        outcome = deliver_batch(
            conn,
            sink.target,
            data,
            group_id=sink.group_id,
            generation=generation,
            actor=actor,
            metadata=metadata,
        )
        write_fingerprints(conn, sink.group_id, committed_only(fingerprints, outcome.committed))
        _faults.at("in_transaction", batch_id)
    return outcome
