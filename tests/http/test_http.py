"""The HTTP/JSON surface (Connect protocol) with curl: every RPC, the same errors, grants and metrics as gRPC."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from google.protobuf import json_format

from offsetstore.server.http import openapi
from offsetstore.server.http.describe import openapi_json
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["OffsetStoreService"]
ROOT = Path(__file__).resolve().parents[2]


if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer

SERVICE_PATH = "/offsetstore.v1.OffsetStoreService"


def _examples(group: str) -> dict[str, dict[str, Any]]:
    """One valid request of each RPC, in an order where each finds what it needs."""
    return {
        "JoinGroup": {"groupId": group, "memberId": "curl"},
        "CommitOffsets": {
            "groupId": group,
            "generation": "1",
            "offsets": [
                {"topic": "orders", "partition": 0, "offset": "42"},
                {"topic": "orders", "partition": 1, "offset": 7},
            ],
        },
        "FetchOffsets": {"groupId": group},
        "ReportWatermarks": {
            "watermarks": [{"topic": "orders", "partition": 0, "logStartOffset": "0", "logEndOffset": "50"}]
        },
        "DescribeGroup": {"groupId": group},
        "ListGroups": {"prefix": group},
        "ListTopics": {"groupId": group},
        "ListOffsetHistory": {"groupId": group},
        "ResetOffsets": {"groupId": group, "allTopics": True, "toBoundary": "BOUNDARY_EARLIEST", "dryRun": True},
        "DeleteOffsets": {"groupId": group, "topics": [{"topic": "orders", "partitions": [1]}]},
        "ExpireGroups": {"idleFor": "86400s", "prefix": group},
        "ObserveOffsets": {
            "groupId": f"{group}-observed",
            "offsets": [{"topic": "orders", "partition": 0, "offset": "40"}],
            "source": "kafka:curl/legacy",
        },
    }


def test_every_rpc_of_the_service_answers_curl_with_its_response(http_server: HttpServer) -> None:
    group = f"http-{uuid.uuid4().hex[:10]}"
    examples = _examples(group)
    # A new RPC must be added here, so that this test proves curl reaches it too.
    assert sorted(examples) == sorted(m.name for m in SERVICE.methods)
    answers = {}
    for name, body in examples.items():
        status, answer = http_server.curl(name, body)
        assert status == 200, (name, answer)
        json_format.ParseDict(answer, getattr(pb, SERVICE.methods_by_name[name].output_type.name)())
        answers[name] = answer
    assert {(o["topic"], o["partition"], o["offset"]) for o in answers["FetchOffsets"]["offsets"]} == {
        ("orders", 0, "42"),
        ("orders", 1, "7"),
    }
    assert answers["ListGroups"]["groups"][0]["groupId"] == group
    assert answers["DescribeGroup"]["partitions"][0]["logEndOffset"] == "50"
    assert [(t["topic"], t["partitionCount"]) for t in answers["ListTopics"]["topics"]] == [("orders", 2)]
    assert answers["ResetOffsets"]["dryRun"] is True
    assert answers["ObserveOffsets"]["changed"] == 1
    assert answers["DeleteOffsets"]["deleted"] == [{"topic": "orders", "partition": 1}]
    assert [c["actor"] for c in answers["ListOffsetHistory"]["changes"]] == ["console-admin", "console-admin"]


def test_errors_carry_the_same_code_and_reason_as_over_grpc(http_server: HttpServer) -> None:
    missing = f"http-missing-{uuid.uuid4().hex[:8]}"
    cases = [
        ("DescribeGroup", {"groupId": missing}, 404, "not_found", grpc.StatusCode.NOT_FOUND),
        ("FetchOffsets", {"groupId": ""}, 400, "invalid_argument", grpc.StatusCode.INVALID_ARGUMENT),
        (
            "CommitOffsets",
            {"groupId": missing, "generation": "7", "offsets": [{"topic": "t", "partition": 0, "offset": "1"}]},
            400,
            "failed_precondition",
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
        (  # a confirm whose previewed generation moved on (an unknown group is at 0)
            "ResetOffsets",
            {
                "groupId": missing,
                "topics": [{"topic": "t", "partitions": [0]}],
                "toOffset": "1",
                "expectedGeneration": "3",
            },
            400,
            "failed_precondition",
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
    ]
    with grpc.insecure_channel(http_server.server.address) as channel:
        stub = offset_store_pb2_grpc.OffsetStoreServiceStub(channel)
        metadata = (("authorization", f"Bearer {http_server.tokens['admin']}"),)
        for method, body, http_status, code, grpc_code in cases:
            status, answer = http_server.curl(method, body)
            assert (status, answer["code"]) == (http_status, code), answer
            request = json_format.ParseDict(body, getattr(pb, SERVICE.methods_by_name[method].input_type.name)())
            with pytest.raises(grpc.RpcError) as raised:
                getattr(stub, method)(request, metadata=metadata, timeout=20)
            assert raised.value.code() == grpc_code
            assert raised.value.details() == answer["message"]
            assert http_server.reason(answer) == _grpc_reason(raised.value)


def _grpc_reason(error: grpc.RpcError) -> str | None:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return None


def test_a_reader_token_cannot_reset_over_http_and_nothing_changes(http_server: HttpServer) -> None:
    group = f"http-reader-{uuid.uuid4().hex[:8]}"
    offsets = [{"topic": "t", "partition": 0, "offset": "10"}]
    assert http_server.curl("CommitOffsets", {"groupId": group, "offsets": offsets})[0] == 200
    assert http_server.curl("FetchOffsets", {"groupId": group}, token="reader")[0] == 200
    status, answer = http_server.curl(
        "ResetOffsets", {"groupId": group, "allTopics": True, "toOffset": "0"}, token="reader"
    )
    assert (status, answer["code"], http_server.reason(answer)) == (403, "permission_denied", "PERMISSION_DENIED")
    # Not even a dry run: the console asks one to learn whether to offer a reset.
    status, answer = http_server.curl(
        "ResetOffsets", {"groupId": group, "allTopics": True, "toOffset": "0", "dryRun": True}, token="reader"
    )
    assert status == 403
    assert http_server.curl("FetchOffsets", {"groupId": group})[1]["offsets"][0]["offset"] == "10"


def test_no_token_or_a_wrong_one_is_unauthenticated(http_server: HttpServer) -> None:
    status, answer = http_server.curl("ListGroups", {}, token=None)
    assert (status, answer["code"], http_server.reason(answer)) == (401, "unauthenticated", "UNAUTHENTICATED")
    status, answer = http_server.curl("ListGroups", {}, token=None, headers=("Authorization: Bearer nope",))
    assert (status, http_server.reason(answer)) == (401, "UNAUTHENTICATED")


def test_bad_bodies_headers_and_paths_are_refused_with_connect_errors(http_server: HttpServer) -> None:
    status, answer = http_server.curl("FetchOffsets", {"groupId": "g", "nosuchfield": 1})
    assert (status, answer["code"], http_server.reason(answer)) == (400, "invalid_argument", "INVALID_ARGUMENT")
    status, answer = http_server.curl("FetchOffsets", "{not json")
    assert (status, http_server.reason(answer)) == (400, "INVALID_ARGUMENT")
    status, answer = http_server.curl("NoSuchMethod", {})
    assert (status, answer["code"]) == (404, "unimplemented")
    status, answer = http_server.curl("FetchOffsets", {"groupId": "g"}, headers=("Connect-Timeout-Ms: soon",))
    assert (status, answer["code"]) == (400, "invalid_argument")
    status, _ = http_server.curl("FetchOffsets", {"groupId": "g"}, headers=("Content-Type: text/plain",))
    assert status == 415


@pytest.mark.parametrize("header", ["Connect-Timeout-Ms: 0", "grpc-timeout: 0m"])
def test_a_timeout_of_zero_is_deadline_exceeded(http_server: HttpServer, header: str) -> None:
    # The Connect protocol's answer (504) to a call whose deadline has passed; it was 503, as if the store were down.
    status, answer = http_server.curl("FetchOffsets", {"groupId": "g"}, headers=(header,))
    assert (status, answer["code"]) == (504, "deadline_exceeded"), answer


def test_http_calls_are_counted_by_the_grpc_metrics(http_server: HttpServer) -> None:
    def handled(code: str) -> float:
        labels = {"grpc_type": "unary", "grpc_service": SERVICE.full_name, "grpc_method": "DescribeGroup"}
        return http_server.registry.get_sample_value("grpc_server_handled_total", {**labels, "grpc_code": code}) or 0

    ok, not_found = handled("OK"), handled("NotFound")
    group = f"http-metrics-{uuid.uuid4().hex[:8]}"
    http_server.curl("CommitOffsets", {"groupId": group, "offsets": [{"topic": "t", "partition": 0, "offset": "1"}]})
    http_server.curl("DescribeGroup", {"groupId": group})
    http_server.curl("DescribeGroup", {"groupId": group + "-none"})
    assert (handled("OK"), handled("NotFound")) == (ok + 1, not_found + 1)


def test_the_binary_codec_answers_too(http_server: HttpServer) -> None:
    request = pb.ListGroupsRequest(prefix="http-")
    done = subprocess.run(
        [
            "curl", "-sS", "-H", "Content-Type: application/proto",
            "-H", f"Authorization: Bearer {http_server.tokens['reader']}",
            "--data-binary", "@-", f"{http_server.url}{SERVICE_PATH}/ListGroups",
        ],
        input=request.SerializeToString(), capture_output=True, timeout=30, check=True,
    )  # fmt: skip
    pb.ListGroupsResponse.FromString(done.stdout)


def test_the_console_is_served_with_a_strict_policy_and_no_cors(http_server: HttpServer) -> None:
    done = subprocess.run(
        ["curl", "-sS", "-i", "-H", "Origin: https://evil.example", f"{http_server.url}/"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    head = done.stdout.partition("\r\n\r\n")[0].lower()
    assert "content-security-policy: default-src 'none'; script-src 'self';" in head
    assert "access-control-allow-origin" not in head
    preflight = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "OPTIONS",
         "-H", "Origin: https://evil.example", "-H", "Access-Control-Request-Method: POST",
         f"{http_server.url}{SERVICE_PATH}/ResetOffsets"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert preflight.stdout == "405"


def test_the_openapi_description_covers_every_rpc_and_is_the_committed_one(http_server: HttpServer) -> None:
    document = openapi()
    assert sorted(document["paths"]) == sorted(f"{SERVICE_PATH}/{m.name}" for m in SERVICE.methods)
    committed = (ROOT / "docs" / "openapi.json").read_text()
    assert committed == openapi_json(), (
        "docs/openapi.json is stale: python -m offsetstore.server.http > docs/openapi.json"
    )
    served = subprocess.run(
        ["curl", "-sS", f"{http_server.url}/openapi.json"], capture_output=True, text=True, timeout=30, check=True
    )
    assert json.loads(served.stdout) == document
