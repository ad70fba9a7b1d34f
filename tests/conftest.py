"""Shared fixtures: a migrated PostgreSQL per session, scratch databases, fresh group ids."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from offsetstore.client import OffsetStoreClient
from offsetstore.server.app import OffsetStoreServer
from offsetstore.storage import migrate
from offsetstore.storage.embedded import EmbeddedPostgres
from offsetstore.storage.engine import create_engine
from offsetstore.storage.store import Store

# --- database ---
#
# OFFSETSTORE_TEST_DATABASE_URL selects an existing PostgreSQL; without it the
# session starts an embedded one. The database tests never skip.


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """URL of a database migrated to head, shared by the whole session.

    On an external server the session works in a database of its own, created next
    to the given one and dropped at the end, so runs never pile up data; where the
    role may not create databases, it uses the given database itself.
    """
    if url := os.environ.get("OFFSETSTORE_TEST_DATABASE_URL"):
        url = migrate.normalize_url(url)
        with contextlib.ExitStack() as stack:
            try:
                session_url = stack.enter_context(new_database(url))
            except sa.exc.ProgrammingError:  # no CREATEDB privilege
                session_url = url
            migrate.upgrade(session_url)
            yield session_url
        return

    # Under /tmp rather than pytest's tmp_path: as root, the embedded server
    # opens up the permissions of every parent of its data directory.
    workdir = Path(tempfile.mkdtemp(prefix="offsetstore-test-"))
    try:
        with EmbeddedPostgres(workdir / "pgdata") as pg:
            migrate.upgrade(pg.url)
            yield pg.url
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[sa.Engine]:
    """An engine on the session's database."""
    engine = sa.create_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def group_id() -> str:
    """A group id no other test uses, so each test owns its data."""
    return f"g-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def new_database(database_url: str) -> Iterator[str]:
    """A new, empty database on the server of ``database_url``, dropped afterwards."""
    name = f"offsetstore_scratch_{uuid.uuid4().hex[:12]}"
    server_url = sa.make_url(database_url)
    admin = sa.create_engine(server_url.set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield server_url.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                # FORCE: a test that failed may have left connections open.
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.fixture
def scratch_database_url(database_url: str) -> Iterator[str]:
    """URL of a new, empty database on the session's server, dropped after the test.

    For tests that change the schema itself (migrations), which must not touch
    the database the other tests share.
    """
    with new_database(database_url) as url:
        yield url


@pytest.fixture(scope="module")
def module_database_url(database_url: str) -> Iterator[str]:
    """A migrated database of the test module's own, for tests that read every group."""
    with new_database(database_url) as url:
        migrate.upgrade(url)
        yield url


# --- server ---
#
# One in-process gRPC server on port 0 for the session, over the session's database.


@pytest.fixture(scope="session")
def store(database_url: str) -> Iterator[Store]:
    """The server's Store on the session's database."""
    store = Store(create_engine(database_url, pool_size=8))
    yield store
    store.dispose()


@pytest.fixture(scope="session")
def server(store: Store) -> Iterator[OffsetStoreServer]:
    """A running gRPC server; dial ``server.address``."""
    server = OffsetStoreServer(store, "127.0.0.1:0", max_workers=16, health_interval=0.2).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def client(server: OffsetStoreServer) -> Iterator[OffsetStoreClient]:
    """A sync client of the session's server."""
    with OffsetStoreClient(server.address, timeout=20) as client:
        yield client
