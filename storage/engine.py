"""The one way to connect to the store's database for writing: server, Spark sink and staging tasks alike.

Every writer gets the same session settings, so durability and timeouts cannot
drift apart between the gRPC server and the sinks that commit in their own
transactions: an acknowledged commit survives a crash whatever the database's
default for ``synchronous_commit``, and no statement or lock wait runs unbounded.
"""

from __future__ import annotations

import weakref
from typing import Any

from sqlalchemy import Engine
from sqlalchemy import create_engine as _sqlalchemy_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.asyncio import create_async_engine as _sqlalchemy_async_engine
from sqlalchemy.pool import NullPool

from offsetstore.storage.migrate import normalize_url

__all__ = [
    "connect_args",
    "create_async_engine",
    "create_async_pool",
    "create_engine",
    "libpq_conninfo",
    "session_args",
]


def connect_args(
    *,
    statement_timeout_ms: int = 5000,
    lock_timeout_ms: int | None = None,
    connect_timeout_s: int = 5,
    application_name: str = "offsetstore",
) -> dict[str, Any]:
    """psycopg ``connect()`` keyword arguments that every writing session uses.

    ``lock_timeout_ms`` defaults to the statement timeout; 0 disables either, as in
    PostgreSQL.
    """
    if statement_timeout_ms < 0 or (lock_timeout_ms is not None and lock_timeout_ms < 0):
        raise ValueError("timeouts must be >= 0 (0: none)")
    lock = statement_timeout_ms if lock_timeout_ms is None else lock_timeout_ms
    options = [
        f"statement_timeout={statement_timeout_ms}",
        f"lock_timeout={lock}",
        # An acknowledged commit must survive a crash, whatever the server's default.
        "synchronous_commit=on",
        # JIT compiling costs more than the short statements of this store ever save.
        "jit=off",
        # Plan each statement for its own arguments. The store's statements take caller-sized
        # arrays (1 to 10,000 partitions); after five executions PostgreSQL may keep a generic
        # plan made for a guessed size and for the table's size at the time, and a page of a
        # 10,000-partition fetch then took 1.2 s instead of 40 ms. The server's hot pool
        # keeps cached plans and decides per statement (steps.is_wide).
        "plan_cache_mode=force_custom_plan",
    ]
    return {
        "connect_timeout": connect_timeout_s,
        "options": " ".join(f"-c {o}" for o in options),
        "application_name": application_name,
    }


def create_engine(
    database_url: str,
    *,
    pool_size: int | None = 16,
    statement_timeout_ms: int = 5000,
    lock_timeout_ms: int | None = None,
    connect_timeout_s: int = 5,
    application_name: str = "offsetstore",
) -> Engine:
    """An engine on psycopg 3 with :func:`connect_args`' settings.

    ``pool_size`` bounds the pool (no overflow; waiting longer than the connect
    timeout fails); ``None`` opens a connection per use, for a process that writes
    rarely, like a Spark driver between batches.
    """
    args = connect_args(
        statement_timeout_ms=statement_timeout_ms,
        lock_timeout_ms=lock_timeout_ms,
        connect_timeout_s=connect_timeout_s,
        application_name=application_name,
    )
    url = normalize_url(database_url)
    if pool_size is None:
        engine = _sqlalchemy_engine(url, poolclass=NullPool, connect_args=args)
    else:
        engine = _sqlalchemy_engine(
            url, pool_size=pool_size, max_overflow=0, pool_timeout=connect_timeout_s, connect_args=args
        )
    _SESSION_ARGS[engine] = args
    return engine


#: The connect_args of each engine this module made: the asyncio server's connections copy them.
_SESSION_ARGS: weakref.WeakKeyDictionary[Engine, dict[str, Any]] = weakref.WeakKeyDictionary()


def session_args(engine: Engine) -> dict[str, Any]:
    """The psycopg ``connect()`` arguments of an engine :func:`create_engine` made (defaults otherwise)."""
    return dict(_SESSION_ARGS.get(engine) or connect_args())


def create_async_engine(database_url: str, args: dict[str, Any], *, pool_size: int = 4) -> AsyncEngine:
    """An asyncio engine whose sessions use ``args`` (:func:`connect_args`), for the server's colder operations.

    They run the storage core's sync functions under ``AsyncConnection.run_sync``: the same
    code as the sinks, and no thread.
    """
    timeout = args.get("connect_timeout", 5)
    return _sqlalchemy_async_engine(
        normalize_url(database_url),
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=timeout,
        connect_args=args,
        # As the hot pool's check: a connection killed while idle is replaced, not handed out.
        pool_pre_ping=True,
    )


def create_async_pool(database_url: str, args: dict[str, Any], *, size: int = 8) -> Any:
    """A psycopg ``AsyncConnectionPool`` (not yet open) of autocommit connections whose sessions use ``args``.

    The server's hot statements (the group commit's batch, the fetch) run on it, prepared,
    without SQLAlchemy's layers. Waiting longer than the connect timeout for a connection
    raises ``PoolTimeout``.
    """
    from psycopg_pool import AsyncConnectionPool

    # Its statements keep cached plans (planning each small commit anew cost 16 % of the
    # 16-partition commit rate); a wide one is planned for its arguments (steps.is_wide).
    args = {**args, "options": f"{args.get('options', '')} -c plan_cache_mode=auto".strip()}
    return AsyncConnectionPool(
        libpq_conninfo(database_url, **args),
        kwargs={"autocommit": True},
        # A connection that died while idle in the pool (killed, a restart) is replaced when
        # taken, for the price of an empty query, instead of failing the call it was given to.
        check=AsyncConnectionPool.check_connection,
        min_size=1,
        max_size=size,
        timeout=args.get("connect_timeout", 5),
        open=False,
    )


def libpq_conninfo(database_url: str, **settings: Any) -> str:
    """The libpq connection string of a SQLAlchemy URL plus ``settings`` (e.g. :func:`connect_args`).

    For processes that connect with psycopg alone, like the sink's staging tasks.
    """
    from psycopg.conninfo import make_conninfo

    url = make_url(normalize_url(database_url))
    params: dict[str, str | int | None] = {}
    for key, value in url.query.items():
        # A repeated query parameter (several hosts) is libpq's comma-separated list.
        params[key] = ",".join(value) if isinstance(value, tuple) else value
    for key, part in (
        ("host", url.host),
        ("port", url.port),
        ("user", url.username),
        ("password", url.password),
        ("dbname", url.database),
    ):
        if part is not None and key not in params:
            params[key] = part
    params.update(settings)
    return make_conninfo("", **params)
