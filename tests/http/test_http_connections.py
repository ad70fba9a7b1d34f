"""The HTTP listener's connections (issue 34, finding 6): capped in all and per peer, each request under a deadline.

Silent connections, slowloris headers, idle keep-alives and stalled TLS handshakes used to
stay open for an hour (aiohttp's keep-alive) or a minute (asyncio's handshake), and nothing
capped them: 1,100 took every descriptor of a server limited to 1,024, and gRPC accepted no
new connection. The servers here run in-process with short deadlines, plain and TLS.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from offsetstore.client import OffsetStoreClient
from offsetstore.runtime.store import Store
from offsetstore.server.auth import AccessControl, server_credentials
from offsetstore.server.http import ConnectionLimits, HttpConfig, http_ssl_context
from tests.fixtures.fix_auth import PKI
from tests.fixtures.fix_server import ServerHandle

QUICK = ConnectionLimits(request_seconds=1, connection_seconds=60)
CAPPED = ConnectionLimits(max_connections=3, max_per_peer=2, request_seconds=60, connection_seconds=120)
JSON_HEADERS = {"Content-Type": "application/json"}
REQUEST = b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def serve(store: Store, limits: ConnectionLimits, pki: PKI | None = None) -> ServerHandle:
    tls = pki is not None
    return ServerHandle(
        store,
        credentials=server_credentials(pki.server.cert, pki.server.key) if pki else None,
        http=HttpConfig(
            "127.0.0.1:0",
            ssl_context=http_ssl_context(pki.server.cert, pki.server.key) if tls and pki else None,
            limits=limits,
        ),
    ).start()


@pytest.fixture(scope="module", params=["plain", "tls"])
def quick(request: pytest.FixtureRequest, store: Store, pki: PKI) -> Iterator[tuple[ServerHandle, PKI | None]]:
    with_tls = pki if request.param == "tls" else None
    server = serve(store, QUICK, with_tls)
    try:
        yield server, with_tls
    finally:
        server.stop()


def connect(server: ServerHandle, pki: PKI | None = None, source: str = "127.0.0.1") -> socket.socket:
    assert server.http is not None
    raw = socket.create_connection(("127.0.0.1", server.http.port), timeout=30, source_address=(source, 0))
    if pki is None:
        return raw
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    return context.wrap_socket(raw, server_hostname="localhost")


def closed_by_server(sock: socket.socket) -> bool:
    """Blocks until the server closes ``sock`` (end of file or a reset); False if it answers something."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def answer(sock: socket.socket) -> bytes | None:
    """Sends one request and reads its whole answer, leaving the connection open (keep-alive); None if closed."""
    try:
        sock.sendall(REQUEST)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")).split()[1])
    while len(body) < length:
        body += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


def test_a_silent_connection_is_closed_at_the_request_deadline(quick: tuple[ServerHandle, PKI | None]) -> None:
    server, pki = quick
    with connect(server, pki) as silent:  # under TLS: after the handshake
        assert closed_by_server(silent)


def test_a_stalled_tls_handshake_is_closed_at_the_request_deadline(store: Store, pki: PKI) -> None:
    server = serve(store, QUICK, pki)
    try:
        with connect(server) as raw:  # TCP only: never says hello
            assert closed_by_server(raw)
    finally:
        server.stop()


def test_a_request_dribbled_a_byte_at_a_time_is_dropped_at_its_deadline(
    quick: tuple[ServerHandle, PKI | None],
) -> None:
    server, pki = quick
    sent = []
    with connect(server, pki) as slow:

        def dribble() -> None:
            # One byte each 0.2 s: never silent for the deadline (1 s), and 9 s for the whole request.
            with contextlib.suppress(OSError):
                for byte in REQUEST:
                    slow.sendall(bytes([byte]))
                    sent.append(byte)
                    time.sleep(0.2)  # the attack's pace, not a synchronisation

        dribbler = threading.Thread(target=dribble, daemon=True)
        dribbler.start()
        assert closed_by_server(slow)
        assert len(sent) < len(REQUEST)  # dropped before its headers were complete
    dribbler.join()


def test_an_idle_keep_alive_connection_is_closed(quick: tuple[ServerHandle, PKI | None]) -> None:
    server, pki = quick
    with connect(server, pki) as kept:
        assert b"openapi" in (answer(kept) or b"")
        assert closed_by_server(kept)


