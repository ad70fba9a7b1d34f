"""The one way to connect to the store's database: server, Spark sink, Kafka writer and staging tasks alike.

Every transaction of the store starts with one statement that sets, for that transaction
only, what its correctness depends on (:meth:`SessionSettings.sql`): ``synchronous_commit
= on``, so an acknowledged commit survives a crash (and waits for a synchronous standby)
whatever the database's default; the statement and lock timeouts, so nothing waits
unbounded; and the planner's settings. Transaction-local settings hold through every
PgBouncer mode and across a failover: nothing rides on a startup parameter that a pooler
drops or on a session that a transaction pooler hands to someone else. No session
prepares statements behind the caller's back (psycopg's automatic preparing is off); the
server's hot pool prepares its own only where ``prepare`` says so.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, event
from sqlalchemy import create_engine as _sqlalchemy_engine
from sqlalchemy.pool import NullPool

from offsetstore.storage import database_url
from offsetstore.storage.replication import (
    Replication,
    ReplicationRefused,
    check,
    read_replication,
)

log = logging.getLogger(__name__)

__all__ = [
    "NotThePrimary",
    "SessionSettings",
    "admit",
    "DIALECT",
    "apply_per_transaction",
    "drop_read_only_connections",
    "create_engine",
    "libpq_conninfo",
    "plain_engine",
    "shares_sessions",
]

#: SQLAlchemy's name for the dialect; the connection itself comes from libpq's reading of the URL.
DIALECT = "postgresql+psycopg://"


#: What a new connection of the server sets for its session, once. A narrow read goes without the
#: transaction's settings (:meth:`SessionSettings.sql`: no COMMIT to make durable, its time bounded
#: by cancelling), and so went with PostgreSQL's JIT on: a page whose estimated cost passed
#: jit_above_cost (a group the statistics guess large, on a big store) compiled 455 functions per
#: call, 0.3-5 s, past the read's deadline (DescribeGroup of 16 partitions x43 on a store of 1M
#: offsets; UNAVAILABLE with stale statistics). Behind a pooler that shares sessions the setting may
#: be lost: the reads are then as before, and every transaction that sends its settings still has it.
SESSION_SQL = "SELECT set_config('jit', 'off', false)"


@dataclass(frozen=True)
class SessionSettings:
    """What every transaction of the store sets for itself, and how its connections are made."""

    statement_timeout_ms: int = 5000
    """Upper bound of one statement; 0: none, as in PostgreSQL."""

    lock_timeout_ms: int | None = None
    """Upper bound of one lock wait; None: the statement timeout."""

    connect_timeout_s: int = 5
    """libpq's connect_timeout, per host tried."""

    application_name: str = "offsetstore"
    """Shown in pg_stat_activity."""

    prepare: bool = True
    """Whether the server's hot pool may prepare statements (off behind a transaction pooler)."""

    require_synchronous_replication: bool = False
    """Refuse connections to a primary whose commits wait for no standby (:mod:`.replication`)."""

    def __post_init__(self) -> None:
        if self.statement_timeout_ms < 0 or (self.lock_timeout_ms is not None and self.lock_timeout_ms < 0):
            raise ValueError("timeouts must be >= 0 (0: none)")
        if self.connect_timeout_s < 0:
            raise ValueError("connect_timeout_s must be >= 0")

    def sql(
        self, statement_timeout_ms: int | None = None, *, custom_plans: bool = True, lock_timeout_ms: int | None = None
    ) -> str:
        """One statement setting this transaction's settings (``set_config(..., true)``: until COMMIT or ROLLBACK).

        ``statement_timeout_ms`` (a caller's shorter deadline) replaces the statement
        timeout. ``custom_plans`` plans each statement for its own arguments: the store's
        statements take caller-sized arrays (1 to 10,000 partitions), and a plan PostgreSQL
        cached for a guessed size cost a page of a 10,000-partition fetch 1.2 s instead of
        40 ms; the server's hot pool keeps cached plans for its narrow statements.
        ``synchronous_commit`` is read at COMMIT, so setting it here covers the commit.
        ``lock_timeout_ms`` replaces the lock timeout (a group-commit batch's short one).
        """
        statement = self.statement_timeout_ms if statement_timeout_ms is None else statement_timeout_ms
        lock = self.statement_timeout_ms if self.lock_timeout_ms is None else self.lock_timeout_ms
        if lock_timeout_ms is not None:
            lock = min(lock, lock_timeout_ms) if lock else lock_timeout_ms
        settings = [
            ("synchronous_commit", "on"),
            ("statement_timeout", str(int(statement))),
            ("lock_timeout", str(int(lock))),
            # JIT compiling costs more than the short statements of this store ever save.
            ("jit", "off"),
            ("plan_cache_mode", "force_custom_plan" if custom_plans else "auto"),
        ]
        return "SELECT " + ", ".join(f"set_config('{name}', '{value}', true)" for name, value in settings)

    def connect_kwargs(self) -> dict[str, Any]:
        """psycopg ``connect()`` keyword arguments: libpq's timeouts and name, and no automatic preparing."""
        return {
            "connect_timeout": self.connect_timeout_s,
            "application_name": self.application_name,
            "prepare_threshold": None,
        }


