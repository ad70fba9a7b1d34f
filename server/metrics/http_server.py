"""``/metrics`` over HTTP(S): prometheus-client's WSGI app on a server bounded against slow and greedy peers."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from offsetstore.server.auth.tls import ssl_context
from offsetstore.server.config import split_host_port

__all__ = [
    "HTTP_CONNECTION_SECONDS",
    "HTTP_REQUEST_SECONDS",
    "HTTP_TIMEOUT_SECONDS",
    "MAX_HTTP_CONNECTIONS",
    "MAX_HTTP_CONNECTIONS_PER_PEER",
    "MetricsHTTPServer",
    "serve_http",
]

log = logging.getLogger(__name__)


#: Connections ``/metrics`` serves at once; more are closed at once. A Prometheus or two
#: need a handful; thousands of idle ones must not become thousands of threads.
MAX_HTTP_CONNECTIONS = 16
#: Connections one peer address may hold at once: one scraper needs one, an HA pair one each;
#: a peer that opens more cannot hold every slot (issue 22).
MAX_HTTP_CONNECTIONS_PER_PEER = 4
#: Seconds a ``/metrics`` connection may stay silent (TLS handshake included) before it is dropped.
HTTP_TIMEOUT_SECONDS = 10.0
#: Seconds from accepting a connection to its complete request (TLS handshake and headers): a
#: peer sending a byte now and then is never silent, but is dropped at this deadline.
HTTP_REQUEST_SECONDS = 10.0
#: Seconds a connection lives at most, answer included: a peer reading the answer a byte at a
#: time is dropped too.
HTTP_CONNECTION_SECONDS = 60.0


class _Watch:
    """One connection's deadlines: shut it down unless its request is complete in time, and at the end of its life."""

    def __init__(self, sock: socket.socket, request_seconds: float, connection_seconds: float) -> None:
        self.sock = sock
        self.complete = False
        self.connection_seconds = connection_seconds - request_seconds
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = threading.Timer(request_seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            if self._timer is None:
                return
            if self.complete and self.connection_seconds > 0:  # the request came in time: now the answer's deadline
                self._timer = threading.Timer(self.connection_seconds, self._expire)
                self._timer.daemon = True
                self.connection_seconds = 0
                self._timer.start()
                return
            self._timer = None
        # The socket class's own shutdown, not SSLSocket's (which would drop its TLS state under
        # the thread reading it): the reader gets end-of-file or an error, and the thread ends.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


class _QuietHandler(WSGIRequestHandler):
    timeout = HTTP_TIMEOUT_SECONDS  # StreamRequestHandler applies it to the socket

    def parse_request(self) -> bool:
        ok = super().parse_request()  # the request line and every header have been read
        watch = self.server.watches.get(id(self.request))  # type: ignore[attr-defined]
        if ok and watch is not None:
            watch.complete = True
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """prometheus-client's thread-per-connection WSGI server, with caps on connections (in all and
    per peer), a deadline to a complete request and to the end of a connection, and a TLS
    handshake that runs on the connection's thread under them, not in the accept loop."""

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None
    slots: threading.BoundedSemaphore
    timeout_seconds: float = HTTP_TIMEOUT_SECONDS
    request_seconds: float = HTTP_REQUEST_SECONDS
    connection_seconds: float = HTTP_CONNECTION_SECONDS
    max_per_peer: int = MAX_HTTP_CONNECTIONS_PER_PEER
    peers: dict[str, int]
    peers_lock: threading.Lock
    watches: dict[int, _Watch]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A connection shut at its deadline ends its handler with an error: that is the point.
        log.debug("metrics connection ended with an error", exc_info=True)

    def _enter_peer(self, peer: str) -> bool:
        with self.peers_lock:
            held = self.peers.get(peer, 0)
            if held >= self.max_per_peer:
                return False
            self.peers[peer] = held + 1
            return True

    def _leave_peer(self, peer: str) -> None:
        with self.peers_lock:
            held = self.peers.pop(peer, 1) - 1
            if held > 0:
                self.peers[peer] = held

    def process_request(self, request: Any, client_address: Any) -> None:
        peer = str(client_address[0])
        if not self._enter_peer(peer):
            self.shutdown_request(request)  # this peer holds its share: refuse, keep the slots for others
            return
        if not self.slots.acquire(blocking=False):
            self._leave_peer(peer)
            self.shutdown_request(request)  # full: refuse at once rather than queue a thread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            self._leave_peer(peer)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        watch = _Watch(request, self.request_seconds, self.connection_seconds)
        key = id(request)
        try:
            request.settimeout(self.timeout_seconds)
            if self.ssl_context is not None:
                try:
                    request = self.ssl_context.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    self.shutdown_request(request)
                    return
                watch.sock = request  # the same descriptor, now owned by the TLS socket
                key = id(request)
            self.watches[key] = watch
            super().process_request_thread(request, client_address)
        finally:
            watch.cancel()
            self.watches.pop(key, None)
            self.slots.release()
            self._leave_peer(str(client_address[0]))


def _cached_app(registry: CollectorRegistry, seconds: float) -> Callable[..., Any]:
    """prometheus-client's WSGI app, rendering at most once per ``seconds`` for each format it negotiates.

    Rendering thousands of series holds the interpreter for a while; a hundred scrapers at
    once must cost what one costs, and the RPC threads must not wait for the other 99.
    Query strings (``name[]`` filters) are ignored, so they cannot be used to bypass the cache.
    """
    app = make_wsgi_app(registry)
    lock = threading.Lock()
    cache: dict[tuple[bool, bool], tuple[float, str, list[tuple[str, str]], bytes]] = {}

    def cached(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("REQUEST_METHOD") != "GET":
            answer: list[bytes] = app(environ, start_response)
            return answer
        key = (
            "application/openmetrics-text" in environ.get("HTTP_ACCEPT", ""),
            "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""),
        )
        with lock:  # one render at a time; the others wait for it and take its result
            found = cache.get(key)
            if found is None or time.monotonic() - found[0] >= seconds:
                rendered: dict[str, Any] = {}

                def keep(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
                    rendered.update(status=status, headers=headers)

                plain = {**environ, "QUERY_STRING": ""}
                body = b"".join(app(plain, keep))
                found = cache[key] = (time.monotonic(), rendered["status"], rendered["headers"], body)
        start_response(found[1], found[2])
        return [found[3]]

    return cached


class MetricsHTTPServer:
    """``/metrics`` (prometheus-client's WSGI app) on a bounded server; ``listen`` may use port 0 (see ``port``).

    With ``certfile`` and ``keyfile`` it serves HTTPS, and with ``client_cafile`` it
    requires a client certificate signed by that CA, as the gRPC server does. At most
    ``max_connections`` are served at once, at most ``max_per_peer`` of them from one peer
    address; each may stay silent ``timeout`` seconds, must complete its request (TLS
    handshake and headers) within ``request_timeout`` seconds and ends after
    ``connection_timeout`` seconds whatever it does. With ``cache_seconds``, a rendered scrape
    is served again for that long.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        listen: str,
        *,
        certfile: Path | None = None,
        keyfile: Path | None = None,
        client_cafile: Path | None = None,
        max_connections: int = MAX_HTTP_CONNECTIONS,
        timeout: float = HTTP_TIMEOUT_SECONDS,
        cache_seconds: float = 0.0,
        max_per_peer: int = MAX_HTTP_CONNECTIONS_PER_PEER,
        request_timeout: float = HTTP_REQUEST_SECONDS,
        connection_timeout: float = HTTP_CONNECTION_SECONDS,
    ) -> None:
        if not 0 < request_timeout <= connection_timeout:
            raise ValueError("request_timeout must be above 0 and at most connection_timeout")
        host, port = split_host_port(listen)
        app = _cached_app(registry, cache_seconds) if cache_seconds > 0 else make_wsgi_app(registry)

        class Server(_BoundedServer):
            pass

        class Handler(_QuietHandler):
            pass

        Handler.timeout = timeout
        Server.timeout_seconds = timeout
        Server.slots = threading.BoundedSemaphore(max_connections)
        Server.max_per_peer = max_per_peer
        Server.request_seconds = request_timeout
        Server.connection_seconds = connection_timeout
        Server.peers, Server.peers_lock, Server.watches = {}, threading.Lock(), {}
        Server.address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        if certfile is not None and keyfile is not None:
            Server.ssl_context = ssl_context(certfile, keyfile, client_cafile)
        self._httpd = make_server(host, port, app, Server, handler_class=Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="offsetstore-metrics", daemon=True)
        self._thread.start()
        self.host = host
        self.port: int = self._httpd.server_port
        self.scheme = "https" if certfile is not None else "http"

    def held(self, peer: str | None = None) -> int:
        """Connections served now, in all or from one ``peer`` address (refused ones are never counted)."""
        with self._httpd.peers_lock:
            return sum(self._httpd.peers.values()) if peer is None else self._httpd.peers.get(peer, 0)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def shutdown(self) -> None:
        """Stops serving and closes the listening socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def serve_http(
    registry: CollectorRegistry,
    listen: str,
    *,
    certfile: Path | None = None,
    keyfile: Path | None = None,
    client_cafile: Path | None = None,
    cache_seconds: float = 0.0,
) -> MetricsHTTPServer:
    """Serves ``registry`` on ``http(s)://listen/metrics`` until ``.shutdown()``."""
    return MetricsHTTPServer(
        registry,
        listen,
        certfile=certfile,
        keyfile=keyfile,
        client_cafile=client_cafile,
        cache_seconds=cache_seconds,
    )
