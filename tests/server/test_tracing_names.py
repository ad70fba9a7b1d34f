"""The OpenTelemetry how-to as a user meets it: the start-up line, the span names, docs/operations.md's words (issue 49).

A real ``offsetstore serve`` run with the how-to's variables (its endpoint moved to the test's
OTLP receiver) says once, at start, that traces are on and where they go; its statement spans
are named by their statement's first keyword (SQLAlchemy's ``;`` ping was a span named ``;``, the
write path's ``BEGIN; SELECT set_config(...)`` one named ``BEGIN;``, the pool's empty check one
named after the database, issue 59); an RPC over HTTP has the span name the doc's table gives.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.fix_server import free_port, start_serve
from tests.fixtures.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
FETCH = "offsetstore.v1.OffsetStoreService/FetchOffsets"


def _how_to() -> tuple[dict[str, str], str, str]:
    """The how-to's command's variables and arguments, and the start-up line it shows."""
    section = DOC.read_text().partition("## Traces (OpenTelemetry)")[2]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    command = next(body for lang, body in blocks if lang == "sh").replace("\\\n", " ")
    [serve] = [line for line in command.splitlines() if "offsetstore serve" in line]
    variables = dict(re.findall(r"(OTEL_\w+)=(\S+)", serve))
    [line] = [body.strip() for lang, body in blocks if not lang and body.startswith("traces on")]
    return variables, serve.partition("offsetstore serve")[2].strip(), line


def test_the_how_to_names_a_receiver_and_a_runnable_command() -> None:
    variables, arguments, line = _how_to()
    assert "..." not in arguments and "..." not in variables.values(), "a placeholder cannot run verbatim"
    assert variables["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http://127.0.0.1:")  # a receiver of this machine
    assert "Jaeger" in DOC.read_text().partition("## Traces (OpenTelemetry)")[2][:1500]
    assert variables["OTEL_EXPORTER_OTLP_ENDPOINT"] in line and variables["OTEL_SERVICE_NAME"] in line


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


def test_serve_says_traces_are_on_and_names_its_spans(
    receiver: OtlpReceiver, database_url: str, group_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables, arguments, expected_line = _how_to()
    for name, value in variables.items():
        monkeypatch.setenv(name, value.replace(variables["OTEL_EXPORTER_OTLP_ENDPOINT"], receiver.endpoint))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    http = f"127.0.0.1:{free_port()}"
    served = start_serve(tmp_path / "data", *arguments.split(), "--database-url", database_url, "--http-listen", http)
    try:
        with grpc.insecure_channel(served.address) as channel:
            stub = pb_grpc.OffsetStoreServiceStub(channel)
            stub.CommitOffsets(
                pb.CommitOffsetsRequest(group_id=group_id, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=5)]),
                timeout=20,
            )
            stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group_id), timeout=20)
        request = urllib.request.Request(
            f"http://{http}/{FETCH}",
            data=json.dumps({"groupId": group_id}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=20) as answer:
            assert json.load(answer)["offsets"][0]["offset"] == "5"
        [http_call] = receiver.wait_for(lambda s: s.name == FETCH and s.attributes.get("rpc.system") == "connect_rpc")
        [http_span] = receiver.wait_for(lambda s: s.span_id == http_call.parent_id)
        receiver.wait_for(lambda s: s.name == "offsetstore.v1.OffsetStoreService/DescribeGroup")
        receiver.wait_for(lambda s: "db.statement" in s.attributes)
    finally:
        assert served.terminate() == 0  # exports what is left
    statements = [s for s in receiver.spans if "db.statement" in s.attributes]
    assert f"`{http_span.name}`" in DOC.read_text(), f"docs/operations.md's table names the HTTP span {http_span.name}"
    named = {s.attributes["db.statement"].strip(): s.name for s in statements}
    wordless = {statement: name for statement, name in named.items() if not re.match(r"[A-Za-z]", name)}
    assert not wordless, f"statement spans named by no word: {wordless}"
    assert all(name == "ping" for statement, name in named.items() if statement == ";")
    # Every statement span (those without a statement text too) is named by a keyword, never by the database.
    database = sa.make_url(database_url).database
    names = {s.name: s.attributes.get("db.statement") for s in receiver.spans if "db.system" in s.attributes}
    assert "BEGIN" in names, names  # the write path's transaction was traced
    assert {name for name in names if not re.fullmatch(r"[A-Z]+|ping", name)} == set(), names
    assert database not in names, names
    # The colder pool's first-connect queries ran at start, in no call (they were the first describe's).
    assert not [s for s in receiver.spans if "pg_catalog.version()" in str(s.attributes.get("db.statement"))]
    lines = [json.loads(line) for line in served.output().splitlines() if line.startswith("{")]
    started = [line for line in lines if line.get("message", "").startswith("traces on")]
    assert [line["message"] for line in started] == [
        expected_line.replace(variables["OTEL_EXPORTER_OTLP_ENDPOINT"], receiver.endpoint)
    ]