def plain_engine(url: str, **kwargs: Any) -> Engine:
    """A SQLAlchemy engine on ``url`` (any spelling libpq accepts) with none of the store's settings, for migrations."""
    connect = database_url.psycopg_connector(url, prepare_threshold=None)
    return _sqlalchemy_engine(DIALECT, creator=connect, **kwargs)


def create_engine(
    url: str,
    *,
    pool_size: int | None = 16,
    statement_timeout_ms: int = 5000,
    lock_timeout_ms: int | None = None,
    connect_timeout_s: int = 5,
    application_name: str = "offsetstore",
    prepare: bool = True,
    require_synchronous_replication: bool = False,
) -> Engine:
    """An engine on psycopg 3 whose every transaction starts with :meth:`SessionSettings.sql`.

    ``pool_size`` bounds the pool (no overflow; waiting longer than the connect
    timeout fails); ``None`` opens a connection per use, for a process that writes
    rarely, like a Spark driver between batches. The engine never prepares (``prepare``
    is kept for callers that passed it). The asyncio runtime connects through no engine:
    it is made from a :class:`~offsetstore.runtime.config.StoreConfig` holding the same
    :class:`SessionSettings`. Each new connection is checked (:func:`admit`): a standby,
    or a primary without the synchronous replication required, is refused.
    """
    settings = SessionSettings(
        statement_timeout_ms,
        lock_timeout_ms,
        connect_timeout_s,
        application_name,
        prepare,
        require_synchronous_replication,
    )
    connect = _checked_connector(url, settings)
    if pool_size is None:
        engine = _sqlalchemy_engine(DIALECT, creator=connect, poolclass=NullPool)
    else:
        engine = _sqlalchemy_engine(
            DIALECT, creator=connect, pool_size=pool_size, max_overflow=0, pool_timeout=connect_timeout_s
        )
    apply_per_transaction(engine, settings.sql())
    drop_read_only_connections(engine)
    return engine


def apply_per_transaction(engine: Engine, sql: str) -> None:
    """Runs ``sql`` (:meth:`SessionSettings.sql`) at the start of every transaction of ``engine``."""

    @event.listens_for(engine, "begin")
    def begin(conn: Connection) -> None:
        conn.exec_driver_sql(sql)


def drop_read_only_connections(engine: Engine) -> None:
    """Makes a statement refused as read-only (a demoted primary) close its connection."""

    # A connection to a server that became a standby (a failover demoted it) takes no write
    # ever again: drop it, so the pool connects anew and libpq finds the new primary
    # (target_session_attrs=read-write), instead of retrying against it forever.
    @event.listens_for(engine, "handle_error")
    def handle_error(context: Any) -> None:
        if isinstance(context.original_exception, psycopg.errors.ReadOnlySqlTransaction):
            context.is_disconnect = True


