"""An exactly-once capture whose Debezium engine cannot start fails loudly instead of exiting as if done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.fix_pg_cluster import PgNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_an_engine_that_cannot_start_makes_the_capture_fail(cdc_node: PgNode, tmp_path: Path) -> None:
    with cdc_node.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS failing_source (id bigserial PRIMARY KEY)")
        conn.execute("CREATE TABLE IF NOT EXISTS failing_changes (LIKE failing_source)")
    argv = [
        sys.executable, "-m", "tests.fixtures.cdc_capture", "exactly-once",
        cdc_node.url(), "cdc-fails", "failing_changes", str(cdc_node.port), "failing_source",
    ]  # fmt: skip
    # A decoding plugin PostgreSQL does not have: the connector's task fails at its start.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CDC_CONNECTOR": json.dumps({"plugin.name": "no_such_plugin"})}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode not in (0, 3), done.stdout[-2000:] + done.stderr[-2000:]
    assert "stopped by itself" in done.stderr, done.stderr[-3000:]
    assert "delivered" not in done.stdout
