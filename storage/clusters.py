"""A group's Kafka cluster: the id it is bound to, and the fingerprints of the records before its offsets (issue 58).

A group binds to the cluster of its first writer that knows one (:func:`bind_cluster`, run in the
writer's join transaction); from then on a writer of another cluster is refused with
:class:`~offsetstore.core.errors.ClusterMismatchError`. Only a switch (a reset with
``switch_to_cluster_id``, :mod:`.resets`) rebinds it, and a switch moves the generation on, so a
writer that joined before it is fenced anyway: checking once per join is enough, and the commit
path pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import Connection, delete, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert

from offsetstore.core.errors import ClusterMismatchError
from offsetstore.core.types import RecordFingerprint, TopicPartition
from offsetstore.storage.schema import group_clusters, record_fingerprints

__all__ = [
    "bind_cluster",
    "bound_cluster",
    "bound_clusters",
    "forget",
    "read_fingerprints",
    "rebind_cluster",
    "write_fingerprints",
]


def bound_cluster(conn: Connection, group_id: str) -> str | None:
    """The Kafka cluster id ``group_id`` is bound to; None when it is bound to none (or unknown)."""
    c = group_clusters.c
    found: str | None = conn.execute(select(c.kafka_cluster_id).where(c.group_id == group_id)).scalar_one_or_none()
    return found


def bound_clusters(conn: Connection, group_ids: Sequence[str]) -> dict[str, str]:
    """The Kafka cluster id each group of ``group_ids`` is bound to; groups bound to none are left out."""
    if not group_ids:
        return {}
    c = group_clusters.c
    rows = conn.execute(select(c.group_id, c.kafka_cluster_id).where(c.group_id.in_(list(group_ids))))
    return {r.group_id: r.kafka_cluster_id for r in rows}


def bind_cluster(conn: Connection, group_id: str, cluster_id: str) -> None:
    """Binds an unbound group to ``cluster_id``; ClusterMismatchError when it is bound to another.

    Call after a join, in its transaction: the join's lock on the group's row orders two binds.
    """
    if not cluster_id:
        raise ValueError("cluster_id must be a non-empty string")
    stmt = pg_insert(group_clusters).values(group_id=group_id, kafka_cluster_id=cluster_id)
    conn.execute(stmt.on_conflict_do_nothing(index_elements=[group_clusters.c.group_id]))
    bound = bound_cluster(conn, group_id)
    if bound != cluster_id:
        raise mismatch(group_id, str(bound), cluster_id)


def rebind_cluster(conn: Connection, group_id: str, cluster_id: str) -> None:
    """Binds ``group_id`` to ``cluster_id`` whatever it was bound to (a switch, under the group's lock)."""
    stmt = pg_insert(group_clusters).values(group_id=group_id, kafka_cluster_id=cluster_id)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[group_clusters.c.group_id], set_={"kafka_cluster_id": stmt.excluded.kafka_cluster_id}
        )
    )


def mismatch(group_id: str, bound: str, cluster_id: str) -> ClusterMismatchError:
    """The error of a writer of cluster ``cluster_id`` on a group bound to ``bound``."""
    return ClusterMismatchError(
        f"group {group_id!r} is bound to Kafka cluster {bound!r}, and this consumer reads cluster {cluster_id!r}: "
        f"nothing was written. Move the group with `offsetstore groups switch {group_id} --to-bootstrap-server ...`",
        metadata={"group_id": group_id, "bound_cluster_id": bound, "cluster_id": cluster_id},
    )


# One statement whatever the partitions (arrays, not executemany): a write pays one round trip for them.
_WRITE_FINGERPRINTS = text(
    """
    INSERT INTO offsetstore.record_fingerprints (group_id, topic, "partition", "offset", timestamp_ms, digest)
    SELECT :group_id, * FROM unnest(
        CAST(:topics AS text[]), CAST(:partitions AS integer[]), CAST(:offsets AS bigint[]),
        CAST(:timestamps AS bigint[]), CAST(:digests AS bytea[]))
    ON CONFLICT (group_id, topic, "partition") DO UPDATE
    SET "offset" = excluded."offset", timestamp_ms = excluded.timestamp_ms, digest = excluded.digest
    """
)


def write_fingerprints(conn: Connection, group_id: str, found: Mapping[TopicPartition, RecordFingerprint]) -> None:
    """Stores each partition's fingerprint, replacing the one before (call in the committing transaction)."""
    if not found:
        return
    conn.execute(
        _WRITE_FINGERPRINTS,
        {
            "group_id": group_id,
            "topics": [tp.topic for tp in found],
            "partitions": [tp.partition for tp in found],
            "offsets": [fp.offset for fp in found.values()],
            "timestamps": [fp.timestamp_ms for fp in found.values()],
            "digests": [fp.digest for fp in found.values()],
        },
    )


def read_fingerprints(conn: Connection, group_id: str) -> dict[TopicPartition, RecordFingerprint]:
    """The group's stored fingerprints (each says which offset it precedes: compare with the stored offset)."""
    f = record_fingerprints.c
    rows = conn.execute(select(f.topic, f.partition, f.offset, f.timestamp_ms, f.digest).where(f.group_id == group_id))
    return {
        TopicPartition(r.topic, r.partition): RecordFingerprint(r.offset, r.timestamp_ms, bytes(r.digest)) for r in rows
    }


def forget(conn: Connection, group_id: str, partitions: Sequence[TopicPartition] | None = None) -> None:
    """A delete's end: the fingerprints of ``partitions`` (None: the group's, and its binding) go with their offsets.

    A deleted group's id is free to be used anew, on any cluster, as ``kafka-consumer-groups
    --delete`` leaves it; a deleted partition's fingerprint would be of an offset no longer stored.
    """
    f = record_fingerprints.c
    if partitions is None:
        conn.execute(delete(record_fingerprints).where(f.group_id == group_id))
        conn.execute(delete(group_clusters).where(group_clusters.c.group_id == group_id))
    elif partitions:  # arrays, not an IN list: 10,000 pairs in a list exceed PostgreSQL's parser stack
        conn.execute(
            _FORGET_PARTITIONS,
            {
                "group_id": group_id,
                "topics": [tp.topic for tp in partitions],
                "partitions": [tp.partition for tp in partitions],
            },
        )


_FORGET_PARTITIONS = text(
    """
    DELETE FROM offsetstore.record_fingerprints AS f
    USING unnest(CAST(:topics AS text[]), CAST(:partitions AS integer[])) AS u(topic, "partition")
    WHERE f.group_id = :group_id AND f.topic = u.topic AND f."partition" = u."partition"
    """
)
