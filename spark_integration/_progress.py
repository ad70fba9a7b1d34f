"""What the driver reads of its running query (the run, the sources' latest and end offsets), and the watermarks it reports."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy
from sqlalchemy import Connection

from offsetstore import storage
from offsetstore.core.errors import OffsetStoreError
from offsetstore.core.types import TopicPartition, Watermark
from offsetstore.sink.batch_write import PartitionStats

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("offsetstore.spark_integration")

# What a watermark says when its reporter did not see the log start (a Spark batch never does).
_UNOBSERVED = -1


def query_run(batch_df: DataFrame) -> tuple[str, str] | None:
    """(query id, run id) of the streaming query running this batch, where Spark tells."""
    try:
        context = batch_df.sparkSession.sparkContext
        query_id = context.getLocalProperty("sql.streaming.queryId")
        # StreamExecution runs each batch's jobs in a job group named after the run id.
        run_id = context.getLocalProperty("spark.jobGroup.id")
    except Exception:  # Spark Connect has no SparkContext; one run per sink object then.
        return None
    return (query_id, run_id or "") if query_id else None


def report_watermarks(
    conn: Connection, group_id: str, stats: Mapping[TopicPartition, PartitionStats], query_id: str | None
) -> None:
    """Reports each partition's log end: the highest of the stored one, the batch's and the query's progress's.

    Best effort, after the commit and in a transaction of its own: the table is
    shared by every group reading the topic, and a lag figure is not worth holding
    its rows' locks through a batch, nor failing a batch over.
    """
    progress_ends = progress_log_ends(query_id) if query_id else {}
    keys = sorted(stats)
    try:
        with conn.begin():
            known = storage.read_watermarks(conn, keys)
            marks = []
            for tp in keys:
                # Never move a log end back that a Kafka client (or a later batch) reported.
                end = max(known.get(tp, (None, 0))[1], stats[tp].max_offset + 1, progress_ends.get(tp, 0))
                # A batch cannot see the log start: the lowest offset it read may be
                # far above it (a query that started mid-topic). Say "not observed".
                marks.append(Watermark(tp.topic, tp.partition, _UNOBSERVED, end))
            storage.report_watermarks(conn, marks)
    except (sqlalchemy.exc.SQLAlchemyError, OffsetStoreError) as error:
        log.warning(
            "could not report watermarks",
            extra={"group_id": group_id, "error": type(getattr(error, "orig", error)).__name__},
        )


def progress_log_ends(query_id: str) -> dict[TopicPartition, int]:
    """Each partition's latest offset in the query's last progress (Kafka's ``latestOffset``)."""
    try:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        query = session.streams.get(query_id) if session is not None else None
        progress = query.lastProgress if query is not None else None
        if not progress:
            return {}
        ends: dict[TopicPartition, int] = {}
        for source in progress["sources"]:
            for tp, offset in kafka_offsets(source.get("latestOffset")).items():
                ends[tp] = max(offset, ends.get(tp, 0))
        return ends
    except Exception:  # progress is a hint; a source that reports none leaves the batch's own ends
        log.debug("no latest offsets in the query's progress", exc_info=True)
        return {}


def kafka_offsets(raw: object) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 42}}`` (Kafka's offset JSON, as text or parsed) as a dict; {} for anything else."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            continue
        for part, offset in parts.items():
            if isinstance(offset, int) and offset >= 0 and str(part).isdigit():
                out[TopicPartition(topic, int(part))] = offset
    return out


@dataclass(frozen=True)
class BatchPositions:
    """What one finished batch says about its Kafka sources."""

    batch_id: int
    #: Each partition's next offset to read (the batch's end offset), over all Kafka sources.
    offsets: dict[TopicPartition, int]
    #: Each partition's latest offset in Kafka as the batch saw it (its log end).
    log_ends: dict[TopicPartition, int]


def _is_kafka(description: object) -> bool:
    # Spark's Kafka sources describe themselves as KafkaV2[Subscribe[...]] (and KafkaSourceV1[...]).
    return isinstance(description, str) and description.startswith("Kafka")


def batch_positions(progress: Mapping[str, Any]) -> BatchPositions:
    """The Kafka end offsets and log ends of a ``StreamingQueryProgress`` (or its JSON, as a dict).

    Sources other than Kafka are left out. A partition read by two Kafka sources of the
    query (a topic joined with itself) gets the lower of their end offsets: the position
    from which a restart re-reads nothing either source has not read.
    """
    offsets: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    for source in progress["sources"]:
        if not _is_kafka(source["description"]):
            continue
        for tp, offset in kafka_offsets(source["endOffset"]).items():
            offsets[tp] = min(offset, offsets.get(tp, offset))
        for tp, offset in kafka_offsets(source.get("latestOffset")).items():
            ends[tp] = max(offset, ends.get(tp, offset))
    return BatchPositions(int(progress["batchId"]), offsets, ends)
