"""A real Prometheus scrapes a real ``offsetstore serve``; the shipped rules and config load in promtool."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import Watermark
from tests.fixtures.waits import wait_until_serving

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = "Debian's prometheus package is not installed (apt-get install prometheus)"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(NOT_INSTALLED)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@pytest.fixture
def offsetstore_serve(scratch_database_url: str, tmp_path: Path) -> Iterator[tuple[str, int, subprocess.Popen[bytes]]]:
    """A running ``offsetstore serve`` process: (gRPC address, metrics port, process).

    On a fresh database, which it migrates at start: the session's database holds every
    other test's groups, and the server shows only the first 1000 by id.
    """
    address = f"127.0.0.1:{free_port()}"
    metrics_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    log = (tmp_path / "offsetstore.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "offsetstore.cli.main",
            "serve",
            "--database-url",
            scratch_database_url,
            "--listen",
            address,
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with OffsetStoreClient(address, timeout=2) as client:
            wait_until_serving(client, process, (tmp_path / "offsetstore.log").read_text)
        yield address, metrics_port, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


def query(api: str, promql: str) -> list[dict]:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]["result"]


def by_partition(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["partition"]: float(r["value"][1]) for r in result}


@pytest.fixture
def prometheus() -> str:
    """The prometheus binary; checked before the server process starts."""
    return tool("prometheus")


@pytest.mark.slow
def test_prometheus_scrapes_offsets_and_lag_of_a_group(
    prometheus: str, offsetstore_serve: tuple[str, int, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    address, metrics_port, server = offsetstore_serve
    group, topic = f"g-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
    with OffsetStoreClient(address, timeout=20) as client:
        client.commit_offsets(group, {(topic, 0): 40, (topic, 1): 70})
        client.report_watermarks([Watermark(topic, 0, 0, 100), Watermark(topic, 1, 0, 70)])

    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: offsetstore\n    scrape_timeout: 1s\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    api = f"http://127.0.0.1:{free_port()}"
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={api.removeprefix('http://')}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        offsets: list[dict] = []
        deadline = time.monotonic() + 60  # the first sample shows 5-6 s after start
        while len(offsets) < 2:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.5)
            try:
                offsets = query(api, f'offsetstore_group_offset{{group="{group}"}}')
            except OSError:
                offsets = []  # the API is not up yet
        assert by_partition(offsets) == {"0": 40, "1": 70}
        assert {r["metric"]["topic"] for r in offsets} == {topic}
        assert by_partition(query(api, f'offsetstore_group_lag{{group="{group}"}}')) == {"0": 60, "1": 0}
        assert [float(r["value"][1]) for r in query(api, f'offsetstore_group_max_lag{{group="{group}"}}')] == [60]
        assert [float(r["value"][1]) for r in query(api, 'up{job="offsetstore"}')] == [1]
        assert [float(r["value"][1]) for r in query(api, "offsetstore_database_up")] == [1]
        handled = query(api, 'grpc_server_handled_total{grpc_method="CommitOffsets",grpc_code="OK"}')
        assert [float(r["value"][1]) for r in handled] == [1]
    finally:
        assert stop(process) == 0, (tmp_path / "prometheus.log").read_text()
        log.close()
    assert stop(server) == 0, (tmp_path / "offsetstore.log").read_text()


def test_the_shipped_alert_rules_and_scrape_config_load() -> None:
    promtool = tool("promtool")
    rules = subprocess.run(
        [promtool, "check", "rules", str(ROOT / "deploy/prometheus/alerts.yml")], capture_output=True, text=True
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr
    shipped = (ROOT / "deploy/prometheus/alerts.yml").read_text().count("- alert: ")
    assert shipped >= 9 and f"SUCCESS: {shipped} rules found" in rules.stdout, rules.stdout
    config = subprocess.run(
        [promtool, "check", "config", str(ROOT / "deploy/prometheus/prometheus.yml")], capture_output=True, text=True
    )
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout
    # Issue 36: the status alerts fire on their verdict, and never on IDLE or UNCONFIRMED.
    unit = subprocess.run(
        [promtool, "test", "rules", str(ROOT / "deploy/prometheus/alerts_test.yml")], capture_output=True, text=True
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_the_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    promtool = tool("promtool")
    dashboard = json.loads((ROOT / "deploy/grafana/offsetstore-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    # Grafana's variables, as Grafana would interpolate them.
    grafana = {"$__rate_interval": "1m", "$instance": ".*", "$group": ".*"}
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(exprs):
        for variable, value in grafana.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        lines += [f"      - record: dashboard:panel_{i}", f"        expr: {json.dumps(expr)}"]
    rules = tmp_path / "dashboard-rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    result = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(rf"SUCCESS: {len(exprs)} rules found", result.stdout), result.stdout
