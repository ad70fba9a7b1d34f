"""docs/switch.md's "Try it": examples/switch/cutover.py, run as the docs print it, moves the recipe to B exactly once.

The example starts its own two clusters and MirrorMaker 2, as a user's run does (40-70 s here, most of it
the three JVMs' start), not the ``mirrored_kafka`` fixture's; it runs on the xdist worker of the other
MirrorMaker tests all the same, so that no two workers start MirrorMaker JVMs at once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from offsetstore.kafka_integration._local_jvm import java
from offsetstore.kafka_integration.local_kafka import KafkaUnavailable, mirror_maker_classpath
from tests.fixtures.doc_snippets import snippets

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.xdist_group("mirror_maker")]

ROOT = Path(__file__).parents[2]
CUTOVER = ROOT / "examples" / "switch" / "cutover.py"


def test_the_cutover_example_moves_the_recipe_to_b_with_no_duplicate_and_none_missing(
    database_url, engine, server, group_id
) -> None:
    try:
        java(KafkaUnavailable)
        mirror_maker_classpath()
    except KafkaUnavailable as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no Apache Kafka here: {e}")
    # The docs' two commands: make switch-demo is the second, with make run's server and database.
    make, by_hand = snippets(ROOT / "docs" / "switch.md", "sh")
    assert (make, by_hand.split(" --server")[0]) == (
        "make switch-demo\n",
        ".venv/bin/python examples/switch/cutover.py",
    )
    assert "\n\t$(PY) examples/switch/cutover.py $(SWITCH_ARGS)\n" in (ROOT / "Makefile").read_text()
    table = f"public.switch_orders_{uuid.uuid4().hex[:10]}"
    # As docs/switch.md prints it; a group and a table of the test's own.
    command = [sys.executable, str(CUTOVER), "--server", server.address, "--database-url", database_url,
               "--group", group_id, "--table", table]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the example stops its JVMs on SIGTERM
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the example did not end within 300 s:\n{out[-3000:]}\n{err[-3000:]}")
    try:
        assert proc.returncode == 0, out[-4000:] + err[-3000:]
        # 16 transactions, then 8 after the switch, 3 orders each; every fourth aborted.
        assert f"Check: 54 orders committed on A, 54 rows in {table}: 0 duplicates, 0 missing, 0 from aborted" in out
        assert "Exactly once across the switch." in out
        executed = out.split("--execute\n", 1)[1]
        assert len(re.findall(r"^orders +\d +\d+ +A\.orders +\d+ +exact +0 +0", executed, re.M)) == 3, executed
        assert "the recipe on A is refused (ClusterMismatchError)" in out
        with engine.connect() as conn:
            ids = [r[0] for r in conn.exec_driver_sql(f"SELECT order_id FROM {table} ORDER BY order_id")]
        assert ids == [3 * t + p for t in range(24) if t % 4 != 2 for p in range(3)]
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
