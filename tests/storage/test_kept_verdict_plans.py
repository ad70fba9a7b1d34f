"""A 10,000-partition group's first page of 100 reads what a 100-partition group's whole description does (issue 55).

The first page carries the group's verdict over all its partitions. Judged at the call it read
every partition's facts (six history lookups, a watermark, the sample ring each): ×93–126 a
16-partition group's description in the scale bench. With the verdict kept by the maintenance
(:mod:`offsetstore.storage.kept_verdicts`) the page reads its own 100 partitions and one row
more. Counted as tests/storage/test_read_plans.py counts (auto_explain with ANALYZE: rows the
scans read, blocks touched), with the statistics of the store before the big group was
bulk-loaded (autovacuum held off), then after ANALYZE. The same page without a kept verdict is
the negative control: it must read far more than the bound, or the bound proves nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.runtime import migrate
from offsetstore.storage import PageRequest, kept_verdicts
from offsetstore.storage.engine import create_engine
from offsetstore.storage.status import DEFAULT_RULES
from tests.fixtures.fix_db import conninfo, new_database
from tests.fixtures.plans import Reads, load_auto_explain, reads

PAGE = 100
BIG = 10_000
RATIO = 1.5
SLACK_ROWS = 50
SLACK_BLOCKS = 100


def _group(name: str, topics: int, partitions: int, commit_age: str) -> str:
    """A group of ``topics`` x ``partitions`` offsets behind their log ends, with watermarks, samples and 5 history rows each."""
    return f"""
INSERT INTO offsetstore.groups (group_id, generation) VALUES ('{name}', 1);
INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", commit_time)
    SELECT '{name}', '{name}-' || t, p, 5000, now() - interval '{commit_age}'
    FROM generate_series(0, {topics - 1}) t, generate_series(0, {partitions - 1}) p;
INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset, updated_at)
    SELECT '{name}-' || t, p, 0, 6000, now() FROM generate_series(0, {topics - 1}) t, generate_series(0, {partitions - 1}) p;
INSERT INTO offsetstore.watermark_samples (topic, partition, slot, sampled_at, log_end_offset)
    SELECT '{name}-' || t, p, s, now() - s * interval '10 s', 6000 - s
    FROM generate_series(0, {topics - 1}) t, generate_series(0, {partitions - 1}) p, generate_series(0, 29) s;
INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset, kind, generation, change_time)
    SELECT o.group_id, o.topic, o.partition, 4990 - 10 * k, 5000 - 10 * k, 1, 1, now() - interval '{commit_age}' - k * interval '5 s'
    FROM offsetstore.offsets o, generate_series(0, 4) k WHERE o.group_id = '{name}';
"""


@dataclass
class Plans:
    engine: sa.Engine
    admin: psycopg.Connection
    whole: Reads  # the 100-partition group's whole description


def measure(engine: sa.Engine, group_id: str, page_size: int) -> Reads:
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")  # the transaction's settings first (jit off, as the server runs)
        raw = conn.connection.driver_connection
        assert isinstance(raw, psycopg.Connection)
        assert load_auto_explain(raw)
        page = PageRequest(page_size=page_size, key=storage.token_key(conn))
        found = reads(raw, lambda: storage.describe_group(conn, group_id, page))
        conn.rollback()
    return found


def keep_verdict(engine: sa.Engine, group_id: str) -> None:
    """What a maintenance round does for the group: evaluate it over every partition, keep the verdict."""
    with engine.begin() as conn:
        evaluated = storage.drive_steps(conn, kept_verdicts.evaluate_steps(group_id, DEFAULT_RULES))
        reset_count = conn.execute(
            sa.text("SELECT reset_count FROM offsetstore.groups WHERE group_id = :g"), {"g": group_id}
        )
        kept_verdicts.keep(conn, evaluated, reset_count.scalar_one())


@pytest.fixture(scope="module")
def plans(database_url: str) -> Iterator[Plans]:
    with new_database(database_url) as url:
        with psycopg.connect(conninfo(url), autocommit=True) as probe:
            if not load_auto_explain(probe):
                pytest.skip(
                    "auto_explain is not in this PostgreSQL (the embedded one): CI's second pass runs this file"
                )
        migrate.upgrade(url)
        engine = create_engine(url, pool_size=1, statement_timeout_ms=60_000)
        with psycopg.connect(conninfo(url), autocommit=True) as admin:
            admin.execute(_group("probe", 1, PAGE, "30 s"))
            admin.execute("ANALYZE")
            whole = measure(engine, "probe", 0)
            for (table,) in admin.execute(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'offsetstore' AND c.relkind = 'r'"
            ).fetchall():
                admin.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            admin.execute(_group("big", 10, BIG // 10, "30 s"))
            try:
                yield Plans(engine, admin, whole)
            finally:
                engine.dispose()


def within(name: str, bound: Reads, found: Reads) -> None:
    assert found.rows <= bound.rows * RATIO + SLACK_ROWS, (
        f"{name}: {found.rows:,} rows read, {bound.rows:,} by a {PAGE}-partition group's whole description;"
        f" by table or index: {found.by_relation()}"
    )
    assert found.blocks <= bound.blocks * RATIO + SLACK_BLOCKS, (
        f"{name}: {found.blocks:,} blocks touched, {bound.blocks:,} by a {PAGE}-partition group's whole description;"
        f" rows by table or index: {found.by_relation()}"
    )


@pytest.mark.parametrize("statistics", ["stale", "analyzed"])
def test_a_first_page_of_a_10_000_partition_group_reads_what_its_page_does(plans: Plans, statistics: str) -> None:
    if statistics == "analyzed":
        plans.admin.execute("ANALYZE")
    keep_verdict(plans.engine, "big")
    found = measure(plans.engine, "big", PAGE)
    print(
        f"\n{statistics}: {found.rows:,} rows, {found.blocks:,} blocks; whole {PAGE}: {plans.whole.rows:,}, {plans.whole.blocks:,}"
    )
    within(f"a first page of {PAGE} of {BIG:,} ({statistics})", plans.whole, found)


def test_without_a_kept_verdict_the_first_page_reads_the_whole_group(plans: Plans) -> None:
    # The negative control: the page that evaluates the group's verdict itself (as before the
    # kept verdicts, and still where none applies) is far past the bound above.
    plans.admin.execute("DELETE FROM offsetstore.group_verdicts")
    found = measure(plans.engine, "big", PAGE)
    print(f"\nwithout a kept verdict: {found.rows:,} rows, {found.blocks:,} blocks")
    assert found.rows > 10 * (plans.whole.rows * RATIO + SLACK_ROWS), found.by_relation()
