"""The history as the mirror's feed (storage/changes.py): every writer's rows after a cursor, ids not yet visible, rollbacks settled."""

from __future__ import annotations

import time
import uuid

from offsetstore import storage
from offsetstore.core.types import OffsetCommit
from offsetstore.storage.changes import changes_since, history_end, latest_offsets


def commit(engine, group: str, topic: str, offset: int) -> None:
    with engine.begin() as conn:
        storage.commit_offsets(conn, group, [OffsetCommit(topic, 0, offset)])


def test_an_open_transactions_id_is_a_hole_until_it_commits_or_rolls_back(engine, topic):
    prefix = f"ch-{uuid.uuid4().hex[:8]}-"
    with engine.begin() as conn:
        start = history_end(conn)
    commit(engine, f"{prefix}a", topic, 1)
    with engine.connect() as open_conn:
        tx = open_conn.begin()
        storage.commit_offsets(open_conn, f"{prefix}open", [OffsetCommit(topic, 0, 2)])
        commit(engine, f"{prefix}c", topic, 3)
        with engine.begin() as conn:
            page = changes_since(conn, start, [], [prefix], 1000)
        mine = [c for c in page.after if c.group_id is not None]
        assert [c.group_id for c in mine] == [f"{prefix}a", f"{prefix}c"]  # the open one's row is not visible
        hole = (mine[0].id + 1, mine[1].id - 1)  # its id lies between them
        assert hole[0] <= hole[1]
        tag = page.xmax
        with engine.begin() as conn:
            still = changes_since(conn, mine[1].id, [hole], [prefix], 1000)
        assert not [c for c in still.in_holes if c.group_id] and still.xmin < tag  # not settled: it runs
        tx.rollback()
    # Once every transaction running then has ended (other sessions' too), a hole still empty was rolled back.
    deadline = time.monotonic() + 60
    while True:
        with engine.begin() as conn:
            after = changes_since(conn, mine[1].id, [hole], [prefix], 1000)
        assert not [c for c in after.in_holes if c.group_id]
        if after.xmin >= tag:
            break
        assert time.monotonic() < deadline, "a transaction of the cluster has been running for a minute"
        time.sleep(0.1)


def test_a_hole_shows_the_row_once_its_transaction_commits(engine, topic):
    prefix = f"ch-{uuid.uuid4().hex[:8]}-"
    with engine.begin() as conn:
        start = history_end(conn)
    with engine.connect() as open_conn:
        with open_conn.begin():
            storage.commit_offsets(open_conn, f"{prefix}late", [OffsetCommit(topic, 0, 7)])
            commit(engine, f"{prefix}early", topic, 5)
            with engine.begin() as conn:
                page = changes_since(conn, start, [], [prefix], 1000)
    early = next(c for c in page.after if c.group_id == f"{prefix}early")
    with engine.begin() as conn:
        found = changes_since(conn, early.id, [(start + 1, early.id - 1)], [prefix], 1000)
        late = [c for c in found.in_holes if c.group_id is not None]
        assert [(c.group_id, c.topic, c.partition) for c in late] == [(f"{prefix}late", topic, 0)]
        assert latest_offsets(conn, [(f"{prefix}late", topic, 0), (f"{prefix}gone", topic, 0)]) == {
            (f"{prefix}late", topic, 0): 7
        }


def test_other_groups_rows_fill_the_cursors_way_without_their_names(engine, topic):
    prefix = f"ch-{uuid.uuid4().hex[:8]}-"
    with engine.begin() as conn:
        start = history_end(conn)
    commit(engine, f"other-{uuid.uuid4().hex[:8]}", topic, 1)
    commit(engine, f"{prefix}mine", topic, 2)
    with engine.begin() as conn:
        page = changes_since(conn, start, [], [prefix], 1000)
    names = [c.group_id for c in page.after]
    assert f"{prefix}mine" in names and None in names
    assert all(name is None or name.startswith(prefix) for name in names)
