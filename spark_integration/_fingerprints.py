"""The fingerprint of the record before each offset a batch commits, from the batch's own rows (issue 58).

Only rows that still are Kafka's records can be fingerprinted: the batch must carry the Kafka
source's ``key`` and ``value`` (binary) and ``timestamp`` columns as Spark's source gives them,
and its ``headers`` (``includeHeaders``) where the records have any; a batch without them gets
no fingerprint. Per partition only the row at the batch's highest offset counts: the committed
offset is that offset + 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from offsetstore.core.types import RecordFingerprint, TopicPartition
from offsetstore.sink.fingerprints import digest

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

#: The columns a batch needs to be fingerprinted; ``headers`` is taken too where the batch has it.
NEEDED = ("key", "value", "timestamp")
HEADERS = "headers"


def columns_of(names: Sequence[str]) -> list[str]:
    """The fingerprint's columns among ``names``; empty when the batch lacks one it needs."""
    if any(c not in names for c in NEEDED):
        return []
    return [*NEEDED, HEADERS] if HEADERS in names else list(NEEDED)


def from_arrow(data: pa.Table) -> dict[TopicPartition, RecordFingerprint] | None:
    """Per partition, the fingerprint of the row at the highest offset; None when ``data`` cannot be fingerprinted."""
    import pyarrow.compute as pc

    columns = columns_of(data.column_names)
    if not columns or not _kafka_types(data.schema.field(c).type for c in NEEDED):
        return None
    if data.num_rows == 0:
        return {}
    # Only the rows at some partition's highest offset reach Python (at most N per partition), then each
    # partition's own: no join, no sort of the batch.
    last = data.select(["topic", "partition", "offset"]).group_by(["topic", "partition"], use_threads=False)
    highest = last.aggregate([("offset", "max")])
    wanted = {(t, p): o for t, p, o in zip(*(highest[c].to_pylist() for c in highest.column_names), strict=True)}
    at = pc.indices_nonzero(pc.is_in(data["offset"], value_set=highest["offset_max"].combine_chunks()))
    rows = data.select(["topic", "partition", "offset", *columns]).take(at)
    millis = _millis(rows["timestamp"])
    kept = [
        (row, ms)
        for row, ms in zip(rows.drop_columns(["timestamp"]).to_pylist(), millis, strict=True)
        if wanted[(row["topic"], row["partition"])] == row["offset"]
    ]
    return _fingerprints([row for row, _ in kept], [ms for _, ms in kept])


def from_spark(batch_df: DataFrame) -> dict[TopicPartition, RecordFingerprint] | None:
    """The same by a Spark aggregation (``max_by`` per partition): N rows reach the driver, one more job runs."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, TimestampType

    columns = columns_of(batch_df.columns)
    types = {f.name: f.dataType for f in batch_df.schema.fields}
    if not columns or not (
        isinstance(types["key"], BinaryType)
        and isinstance(types["value"], BinaryType)
        and isinstance(types["timestamp"], TimestampType)
    ):
        return None
    fields = [F.col("offset"), *(F.col(c) for c in columns if c != "timestamp")]
    fields.append(F.unix_millis(F.col("timestamp")).alias("millis"))
    last = (
        batch_df.groupBy("topic", "partition")
        .agg(F.max_by(F.struct(*fields), F.col("offset")).alias("r"))
        .select("topic", "partition", "r.*")
        .toArrow()
    )
    return _fingerprints(last.drop_columns(["millis"]).to_pylist(), last["millis"].to_pylist())


def committed_only(
    found: Mapping[TopicPartition, RecordFingerprint] | None, committed: Mapping[TopicPartition, int]
) -> dict[TopicPartition, RecordFingerprint]:
    """The fingerprints of the offsets the batch committed (a replayed partition's stored offset stays, with its own)."""
    if not found:
        return {}
    return {tp: fp for tp, fp in found.items() if committed.get(tp) == fp.offset}


def _kafka_types(types: Any) -> bool:
    import pyarrow as pa

    key, value, timestamp = types
    return all(pa.types.is_binary(t) or pa.types.is_large_binary(t) for t in (key, value)) and pa.types.is_timestamp(
        timestamp
    )


def _millis(timestamps: pa.ChunkedArray) -> list[int | None]:
    import pyarrow as pa

    per_milli = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[timestamps.type.unit]
    raw = timestamps.cast(pa.timestamp(timestamps.type.unit)).cast(pa.int64()).to_pylist()
    if per_milli is None:
        return [None if t is None else t * 1000 for t in raw]
    return [None if t is None else t // per_milli for t in raw]


def _fingerprints(rows: list[dict[str, Any]], millis: list[int | None]) -> dict[TopicPartition, RecordFingerprint]:
    found: dict[TopicPartition, RecordFingerprint] = {}
    for row, ms in zip(rows, millis, strict=True):
        if ms is None:  # no timestamp: nothing to find the record by
            continue
        headers = [(h["key"], h["value"]) for h in row.get(HEADERS) or ()]
        found[TopicPartition(row["topic"], row["partition"])] = RecordFingerprint(
            row["offset"] + 1, ms, digest(row["key"], row["value"], headers)
        )
    return found
