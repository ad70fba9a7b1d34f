"""What an acknowledged commit survives on the database the store reaches: its replication, read from PostgreSQL.

Every store transaction commits with ``synchronous_commit = on`` (engine.py): the commit
is flushed to this server's disk, and, where ``synchronous_standby_names`` names standbys,
to theirs before it is acknowledged. So the durability follows from the primary's
configuration alone: synchronous replication configured, an acknowledged commit is on a
standby too and survives a failover to it; not configured, it survives a crash of this
server but a failover may lose the commits its standbys had not received yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

__all__ = [
    "Replication",
    "ReplicationRefused",
    "check",
    "read_replication",
    "REPLICATION_SQL",
    "replication_from",
    "replication_of",
]

# Connected synchronous standbys are visible to a superuser or a member of pg_read_all_stats
# only (others see sync_state as NULL): then the count is unknown (-1), the setting is not.
REPLICATION_SQL = """
SELECT pg_is_in_recovery(),
       current_setting('synchronous_standby_names'),
       CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
                 OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
            THEN (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))
            ELSE -1 END
"""


@dataclass(frozen=True)
class Replication:
    """The replication of the server a connection reached, as it said."""

    in_recovery: bool
    """A standby (read-only): no writes until it is promoted."""

    synchronous_standby_names: str
    """The primary's setting: empty means commits wait for no standby."""

    synchronous_standbys: int
    """Standbys connected in sync or quorum state now; -1 where the role may not see them."""

    @property
    def synchronous(self) -> bool:
        """Whether a commit waits for a standby before it is acknowledged."""
        return bool(self.synchronous_standby_names.strip())

    def describe(self) -> str:
        """One line for the log: what an acknowledged commit survives here."""
        if self.in_recovery:
            return "the database is a standby (read-only): it takes no commit until it is promoted"
        if not self.synchronous:
            return (
                "replication is asynchronous or absent (synchronous_standby_names is empty): an acknowledged "
                "commit survives a crash of this server, but a failover may lose the latest ones"
            )
        connected = "unknown (the role may not read pg_stat_replication)"
        if self.synchronous_standbys >= 0:
            connected = str(self.synchronous_standbys)
        return (
            f"replication is synchronous (synchronous_standby_names={self.synchronous_standby_names!r}, "
            f"synchronous standbys connected: {connected}): an acknowledged commit is on a standby too"
        )


class ReplicationRefused(Exception):
    """The database does not give what the server was told to require; the message names the fix."""


def replication_of(conn: Connection) -> Replication:
    """:func:`read_replication` in the caller's transaction (SQLAlchemy ``Connection``), e.g. through ``Store.run``."""
    in_recovery, names, standbys = conn.exec_driver_sql(REPLICATION_SQL).one()
    return Replication(bool(in_recovery), str(names or ""), int(standbys))


def read_replication(cursor: Any) -> Replication:
    """Reads the replication of the server under ``cursor`` (a psycopg or DB-API cursor, sync)."""
    cursor.execute(REPLICATION_SQL)
    in_recovery, names, standbys = cursor.fetchone()
    return Replication(bool(in_recovery), str(names or ""), int(standbys))


def replication_from(row: Any) -> Replication:
    """The :class:`Replication` of :data:`REPLICATION_SQL`'s row (a runtime reads it on its own connections)."""
    in_recovery, names, standbys = row
    return Replication(bool(in_recovery), str(names or ""), int(standbys))


def check(replication: Replication, *, require_synchronous: bool) -> None:
    """Raises :class:`ReplicationRefused` where commits here would not be what the server promises."""
    if replication.in_recovery:
        raise ReplicationRefused(
            "the database is a standby (read-only); point the URL at the primary, or list every host with "
            "target_session_attrs=read-write so libpq finds it"
        )
    if require_synchronous and not replication.synchronous:
        raise ReplicationRefused(
            "the database has no synchronous replication (synchronous_standby_names is empty), so an "
            "acknowledged commit could be lost in a failover; configure a synchronous standby, or serve "
            "without --require-synchronous-replication"
        )