def _checked_connector(url: str, settings: SessionSettings) -> Any:
    target = database_url.conninfo(url)
    kwargs = settings.connect_kwargs()

    def connect() -> psycopg.Connection[Any]:
        conn = psycopg.connect(target, autocommit=True, **kwargs)
        try:
            with conn.cursor() as cursor:
                admit(read_replication(cursor), settings)
            conn.autocommit = False
        except BaseException:
            conn.close()
            raise
        return conn

    return connect


class NotThePrimary(psycopg.OperationalError):
    """A connection refused by :func:`admit`: its server is a standby, or lacks the synchronous replication required."""


_last_seen: list[str] = []
_last_seen_lock = threading.Lock()


def admit(replication: Replication, settings: SessionSettings) -> None:
    """Refuses a new connection whose server is a standby, or lacks the synchronous replication required.

    The refusal is :class:`NotThePrimary`, a psycopg ``OperationalError`` (the store's callers hear UNAVAILABLE, and the
    pools connect anew: libpq's ``target_session_attrs=read-write`` then finds the primary).
    What an acknowledged commit survives is logged whenever it changes (a failover, a
    reconfiguration), once per process.
    """
    say_replication(replication)
    try:
        check(replication, require_synchronous=settings.require_synchronous_replication)
    except ReplicationRefused as refused:
        raise NotThePrimary(str(refused)) from None


def say_replication(replication: Replication, **extra: object) -> None:
    """Logs what an acknowledged commit survives there, unless this process said it last.

    ``serve`` says it at start; its store's connections, and the serving processes it spawns
    (told with :func:`replication_said`), then stay quiet until it changes.
    """
    line = replication.describe()
    with _last_seen_lock:
        if _last_seen == [line]:
            return
        _last_seen[:] = [line]
    log.log(
        logging.WARNING if replication.in_recovery else logging.INFO,
        "database: %s",
        line,
        extra={
            **extra,
            "synchronous_standbys": replication.synchronous_standbys,
            "synchronous_standby_names": replication.synchronous_standby_names,
        },
    )


def replication_said(line: str | None) -> None:
    """This process's log (its supervisor's, shared) has said `line` (a :meth:`Replication.describe`) already."""
    with _last_seen_lock:
        _last_seen[:] = [] if line is None else [line]


def last_replication_said() -> str | None:
    """What :func:`say_replication` said last in this process, for the processes it spawns."""
    with _last_seen_lock:
        return _last_seen[0] if _last_seen else None


def libpq_conninfo(url: str, **settings: Any) -> str:
    """The libpq connection string of ``url`` (any spelling libpq accepts) plus libpq ``settings``.

    For processes that connect with psycopg alone, like the sink's staging tasks.
    """
    return database_url.conninfo(url, **settings)


def shares_sessions(url: str, *, connect_timeout_s: int = 5) -> bool:
    """Whether something between here and PostgreSQL hands one client connection's session to others.

    A transaction pooler (PgBouncer's ``pool_mode = transaction``) does: then neither a
    prepared statement nor a session setting outlives a transaction. Probed with two
    connections: a mark set in the first one's session, and looked for from the second
    while the first is idle between transactions, and again from the first afterwards.
    """
    target = database_url.conninfo(url, connect_timeout=connect_timeout_s, application_name="offsetstore-probe")
    mark = uuid.uuid4().hex
    with psycopg.connect(target, autocommit=True, prepare_threshold=None) as first:
        first.execute("SELECT set_config('offsetstore.session_mark', %s, false)", (mark,))
        with psycopg.connect(target, autocommit=True, prepare_threshold=None) as second, second.transaction():
            row = second.execute("SELECT current_setting('offsetstore.session_mark', true)").fetchone()
            if row is not None and row[0] == mark:
                return True
            # The second connection holds its server session now: the first one's next statement
            # runs on another session if sessions are handed around.
            row = first.execute("SELECT current_setting('offsetstore.session_mark', true)").fetchone()
            return row is None or row[0] != mark
