"""OpenTelemetry traces of a real `offsetstore serve`, received by a real OTLP/gRPC receiver (issue 37, item 3)."""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from offsetstore.server import tracing
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures import traced_server
from tests.fixtures.fix_server import free_port, start_serve
from tests.fixtures.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.slow

COMMIT = "offsetstore.v1.OffsetStoreService/CommitOffsets"
FETCH = "offsetstore.v1.OffsetStoreService/FetchOffsets"


def test_tracing_is_off_unless_otel_variables_ask() -> None:
    assert not tracing.configured({})
    assert not tracing.configured({"OTEL_SERVICE_NAME": "x"})  # naming a service exports nothing
    assert not tracing.configured({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317"})
    assert not tracing.configured({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.configured({"OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317"})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:4317"})


def test_off_imports_nothing_of_opentelemetry() -> None:
    """Off (no OTEL_* asking), a server process loads no OpenTelemetry module: nothing of it is on a call's path."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    probe = (
        "import sys\n"
        "from offsetstore.server import app, tracing\n"
        "assert tracing.server_interceptors() == () and tracing.write_carry() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=environment, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_an_exporter_not_installed_leaves_the_server_serving_untraced() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment["OTEL_TRACES_EXPORTER"] = "zipkin_json"  # not installed
    probe = "from offsetstore.server import tracing\nassert tracing.server_interceptors() == ()\n"
    done = subprocess.run([sys.executable, "-c", probe], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "traces are off: no OpenTelemetry traces exporter 'zipkin_json' is installed" in done.stderr


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


def _traceparent() -> tuple[str, str, str]:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{parent}-01", trace_id, parent


def test_serve_exports_spans_of_calls_and_statements(
    receiver: OtlpReceiver, database_url: str, group_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "offsetstore-under-test")
    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "otel,process")  # process.pid: which process sent it
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    http = f"127.0.0.1:{free_port()}"
    served = start_serve(
        tmp_path / "data",
        "--database-url",
        database_url,
        "--processes",
        "2",
        "--http-listen",
        http,
        "--log-format",
        "json",
    )
    try:
        with grpc.insecure_channel(served.address) as channel:
            stub = pb_grpc.OffsetStoreServiceStub(channel)
            # A commit, in the caller's trace.
            header, commit_trace, commit_parent = _traceparent()
            stub.CommitOffsets(
                pb.CommitOffsetsRequest(group_id=group_id, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=5)]),
                metadata=[("traceparent", header)],
                timeout=20,
            )
            # A refused commit: a generation the group never had.
            header, refused_trace, _ = _traceparent()
            with pytest.raises(grpc.RpcError) as refused:
                stub.CommitOffsets(
                    pb.CommitOffsetsRequest(
                        group_id=group_id, generation=7, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=6)]
                    ),
                    metadata=[("traceparent", header)],
                    timeout=20,
                )
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            # A read: its statements run in the call's task.
            header, fetch_trace, _ = _traceparent()
            stub.FetchOffsets(pb.FetchOffsetsRequest(group_id=group_id), metadata=[("traceparent", header)], timeout=20)
        # The same call over HTTP.
        header, http_trace, http_parent = _traceparent()
        request = urllib.request.Request(
            f"http://{http}/offsetstore.v1.OffsetStoreService/FetchOffsets",
            data=json.dumps({"groupId": group_id}).encode(),
            headers={"Content-Type": "application/json", "traceparent": header},
        )
        with urllib.request.urlopen(request, timeout=20) as answer:
            assert json.load(answer)["offsets"][0]["offset"] == "5"

        [commit] = receiver.wait_for(lambda s: s.name == COMMIT and s.trace_id == commit_trace)
        assert commit.parent_id == commit_parent  # the caller's traceparent, honoured
        assert commit.span.kind == commit.span.SPAN_KIND_SERVER
        assert commit.resource["service.name"] == "offsetstore-under-test"
        assert commit.attributes["offsetstore.group"] == group_id
        assert commit.attributes["offsetstore.outcome"] == "OK"
        assert commit.attributes["offsetstore.principal"] == "ipv4:127.0.0.1"  # authentication off: the peer
        assert "offsetstore.reason" not in commit.attributes
        # Its statement is a group commit's, in a task of its own: the batch's span is the call's child.
        [batch] = receiver.wait_for(lambda s: s.name == "offsetstore write batch" and s.parent_id == commit.span_id)
        [write] = receiver.wait_for(
            lambda s: s.parent_id == batch.span_id and "write_batch" in s.attributes.get("db.statement", "")
        )
        assert write.trace_id == commit_trace and write.attributes["db.system"] == "postgresql"

        [stale] = receiver.wait_for(lambda s: s.name == COMMIT and s.trace_id == refused_trace)
        assert stale.attributes["offsetstore.outcome"] == "FAILED_PRECONDITION"
        assert stale.attributes["offsetstore.reason"] == "STALE_GENERATION"
        assert stale.span.status.code != stale.span.status.STATUS_CODE_ERROR  # a refusal is not a server failure

        [fetch] = receiver.wait_for(lambda s: s.name == FETCH and s.trace_id == fetch_trace)
        statements = receiver.wait_for(lambda s: s.parent_id == fetch.span_id and "db.statement" in s.attributes)
        assert all(s.trace_id == fetch_trace and s.attributes["db.system"] == "postgresql" for s in statements)
        assert any("offsets" in s.attributes["db.statement"] for s in statements)

        [http_span] = receiver.wait_for(lambda s: s.trace_id == http_trace and s.parent_id == http_parent)
        assert http_span.span.kind == http_span.span.SPAN_KIND_SERVER  # aiohttp's request span
        [http_call] = receiver.wait_for(lambda s: s.name == FETCH and s.parent_id == http_span.span_id)
        assert http_call.attributes["offsetstore.group"] == group_id
        assert http_call.attributes["offsetstore.outcome"] == "OK"
        assert http_call.attributes["rpc.system"] == "connect_rpc"

        # No statement is traced outside a call: the health check's pings (one a second) are not.
        assert all(s.parent_id for s in receiver.spans if "db.statement" in s.attributes)

        # Each serving process exports its own spans: new connections until both were seen.
        pids = {s.resource["process.pid"] for s in receiver.spans if s.name in (COMMIT, FETCH)}
        for _ in range(50):
            if len(pids) == 2:
                break
            # A subchannel of its own: gRPC shares one connection between channels to one target.
            with grpc.insecure_channel(served.address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
                header, trace_id, _ = _traceparent()
                pb_grpc.OffsetStoreServiceStub(channel).FetchOffsets(
                    pb.FetchOffsetsRequest(group_id=group_id), metadata=[("traceparent", header)], timeout=20
                )
            [span] = receiver.wait_for(lambda s, t=trace_id: s.name == FETCH and s.trace_id == t)
            pids.add(span.resource["process.pid"])
        assert len(pids) == 2
    finally:
        assert served.terminate() == 0
    # The refused call's log line carries its trace id.
    lines = [json.loads(line) for line in served.output().splitlines() if line.startswith("{")]
    [failed] = [line for line in lines if line.get("message") == "rpc failed" and line.get("group") == group_id]
    assert failed["trace_id"] == refused_trace
    assert failed["reason"] == "STALE_GENERATION"


def test_an_in_process_server_traces_grpc_and_http_calls(
    receiver: OtlpReceiver, database_url: str, group_id: str
) -> None:
    """OffsetStoreServer built by code (as an embedder or the fixtures build it) traces with OTEL_* alone."""
    environment = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,  # the endpoint alone turns tracing on
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_SERVICE_NAME": "offsetstore-in-process",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    spawn = multiprocessing.get_context("spawn")
    ready, stop = spawn.Queue(), spawn.Event()
    process = spawn.Process(target=traced_server.run, args=(database_url, environment, ready, stop))
    process.start()
    try:
        address, http_url = ready.get(timeout=120)
        header, commit_trace, commit_parent = _traceparent()
        with grpc.insecure_channel(address) as channel:
            pb_grpc.OffsetStoreServiceStub(channel).CommitOffsets(
                pb.CommitOffsetsRequest(group_id=group_id, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=1)]),
                metadata=[("traceparent", header)],
                timeout=20,
            )
        # A refusal over HTTP: its reason on the call's span, under the request's.
        header, http_trace, http_parent = _traceparent()
        request = urllib.request.Request(
            f"{http_url}/offsetstore.v1.OffsetStoreService/DescribeGroup",
            data=json.dumps({"groupId": f"{group_id}-missing"}).encode(),
            headers={"Content-Type": "application/json", "traceparent": header},
        )
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(request, timeout=20)
        missing.value.close()  # the error holds the response's connection
        assert missing.value.code == 404
    finally:
        stop.set()
        process.join(60)
    assert process.exitcode == 0

    [commit] = receiver.wait_for(lambda s: s.name == COMMIT and s.trace_id == commit_trace)
    assert commit.parent_id == commit_parent
    assert commit.resource["service.name"] == "offsetstore-in-process"
    assert (commit.attributes["offsetstore.group"], commit.attributes["offsetstore.outcome"]) == (group_id, "OK")
    [http_span] = receiver.wait_for(lambda s: s.trace_id == http_trace and s.parent_id == http_parent)
    [describe] = receiver.wait_for(lambda s: s.parent_id == http_span.span_id)
    assert describe.name == "offsetstore.v1.OffsetStoreService/DescribeGroup"
    assert describe.attributes["offsetstore.outcome"] == "NOT_FOUND"
    assert describe.attributes["offsetstore.reason"] == "GROUP_NOT_FOUND"
