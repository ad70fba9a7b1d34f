"""``offsetstore groups`` against a real in-process server: what an operator sees and what changes."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from offsetstore.cli import groups as cli
from offsetstore.client import Boundary, OffsetStoreClient, StaleGenerationError
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server.limits import Limits
from offsetstore.storage.engine import SessionSettings
from tests.fixtures.fix_server import ServerHandle


def offsets_of(client: OffsetStoreClient, group_id: str) -> dict[tuple[str, int], int]:
    return {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}


def with_placeholders(client: OffsetStoreClient, group_id: str) -> None:
    """cli-orders:0 at 5, cli-orders:1 the earliest and cli-orders:2 the latest placeholder (no watermark known)."""
    client.commit_offsets(group_id, {("cli-orders", 0): 5})
    client.reset_offsets(group_id, topics={"cli-orders": [1]}, to_boundary=Boundary.EARLIEST)
    client.reset_offsets(group_id, topics={"cli-orders": [2]}, to_boundary=Boundary.LATEST)


def table_rows(text: str) -> list[list[str]]:
    """The rows of a table under its header, split on whitespace, up to the first blank line."""
    lines = text.split("\n\n")[0].splitlines()
    return [line.split() for line in lines[1:]]


# --- placeholders ---


def test_describe_names_placeholders_in_the_table_and_keeps_numbers_in_json(client, groups, group_id) -> None:
    with_placeholders(client, group_id)

    table = groups("describe", group_id)
    assert table.code == 0, table.err
    current = {(row[1], row[2]): row[3] for row in table_rows(table.out)}
    assert current == {("cli-orders", "0"): "5", ("cli-orders", "1"): "earliest", ("cli-orders", "2"): "latest"}

    document = groups("describe", group_id, "--output", "json").json()
    assert [(p["offset"], p["offset_placeholder"]) for p in document["partitions"]] == [
        (5, None),
        (-2, "earliest"),
        (-1, "latest"),
    ]


def test_reset_and_history_name_placeholders_in_every_column(client, groups, group_id) -> None:
    with_placeholders(client, group_id)

    reset = groups("reset", group_id, "--all-topics", "--to-offset", "7")
    assert reset.code == 0, reset.err
    previous = {row[2]: row[3] for row in table_rows(reset.out)}
    assert previous == {"0": "5", "1": "earliest", "2": "latest"}
    changes = groups("reset", group_id, "--all-topics", "--to-offset", "7", "--output", "json").json()["changes"]
    assert [(c["previous_offset"], c["previous_offset_placeholder"]) for c in changes] == [
        (5, None),
        (-2, "earliest"),
        (-1, "latest"),
    ]

    # A commit over the latest placeholder: its PREVIOUS is "latest", while the first
    # change of a partition has no previous offset at all (-).
    client.commit_offsets(group_id, {("cli-orders", 2): 9})
    history = groups("history", group_id, "--topic", "cli-orders:2")
    assert history.code == 0, history.err
    assert [(row[1], row[4], row[5]) for row in table_rows(history.out)] == [
        ("COMMIT", "latest", "9"),
        ("RESET", "-", "latest"),
    ]
    document = groups("history", group_id, "--topic", "cli-orders:2", "--output", "json").json()
    assert [(c["previous_offset_placeholder"], c["new_offset_placeholder"]) for c in document["changes"]] == [
        ("latest", None),
        (None, "latest"),
    ]


def test_shift_of_a_placeholder_says_there_is_nothing_to_shift_from(client, groups, group_id) -> None:
    with_placeholders(client, group_id)

    shifted = groups("reset", group_id, "--all-topics", "--shift-by", "-2", "--execute")
    assert shifted.code == 0, shifted.err
    assert "cli-orders:1 holds the earliest placeholder and no log start is known" in shifted.out
    assert "cli-orders:2 holds the latest placeholder and no log end is known" in shifted.out
    assert "has no offsets" not in shifted.out
    assert offsets_of(client, group_id) == {("cli-orders", 0): 3, ("cli-orders", 1): -2, ("cli-orders", 2): -1}

    document = groups("reset", group_id, "--all-topics", "--shift-by", "1", "--output", "json").json()
    assert [(k["partition"], k["offset_placeholder"]) for k in document["kept_placeholders"]] == [
        (1, "earliest"),
        (2, "latest"),
    ]


# --- reset --to-current ---


def test_reset_to_current_keeps_the_offsets_and_fences_live_writers(client, groups, group_id) -> None:
    writer = client.join_group(group_id, "writer")
    client.commit_offsets(group_id, {("cli-orders", 0): 40, ("cli-orders", 1): 41}, generation=writer)

    dry = groups("reset", group_id, "--all-topics", "--to-current")
    assert dry.code == 0, dry.err
    assert [(row[3], row[4]) for row in table_rows(dry.out)] == [("40", "40"), ("41", "41")]
    assert client.fetch_offsets(group_id).generation == writer

    applied = groups("reset", group_id, "--topic", "cli-orders", "--to-current", "--execute")
    assert applied.code == 0, applied.err
    after = client.fetch_offsets(group_id)
    assert {tp: o.offset for tp, o in after.offsets.items()} == {("cli-orders", 0): 40, ("cli-orders", 1): 41}
    assert after.generation == writer + 1
    with pytest.raises(StaleGenerationError):
        client.commit_offsets(group_id, {("cli-orders", 0): 99}, generation=writer)


# --- delete ---


def test_delete_is_a_dry_run_unless_execute(client, groups, group_id) -> None:
    with_placeholders(client, group_id)

    dry = groups("delete", group_id, "--topic", "cli-orders:0,1")
    assert dry.code == 0, dry.err
    assert [row[2:] for row in table_rows(dry.out)] == [["0", "5"], ["1", "earliest"]]
    assert "Dry run: nothing changed" in dry.out
    assert offsets_of(client, group_id) == {("cli-orders", 0): 5, ("cli-orders", 1): -2, ("cli-orders", 2): -1}

    document = groups("delete", group_id, "--all-topics", "--output", "json").json()
    assert document["dry_run"] is True
    assert [(d["partition"], d["offset"]) for d in document["deleted"]] == [(0, 5), (1, -2), (2, -1)]
    assert len(offsets_of(client, group_id)) == 3

    applied = groups("delete", group_id, "--topic", "cli-orders:0,1", "--execute")
    assert applied.code == 0, applied.err
    assert "Deleted 2 offset(s)" in applied.out
    assert offsets_of(client, group_id) == {("cli-orders", 2): -1}


# --- export and import ---


def test_export_then_import_round_trips_a_group_with_placeholders(client, groups, group_id, tmp_path: Path) -> None:
    with_placeholders(client, group_id)
    client.commit_offsets(group_id, {("payments", 3): 123456789012})
    exported = tmp_path / "offsets.csv"

    assert groups("export", group_id, "--file", str(exported)).code == 0
    assert "cli-orders,1,-2\n" in exported.read_text() and "cli-orders,2,-1\n" in exported.read_text()

    copy = f"{group_id}-copy"
    dry = groups("import", str(exported), "--group", copy)
    assert dry.code == 0, dry.err
    assert {row[2]: row[4] for row in table_rows(dry.out) if row[1] == "cli-orders"} == {
        "0": "5",
        "1": "earliest",
        "2": "latest",
    }
    assert offsets_of(client, copy) == {}

    applied = groups("import", str(exported), "--group", copy, "--execute")
    assert applied.code == 0, applied.err
    assert offsets_of(client, copy) == offsets_of(client, group_id)

    # And the copy exports the same file again.
    again = tmp_path / "again.csv"
    assert groups("export", copy, "--file", str(again)).code == 0
    assert again.read_text() == exported.read_text()


def test_import_fences_writers_of_the_group(client, groups, group_id, tmp_path: Path) -> None:
    writer = client.join_group(group_id, "writer")
    client.commit_offsets(group_id, {("cli-orders", 0): 1}, generation=writer)
    plan = tmp_path / "plan.csv"
    plan.write_text("cli-orders,0,-2\ncli-orders,1,50\n")

    assert groups("import", str(plan), "--group", group_id, "--execute").code == 0
    assert offsets_of(client, group_id) == {("cli-orders", 0): -2, ("cli-orders", 1): 50}
    with pytest.raises(StaleGenerationError):
        client.commit_offsets(group_id, {("cli-orders", 0): 2}, generation=writer)


# --- describe: the latest member ---


def test_describe_shows_the_latest_joiner_as_consumer_id_and_host(client, groups, group_id) -> None:
    client.commit_offsets(group_id, {("cli-orders", 0): 3})
    before = groups("describe", group_id)
    assert before.code == 0, before.err
    header = before.out.splitlines()[0].split()
    assert header[6:8] == ["CONSUMER-ID", "HOST"]
    assert table_rows(before.out)[0][6:8] == ["-", "-"]  # nobody joined yet

    client.join_group(group_id, "first")
    client.join_group(group_id, "worker-7")
    document = groups("describe", group_id, "--output", "json").json()
    assert document["member_id"] == "worker-7"
    # The peer as gRPC saw it: this test's own connection over the loopback interface.
    assert "127.0.0.1" in document["member_host"]

    row = table_rows(groups("describe", group_id).out)[0]
    assert row[6:8] == ["worker-7", document["member_host"]]


# --- describe --all-groups ---


def test_describe_all_groups(client, groups, group_id) -> None:
    other = f"{group_id}-other"
    client.commit_offsets(group_id, {("cli-orders", 0): 1})
    client.commit_offsets(other, {("cli-orders", 0): 2, ("cli-orders", 1): 3})
    empty = f"{group_id}-empty"
    client.join_group(empty)

    document = groups("describe", "--all-groups", "--output", "json").json()
    described = {g["group_id"]: [p["offset"] for p in g["partitions"]] for g in document}
    assert (described[group_id], described[other], described[empty]) == ([1], [2, 3], [])

    table = groups("describe", "--all-groups")
    assert table.code == 0, table.err
    rows = [row for row in table_rows(table.out) if row[0] in (group_id, other)]
    assert [(row[0], row[3]) for row in rows] == [(group_id, "1"), (other, "2"), (other, "3")]
    assert f"Group {empty} has no offsets" in table.out


# --- errors ---


def wait_until_blocked(conninfo: str, pid: int) -> None:
    """Returns once a session waits for a lock that the session `pid` holds."""
    with psycopg.connect(conninfo, autocommit=True) as watcher:
        query = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        for _ in range(600):
            row = watcher.execute(query, (pid,)).fetchone()
            if row and row[0]:
                return
            time.sleep(0.05)
    raise AssertionError("no call came to wait for the lock")


def test_a_call_past_its_deadline_points_to_timeout(
    database_url: str, group_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A busy server: a commit of 10,000 partitions (this peer's whole cost share) waits for a
    # row lock held by another session, so the CLI's call queues behind it until its deadline.
    store = Store.open(StoreConfig(database_url, SessionSettings(statement_timeout_ms=60_000), hot_pool_size=2))
    conninfo = sa.make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    wide = {("cli-orders", p): 2 for p in range(10_000)}
    with (
        ServerHandle(store, limits=Limits(max_workers=1)) as busy,
        OffsetStoreClient(busy.address, timeout=30) as client,
    ):
        client.commit_offsets(group_id, {("cli-orders", 0): 1})
        with psycopg.connect(conninfo) as locker:
            locker.execute("SELECT 1 FROM offsetstore.groups WHERE group_id = %s FOR UPDATE", (group_id,))
            with ThreadPoolExecutor(1) as pool:
                blocked = pool.submit(client.commit_offsets, group_id, wide)
                wait_until_blocked(conninfo, locker.info.backend_pid)
                try:
                    code = cli.main(["describe", group_id, "--server", busy.address, "--timeout", "0.5"])
                finally:
                    locker.rollback()
                blocked.result()
    store.dispose()
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"Error: no answer from the offsetstore server at {busy.address} in time (see --timeout)")
    assert "may or may not" not in err  # a read changed nothing
    assert "Traceback" not in err
