"""Apply, revert and inspect the store's Alembic migrations from code, with no alembic.ini."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection
from sqlalchemy.pool import NullPool

import offsetstore.migrations
from offsetstore.migrations import MIGRATION_LOCK_TIMEOUT
from offsetstore.storage.advisory_locks import LockWaitStopped, LockWaitTimedOut
from offsetstore.storage.database_url import normalize_url
from offsetstore.storage.engine import plain_engine
from offsetstore.storage.sql_access import NARROWING_REVISION, RoleAccess, keep_access, roles_losing_access

__all__ = [
    "DatabaseAhead",
    "LockWaitStopped",
    "LockWaitTimedOut",
    "SQL_API_ROLES",
    "SqlApiLockOut",
    "Upgraded",
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


#: What an upgrade across migration 0011 does with the roles that call the SQL API v1 without
#: a grant (see :func:`upgrade`): ``keep`` grants each what it could do before, ``revoke``
#: lets them lose it.
SQL_API_ROLES = ("keep", "revoke")


class SqlApiLockOut(Exception):
    """An upgrade across migration 0011 would lock SQL API v1 callers out, and no ``sql_api_roles`` says what to do."""


class _AlembicBoilerplate(logging.Filter):
    """Drops the two lines Alembic logs each time a migration context opens ("Context impl
    PostgresqlImpl.", "Will assume transactional DDL."): they name no change, and a start that
    checks the revision, then upgrades, printed them twice. "Running upgrade ..." stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(("Context impl ", "Will assume "))


logging.getLogger("alembic.runtime.migration").addFilter(_AlembicBoilerplate())


class DatabaseAhead(Exception):
    """The database is at a revision these migrations do not know: a newer release migrated it."""


@dataclasses.dataclass(frozen=True)
class Upgraded:
    """What :func:`upgrade` did: the revisions this call applied (none when another migrator had), where the database is."""

    #: The revisions applied by this call, in order; empty when the database already was there.
    applied: tuple[str, ...]
    #: The revision the database is at now (None: at base).
    revision: str | None
    #: The SQL API v1 roles an upgrade across migration 0011 kept or revoked (see ``sql_api_roles``).
    roles: tuple[RoleAccess, ...] = ()


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
    sql_api_roles: str | None = None,
) -> Upgraded:
    """Migrate the database at `database_url` up to `revision`; say what was applied.

    Safe to run from several processes at once: one migrates, the others
    wait and then find nothing left to do. The wait for the migration lock
    lasts `lock_timeout` seconds at most (:class:`LockWaitTimedOut`, naming
    the holder) and ends when `stop` is set (:class:`LockWaitStopped`).

    Across migration 0011 (SQL API grants), the login roles that may call the SQL API v1
    and would need a grant are found first: without `sql_api_roles` the upgrade stops
    with :class:`SqlApiLockOut` naming each, before anything is applied; ``"keep"`` grants
    each its access on every group in the migration's own transaction (no caller ever sees
    0011 without its grant); ``"revoke"`` migrates and they lose access. Those roles are in the answer.
    """
    if sql_api_roles is not None and sql_api_roles not in SQL_API_ROLES:
        raise ValueError(f"sql_api_roles must be one of {', '.join(SQL_API_ROLES)}, not {sql_api_roles!r}")
    with _alembic_lock:
        _check_known(database_url)
        return _run(command.upgrade, database_url, revision, lock_timeout, stop, sql_api_roles)


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
    sql_api_roles: str | None = None,
) -> Upgraded:
    # The connection is handed to env.py: libpq reads the URL (every spelling it accepts,
    # multi-host included), not SQLAlchemy's parser.
    engine = plain_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            config = alembic_config(database_url)
            losing = _losing_access(connection, revision) if alembic_command is command.upgrade else []
            if losing and sql_api_roles is None:
                raise SqlApiLockOut(
                    f"migration {NARROWING_REVISION} gives the SQL API grants: these roles call the SQL API v1 "
                    f"and would get OS003 at once: {', '.join(f'{r.role} ({r.access})' for r in losing)}. "
                    "Grant them their groups after, or migrate with --sql-api-roles keep (each keeps its access "
                    "on every group, granted in the migration's transaction) or --sql-api-roles revoke (docs/sql.md)"
                )
            # The caller's transaction (env.py joins it): the grants commit with the migration.
            config.attributes["connection"] = connection
            config.attributes["lock_timeout"] = lock_timeout
            config.attributes["stop"] = stop
            applied: list[str] = []

            def on_version_apply(*, step: Any, **_: Any) -> None:  # Alembic's hook, under the migration lock
                applied.extend(step.destination_revision_ids)

            config.attributes["on_version_apply"] = on_version_apply
            alembic_command(config, revision)
            if losing and sql_api_roles == "keep":
                keep_access(connection, losing)
            at = MigrationContext.configure(
                connection, opts=offsetstore.migrations.context_options()
            ).get_current_revision()
            connection.commit()
            return Upgraded(tuple(applied), at, tuple(losing))
    finally:
        engine.dispose()


def _losing_access(connection: Connection, revision: str) -> list[RoleAccess]:
    """The SQL API v1 callers an upgrade to ``revision`` across migration 0011 would lock out; none otherwise."""
    at = MigrationContext.configure(connection, opts=offsetstore.migrations.context_options()).get_current_revision()
    crosses = (
        at is not None and at < NARROWING_REVISION and (revision in ("head", "heads") or revision >= NARROWING_REVISION)
    )
    return roles_losing_access(connection) if crosses else []


def current(database_url: str) -> str | None:
    """Return the revision the database is at, None if the store was never installed."""
    engine = plain_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts=offsetstore.migrations.context_options())
            return context.get_current_revision()
    finally:
        engine.dispose()
