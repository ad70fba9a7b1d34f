"""Apply, revert and inspect the store's Alembic migrations from code, with no alembic.ini."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.pool import NullPool

import offsetstore.migrations
from offsetstore.migrations import MIGRATION_LOCK_TIMEOUT
from offsetstore.storage.advisory_locks import LockWaitStopped, LockWaitTimedOut
from offsetstore.storage.database_url import normalize_url
from offsetstore.storage.engine import plain_engine

__all__ = [
    "DatabaseAhead",
    "LockWaitStopped",
    "LockWaitTimedOut",
    "alembic_config",
    "current",
    "downgrade",
    "normalize_url",
    "upgrade",
]

_SCRIPT_LOCATION = str(Path(offsetstore.migrations.__file__).parent)

# Alembic's `context` and `op` are module-level proxies, so two migrations
# running in threads of one process would trample each other. Other processes
# are kept out by the advisory lock that env.py takes in the database.
_alembic_lock = threading.Lock()


class _AlembicBoilerplate(logging.Filter):
    """Drops the two lines Alembic logs each time a migration context opens ("Context impl
    PostgresqlImpl.", "Will assume transactional DDL."): they name no change, and a start that
    checks the revision, then upgrades, printed them twice. "Running upgrade ..." stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(("Context impl ", "Will assume "))


logging.getLogger("alembic.runtime.migration").addFilter(_AlembicBoilerplate())


class DatabaseAhead(Exception):
    """The database is at a revision these migrations do not know: a newer release migrated it."""


def alembic_config(database_url: str) -> Config:
    """Return an Alembic config for the packaged migrations, pointed at `database_url`."""
    config = Config()
    config.set_main_option("script_location", _SCRIPT_LOCATION)
    # Lists such as version_locations split on os.pathsep, the modern rule.
    config.set_main_option("path_separator", "os")
    # The options go through ConfigParser interpolation: a password with %
    # in it (percent-encoded characters) must survive it.
    config.set_main_option("sqlalchemy.url", normalize_url(database_url).replace("%", "%%"))
    return config


def upgrade(
    database_url: str,
    revision: str = "head",
    *,
    lock_timeout: float = MIGRATION_LOCK_TIMEOUT,
    stop: threading.Event | None = None,
) -> None:
    """Migrate the database at `database_url` up to `revision`.

    Safe to run from several processes at once: one migrates, the others
    wait and then find nothing left to do. The wait for the migration lock
    lasts `lock_timeout` seconds at most (:class:`LockWaitTimedOut`, naming
    the holder) and ends when `stop` is set (:class:`LockWaitStopped`).
    """
    with _alembic_lock:
        _check_known(database_url)
        _run(command.upgrade, database_url, revision, lock_timeout, stop)


def _check_known(database_url: str) -> None:
    """Raises :class:`DatabaseAhead` when the database's revision is not one of these migrations.

    During a rolling upgrade, a server of the previous release (re)started after the new one
    migrated must serve without migrating; Alembic would only say it cannot locate the revision.
    """
    at = current(database_url)
    script = ScriptDirectory.from_config(alembic_config(database_url))
    known = {migration.revision for migration in script.walk_revisions()}
    if at is not None and at not in known:
        raise DatabaseAhead(
            f"the database is at revision {at}, which this release (migrations up to {script.get_current_head()}) "
            "does not know: a newer release migrated it. During a rolling upgrade serve with --no-migrate "
            "until this server is replaced by the new release (docs/operations.md)"
        )


def downgrade(database_url: str, revision: str) -> None:
    """Migrate the database at `database_url` down to `revision`.

    ``"base"`` removes the store: its tables, Alembic's version table and the
    ``offsetstore`` schema.
    """
    with _alembic_lock:
        _run(command.downgrade, database_url, revision, MIGRATION_LOCK_TIMEOUT, None)


def _run(
    alembic_command: Callable[[Config, str], None],
    database_url: str,
    revision: str,
    lock_timeout: float,
    stop: threading.Event | None,
) -> None:
    # The connection is handed to env.py: libpq reads the URL (every spelling it accepts,
    # multi-host included), not SQLAlchemy's parser.
    engine = plain_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            config = alembic_config(database_url)
            config.attributes["connection"] = connection
            config.attributes["lock_timeout"] = lock_timeout
            config.attributes["stop"] = stop
            alembic_command(config, revision)
            connection.commit()
    finally:
        engine.dispose()


def current(database_url: str) -> str | None:
    """Return the revision the database is at, None if the store was never installed."""
    engine = plain_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts=offsetstore.migrations.context_options())
            return context.get_current_revision()
    finally:
        engine.dispose()
