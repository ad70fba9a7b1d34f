"""A new consumer of 10,000 partitions, in a table whose statistics have not seen it yet.

In production the offsets table is large and one new group's rows do not trigger autovacuum's
analyze, so PostgreSQL estimates the group at about one row. A join of the request's partitions
to the group's offsets, planned for one row, was a nested loop comparing every partition with
every stored row: a compare-and-set commit of 10,000 partitions took 6 s and passed the
statement timeout in CI. The check is now planned without nested loops (storage/sql/write_batch.sql). Counted here in rows, not seconds: PostgreSQL's own executor
statistics (auto_explain with ANALYZE) say how many rows a join filter threw away.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import psycopg
import pytest

from offsetstore.runtime import migrate
from tests.fixtures.fix_db import conninfo

PARTITIONS = 10_000
_REMOVED = re.compile(r"Rows Removed by Join Filter: (\d+)")


@pytest.fixture
def conn(scratch_database_url: str) -> Iterator[psycopg.Connection]:
    """A database of its own with many small groups, analyzed; then a group of 10,000 partitions."""
    migrate.upgrade(scratch_database_url)
    with psycopg.connect(conninfo(scratch_database_url), autocommit=True) as c:
        try:
            c.execute("LOAD 'auto_explain'")
        except psycopg.errors.UndefinedFile:
            pytest.skip("auto_explain is not in this PostgreSQL (the embedded one): CI's second pass runs this file")
        c.execute("INSERT INTO offsetstore.groups (group_id) SELECT 'small-' || n FROM generate_series(1, 500) AS n")
        c.execute(
            'INSERT INTO offsetstore.offsets (group_id, topic, "partition", "offset", metadata)'
            " SELECT 'small-' || n, 't', 0, 1, '' FROM generate_series(1, 500) AS n"
        )
        c.execute("ANALYZE offsetstore.offsets")
        commit(c, "big", [p + 1 for p in range(PARTITIONS)])
        yield c


def commit(c: psycopg.Connection, group: str, offsets: list[int], expected: list[int] | None = None) -> int:
    row = c.execute(
        "SELECT count(*) FROM offsetstore.commit_offsets(%s, 0, %s, %s, %s, %s)",
        [group, ["t"] * len(offsets), list(range(len(offsets))), offsets, expected],
    ).fetchone()
    assert row is not None
    return int(row[0])


def rows_thrown_away(c: psycopg.Connection, action: Callable[[], object]) -> int:
    """Run ``action`` with every plan (nested ones included) reported, and sum its join filters' removed rows.

    auto_explain is loaded in ``c``'s session already (the fixture).
    """
    plans: list[str] = []
    c.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    for name, value in [
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_timing", "off"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_level", "notice"),
        ("client_min_messages", "notice"),
    ]:
        c.execute("SELECT set_config(%s, %s, false)", [name, value])
    try:
        action()
    finally:
        c.execute("SET auto_explain.log_min_duration = -1")
    assert any("offsets" in p for p in plans), "auto_explain reported no plan: nothing was measured"
    return sum(int(n) for p in plans for n in _REMOVED.findall(p))


def test_a_compare_and_set_commit_compares_each_partition_once(conn: psycopg.Connection) -> None:
    expected = [p + 1 for p in range(PARTITIONS)]
    removed = rows_thrown_away(conn, lambda: commit(conn, "big", [p + 2 for p in range(PARTITIONS)], expected))
    # A hash join throws nothing away; the nested loop over the group's rows threw away 49,995,000.
    assert removed < PARTITIONS, f"{removed:,} rows compared and thrown away for {PARTITIONS:,} partitions"
    assert conn.execute("SELECT min(\"offset\") FROM offsetstore.offsets WHERE group_id = 'big'").fetchone() == (2,)
