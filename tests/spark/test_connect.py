"""The sink under Spark Connect: a real Connect server (PySpark's own, by spark-submit), a client killed mid-stream and restarted."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.fix_db import stored_offsets
from tests.fixtures.fix_spark import at_end, records, spark_home, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLIENT = Path(__file__).with_name("connect_client.py")
# 60 records a trigger, above the sink's executor_threshold of 50 (connect_client.py): every
# batch takes the executors' path, mapInArrow started from the server's foreachBatch worker.
PARTITIONS, RECORDS, PER_TRIGGER = 3, 300, 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_python(tmp_path: Path) -> Path:
    """This venv's Python for the server's workers, without PySpark's zip on their path.

    Spark puts ``python/lib/pyspark.zip`` first on each worker's ``PYTHONPATH``, and a module
    imported from a zip is compiled from source at every start (about 3 s of CPU for the
    foreachBatch worker), while Spark waits a fixed 10 s for a worker to connect back: the
    restarted client's worker, started while the killed client's query still runs on the server,
    missed it on a busy machine. The venv holds the same PySpark, compiled once.
    """
    wrapper = tmp_path / "worker-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        "PYTHONPATH=$(printf '%s' \"$PYTHONPATH\" | tr ':' '\\n' | grep -v '/python/lib/py' | paste -sd: -)\n"
        "export PYTHONPATH\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


@dataclass
class ConnectServer:
    url: str
    log: Path


@pytest.fixture
def connect_server(jdk, tmp_path: Path) -> Iterator[ConnectServer]:
    """A Spark Connect server of PySpark's own, in the foreground.

    PySpark's wheel carries the server (``jars/spark-connect_2.13-*.jar``) but (4.2.0, the version the tests pin) not
    ``sbin/start-connect-server.sh``: the server's main class goes to ``spark-submit`` as that
    script would hand it on.
    """
    port = _free_port()
    logs = tmp_path / "connect-logs"
    logs.mkdir()
    env = {
        **os.environ,
        # The server's Python workers (foreachBatch, UDFs, the data source) run this venv's Python.
        "PYSPARK_PYTHON": str(_worker_python(tmp_path)),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_LOG_DIR": str(logs),
        "SPARK_PID_DIR": str(logs),
    }
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.local.dir": str(tmp_path / "connect-local"),
        "spark.sql.warehouse.dir": str(tmp_path / "connect-warehouse"),
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name", "Spark Connect server",
        "--master", "local[2,4]",
    ]  # fmt: skip
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    with (logs / "server.out").open("w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "Spark Connect server started" not in (logs / "server.out").read_text():
            assert server.poll() is None, (logs / "server.out").read_text()[-3000:]
            assert time.monotonic() < deadline, "the Connect server did not start within 180 s"
            time.sleep(0.5)
        yield ConnectServer(f"sc://127.0.0.1:{port}", logs / "server.out")
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_connect_client_killed_mid_stream_and_restarted_delivers_every_record_once(
    connect_server, database_url, engine, group_id, topic, make_table, tmp_path
):
    table = make_table()
    common = [
        sys.executable, str(CLIENT),
        "--remote", connect_server.url,
        "--database-url", database_url,
        "--group-id", group_id,
        "--table", str(table),
        "--topic", topic,
        "--partitions", str(PARTITIONS),
        "--records", str(RECORDS),
        "--max-offsets-per-trigger", str(PER_TRIGGER),
        "--checkpoint", str(tmp_path / "checkpoint"),
    ]  # fmt: skip

    # A trigger every 0.5 s: the client is killed after two batches, long before the end.
    first = subprocess.Popen(
        [*common, "--trigger", "interval"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_for(lambda: sum(stored_offsets(engine, group_id).values()) >= 2 * PER_TRIGGER, what="two batches")
    finally:
        first.send_signal(signal.SIGKILL)
        out = first.communicate()[0]
    assert "started query" in out, out[-3000:]
    killed_at = sum(stored_offsets(engine, group_id).values())
    assert killed_at < PARTITIONS * RECORDS, "the first client read everything: the kill proved nothing"

    # The same command again, to the end of the data. The killed client's query ran on
    # in the server (a client's death does not stop it); Spark stops that run when a
    # query on the same checkpoint starts (spark.sql.streaming.stopActiveRunOnRestart).
    again = subprocess.run(
        [*common, "--trigger", "available-now"], capture_output=True, text=True, timeout=300, check=False
    )
    assert again.returncode == 0 and "finished" in again.stdout, again.stdout[-3000:] + again.stderr[-3000:]

    table.assert_exactly_once(records(topic, PARTITIONS, RECORDS))
    assert stored_offsets(engine, group_id) == at_end(topic, PARTITIONS, RECORDS)
    # The sink ran in the server's Python worker: its progress lines are in the server's output.
    assert "executors path" in connect_server.log.read_text()
