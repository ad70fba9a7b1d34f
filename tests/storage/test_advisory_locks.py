"""A role squatting the store's advisory locks (issue 34 finding 7): bounded waits that name the holder, never silence."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from offsetstore.migrations import MIGRATION_LOCK_ID
from offsetstore.runtime.maintenance import MAINTENANCE_LOCK_ID, SKIPPED_ROUNDS_WARNING, Maintenance
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from tests.fixtures.fix_db import conninfo
from tests.fixtures.fix_locks import spawn_serve, squatting
from tests.fixtures.fix_tenants import wait_until

pytestmark = pytest.mark.slow


def _ended(process: subprocess.Popen[bytes], seconds: float) -> int | None:
    """The exit code, or None (and the process killed) if it still runs after ``seconds``: a hang, not slowness."""
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


def test_a_squatted_migration_lock_stops_the_start_with_one_line_naming_the_holder(
    scratch_database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "serve.log"
    with squatting(scratch_database_url, MIGRATION_LOCK_ID) as squatter:
        started = time.monotonic()
        process = spawn_serve(scratch_database_url, log, "--migration-lock-timeout", "2s")
        code = _ended(process, 120)
        waited = time.monotonic() - started
    output = log.read_text(errors="replace")
    print(f"serve gave up after {waited:.1f} s with {code}: {output.strip().splitlines()[-1:]}")
    assert code == 2, output
    # Issue 49: the wait is said when it starts, then the start gives up with one line.
    [waiting] = [line for line in output.splitlines() if "waiting for the migration lock" in line]
    [line] = [line for line in output.splitlines() if "migration lock" in line and "cannot start" in line]
    assert output.index(waiting) < output.index(line)
    for said in (waiting, line):
        assert f"pid {squatter.pid}" in said
        assert f"role {squatter.role}" in said
        assert repr(squatter.application) in said


def test_serve_waiting_for_the_migration_lock_stops_on_sigterm(scratch_database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    # The tests' own role watches: another role's query text is hidden from the squatter.
    with (
        squatting(scratch_database_url, MIGRATION_LOCK_ID),
        psycopg.connect(conninfo(scratch_database_url), autocommit=True) as watcher,
    ):
        process = spawn_serve(scratch_database_url, log, "--migration-lock-timeout", "1h")

        def waiting_for_the_lock() -> bool:
            assert process.poll() is None, log.read_text(errors="replace")
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND query LIKE %s",
                ("%advisory_xact_lock%",),
            ).fetchone()
            return row is not None and row[0] > 0

        wait_until(waiting_for_the_lock, 120)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = _ended(process, 60)
        print(f"serve stopped {time.monotonic() - started:.2f} s after SIGTERM with {code}")
    assert code == 0, log.read_text(errors="replace")


def test_maintenance_skipped_for_long_is_a_warning_naming_the_holder_and_a_metric(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    retention = metrics.RetentionMetrics(registry, registry)
    maintenance = Maintenance(store.aio, history_retention=0, offsets_retention=0, metrics=retention)
    caplog.set_level(logging.DEBUG, logger="offsetstore.storage.retention.maintenance")
    with squatting(database_url, MAINTENANCE_LOCK_ID) as squatter:
        for _ in range(SKIPPED_ROUNDS_WARNING):
            assert store.wait(maintenance.run_once()) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"pid {squatter.pid}" in warnings[0]
    assert f"role {squatter.role}" in warnings[0]
    assert repr(squatter.application) in warnings[0]
    assert registry.get_sample_value("offsetstore_maintenance_skipped_total") == SKIPPED_ROUNDS_WARNING

    # The squatter gone, the next round runs and says it runs again.
    assert store.wait(maintenance.run_once()) is not None
    assert any("runs again" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_the_migration_lock_is_free_again_after_a_migration_gave_up(scratch_database_url: str, tmp_path: Path) -> None:
    # The migrator that gave up holds nothing: its transaction (and its try-lock attempts) ended.
    with squatting(scratch_database_url, MIGRATION_LOCK_ID):
        process = spawn_serve(scratch_database_url, tmp_path / "serve.log", "--migration-lock-timeout", "0")
        assert _ended(process, 120) == 2
    with psycopg.connect(conninfo(scratch_database_url), autocommit=True) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATION_LOCK_ID,)).fetchone()
        assert row is not None and row[0] is True
