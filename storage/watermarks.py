"""Watermarks: the log start and end offsets reported per partition."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from sqlalchemy import (
    Connection,
    func,
    select,
)

from offsetstore.core.types import (
    NO_OFFSET,
    TopicPartition,
    Watermark,
)
from offsetstore.storage import validate as check
from offsetstore.storage._groups import among
from offsetstore.storage.lag import NOW, with_samples
from offsetstore.storage.schema import watermarks
from offsetstore.storage.steps import PAUSE, SLICE, HotSteps, drive_steps, int_array, text_array


def report_watermarks(conn: Connection, values: Sequence[Watermark], *, at: datetime | None = None) -> None:
    """Stores the latest reported log start and end of each partition, and samples the log ends (:mod:`.lag`).

    A log start of -1 was not observed (a Spark batch sees only log ends): the one
    stored stays, and none is invented where none is stored. ``at``: the report's time
    (tests report at known times; the server's Kafka reader, the time it asked); default the
    statement's. The newer observation wins: a report older than the stored one changes
    nothing (a consumer's and the server's reader's reports coexist).
    """
    drive_steps(conn, report_watermarks_steps(values, at=at))


# One statement whatever the number of watermarks, in key order, so that concurrent
# reporters lock rows in one order and cannot deadlock. A kept log start never lies past
# the newest log end (LEAST skips NULLs, so an unknown start must stay NULL explicitly).
_REPORT_WATERMARKS = with_samples(f"""
INSERT INTO offsetstore.watermarks AS w (topic, partition, log_start_offset, log_end_offset, updated_at)
SELECT r.topic, r.partition, r.log_start, r.log_end, {NOW}
FROM unnest(%(topic)s::text[], %(partition)s::integer[], %(start)s::bigint[], %(end)s::bigint[])
    AS r(topic, partition, log_start, log_end)
ORDER BY r.topic, r.partition
ON CONFLICT (topic, partition) DO UPDATE SET
    log_start_offset = CASE
        WHEN coalesce(EXCLUDED.log_start_offset, w.log_start_offset) IS NULL THEN NULL
        ELSE least(coalesce(EXCLUDED.log_start_offset, w.log_start_offset), EXCLUDED.log_end_offset)
    END,
    log_end_offset = EXCLUDED.log_end_offset,
    updated_at = EXCLUDED.updated_at
WHERE w.updated_at <= EXCLUDED.updated_at
""")


def report_watermarks_steps(values: Sequence[Watermark], *, at: datetime | None = None) -> HotSteps[None]:
    """:func:`report_watermarks` as steps (see :func:`write_batch_steps`); bad input raises before the first."""
    check.watermarks(values)
    if not values:
        return
    params: dict[str, object] = {"at": at}
    columns: tuple[tuple[str, Callable[[], str]], ...] = (
        ("topic", lambda: text_array([w.topic for w in values])),
        ("partition", lambda: int_array([w.partition for w in values])),
        ("start", lambda: int_array([None if w.log_start_offset == NO_OFFSET else w.log_start_offset for w in values])),
        ("end", lambda: int_array([w.log_end_offset for w in values])),
    )
    for name, column in columns:
        if len(values) > SLICE:
            yield PAUSE
        params[name] = column()
    yield _REPORT_WATERMARKS, params


def read_watermarks(conn: Connection, keys: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int | None, int]]:
    """The reported (log start or None where not observed, log end) of each of ``keys`` that has any."""
    keys = list(keys)
    if not keys:
        return {}
    rows = conn.execute(
        select(
            watermarks.c.topic, watermarks.c.partition, watermarks.c.log_start_offset, watermarks.c.log_end_offset
        ).where(among(watermarks, keys))
    )
    return {TopicPartition(r.topic, r.partition): (r.log_start_offset, r.log_end_offset) for r in rows}


def database_time(conn: Connection) -> datetime:
    """The database's clock (the statement's time): what a watermark read from elsewhere is stamped with."""
    at: datetime = conn.execute(select(func.statement_timestamp())).scalar_one()
    return at