def test_tls_connections_one_after_another_each_get_their_answer_and_leave_no_count(store: Store, pki: PKI) -> None:
    # The listener counts a connection before its handshake. It ran the handshake with start_tls
    # on the accepted transport, paused until then; uvloop starts reading once connection_made
    # returns, so a ClientHello read in that turn went to the listener's protocol, not to TLS:
    # the handshake stalled until its deadline and the client saw an EOF (1 to 3 connections in
    # 50 here, on uvloop). Now the loop's own TLS gets the socket before a byte is read.
    server = serve(store, QUICK, pki)
    try:
        for n in range(50):
            with connect(server, pki) as sock:
                assert b"openapi" in (answer(sock) or b""), f"connection {n}"
            if n % 10 == 9:
                with connect(server, pki) as idle:  # and one the server closes at its deadline
                    assert closed_by_server(idle)
        assert server.http is not None
        stop_at = time.monotonic() + 10
        while server.http.tally.total and time.monotonic() < stop_at:
            time.sleep(0.05)
        assert (server.http.tally.total, server.http.tally.peers) == (0, {})
    finally:
        server.stop()


def test_one_peer_cannot_hold_every_connection_nor_anyone_the_grpc_service(store: Store) -> None:
    server = serve(store, CAPPED)
    held: list[socket.socket] = []
    try:
        held += [connect(server), connect(server)]
        assert all(answer(sock) for sock in held)  # admitted, and held open (keep-alive)
        with connect(server) as third:
            assert closed_by_server(third)  # 127.0.0.1 holds its two
        held.append(connect(server, source="127.0.0.2"))
        assert answer(held[-1])  # another address gets the last slot
        with connect(server, source="127.0.0.3") as fourth:
            assert closed_by_server(fourth)  # the listener is full
        with OffsetStoreClient(server.address, timeout=10) as client:
            assert client.health() == "SERVING"  # a new gRPC connection, while HTTP is full
        held.pop(0).close()
        # The slot is freed once the server sees the close: a new connection gets it then.
        stop_at = time.monotonic() + 30
        while not answer(sock := connect(server)):
            sock.close()
            assert time.monotonic() < stop_at, "the slot of a closed connection was never freed"
        held.append(sock)
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_malformed_requests_are_one_warning_line_not_an_error_each(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    server = serve(store, QUICK)
    malformed = [b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n"]
    try:
        for payload in malformed * 10:
            with connect(server) as sock:
                sock.sendall(payload)
                answered = b""
                while chunk := sock.recv(4096):  # to the end: handled (and logged) before the server closed it
                    answered += chunk
                assert answered.startswith(b"HTTP/1.0 400"), answered
    finally:
        server.stop()
    records = [r for r in caplog.records if r.name == "aiohttp.server" and r.levelno >= logging.INFO]
    # An ERROR with a traceback each, before: an anonymous log flood.
    assert [(r.levelname, r.exc_info) for r in records] == [("WARNING", None)], records
    assert "malformed HTTP request refused (400" in records[0].getMessage()


def test_a_client_certificate_names_the_caller_through_the_listeners_own_handshake(store: Store, pki: PKI) -> None:
    # The listener runs TLS itself (to count a connection before its handshake): the
    # certificate must still reach the gate, which names the cert: principal by it.
    server = ServerHandle(
        store,
        auth=AccessControl(None, mtls=True),
        credentials=server_credentials(pki.server.cert, pki.server.key, pki.ca.cert),
        http=HttpConfig("127.0.0.1:0", ssl_context=http_ssl_context(pki.server.cert, pki.server.key, pki.ca.cert)),
    ).start()
    group = f"t-mtls-{uuid.uuid4().hex[:8]}"
    try:
        assert server.http is not None
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        context.load_cert_chain(str(pki.alice.cert), str(pki.alice.key))
        connection = http.client.HTTPSConnection("localhost", server.http.port, context=context, timeout=30)
        body = json.dumps({"groupId": group, "offsets": [{"topic": "t", "partition": 0, "offset": "3"}]})
        connection.request("POST", "/offsetstore.v1.OffsetStoreService/CommitOffsets", body, JSON_HEADERS)
        committed = connection.getresponse()
        committed.read()
        assert committed.status == 200
        connection.request(
            "POST", "/offsetstore.v1.OffsetStoreService/ListOffsetHistory", json.dumps({"groupId": group}), JSON_HEADERS
        )
        response = connection.getresponse()
        assert [c["actor"] for c in json.loads(response.read())["changes"]] == ["cert:CN=alice"]
        connection.close()
        anonymous = http.client.HTTPSConnection(
            "localhost", server.http.port, context=ssl.create_default_context(cafile=str(pki.ca.cert))
        )
        try:
            with pytest.raises((ssl.SSLError, ConnectionResetError)):  # no certificate: no handshake
                anonymous.request("POST", "/offsetstore.v1.OffsetStoreService/FetchOffsets", "{}", JSON_HEADERS)
                anonymous.getresponse()
        finally:
            anonymous.close()
    finally:
        server.stop()
