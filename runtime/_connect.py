"""The runtime's connections on asyncio: the colder operations' SQLAlchemy engine and the admission of a new connection.

The storage core (:mod:`offsetstore.storage.engine`) says what a connection must be (its
:class:`~offsetstore.storage.engine.SessionSettings`, :func:`~offsetstore.storage.engine.admit`);
this module makes asyncio ones by those rules, so the core stays free of asyncio.
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.asyncio import create_async_engine as _sqlalchemy_async_engine

from offsetstore.storage import database_url
from offsetstore.storage.engine import (
    DIALECT,
    SESSION_SQL,
    SessionSettings,
    admit,
    apply_per_transaction,
    drop_read_only_connections,
)
from offsetstore.storage.replication import REPLICATION_SQL, replication_from

__all__ = ["admit_async", "create_async_engine"]


async def admit_async(conn: psycopg.AsyncConnection[Any], settings: SessionSettings) -> None:
    """:func:`~offsetstore.storage.engine.admit` for a new asyncio connection (autocommit), then its session's settings."""
    cursor = await conn.execute(REPLICATION_SQL, prepare=False)
    admit(replication_from(await cursor.fetchone()), settings)
    await conn.execute(SESSION_SQL, prepare=False)


def create_async_engine(url: str, settings: SessionSettings, *, pool_size: int = 4) -> AsyncEngine:
    """An asyncio engine like :func:`~offsetstore.storage.engine.create_engine`'s, for the server's colder operations.

    They run the storage core's sync functions under ``AsyncConnection.run_sync``: the same
    code as the sinks, and no thread.
    """
    target = database_url.conninfo(url)
    kwargs = settings.connect_kwargs()

    async def connect() -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(target, autocommit=True, **kwargs)
        try:
            await admit_async(conn, settings)
            await conn.set_autocommit(False)
        except BaseException:
            await conn.close()
            raise
        return conn

    engine = _sqlalchemy_async_engine(
        DIALECT,
        async_creator=connect,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=settings.connect_timeout_s,
        # As the hot pool's check: a connection killed while idle is replaced, not handed out.
        pool_pre_ping=True,
    )
    apply_per_transaction(engine.sync_engine, settings.sql())
    drop_read_only_connections(engine.sync_engine)
    return engine
