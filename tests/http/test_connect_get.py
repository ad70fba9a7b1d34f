"""Connect's GET, for the reads the contract marks NO_SIDE_EFFECTS: curl and caches reach them by URL."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.parse
import uuid
from typing import Any

from offsetstore.core.calls import FACTS
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_http import SERVICE_PATH, TOKENS, HttpServer


def get(http: HttpServer, method: str, query: str, token: str = "reader", *extra: str) -> tuple[int, Any]:
    """(HTTP status, decoded JSON) of ``curl URL?query``."""
    command = ["curl", "-sS", "-w", "\n%{http_code}", "-H", f"Authorization: Bearer {TOKENS[token]}", *extra]
    command.append(f"{http.url}{SERVICE_PATH}/{method}?{query}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    text, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(text) if text.startswith(("{", "[")) else text


def test_a_read_answers_a_get_with_its_message_in_the_url(http_server: HttpServer) -> None:
    group, topic = f"get-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    status, _ = http_server.curl("CommitOffsets", {"groupId": group, "offsets": [{"topic": topic, "offset": "9"}]})
    assert status == 200
    message = urllib.parse.quote(json.dumps({"groupId": group}))

    status, body = get(http_server, "FetchOffsets", f"encoding=json&message={message}")
    assert status == 200
    assert [(o["topic"], o["offset"]) for o in body["offsets"]] == [(topic, "9")]

    binary = base64.urlsafe_b64encode(pb.ListTopicsRequest(group_id=group).SerializeToString()).decode().rstrip("=")
    status, body = get(
        http_server, "ListTopics", f"encoding=proto&base64=1&message={binary}", "reader", "-o", "/dev/null"
    )
    assert status == 200


def test_a_write_refuses_a_get_and_says_to_post_it(http_server: HttpServer) -> None:
    writes = [name for name, facts in FACTS.items() if not facts.read_only]
    assert "CommitOffsets" in writes and "ReportWatermarks" in writes
    for name in writes:
        status, body = get(http_server, name, "encoding=json&message=%7B%7D", "admin")
        assert status == 405, name
        assert body["code"] == "unimplemented"


def test_a_bad_get_is_invalid_argument(http_server: HttpServer) -> None:
    status, body = get(http_server, "FetchOffsets", "message=%7B%7D")  # no encoding
    assert (status, body["code"]) == (400, "invalid_argument")
    status, body = get(http_server, "FetchOffsets", "encoding=json&message=%7B%22groupId%22%3A%22%22%7D")
    assert (status, http_server.reason(body)) == (400, "INVALID_ARGUMENT")
    status, body = get(http_server, "FetchOffsets", "encoding=proto&base64=1&message=%%%")
    assert status == 400


def test_a_get_from_another_origin_is_refused(http_server: HttpServer) -> None:
    status, _ = get(
        http_server, "ListGroups", "encoding=json&message=%7B%7D", "reader", "-H", "Origin: https://evil.example"
    )
    assert status == 403
