"""A DescribeGroup first page of a large group is weighed by its page when a kept verdict serves it, and whole otherwise (issue 55).

The scan-cost policy counted every partition of the group before each first page (up to
10,000 index entries, a transaction of ~12 ms, more than the page's own read once the verdict
is kept). Now a kept verdict fresh enough means the page judges its page only: it is admitted
at its page size and the group is not counted. Without one (none yet, too old, a reset since)
the page evaluates the whole group, and is still admitted as the whole group: a tenant does
not get a whole-group evaluation for the price of a page. The rows each weighing touches are
read from PostgreSQL's own per-transaction counters, not timed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.calls import FACTS
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server.admission import cost_of
from offsetstore.server.call import Call
from offsetstore.server.scan_cost import ScanCost
from offsetstore.storage import kept_verdicts, scans
from offsetstore.storage import validate as check
from offsetstore.storage.status import DEFAULT_RULES
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.retention import fresh
from tests.fixtures.storage import engine_of

LARGE = kept_verdicts.LARGE_GROUP * 3
PAGE = 100


@pytest.fixture(scope="module")
def kstore(module_database_url: str) -> Iterator[Store]:
    store = Store.open(StoreConfig(module_database_url, hot_pool_size=2))
    yield store
    store.dispose()


def _group(store: Store, partitions: int) -> str:
    group_id, topic = fresh("weigh-"), fresh("t-")
    with engine_of(store).begin() as conn:
        conn.execute(sa.text("INSERT INTO offsetstore.groups (group_id, generation) VALUES (:g, 1)"), {"g": group_id})
        conn.execute(
            sa.text(
                'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", commit_time)'
                " SELECT :g, :t, i, 10, now() FROM generate_series(0, :n - 1) i"
            ),
            {"g": group_id, "t": topic, "n": partitions},
        )
    return group_id


def _keep(store: Store, group_id: str, age: float = 0.0) -> None:
    """The group's verdict evaluated and kept as the maintenance round does, ``age`` seconds old."""
    with engine_of(store).begin() as conn:
        evaluated = storage.drive_steps(conn, kept_verdicts.evaluate_steps(group_id, DEFAULT_RULES))
        kept_verdicts.keep(conn, evaluated, reset_count=0)
        conn.execute(
            sa.text(
                "UPDATE offsetstore.group_verdicts SET evaluated_at = evaluated_at - make_interval(secs => :age)"
                " WHERE group_id = :g"
            ),
            {"g": group_id, "age": age},
        )


def _charged(store: Store, group_id: str, page_size: int = PAGE) -> int:
    """What the gate admits a first page of ``page_size`` at: its cost, or what its scan reads if more (policies.admission.Shared)."""
    call = Call(FACTS["DescribeGroup"], pb.DescribeGroupRequest(group_id=group_id, page_size=page_size))
    call.scanned = store.wait(ScanCost(store.aio).of(call))
    return max(cost_of(call), call.scanned)


_SCANS_OF_OFFSETS = sa.text(
    "SELECT seq_scan + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
    " WHERE schemaname = 'offsetstore' AND relname = 'offsets'"
)


def _weighing_touches(store: Store, group_id: str) -> tuple[int, int]:
    """(statements, index and sequential scans of the offsets table) of weighing a first page.

    The scans are the backend's own counters, read before and after in one transaction (they
    also hold earlier transactions' until the backend reports them: only the difference counts).
    """
    statements: list[str] = []

    def sent(conn: sa.Connection, cursor: object, statement: str, *rest: object) -> None:
        statements.append(statement)

    with engine_of(store).connect() as conn, conn.begin():
        before = conn.execute(_SCANS_OF_OFFSETS).scalar_one()
        sa.event.listen(conn, "before_cursor_execute", sent)
        scans.verdict_partitions(conn, group_id, PAGE, DEFAULT_RULES.window, check.MAX_PARTITIONS)
        sa.event.remove(conn, "before_cursor_execute", sent)
        after = conn.execute(_SCANS_OF_OFFSETS).scalar_one()
    return len(statements), int(after - before)


def test_a_first_page_with_a_kept_verdict_is_weighed_by_its_page_and_the_group_is_not_counted(kstore: Store) -> None:
    group_id = _group(kstore, LARGE)
    _keep(kstore, group_id)
    assert _charged(kstore, group_id) == PAGE
    # One statement (the kept verdict's probe), and not one scan of the offsets table.
    assert _weighing_touches(kstore, group_id) == (1, 0)


def test_a_first_page_without_a_kept_verdict_is_weighed_by_the_whole_group(kstore: Store) -> None:
    group_id = _group(kstore, LARGE)
    # It evaluates every partition for the verdict (tests/storage/test_kept_verdicts.py): it pays for them.
    assert _charged(kstore, group_id) == LARGE
    statements, touched = _weighing_touches(kstore, group_id)
    assert statements == 2 and touched >= 1


def test_a_kept_verdict_the_page_might_not_use_by_its_read_is_weighed_whole(kstore: Store) -> None:
    # Older than half the age a page uses a kept verdict at: by the time an admitted call reads,
    # the page could evaluate the group itself; it is charged for that.
    old = _group(kstore, LARGE)
    _keep(kstore, old, age=scans.WEIGHED_MAX_AGE + 5)
    assert _charged(kstore, old) == LARGE
    # A reset since the evaluation: the page does not use the verdict kept before it.
    reset = _group(kstore, LARGE)
    _keep(kstore, reset)
    with engine_of(kstore).begin() as conn:
        conn.execute(sa.text("UPDATE offsetstore.groups SET reset_count = 1 WHERE group_id = :g"), {"g": reset})
    assert _charged(kstore, reset) == LARGE


def test_the_whole_group_at_once_is_weighed_whole_even_with_a_kept_verdict(kstore: Store) -> None:
    group_id = _group(kstore, LARGE)
    _keep(kstore, group_id)
    assert _charged(kstore, group_id, page_size=0) == LARGE
