"""Where a query starts: the Kafka source's ``startingOffsets`` and a checkpoint location from the store."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar
from urllib.parse import quote

from sqlalchemy import Connection, Engine

from offsetstore import storage
from offsetstore.client import EARLIEST, GroupNotFoundError, OffsetStoreClient
from offsetstore.storage.engine import create_engine

__all__ = ["checkpoint_location", "starting_offsets"]

R = TypeVar("R")


@contextmanager
def _connection(database: str | Engine) -> Iterator[Connection]:
    if isinstance(database, Engine):
        with database.connect() as conn:
            yield conn
        return
    engine = create_engine(database, pool_size=None, application_name="offsetstore-spark")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _read(database: str | Engine, operation: Callable[..., R], *args: object) -> R:
    with _connection(database) as conn:
        return operation(conn, *args)


def starting_offsets(
    database_url_or_client: str | Engine | OffsetStoreClient,
    group_id: str,
    partitions: Mapping[str, int],
) -> str:
    """The group's stored offsets as the JSON the Kafka source takes as ``startingOffsets``.

    Parameters
    ----------
    database_url_or_client : str, sqlalchemy.Engine or OffsetStoreClient
        The store's database, or a client of its gRPC service.
    group_id : str
        The consumer group.
    partitions : mapping of str to int
        Each topic the query subscribes to, with its partition count.

    Returns
    -------
    str
        ``{"topic": {"0": offset, ...}, ...}`` listing every partition, as Spark requires
        of specific starting offsets: the stored offset, or -2 (earliest) where the group
        has none.

    Notes
    -----
    A stored sentinel is passed on as it is: -2 (earliest) and -1 (latest) are what an
    operator's reset to a boundary leaves when no watermark was known, and the Kafka
    source reads them the same way. Partitions the store holds beyond the given counts
    are left out: Spark refuses partitions that are not assigned to the query.
    """
    counts = {}
    for topic, count in partitions.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"partitions[{topic!r}] must be a partition count >= 1, not {count!r}")
        counts[topic] = count
    if not counts:
        raise ValueError("partitions must name at least one topic")
    # Whole topics, not named partitions: a named partition without an offset would come
    # back as -1, which is also the stored sentinel for "latest".
    selection = {topic: () for topic in counts}
    if isinstance(database_url_or_client, OffsetStoreClient):
        fetched = database_url_or_client.fetch_offsets(group_id, selection)
    else:
        fetched = _read(database_url_or_client, storage.fetch_offsets, group_id, selection)
    stored = {tp: c.offset for tp, c in fetched.offsets.items()}
    return json.dumps(
        {topic: {str(p): stored.get((topic, p), EARLIEST) for p in range(count)} for topic, count in counts.items()}
    )


def checkpoint_location(database_url_or_client: str | Engine | OffsetStoreClient, group_id: str, base: str) -> str:
    """A checkpoint location that changes when an operator resets the group: ``base/<group>/reset-<n>``.

    Parameters
    ----------
    database_url_or_client : str, sqlalchemy.Engine or OffsetStoreClient
        The store's database, or a client of its gRPC service.
    group_id : str
        The consumer group; percent-encoded in the path.
    base : str
        A directory or URI (``/data/checkpoints``, ``s3a://bucket/checkpoints``).

    Returns
    -------
    str
        The location for the query's ``checkpointLocation``.

    Notes
    -----
    Spark's checkpoint overrides ``startingOffsets``: a query restarted on its old
    checkpoint after a reset would go on where it was, not where the operator put it
    (forward resets are still honoured, since the sink skips what lies below the stored
    offset; backward ones are not). Starting each reset generation of the group on a
    fresh checkpoint, with :func:`starting_offsets`, lets the store decide. A stateful
    query gives up its state (aggregations, deduplication, joins) at that point: the
    state lives only in the checkpoint.

    ``n`` counts the group's resets and deletes (DescribeGroup's ``reset_count``), and is
    kept across a delete of the whole group: a query of a deleted and recreated group
    never finds an old checkpoint.
    """
    if isinstance(database_url_or_client, OffsetStoreClient):
        try:
            count = database_url_or_client.describe_group(group_id).reset_count
        except GroupNotFoundError as error:
            # A deleted group's id keeps its count; the error carries it.
            count = int(error.metadata.get("reset_count", "0"))
    else:
        count = _read(database_url_or_client, storage.reset_count, group_id)
    return f"{base.rstrip('/')}/{quote(group_id, safe='')}/reset-{count}"
