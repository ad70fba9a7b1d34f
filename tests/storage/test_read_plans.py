"""A read costs what it returns: the rows its plans read do not grow with other groups, whatever the statistics say.

Each probe runs on a small store, then again after other groups 100 times the probed one's size
were bulk-loaded beside it: first with the small store's statistics (autovacuum held off, as right
after an import or a new large consumer), then after ANALYZE. The rows its plans read (scans'
rows kept and filtered out, over every loop) and the blocks they touched must stay within a
margin of the small store's. Counted by PostgreSQL's own executor statistics (auto_explain with
ANALYZE), not in seconds: the point is the ratio, so the data stays small enough for seconds.

Before: a 16-partition group's description read every topic's watermarks (a hash join) and the
whole history's index (an EXISTS planned as a hashed subplan); ListTopics and ListGroups read
every watermark; with stale statistics, a page of a new large group scanned the watermarks once
per row (a nested loop: 10,000 x 10,000 rows for the 10,000-partition description the limits
test once waited 120 s for).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg
import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.types import OffsetCommit
from offsetstore.runtime import migrate
from offsetstore.storage import PageRequest, group_metrics, scans
from offsetstore.storage.engine import create_engine
from tests.fixtures.fix_db import conninfo, new_database
from tests.fixtures.plans import Reads, load_auto_explain, reads

PROBED = 16  # the probed group's partitions
LARGER = 100  # how many times larger each other group is
OTHERS = 10  # how many such groups

#: A probe may read this much more than on the small store (a deeper index: one more block a
#: descent), never a multiple.
RATIO = 1.5
SLACK_ROWS = 50
SLACK_BLOCKS = 100

_SMALL = f"""
INSERT INTO offsetstore.groups (group_id, generation)
    SELECT 'small-' || lpad(g::text, 3, '0'), 1 FROM generate_series(1, 30) g UNION ALL SELECT 'probe', 1;
INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", commit_time)
    SELECT 'small-' || lpad(g::text, 3, '0'), 'st', p, 1000, now() - interval '1 minute'
    FROM generate_series(1, 30) g, generate_series(0, {PROBED - 1}) p
    UNION ALL SELECT 'probe', 'pt', p, 1000, now() - interval '1 minute' FROM generate_series(0, {PROBED - 1}) p;
INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset, updated_at)
    SELECT t, p, 0, 1100, now() FROM unnest(array['st', 'pt']) t, generate_series(0, {PROBED - 1}) p;
INSERT INTO offsetstore.watermark_samples (topic, partition, slot, sampled_at, log_end_offset)
    SELECT t, p, s, now() - s * interval '10 s', 1100 - s
    FROM unnest(array['st', 'pt']) t, generate_series(0, {PROBED - 1}) p, generate_series(0, 29) s;
INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset, kind, generation, change_time)
    SELECT o.group_id, o.topic, o.partition, 990 - 10 * k, 1000 - 10 * k, 1, 1, now() - interval '1 minute' - k * interval '5 s'
    FROM offsetstore.offsets o, generate_series(0, 4) k;
"""

# The other groups: LARGER x the probed one's partitions each, on topics of their own.
_BIG_TOPICS = PROBED
_BIG_PARTITIONS = PROBED * LARGER // _BIG_TOPICS
_BIG = f"""
INSERT INTO offsetstore.groups (group_id, generation) SELECT 'big-' || lpad(g::text, 3, '0'), 1 FROM generate_series(1, {OTHERS}) g;
INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", commit_time)
    SELECT 'big-' || lpad(g::text, 3, '0'), 'bt-' || t, p, 5000, now() - interval '30 s'
    FROM generate_series(1, {OTHERS}) g, generate_series(0, {_BIG_TOPICS - 1}) t, generate_series(0, {_BIG_PARTITIONS - 1}) p;
INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset, updated_at)
    SELECT 'bt-' || t, p, 0, 6000, now() FROM generate_series(0, {_BIG_TOPICS - 1}) t, generate_series(0, {_BIG_PARTITIONS - 1}) p;
INSERT INTO offsetstore.watermark_samples (topic, partition, slot, sampled_at, log_end_offset)
    SELECT 'bt-' || t, p, s, now() - s * interval '10 s', 6000 - s
    FROM generate_series(0, {_BIG_TOPICS - 1}) t, generate_series(0, {_BIG_PARTITIONS - 1}) p, generate_series(0, 29) s;
INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset, kind, generation, change_time)
    SELECT o.group_id, o.topic, o.partition, 4990 - 10 * k, 5000 - 10 * k, 1, 1, now() - interval '30 s' - k * interval '5 s'
    FROM offsetstore.offsets o, generate_series(0, 4) k WHERE o.group_id LIKE 'big-%';
