"""Alembic migrations of the store's schema, shipped in the package so any install can migrate."""

from __future__ import annotations

from typing import Any

from offsetstore.storage.schema import SCHEMA

__all__ = [
    "HISTORY_PARTITION_PREFIX",
    "MIGRATION_LOCK_ID",
    "MIGRATION_LOCK_TIMEOUT",
    "VERSION_TABLE",
    "context_options",
    "include_name",
]

VERSION_TABLE = "alembic_version"

#: Every partition of ``offset_history`` is named with this prefix.
HISTORY_PARTITION_PREFIX = "offset_history_"

# Key of the PostgreSQL advisory lock held while migrating. Advisory locks are
# per database, so this only serialises migrations of the same database.
MIGRATION_LOCK_ID = 0x6F66_6673_6574_0001
#: Seconds a migrator waits for that lock by default (another migrator, or a squatter) before giving up.
MIGRATION_LOCK_TIMEOUT = 300.0


def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Alembic name filter: the store owns the ``offsetstore`` schema and nothing else."""
    if type_ == "schema":
        # The default schema comes through as None: it is the user's, not ours.
        return name == SCHEMA
    # The history's partitions come and go with retention; the models know only their parent.
    return not (type_ == "table" and name is not None and name.startswith(HISTORY_PARTITION_PREFIX))


def context_options() -> dict[str, Any]:
    """Options for ``MigrationContext.configure`` that env.py and model checks share."""
    return {
        "include_schemas": True,
        "include_name": include_name,
        "version_table": VERSION_TABLE,
        "version_table_schema": SCHEMA,
        "compare_type": True,
        "compare_server_default": True,
    }
