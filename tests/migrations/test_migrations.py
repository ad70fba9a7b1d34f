"""The migrations build exactly the models' schema, revert cleanly and survive concurrent runs."""

from __future__ import annotations

import subprocess
import sys
import threading

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.pool import NullPool

from offsetstore.migrations import HISTORY_PARTITION_PREFIX, context_options
from offsetstore.runtime import migrate
from offsetstore.storage import schema


def head_revision() -> str:
    config = migrate.alembic_config("postgresql://unused")
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def inspect_database(url: str) -> tuple[list[str], list[str]]:
    """Return the schema names and the tables in ``offsetstore``."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            schemas = inspector.get_schema_names()
            if schema.SCHEMA not in schemas:
                return schemas, []
            # The history's partitions are the parent's business (tested in test_retention.py).
            tables = [
                t for t in inspector.get_table_names(schema=schema.SCHEMA) if not t.startswith(HISTORY_PARTITION_PREFIX)
            ]
            return schemas, sorted(tables)
    finally:
        engine.dispose()


def model_differences(url: str) -> list[object]:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts=context_options())
            return compare_metadata(context, schema.metadata)
    finally:
        engine.dispose()


def test_normalize_url() -> None:
    url = "postgresql://u:p%40ss@h/db"
    assert migrate.normalize_url(url) == "postgresql+psycopg://u:p%40ss@h/db"
    assert migrate.normalize_url("postgres://h/db") == "postgresql+psycopg://h/db"
    assert migrate.normalize_url("postgresql+psycopg://h/db") == "postgresql+psycopg://h/db"


def test_models_match_migrations(scratch_database_url: str) -> None:
    migrate.upgrade(scratch_database_url)
    assert model_differences(scratch_database_url) == []


def test_upgrade_downgrade_upgrade(scratch_database_url: str) -> None:
    url = scratch_database_url
    assert migrate.current(url) is None

    migrate.upgrade(url)
    assert migrate.current(url) == head_revision()
    schemas, tables = inspect_database(url)
    model_tables = sorted(t.name for t in schema.metadata.tables.values())
    assert tables == sorted([*model_tables, "alembic_version"])

    migrate.downgrade(url, "base")
    assert migrate.current(url) is None
    schemas, tables = inspect_database(url)
    assert tables == []
    assert schema.SCHEMA not in schemas
    # The user's own schema was never touched.
    assert "public" in schemas

    migrate.upgrade(url)
    assert migrate.current(url) == head_revision()
    assert model_differences(url) == []


def test_upgrade_is_idempotent(scratch_database_url: str) -> None:
    migrate.upgrade(scratch_database_url)
    migrate.upgrade(scratch_database_url)
    assert migrate.current(scratch_database_url) == head_revision()


def test_downgrade_keeps_foreign_objects_in_the_schema(scratch_database_url: str) -> None:
    url = scratch_database_url
    migrate.upgrade(url)
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE {schema.SCHEMA}.not_ours (x int)")
    finally:
        engine.dispose()

    migrate.downgrade(url, "base")
    assert migrate.current(url) is None
    assert inspect_database(url)[1] == ["not_ours"]


def test_concurrent_upgrades_from_threads(scratch_database_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        try:
            barrier.wait()
            migrate.upgrade(scratch_database_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert migrate.current(scratch_database_url) == head_revision()
    assert model_differences(scratch_database_url) == []


def test_concurrent_upgrades_from_processes(scratch_database_url: str) -> None:
    # Threads share one in-process lock; separate processes meet only at the
    # database's advisory lock, which is what concurrent servers rely on.
    # Each child imports first and then waits for "go", so that they really
    # migrate at the same moment.
    code = (
        "import sys\n"
        "from offsetstore.runtime.migrate import upgrade\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "upgrade(sys.argv[1])\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, scratch_database_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert migrate.current(scratch_database_url) == head_revision()
    assert model_differences(scratch_database_url) == []


def test_groups_deleted_before_tombstones_keep_their_generation(scratch_database_url: str) -> None:
    # Revision 0001 deleted a group's row and kept its generation only in the history.
    migrate.upgrade(scratch_database_url, "0001")
    engine = sa.create_engine(scratch_database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset,"
                " kind, generation) VALUES ('gone', 't', 0, NULL, 5, 1, 3), ('gone', 't', 0, 5, NULL, 3, 7)"
            )
        migrate.upgrade(scratch_database_url)
        from offsetstore import storage

        with engine.begin() as conn:
            assert storage.join_group(conn, "gone") == 8
        migrate.downgrade(scratch_database_url, "0001")
        migrate.upgrade(scratch_database_url)
    finally:
        engine.dispose()


def _history(conn: sa.Connection) -> list[tuple]:
    return [
        tuple(r)
        for r in conn.exec_driver_sql(
            "SELECT id, group_id, topic, partition, previous_offset, new_offset, kind, generation, change_time, actor"
            " FROM offsetstore.offset_history ORDER BY id"
        )
    ]


def test_partitioning_keeps_every_history_row(scratch_database_url: str) -> None:
    # 0002 -> head turns the history into a partitioned table; nothing may be lost either way.
    migrate.upgrade(scratch_database_url, "0002")
    engine = sa.create_engine(scratch_database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO offsetstore.groups (group_id, generation) VALUES ('g', 4)")
            conn.exec_driver_sql(
                "INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset,"
                " kind, generation, change_time, actor)"
                " SELECT 'g', 't', mod(n, 3), n - 1, n, 1 + mod(n, 3), 4, now() - make_interval(days => mod(n, 40)), 'a'"
                " FROM generate_series(1, 3000) AS n"
            )
            before = _history(conn)
        migrate.upgrade(scratch_database_url)
        with engine.begin() as conn:
            assert _history(conn) == before
            assert (
                conn.exec_driver_sql(
                    "SELECT relkind FROM pg_class WHERE oid = 'offsetstore.offset_history'::regclass"
                ).scalar_one()
                == "p"
            )
            # New rows continue the ids and land in the partitions.
            from offsetstore import storage
            from offsetstore.core.types import OffsetCommit

            storage.commit_offsets(conn, "g", [OffsetCommit("t", 0, 99_999)])
            after = _history(conn)
            assert after[:-1] == before and after[-1][0] > before[-1][0]
            assert conn.exec_driver_sql(
                "SELECT active_at IS NOT NULL FROM offsetstore.groups WHERE group_id = 'g'"
            ).scalar_one()
        migrate.downgrade(scratch_database_url, "0002")
        with engine.begin() as conn:
            assert _history(conn) == after
            assert (
                conn.exec_driver_sql(
                    "SELECT relkind FROM pg_class WHERE oid = 'offsetstore.offset_history'::regclass"
                ).scalar_one()
                == "r"
            )
            conn.exec_driver_sql(
                "INSERT INTO offsetstore.offset_history (group_id, topic, partition, kind, generation)"
                " VALUES ('g', 't', 0, 1, 4)"
            )
            assert _history(conn)[-1][0] > after[-1][0]
        migrate.upgrade(scratch_database_url)
        with engine.begin() as conn:
            assert _history(conn)[: len(after)] == after
        assert model_differences(scratch_database_url) == []
    finally:
        engine.dispose()
