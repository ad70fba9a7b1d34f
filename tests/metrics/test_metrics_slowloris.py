"""``/metrics`` against slowloris (issue 22): a peer that dribbles its request, or holds many
connections, cannot keep Prometheus out. Real servers, plain and TLS, real sockets."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from offsetstore.server import metrics
from tests.fixtures.fix_auth import PKI
from tests.fixtures.waits import wait_for

ATTACKER = "127.0.0.2"  # Linux routes all of 127/8 to loopback: a second peer address


@pytest.fixture(params=["plain", "tls"])
def served(request: pytest.FixtureRequest, pki: PKI) -> Iterator[metrics.MetricsHTTPServer]:
    registry = CollectorRegistry()
    Counter("probe", "a series to find", registry=registry).inc()
    tls = {"certfile": pki.server.cert, "keyfile": pki.server.key} if request.param == "tls" else {}
    server = metrics.MetricsHTTPServer(registry, "127.0.0.1:0", timeout=5, request_timeout=6, **tls)
    yield server
    server.shutdown()


def connect(served: metrics.MetricsHTTPServer, pki: PKI, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=10, source_address=(source, 0))
    if served.scheme == "https":
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        context.check_hostname = False
        sock = context.wrap_socket(sock)
    return sock


def scrape(served: metrics.MetricsHTTPServer, pki: PKI) -> str:
    context = None
    if served.scheme == "https":
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        context.check_hostname = False
    with urllib.request.urlopen(served.url, timeout=10, context=context) as response:
        return response.read().decode()


def test_a_request_dribbled_a_byte_at_a_time_is_dropped_at_its_deadline(
    served: metrics.MetricsHTTPServer, pki: PKI
) -> None:
    # Never silent for the 5 s idle timeout, but never a complete request: dropped at 6 s.
    sock = connect(served, pki)
    started = time.monotonic()
    dropped = None
    try:
        for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 200:
            sock.sendall(bytes([byte]))
            time.sleep(0.5)
            if time.monotonic() - started > 20:  # generous: the deadline is 6 s
                break
    except OSError:  # ECONNRESET/EPIPE, or the TLS layer's error: the server shut it
        dropped = time.monotonic() - started
    finally:
        sock.close()
    assert dropped is not None, "the server kept a dribbling connection for 20 s"
    assert dropped < 20


def test_one_peer_cannot_hold_every_slot(served: metrics.MetricsHTTPServer, pki: PKI) -> None:
    held: list[socket.socket] = []
    try:
        for _ in range(metrics.MAX_HTTP_CONNECTIONS):  # as many as there are slots, from one address
            with contextlib.suppress(OSError):  # refused ones fail the TLS handshake or read EOF
                sock = connect(served, pki, source=ATTACKER)
                sock.sendall(b"G")  # one header byte, then nothing
                held.append(sock)
        # Every slot the attacker may hold is held before Prometheus scrapes.
        wait_for(
            lambda: served.held(ATTACKER) == metrics.MAX_HTTP_CONNECTIONS_PER_PEER, "the attacker's share held", 10
        )
        assert "probe_total 1.0" in scrape(served, pki)  # Prometheus, from another address, gets through
    finally:
        for sock in held:
            sock.close()
