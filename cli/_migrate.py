"""``offsetstore migrate``: its flags (the settings' own, as ``serve`` has them) and the command.

It refuses what ``serve`` refuses at start with the same exit code, 2: a migration lock held
past ``--migration-lock-timeout``, a database a newer release migrated, a database it cannot
reach, SQL API callers an upgrade would lock out. It says what it did: the revisions it
applied, or that the database already was at the target (nothing to do).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from offsetstore.cli._serve_flags import add_serve_flags

__all__ = ["add_migrate_parser", "run"]

#: The settings ``migrate`` reads (flags, ``OFFSETSTORE_*`` variables, defaults), as ``serve`` does.
SETTINGS = ("database_url", "data_dir", "sql_api_roles", "migration_lock_timeout")


def add_migrate_parser(sub: Any) -> argparse.ArgumentParser:
    migrate: argparse.ArgumentParser = sub.add_parser(
        "migrate",
        help="apply the database migrations",
        description="Apply the database migrations, as serve does at start. With no database configured it "
        "migrates the embedded PostgreSQL under --data-dir. Every flag but --revision can also be set as the "
        "environment variable its help names.",
        usage="offsetstore migrate [OPTIONS]",
    )
    migrate.add_argument("--revision", default="head", help="target revision (default head)")
    add_serve_flags(migrate, SETTINGS)
    return migrate


def run(args: argparse.Namespace) -> int:
    from offsetstore.server.config import Settings

    try:
        settings = Settings.load({name: getattr(args, name) for name in SETTINGS})
    except ValueError as error:
        print(f"offsetstore: {error}", file=sys.stderr)
        return 2
    if settings.database_url is not None:
        return _upgrade(settings, settings.database_url, args.revision, "")
    from offsetstore.runtime.embedded import EmbeddedPostgres

    with EmbeddedPostgres(settings.data_dir) as pg:
        return _upgrade(settings, pg.url, args.revision, f"the embedded database in {settings.data_dir}")


def _upgrade(settings: Any, url: str, revision: str, embedded: str) -> int:
    """Upgrades ``url`` and says what it did (``embedded``: which embedded database, if it is one); the exit code."""
    import sqlalchemy.exc

    from offsetstore.runtime import migrate
    from offsetstore.storage import database_url

    try:
        done = migrate.upgrade(
            url, revision, lock_timeout=settings.migration_lock_timeout, sql_api_roles=settings.sql_api_roles or None
        )
    except (migrate.SqlApiLockOut, migrate.LockWaitTimedOut, migrate.DatabaseAhead) as error:
        print(f"offsetstore: {error}", file=sys.stderr)
        return 2
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as error:
        reason = str(getattr(error, "orig", error)).strip().splitlines()[0]
        print(f"offsetstore: cannot reach the database at {database_url.display(url)}: {reason}", file=sys.stderr)
        return 2
    count = len(done.applied)
    if count:
        print(
            f"migrated {embedded + ' ' if embedded else ''}to {done.revision}: {count} migration{'s' * (count > 1)} applied"
        )
    else:
        print(f"{embedded or 'the database'} is already at {done.revision}: nothing to migrate")
    if done.roles:
        kept = "kept their access on every group" if settings.sql_api_roles == "keep" else "lost their access"
        print(f"SQL API v1 roles that {kept}: {', '.join(f'{r.role} ({r.access})' for r in done.roles)}")
    return 0
