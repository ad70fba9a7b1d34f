"""Alembic environment: migrates the ``offsetstore`` schema, one migrator at a time per database."""

from __future__ import annotations

from contextlib import nullcontext
from logging.config import fileConfig

import psycopg.errors
from alembic import context
from sqlalchemy import Connection, MetaData, Table, create_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateSchema, DropSchema, DropTable

from offsetstore.migrations import MIGRATION_LOCK_ID, MIGRATION_LOCK_TIMEOUT, VERSION_TABLE, context_options
from offsetstore.storage.advisory_locks import wait_for_xact_lock
from offsetstore.storage.schema import SCHEMA, metadata

config = context.config

# Only the alembic command line has an ini file; a program calling
# offsetstore.runtime.migrate keeps its own logging setup.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def run_migrations_offline() -> None:
    """Emit the migrations as SQL (``alembic upgrade --sql``) instead of running them."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        **context_options(),
    )
    with context.begin_transaction():
        # The version table lives in the schema, so the schema comes first.
        context.execute(CreateSchema(SCHEMA, if_not_exists=True))
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on the connection the caller passed, or on one to ``sqlalchemy.url``."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return

    engine = create_engine(config.get_main_option("sqlalchemy.url", ""), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            _migrate(connection)
    finally:
        engine.dispose()


def _migrate(connection: Connection) -> None:
    # A caller that is already in a transaction owns it (and its commit).
    transaction = nullcontext() if connection.in_transaction() else connection.begin()
    with transaction:
        # Everything below, Alembic's own version-table bookkeeping included,
        # is racy when two processes migrate at once: the first to take the
        # lock migrates, the others wait, then find the database up to date.
        # The lock goes away with the transaction. Any role can take the lock's key too, so
        # the wait is bounded and a stop (SIGTERM) ends it.
        wait_for_xact_lock(
            connection,
            MIGRATION_LOCK_ID,
            what="the migration lock",
            timeout=config.attributes.get("lock_timeout", MIGRATION_LOCK_TIMEOUT),
            stop=config.attributes.get("stop"),
        )
        connection.execute(CreateSchema(SCHEMA, if_not_exists=True))

        context.configure(
            connection=connection,
            target_metadata=metadata,
            # The caller's (runtime/migrate.py): which revisions this run applied, once it holds the lock.
            on_version_apply=config.attributes.get("on_version_apply"),
            **context_options(),
        )
        with context.begin_transaction():
            context.run_migrations()

        if not context.get_context().get_current_heads():
            _drop_schema(connection)


def _drop_schema(connection: Connection) -> None:
    # At base the store's tables are gone, but Alembic keeps its (now empty)
    # version table, which lives in our schema: only here can the schema go.
    version_table = Table(VERSION_TABLE, MetaData(), schema=SCHEMA)
    connection.execute(DropTable(version_table, if_exists=True))
    try:
        with connection.begin_nested():
            connection.execute(DropSchema(SCHEMA))
    except DBAPIError as exc:
        # Someone else's objects live in the schema (or a `stamp base` left
        # the tables): keep it rather than drop what the store did not create.
        if not isinstance(exc.orig, psycopg.errors.DependentObjectsStillExist):
            raise


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