"""

# The probes: the storage calls behind CommitOffsets, FetchOffsets, DescribeGroup (whole, and a
# first page whose group verdict is read apart), ListGroups, ListTopics, ListOffsetHistory, the
# weights the server admits reads at, and the per-group lag collector's statement.
PROBES: dict[str, Callable[[sa.Connection], object]] = {
    "commit": lambda c: storage.commit_offsets(c, "probe", [OffsetCommit("pt", 3, 1001)]),
    "fetch": lambda c: storage.fetch_offsets(c, "probe"),
    "describe": lambda c: storage.describe_group(c, "probe"),
    "describe page and verdict": lambda c: storage.describe_group(c, "probe", PageRequest(page_size=PROBED // 2)),
    "list groups": lambda c: storage.list_groups(c, "small-", page_size=PROBED),
    "list topics": lambda c: storage.list_topics(c, "probe", page_size=10),
    "history": lambda c: storage.list_offset_history(c, "probe", page_size=50),
    # What the server weighs a ListGroups page and a DescribeGroup at before admitting them.
    "list groups' weight": lambda c: scans.listed_partitions(c, "small-", PROBED, "", 10_000),
    "describe's weight": lambda c: scans.group_partitions(c, "probe", 10_000),
    "group metrics": lambda c: c.execute(
        group_metrics._PARTITION_QUERY, {"detailed": ["probe"], "summarized": ["small-001"], "window": 60.0}
    ).all(),
}


@dataclass
class Store:
    engine: sa.Engine
    admin: psycopg.Connection
    small: dict[str, Reads]


def measure(engine: sa.Engine, probe: Callable[[sa.Connection], object]) -> Reads:
    """The probe's reads in a transaction of the store's own settings (rolled back: a commit probe leaves nothing)."""
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")  # the transaction's settings first (jit off, as the server runs)
        raw = conn.connection.driver_connection
        assert isinstance(raw, psycopg.Connection)
        assert load_auto_explain(raw)
        found = reads(raw, lambda: probe(conn))
        conn.rollback()
    return found


@pytest.fixture(scope="module")
def store(database_url: str) -> Iterator[Store]:
    """A small store, measured; then the others bulk-loaded with autovacuum held off (stale statistics)."""
    with new_database(database_url) as url:
        with psycopg.connect(conninfo(url), autocommit=True) as probe:
            if not load_auto_explain(probe):
                pytest.skip(
                    "auto_explain is not in this PostgreSQL (the embedded one): CI's second pass runs this file"
                )
        migrate.upgrade(url)
        engine = create_engine(url, pool_size=1, statement_timeout_ms=60_000)
        with psycopg.connect(conninfo(url), autocommit=True) as admin:
            admin.execute(_SMALL)
            admin.execute("ANALYZE")
            small = {name: measure(engine, probe) for name, probe in PROBES.items()}
            leaves = admin.execute(
                "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'offsetstore' AND c.relkind = 'r'"
            ).fetchall()
            for (table,) in leaves:
                admin.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            admin.execute(_BIG)
            try:
                yield Store(engine, admin, small)
            finally:
                engine.dispose()


def within(name: str, small: Reads, large: Reads) -> None:
    assert large.rows <= small.rows * RATIO + SLACK_ROWS, (
        f"{name}: {large.rows:,} rows read beside groups {LARGER}x larger, {small.rows:,} on the small store;"
        f" by table or index: {large.by_relation()}"
    )
    assert large.blocks <= small.blocks * RATIO + SLACK_BLOCKS, (
        f"{name}: {large.blocks:,} blocks touched beside groups {LARGER}x larger, {small.blocks:,} on the small store;"
        f" rows by table or index: {large.by_relation()}"
    )


@pytest.mark.parametrize("name", list(PROBES))
def test_a_read_beside_larger_groups_reads_what_it_did_with_stale_statistics(store: Store, name: str) -> None:
    within(name, store.small[name], measure(store.engine, PROBES[name]))


@pytest.mark.parametrize("name", list(PROBES))
def test_a_read_beside_larger_groups_reads_what_it_did_after_analyze(store: Store, name: str) -> None:
    store.admin.execute("ANALYZE")
    within(name, store.small[name], measure(store.engine, PROBES[name]))


def test_a_later_page_of_a_large_group_reads_what_a_small_group_s_whole_description_does(store: Store) -> None:
    # A later page has no group verdict to read: its statement alone, LIMIT before the columns.
    with store.engine.connect() as conn:
        token = storage.describe_group(conn, "big-001", PageRequest(page_size=PROBED, key=storage.token_key(conn)))
    later = measure(
        store.engine,
        lambda c: storage.describe_group(
            c, "big-001", PageRequest(page_size=PROBED, page_token=token.next_page_token, key=storage.token_key(c))
        ),
    )
    within("a later page of 16 of a 1,600-partition group", store.small["describe"], later)
