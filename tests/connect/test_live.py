"""A running capture managed live (issue 38): describe, history and reset through ``offsetstore groups``.

One capture process (offsetstore's ``CaptureRunner``) runs throughout. ``groups describe``
shows its position (the last transaction's commit LSN + 1); ``groups reset --to-offset`` to
an earlier transaction's commit LSN fences the running engine, which joins again and
restarts from there: the changes from that transaction on are delivered again, once more
each, and new ones once; ``groups history`` shows the reset. A second engine of the same
name then fences the first, which stops (exit status 3), and carries on from the position.

The connector keeps its slot's WAL (``flush.lsn.source = false``): a replay needs changes
PostgreSQL still holds (docs/connect.md, "Resetting a CDC position").
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from offsetstore.cli import groups as cli
from offsetstore.connect_integration import change_table_sql
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server.limits import Limits
from tests.fixtures.fix_pg_cluster import PgNode
from tests.fixtures.fix_server import ServerHandle
from tests.fixtures.processes import free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
NAME = "orders-cdc"


class Process:
    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(ROOT), "CDC_CONNECTOR": json.dumps({"flush.lsn.source": "false"})},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self.process.stdout:
                self.lines.append(line.rstrip())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def cdc_server(cdc_node: PgNode) -> Iterator[str]:
    store = Store.open(StoreConfig(cdc_node.url(), hot_pool_size=4))
    server = ServerHandle(store, f"127.0.0.1:{free_port()}", limits=Limits(max_workers=4)).start()
    try:
        yield server.address
    finally:
        server.stop()
        store.dispose()


def groups(address: str, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    code = cli.main([*argv, "--server", address])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_reset_moves_a_running_capture_and_a_second_engine_fences_it(
    cdc_node: PgNode, cdc_server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with cdc_node.connect() as conn:
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, amount integer NOT NULL)")
        conn.execute(change_table_sql("public.orders_changes"))

        def captured() -> list[tuple[int, int, int]]:
            """(order id, commit LSN, times written) of every captured change."""
            return conn.execute(
                "SELECT (after::json->>'id')::bigint, \"offset\", count(*) FROM orders_changes GROUP BY 1, 2 ORDER BY 1"
            ).fetchall()

        def insert(n: int) -> None:
            for i in range(n):
                conn.execute("INSERT INTO orders (amount) VALUES (%s)", (i,))  # one transaction each

        argv = [
            *(sys.executable, "-m", "tests.fixtures.cdc_capture", "exactly-once", cdc_node.url(), NAME),
            *("public.orders_changes", str(cdc_node.port), "orders"),
        ]
        first = Process(argv, tmp_path)
        second: Process | None = None
        try:
            wait_for(lambda: first.process.poll() is None and "public.orders" in _slots_tables(conn), "the slot", 120)
            insert(10)
            wait_for(lambda: len(captured()) == 10, "10 changes captured", 120)
            changes = captured()
            assert all(times == 1 for _, _, times in changes)
            last_commit = changes[-1][1]

            described = json.loads(groups(cdc_server, capsys, "describe", NAME, "--output", "json"))
            [position] = described["partitions"]
            assert (position["topic"], position["partition"]) == ("source", 0)
            assert int(position["offset"]) == last_commit + 1
            assert json.loads(position["metadata"])["offset"]["lsn_commit"] == last_commit

            # Replay from the 6th order's transaction on, while the engine runs.
            sixth_commit = changes[5][1]
            groups(
                cdc_server, capsys, "reset", NAME, "--topic", "source", "--to-offset", str(sixth_commit), "--execute"
            )
            wait_for(lambda: sum(times for _, _, times in captured()) == 15, "orders 6-10 delivered again", 120)
            assert [times for _, _, times in captured()] == [1] * 5 + [2] * 5
            assert first.process.poll() is None, "a reset restarts the engine; it does not stop it"
            insert(1)
            wait_for(lambda: len(captured()) == 11, "a new order after the reset", 120)
            assert captured()[-1][2] == 1
            history = groups(cdc_server, capsys, "history", NAME, "--output", "json")
            assert "CHANGE_KIND_RESET" in history

            # A second engine of the same name: the first is fenced and stops; the second carries on.
            second = Process(argv, tmp_path)
            wait_for(lambda: first.process.poll() is not None, "the first engine to be fenced", 120)
            assert first.process.returncode == 3, first.lines
            assert any(line.startswith("fenced:") for line in first.lines)
            insert(2)
            wait_for(lambda: len(captured()) == 13, "changes through the second engine", 120)
            assert [times for _, _, times in captured()][10:] == [1, 1, 1]
        finally:
            first.stop()
            if second is not None:
                second.stop()


def _slots_tables(conn) -> str:
    """The tables of the capture's publication, once the engine made it (it streams then)."""
    rows = conn.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
        (f"pub_{NAME.replace('-', '_')}",),
    ).fetchall()
    active = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE active").fetchone()[0]
    return " ".join(r[0] for r in rows) if active else ""


def test_the_java_store_alone_commits_the_engines_flushes_fenced(
    cdc_node: PgNode, cdc_server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``offset.storage.offsetstore.mode = engine``: any handler, positions committed as the engine flushes them."""
    name = "plain-engine"
    with cdc_node.connect() as conn:
        conn.execute("CREATE TABLE refunds (id bigserial PRIMARY KEY, amount integer NOT NULL)")
        conn.execute("CREATE TABLE refunds_copy (after text NOT NULL)")
        argv = [
            *(sys.executable, "-m", "tests.fixtures.cdc_capture", "engine", cdc_node.url(), name),
            *("refunds_copy", str(cdc_node.port), "refunds"),
        ]
        engine = Process(argv, tmp_path)
        try:
            slot = (  # consistent, not only active (test_kill.py's slots_streaming says why)
                "SELECT count(*) FROM pg_replication_slots"
                " WHERE active AND confirmed_flush_lsn IS NOT NULL AND slot_name = 'plain_engine'"
            )
            wait_for(lambda: engine.process.poll() is None and conn.execute(slot).fetchone()[0] == 1, "the slot", 120)
            before_last = 0
            for i in range(3):
                before_last = conn.execute("SELECT (pg_current_wal_lsn() - '0/0')::bigint").fetchone()[0]
                conn.execute("INSERT INTO refunds (amount) VALUES (%s)", (i,))
            wait_for(lambda: conn.execute("SELECT count(*) FROM refunds_copy").fetchone()[0] == 3, "3 changes", 120)

            def stored() -> int:
                row = conn.execute("SELECT next_offset FROM offsetstore.read_offsets(%s)", (name,)).fetchone()
                return -1 if row is None else row[0]

            # The engine flushes every second: its position passes the last insert's commit.
            wait_for(lambda: stored() > before_last, "the engine's flush of the last change", 120)
            history = groups(cdc_server, capsys, "history", name, "--output", "json")
            assert "CHANGE_KIND_COMMIT" in history, "the engine's flushes are commits of the group, in its history"
            generation = conn.execute("SELECT generation FROM offsetstore.groups WHERE group_id = %s", (name,))
            assert generation.fetchone()[0] == 1, "the store joined the group once, at start"
        finally:
            engine.stop()
