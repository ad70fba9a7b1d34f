"""Arrow data into PostgreSQL COPY, and the per-partition arithmetic of a batch, without per-row Python objects.

Needs pyarrow and numpy (the ``spark`` or ``kafka`` extra); only the writers import it,
lazily, so importing :mod:`offsetstore.server` needs neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from psycopg import Cursor, sql

from offsetstore.core.types import TopicPartition
from offsetstore.sink import sql as sink_sql
from offsetstore.sink.sql import PartitionStats

# Rows per CSV chunk handed to COPY: bounds the memory of one encoded chunk.
_CHUNK_ROWS = 32_768

_CSV = pacsv.WriteOptions(include_header=False)

# Each byte's two lower-case hex digits, as one little 2-byte string per byte value.
_HEX_PAIRS = np.frombuffer(b"".join(f"{b:02x}".encode() for b in range(256)), dtype="S2")


def check_coordinates(data: pa.Table | pa.RecordBatch) -> None:
    """Raises ValueError unless the Kafka columns are there and hold no nulls."""
    names = set(data.schema.names)
    missing = [c for c in ("topic", "partition", "offset") if c not in names]
    if missing:
        raise ValueError(f"the batch has no {', '.join(missing)} column: it must carry the Kafka source's columns")
    for name in ("topic", "partition", "offset"):
        if data.column(name).null_count:
            raise ValueError(f"the batch's {name} column holds nulls")


def partition_stats(data: pa.Table | pa.RecordBatch) -> dict[TopicPartition, PartitionStats]:
    """Min and max offset and row count per (topic, partition)."""
    if data.num_rows == 0:
        return {}
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    agg = (
        table.select(["topic", "partition", "offset"])
        .group_by(["topic", "partition"])
        .aggregate([("offset", "min"), ("offset", "max"), ("offset", "count")])
    )
    return {
        TopicPartition(t, p): PartitionStats(lo, hi, n)
        for t, p, lo, hi, n in zip(
            agg["topic"].to_pylist(),
            agg["partition"].to_pylist(),
            agg["offset_min"].to_pylist(),
            agg["offset_max"].to_pylist(),
            agg["offset_count"].to_pylist(),
            strict=True,
        )
    }


def merge_stats(into: dict[TopicPartition, PartitionStats], more: Mapping[TopicPartition, PartitionStats]) -> None:
    for tp, s in more.items():
        old = into.get(tp)
        into[tp] = (
            s
            if old is None
            else PartitionStats(min(old.min_offset, s.min_offset), max(old.max_offset, s.max_offset), old.rows + s.rows)
        )


def skip_delivered(
    data: pa.Table | pa.RecordBatch,
    stats: Mapping[TopicPartition, PartitionStats],
    stored: Mapping[TopicPartition, int],
) -> pa.Table | pa.RecordBatch:
    """The rows at or above their partition's stored offset; ``data`` itself when none is below.

    The skip rule is :mod:`offsetstore.sink.sql`'s (a stored sentinel skips nothing).
    """
    below = sink_sql.skip_below(stats, stored)
    if not below:
        return data
    return data.filter(sink_sql.fresh_rows(data, below))


def _hex_bytea(arr: pa.Array) -> pa.Array:
    """Binary values as PostgreSQL's bytea hex text (``\\x0a1b``), computed on whole buffers."""
    if pa.types.is_fixed_size_binary(arr.type):
        arr = arr.cast(pa.binary())
    arr = arr.cast(pa.large_binary())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    start = int(offsets[0])
    data = arr.buffers()[2]
    body = np.frombuffer(data, dtype=np.uint8)[start : int(offsets[-1])] if data is not None else np.empty(0, np.uint8)
    digits = _HEX_PAIRS[body].view(np.uint8)
    # "\x" in front of every value: insert the two prefix bytes at each value's start.
    starts = np.repeat(2 * (offsets[:-1] - start), 2)
    prefix = np.tile(np.frombuffer(b"\\x", dtype=np.uint8), n)
    out = np.insert(digits, starts, prefix)
    new_offsets = 2 * (offsets - start) + 2 * np.arange(n + 1, dtype=np.int64)
    validity = None
    if arr.null_count:
        validity = pc.is_valid(arr).buffers()[1]
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(new_offsets), pa.py_buffer(out), validity, arr.null_count)


def _encodable(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Columns in a form whose CSV text PostgreSQL reads back as the same value."""
    columns = []
    changed = False
    for field, column in zip(batch.schema, batch.columns, strict=True):
        t = field.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            column = _hex_bytea(column)
            changed = True
        elif pa.types.is_nested(t) or pa.types.is_dictionary(t):
            if pa.types.is_dictionary(t):
                column = column.cast(t.value_type)
                changed = True
            else:
                raise TypeError(
                    f"column {field.name!r} is of type {t}: convert nested values in the query "
                    "(to_json() into a json/jsonb column) before the sink"
                )
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names) if changed else batch


def copy_batches(cursor: Cursor, statement: sql.Composable, batches: Iterable[pa.RecordBatch]) -> int:
    """Streams record batches into ``COPY ... FROM STDIN (FORMAT csv)``; returns the rows written.

    CSV from Arrow's C++ writer keeps the encoding off the Python interpreter; nulls go
    as unquoted empty fields and every string is quoted, which is how PostgreSQL's CSV
    COPY tells NULL from the empty string.
    """
    rows = 0
    with cursor.copy(statement) as copy:
        for batch in batches:
            for begin in range(0, batch.num_rows, _CHUNK_ROWS):
                chunk = _encodable(batch.slice(begin, _CHUNK_ROWS))
                out = pa.BufferOutputStream()
                pacsv.write_csv(chunk, out, _CSV)
                copy.write(memoryview(out.getvalue()))
                rows += chunk.num_rows
    return rows


def with_constants(batch: pa.RecordBatch, front: Mapping[str, pa.Scalar]) -> pa.RecordBatch:
    """``batch`` with constant columns put in front."""
    arrays = [pa.repeat(value, batch.num_rows) for value in front.values()]
    return pa.RecordBatch.from_arrays(arrays + list(batch.columns), names=list(front) + batch.schema.names)
