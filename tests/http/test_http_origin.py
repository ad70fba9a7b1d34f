"""DNS rebinding and cross-origin calls on ``--http-listen`` (issue 34, finding 8), with tokens off, the default.

A page on ``attacker.example`` whose name was re-resolved to 127.0.0.1 calls the listener
with ``Host: attacker.example``; with no Host check it reset and deleted every group.
"""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from offsetstore.client import OffsetStoreClient
from offsetstore.runtime.store import Store
from offsetstore.server.http import HttpConfig
from tests.fixtures.fix_server import ServerHandle

SERVICE_PATH = "/offsetstore.v1.OffsetStoreService"


@pytest.fixture(scope="module")
def open_server(store: Store) -> Iterator[ServerHandle]:
    """No tokens, HTTP on loopback, one extra name allowed (as OFFSETSTORE_HTTP_ALLOWED_HOSTS would)."""
    server = ServerHandle(
        store, http=HttpConfig("127.0.0.1:0", allowed_hosts=("offsets.internal", ".corp.example"))
    ).start()
    try:
        yield server
    finally:
        server.stop()


def request(
    server: ServerHandle, path: str, host: str, body: dict[str, Any] | None = None, origin: str | None = None
) -> tuple[int, dict[str, Any]]:
    """(status, JSON answer or {}) of one request to the listener with the given Host (and Origin)."""
    assert server.http is not None
    connection = http.client.HTTPConnection("127.0.0.1", server.http.port, timeout=30)
    try:
        connection.putrequest("POST" if body is not None else "GET", path, skip_host=True)
        connection.putheader("Host", host.replace("PORT", str(server.http.port)))
        if origin is not None:
            connection.putheader("Origin", origin.replace("PORT", str(server.http.port)))
        data = json.dumps(body).encode() if body is not None else b""
        if body is not None:
            connection.putheader("Content-Type", "application/json")
            connection.putheader("Content-Length", str(len(data)))
        connection.endheaders(data or None)
        response = connection.getresponse()
        text = response.read()
        kind = response.getheader("Content-Type", "")
        return response.status, json.loads(text) if kind.startswith("application/json") and text else {}
    finally:
        connection.close()


@pytest.fixture
def group(open_server: ServerHandle) -> Iterator[str]:
    group_id = f"rebind-{uuid.uuid4().hex[:10]}"
    with OffsetStoreClient(open_server.address, timeout=20) as client:
        client.commit_offsets(group_id, {("orders", 0): 42})
        yield group_id


def offsets(server: ServerHandle, group_id: str) -> dict[Any, int]:
    with OffsetStoreClient(server.address, timeout=20) as client:
        return {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}


@pytest.mark.parametrize("host", ["attacker.example:PORT", "attacker.example", "localhost.attacker.example:PORT"])
def test_a_foreign_host_gets_421_and_changes_nothing(open_server: ServerHandle, group: str, host: str) -> None:
    wipe = {"groupId": group, "allTopics": True}
    status, answer = request(open_server, f"{SERVICE_PATH}/DeleteOffsets", host, wipe)
    assert (status, answer["code"]) == (421, "permission_denied"), answer
    reset = {"groupId": group, "allTopics": True, "toOffset": "0"}
    assert request(open_server, f"{SERVICE_PATH}/ResetOffsets", host, reset)[0] == 421
    assert request(open_server, "/", host)[0] == 421  # nor is the console served to the rebinding page
    assert offsets(open_server, group) == {("orders", 0): 42}


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:PORT", "localhost:PORT", "LOCALHOST", "[::1]:PORT", "10.1.2.3:PORT", "offsets.internal:PORT"]
    + ["eu.corp.example"],
)
def test_addresses_loopback_names_and_allowed_names_are_answered(
    open_server: ServerHandle, group: str, host: str
) -> None:
    status, answer = request(open_server, f"{SERVICE_PATH}/FetchOffsets", host, {"groupId": group})
    assert status == 200, answer
    assert request(open_server, "/", host)[0] == 200


def test_a_call_from_another_origin_gets_403_and_changes_nothing(open_server: ServerHandle, group: str) -> None:
    wipe = {"groupId": group, "allTopics": True}
    for origin in ("http://attacker.example", "null", "http://localhost:PORT", "http://127.0.0.1:1"):
        status, answer = request(open_server, f"{SERVICE_PATH}/DeleteOffsets", "127.0.0.1:PORT", wipe, origin)
        assert (status, answer["code"]) == (403, "permission_denied"), (origin, answer)
    assert offsets(open_server, group) == {("orders", 0): 42}
    # The console's own calls carry its own origin.
    status, _ = request(open_server, f"{SERVICE_PATH}/DeleteOffsets", "127.0.0.1:PORT", wipe, "http://127.0.0.1:PORT")
    assert status == 200
    assert offsets(open_server, group) == {}
