"""`offsetstore serve` as a user runs it: embedded PostgreSQL, health, a round trip, the CLI, SIGTERM."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient, StaleGenerationError
from tests.fixtures.fix_server import Served, start_serve

pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Under /tmp: as root the embedded server opens up the permissions of its parents.
    path = Path(tempfile.mkdtemp(prefix="offsetstore-serve-"))
    yield path / "pgdata"
    shutil.rmtree(path, ignore_errors=True)


def cli(served: Served, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offsetstore.cli.main", "groups", *args, "--server", served.address],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


def test_serve_on_the_embedded_default_round_trips_and_exits_0_on_sigterm(data_dir: Path) -> None:
    served = start_serve(data_dir)
    try:
        with OffsetStoreClient(served.address) as client:
            generation = client.join_group("orders-etl")
            client.commit_offsets("orders-etl", {("orders", 0): 42, ("orders", 1): 7}, generation=generation)
            fetched = client.fetch_offsets("orders-etl")
            assert {tp: c.offset for tp, c in fetched.offsets.items()} == {("orders", 0): 42, ("orders", 1): 7}
            assert fetched.generation == generation
    finally:
        code = served.terminate()
    assert code == 0, served.output()
    # uvloop by default (the dev install has it), in the supervisor and in each serving process.
    assert loops_said(served.output()) == {"uvloop"}, served.output()

    # Restarting on the same data directory finds the same offsets; on asyncio's own loop as asked.
    served = start_serve(data_dir, "--event-loop", "asyncio")
    try:
        with OffsetStoreClient(served.address) as client:
            fetched = client.fetch_offsets("orders-etl", {"orders": [0, 1]})
            assert [c.offset for c in fetched.offsets.values()] == [42, 7]
    finally:
        assert served.terminate() == 0, served.output()
    assert loops_said(served.output()) == {"asyncio"}, served.output()


def loops_said(output: str) -> set[str]:
    """The event loops the supervisor's "serving" line and each "serving process ready" line name."""
    lines = [line for line in output.splitlines() if re.search(r'"serving( process ready)?"', line)]
    assert any("serving process ready" in line for line in lines) and len(lines) >= 2, output
    return {m.group(1) if (m := re.search(r'event_loop="?(\w+)', line)) else "unsaid" for line in lines}


def test_cli_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    served = start_serve(data_dir)
    try:
        with OffsetStoreClient(served.address) as client:
            generation = client.join_group("payments")
            client.commit_offsets("payments", {("pay", 0): 100, ("pay", 1): 200}, generation=generation)

        listed = cli(served, "list", "--output", "json")
        assert listed.returncode == 0, listed.stderr
        assert [g["group_id"] for g in json.loads(listed.stdout)] == ["payments"]

        described = cli(served, "describe", "payments")
        assert described.returncode == 0, described.stderr
        assert "pay" in described.stdout and "100" in described.stdout and "200" in described.stdout

        # Dry run by default: nothing changes.
        dry = cli(served, "reset", "payments", "--topic", "pay:0", "--to-offset", "10")
        assert dry.returncode == 0, dry.stderr
        with OffsetStoreClient(served.address) as client:
            assert client.fetch_offsets("payments", {"pay": [0]}).offsets[("pay", 0)].offset == 100

        applied = cli(served, "reset", "payments", "--topic", "pay:0", "--to-offset", "10", "--execute")
        assert applied.returncode == 0, applied.stderr
        with OffsetStoreClient(served.address) as client:
            assert client.fetch_offsets("payments", {"pay": [0]}).offsets[("pay", 0)].offset == 10
            # The reset fenced the writer that joined before it.
            with pytest.raises(StaleGenerationError):
                client.commit_offsets("payments", {("pay", 0): 101}, generation=generation)

        exported = cli(served, "export", "payments")
        assert exported.returncode == 0, exported.stderr
        rows = list(csv.reader(io.StringIO(exported.stdout)))
        assert rows == [["pay", "0", "10"], ["pay", "1", "200"]]

        plan = tmp_path / "offsets.csv"
        plan.write_text("pay,0,55\npay,1,66\n")
        imported = cli(served, "import", str(plan), "--group", "payments", "--execute")
        assert imported.returncode == 0, imported.stderr
        with OffsetStoreClient(served.address) as client:
            offsets = client.fetch_offsets("payments").offsets
            assert {tp: c.offset for tp, c in offsets.items()} == {("pay", 0): 55, ("pay", 1): 66}

        history = cli(served, "history", "payments", "--output", "json")
        assert history.returncode == 0, history.stderr
        assert json.loads(history.stdout)["changes"][0]["new_offset"] in (55, 66)

        missing = cli(served, "describe", "no-such-group")
        assert missing.returncode == 1
        assert "no-such-group" in missing.stderr and "Traceback" not in missing.stderr

        deleted = cli(served, "delete", "payments", "--all-topics", "--execute")
        assert deleted.returncode == 0, deleted.stderr
        assert cli(served, "describe", "payments").returncode == 1
    finally:
        assert served.terminate() == 0, served.output()


def test_the_replication_line_is_said_once(data_dir: Path) -> None:
    """Issue 49: `make run` said what a commit survives three times (the start check, the supervisor's
    store and each serving process's store): once now, with two serving processes that both served."""
    served = start_serve(data_dir, "--processes", "2")
    try:
        for n in range(8):  # fresh channels: SO_REUSEPORT spreads them over both processes
            with OffsetStoreClient(served.address) as client:
                client.commit_offsets("replication-line", {("t", n): 1})
    finally:
        assert served.terminate() == 0, served.output()
    said = [line for line in served.output().splitlines() if "database: replication is" in line]
    assert len(said) == 1, served.output()
