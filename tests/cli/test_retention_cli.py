"""Retention from the command line (groups list --idle-for, groups expire), and resets to a time older than
the kept history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from offsetstore.cli import groups as cli
from offsetstore.client import (
    InvalidArgumentError,
    OffsetCommit,
    OffsetStoreClient,
)
from offsetstore.storage import retention
from offsetstore.storage.engine import create_engine
from tests.fixtures.fix_server import ServerHandle
from tests.fixtures.retention import fresh, midnight
from tests.fixtures.waits import wait_for

# --- the CLI ----------------------------------------------------------------------------


def test_cli_lists_what_would_expire_and_expires_only_with_execute(
    server: ServerHandle, client: OffsetStoreClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # The session's server and database: every call is confined to this test's prefix.
    prefix = fresh("cli-")
    group = prefix + "-a"
    client.commit_offsets(group, {("t", 0): 7})
    wait_for(lambda: client.expire_groups(1, prefix=prefix) != [], "the group idle for 1 s", 10)

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = cli.main([*argv, "--server", server.address])
        return code, capsys.readouterr().out

    code, out = run("list", "--prefix", prefix)
    assert code == 0 and out.splitlines()[0].split()[:2] == ["GROUP", "GENERATION"]  # the usual listing
    code, out = run("list", "--prefix", prefix, "--idle-for", "1s")
    assert code == 0
    assert out.splitlines()[0].split() == ["GROUP", "GENERATION", "PARTITIONS", "LAST-ACTIVE", "IDLE"]
    assert out.splitlines()[1].split()[:3] == [group, "0", "1"]
    code, out = run("list", "--prefix", prefix, "--idle-for", "1h")
    assert code == 0 and len(out.splitlines()) == 1

    code, out = run("expire", "--prefix", prefix, "--idle-for", "PT1S")  # kafka's form, as --by-duration takes
    assert code == 0 and "Dry run" in out and group in out
    assert client.fetch_offsets(group).offsets[("t", 0)].offset == 7

    code, out = run("--output", "json", "expire", "--prefix", prefix, "--idle-for", "1s", "--execute")
    assert code == 0
    document = json.loads(out)
    assert document["dry_run"] is False and [g["group_id"] for g in document["groups"]] == [group]
    assert client.fetch_offsets(group).offsets == {}
    code, out = run("history", group)
    assert code == 0 and "EXPIRE" in out


def test_last_active_is_one_instant_in_describe_and_in_list_idle_for(
    server: ServerHandle, client: OffsetStoreClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 59: LAST-ACTIVE is the latest commit, join or reset wherever it is shown; here the join is last."""
    prefix = fresh("cli-active-")
    group = prefix + "-a"
    client.commit_offsets(group, {("t", 0): 7})
    client.join_group(group, "worker-1")
    wait_for(lambda: client.expire_groups(1, prefix=prefix) != [], "the group idle for 1 s", 10)

    def document(*argv: str) -> object:
        capsys.readouterr()
        assert cli.main([*argv, "--output", "json", "--server", server.address]) == 0
        return json.loads(capsys.readouterr().out)

    idle = document("list", "--prefix", prefix, "--idle-for", "1s")
    state = document("describe", group, "--state")
    members = document("describe", group, "--members")
    assert [g["last_active_time"] for g in idle] == [state["last_active_time"]] == [members["last_active_time"]]
    listed = document("list", "--prefix", prefix)
    last_commit, last_active = (
        datetime.fromisoformat(t) for t in (listed[0]["last_commit_time"], state["last_active_time"])
    )
    assert last_commit < last_active  # the join came after the commit


def test_cli_refuses_a_zero_or_bad_idle_time(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0s", "PT0S", "soon", "-1s", "1"):
        with pytest.raises(SystemExit) as raised:
            cli.main(["expire", "--idle-for", bad])
        assert raised.value.code == 2
    assert "idle" in capsys.readouterr().err


# --- resets to a time before the kept history ----------------------------------------------


def test_a_reset_to_a_time_before_the_kept_history_names_the_oldest_restorable_instant(
    scratch_database_url: str,
) -> None:
    from offsetstore import storage
    from offsetstore.runtime import migrate

    migrate.upgrade(scratch_database_url)
    engine = create_engine(scratch_database_url, pool_size=1)
    tomorrow = midnight(datetime.now(UTC)) + timedelta(days=1)
    group = fresh()

    def change(conn: sa.Connection, partition: int, before: int | None, after: int, when: datetime) -> None:
        conn.execute(
            sa.text(
                "INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset,"
                " kind, generation, change_time) VALUES (:g, 't', :p, :before, :after, 1, 0, :when)"
            ),
            {"g": group, "p": partition, "before": before, "after": after, "when": when},
        )

    try:
        with engine.begin() as conn:
            storage.commit_offsets(conn, group, [OffsetCommit("t", p, 1) for p in range(3)])
            # Before any history is dropped, every instant can be restored.
            early = datetime.now(UTC) - timedelta(days=365)
            assert storage.reset_offsets(conn, group, all_topics=True, to_commit_time=early, dry_run=True).changes
            # Partition 0 changes on day +1 and +3, partition 1 only on day +3, partition 2 never again.
            change(conn, 0, 1, 5, tomorrow + timedelta(hours=1))
            change(conn, 0, 5, 9, tomorrow + timedelta(days=2, hours=1))
            change(conn, 1, 4, 8, tomorrow + timedelta(days=2, hours=1))
            conn.execute(
                sa.text(
                    'UPDATE offsetstore.offsets SET "offset" = CASE partition WHEN 0 THEN 9 WHEN 1 THEN 8 ELSE 3 END'
                    " WHERE group_id = :g"
                ),
                {"g": group},
            )
            # Retention drops everything before tomorrow.
            assert [p.name for p in retention.drop_history_before(conn, tomorrow, limit=10)] == [
                f"offset_history_before_{tomorrow:%Y%m%d}"
            ]
            assert retention.history_horizon(conn) == tomorrow

        with engine.begin() as conn, pytest.raises(InvalidArgumentError) as raised:
            storage.reset_offsets(conn, group, all_topics=True, to_commit_time=tomorrow - timedelta(seconds=1))
        oldest = tomorrow.isoformat().replace("+00:00", "Z")
        assert oldest in raised.value.message
        assert raised.value.metadata["oldest_restorable_time"] == oldest
        assert [v.field for v in raised.value.violations] == ["to_commit_time"]

        with engine.begin() as conn:
            result = storage.reset_offsets(
                conn, group, all_topics=True, to_commit_time=tomorrow + timedelta(days=1), dry_run=True
            )
        # 0: its change of day +1; 1: what its next change started from; 2: unchanged since.
        assert {(c.topic, c.partition): c.new_offset for c in result.changes} == {
            ("t", 0): 5,
            ("t", 1): 4,
            ("t", 2): 3,
        }
    finally:
        engine.dispose()
