"""What each install can do: the wheel alone (the client), with the sink extra (a Spark executor), with the server extra.

Each install goes into a virtualenv of its own made from nothing, as a user's would be; the
dependencies come from the package index (pip's cache makes a second run quick). The wheel is the
session's (``tests/fixtures/installs.py``), shared with the other install lines
(``test_install_lines.py``).
"""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient
from tests.fixtures.doc_snippets import snippets
from tests.fixtures.fix_server import ServerHandle
from tests.fixtures.installs import Venv, install

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# The client-only install's whole list of requirements: gRPC and protobuf.
CLIENT_REQUIREMENTS = {"grpcio", "grpcio-health-checking", "grpcio-status", "protobuf", "googleapis-common-protos"}
# What only the server imports (the server extra) and what only the sinks do (Arrow).
SERVER_MODULES = (
    "sqlalchemy",
    "psycopg",
    "psycopg_pool",
    "alembic",
    "prometheus_client",
    "grpc_reflection",
    "aiohttp",
    "uvloop",
)
ARROW_MODULES = ("pyarrow", "numpy")
CLIENT_MODULES = ("offsetstore.client", "offsetstore.core", "offsetstore.v1", "offsetstore.cli.main")
# What a Spark executor's Python worker imports (spark_integration/workers.py checks this very module).
EXECUTOR_MODULES = ("offsetstore.spark_integration._staging", "offsetstore.sink.arrow_copy")
SERVER_ENTRY_MODULES = ("offsetstore.server.serve", "offsetstore.runtime.migrate")


@pytest.fixture(scope="module")
def client_only(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return install(wheel, tmp_path_factory.mktemp("client") / "venv")


@pytest.fixture(scope="module")
def sink(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return install(wheel, tmp_path_factory.mktemp("sink") / "venv", "sink")


@pytest.fixture(scope="module")
def server_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return install(wheel, tmp_path_factory.mktemp("server") / "venv", "server")


def test_the_wheel_requires_only_grpc_and_protobuf_without_extras(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    requires = [
        line.removeprefix("Requires-Dist: ") for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    unconditional = {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requires if "extra ==" not in r}
    assert unconditional == CLIENT_REQUIREMENTS


# --- the wheel alone: the client, the CLI's groups commands, the core types ---


def test_client_only_imports_the_client_and_none_of_the_server(client_only: Venv) -> None:
    found = client_only.importable(*CLIENT_MODULES, *SERVER_MODULES, *ARROW_MODULES)
    assert {m for m in CLIENT_MODULES if not found[m]} == set()
    assert {m for m in (*SERVER_MODULES, *ARROW_MODULES) if found[m]} == set()


def test_client_only_cli_answers_version_and_help(client_only: Venv) -> None:
    version = client_only.run("offsetstore", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"offsetstore {VERSION}"), version.stderr
    help_ = client_only.run("offsetstore", "groups", "--help")
    assert help_.returncode == 0, help_.stderr
    assert "describe" in help_.stdout and "reset" in help_.stdout
    # serve's flags come from the settings' declarations, which need nothing of the server extra.
    serve_help = client_only.run("offsetstore", "serve", "--help")
    assert serve_help.returncode == 0, serve_help.stderr
    assert "--pool-size" in serve_help.stdout and "OFFSETSTORE_POOL_SIZE" in serve_help.stdout


def test_client_only_cli_reads_a_real_server(
    client_only: Venv, server: ServerHandle, client: OffsetStoreClient, group_id: str
) -> None:
    client.commit_offsets(group_id, {("orders", 0): 42})
    done = client_only.run(
        "offsetstore", "groups", "describe", "--group", group_id, "--server", server.address, "--output", "json"
    )
    assert done.returncode == 0, done.stderr
    (described,) = json.loads(done.stdout)  # --group: a list, one per group named
    assert described["group_id"] == group_id
    assert [(p["topic"], p["partition"], p["offset"]) for p in described["partitions"]] == [("orders", 0, 42)]


def test_client_only_runs_the_python_guides_first_example(
    client_only: Venv, server: ServerHandle, client: OffsetStoreClient, group_id: str, tmp_path: Path
) -> None:
    """docs/python.md's first example, as a file run by the client-only install's Python (issue 59: each line's example)."""
    code = snippets(ROOT / "docs" / "python.md", "python")[0]
    script = tmp_path / "first.py"
    script.write_text(code.replace("127.0.0.1:50051", server.address).replace("python-orders-etl", group_id))
    done = client_only.run("python", str(script))
    assert done.returncode == 0, done.stderr
    committed = {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}
    assert committed == {("python-orders", 0): 2, ("python-orders", 1): 6}


@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["serve", "--database-url", "postgresql://h/db"]])
def test_client_only_serve_and_migrate_say_in_one_line_to_install_the_server(
    client_only: Venv, command: list[str]
) -> None:
    done = client_only.run("offsetstore", *command)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("offsetstore: the server is not installed") and "'.[server]'" in line, line


# --- the sink extra: a Spark executor's Python, the Kafka writer's write path ---


def test_sink_imports_the_executors_write_path_and_not_the_server(sink: Venv) -> None:
    server_only = ("alembic", "aiohttp", "grpc_reflection", "uvloop")
    found = sink.importable(*EXECUTOR_MODULES, "offsetstore.storage", *server_only)
    assert {m for m in (*EXECUTOR_MODULES, "offsetstore.storage") if not found[m]} == set()
    assert {m for m in server_only if found[m]} == set()


# --- the server extra: serve and migrate ---


def test_server_imports_serve_and_migrate_and_no_arrow(server_install: Venv) -> None:
    found = server_install.importable(*SERVER_ENTRY_MODULES, *SERVER_MODULES, *ARROW_MODULES)
    assert {m for m in (*SERVER_ENTRY_MODULES, *SERVER_MODULES) if not found[m]} == set()
    assert {m for m in ARROW_MODULES if found[m]} == set()
    help_ = server_install.run("offsetstore", "serve", "--help")
    assert help_.returncode == 0 and "--database-url" in help_.stdout, help_.stderr


def test_server_migrates_a_database(server_install: Venv, scratch_database_url: str) -> None:
    done = server_install.run("offsetstore", "migrate", "--database-url", scratch_database_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("migrated to "), done.stdout
