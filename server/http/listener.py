"""The ``--http-listen`` server: Connect calls, ``/openapi.json`` and the console, on the gRPC server's event loop.

aiohttp serves HTTP/1.1 on the loop the ``grpc.aio`` server runs on, so an HTTP call is a
coroutine beside the gRPC calls, admitted by the same gate with the same shares. TLS, when
given, is the gRPC server's certificate and, under mutual TLS, the same client CA.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from offsetstore.server.http.connect import SERVICE, ConnectTransport
from offsetstore.server.http.connections import ConnectionLimits, LimitedProtocol, Tally
from offsetstore.server.http.describe import openapi_json
from offsetstore.server.http.origin import HostGuard
from offsetstore.server.policy import Next

__all__ = ["CONSOLE_FILES", "HttpListener", "ServerLog", "http_ssl_context"]

#: The console's files (package data of ``offsetstore.server.http``), by the name they are served at.
CONSOLE_FILES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "actions.js": "text/javascript",
    "adopt.js": "text/javascript",
    "style.css": "text/css",
}

# The console runs only its own script and talks only to this server: an injected <script>
# would not run even if a name slipped through unescaped, and no other site may frame it.
_CONSOLE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def http_ssl_context(cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> ssl.SSLContext:
    """The HTTP listener's TLS: the gRPC server's certificate; with ``client_ca_file``, client certificates required."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=client_ca_file)
    return context


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP listener of a server: made only when one is configured (``--http-listen``)."""

    listen: str
    """HOST:PORT; port 0 picks one (:attr:`HttpListener.port`)."""

    ssl_context: ssl.SSLContext | None = None
    """TLS, on the gRPC server's certificate (:func:`http_ssl_context`); None: plain HTTP."""

    limits: ConnectionLimits = ConnectionLimits()
    """What its connections are allowed."""

    allowed_hosts: tuple[str, ...] = ()
    """Host names answered besides IP addresses and localhost (``.example.com``: every name under it)."""


class HttpListener:
    """Serves the gate's chain (``run``: :attr:`offsetstore.server.gate.Gate.run`) over HTTP as ``config`` says.

    Made on the gRPC server's loop, started and stopped there with it.
    """

    def __init__(
        self,
        run: Next,
        config: HttpConfig,
        *,
        max_message_bytes: int,
        reuse_port: bool = False,
    ) -> None:
        self.transport = ConnectTransport(run, max_message_bytes=max_message_bytes)
        self.limits = config.limits
        self.tally = Tally(self.limits)
        host, _, port = config.listen.rpartition(":")
        self.host = host.strip("[]") or "0.0.0.0"
        self.guard = HostGuard(self.host, config.allowed_hosts)
        self.port = int(port)
        self.ssl_context = config.ssl_context
        self.reuse_port = reuse_port
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.ssl_context is not None else 'http'}://{host}:{self.port}"

    def app(self) -> web.Application:
        """The aiohttp application: every route the listener serves."""
        app = web.Application(
            client_max_size=self.transport.max_body_bytes, middlewares=[_headers, self.guard.middleware]
        )
        app.router.add_post(f"/{SERVICE.full_name}/{{method}}", self.transport.handle)
        # Connect's GET, for the reads (NO_SIDE_EFFECTS): the transport answers 405 for the rest.
        app.router.add_get(f"/{SERVICE.full_name}/{{method}}", self.transport.handle, allow_head=False)
        description = openapi_json().encode()
        app.router.add_get("/openapi.json", _fixed(description, "application/json"))
        console = resources.files("offsetstore.server.http").joinpath("console")
        files = {name: (console.joinpath(name).read_bytes(), kind) for name, kind in CONSOLE_FILES.items()}
        app.router.add_get("/", _fixed(*files["index.html"]))
        for name, (body, kind) in files.items():
            app.router.add_get(f"/console/{name}", _fixed(body, kind))
        return app

    async def start(self) -> None:
        # No access log: the gate logs each call with its principal and outcome. aiohttp's
        # keep-alive timer, armed at a connection's start and after each answer and not reset
        # by a byte now and then, is the deadline of each request's headers.
        self._runner = web.AppRunner(
            self.app(),
            access_log=None,
            keepalive_timeout=self.limits.request_seconds,
            logger=ServerLog(logging.getLogger("aiohttp.server")),
        )
        await self._runner.setup()
        site = _LimitedSite(self._runner, self.host, self.port, self.ssl_context, self.reuse_port, self.tally)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self, grace: float | None = 0) -> None:
        """Stops accepting, lets running calls finish within ``grace`` seconds."""
        if self._runner is not None:
            self._runner._shutdown_timeout = grace or 0.0  # aiohttp reads it in cleanup()
            await self._runner.cleanup()
            self._runner = None


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server log: a malformed request is a WARNING line at most once a minute (with the count since), its
    traceback at DEBUG; anyone may send them, and each was an ERROR with a traceback. A crash of a handler stays an
    ERROR with its traceback.
    """

    def __init__(self, logger: logging.Logger, every: float = 60.0) -> None:
        super().__init__(logger, {})
        self.every = every
        self.quiet_until = 0.0
        self.suppressed = 0

    def exception(self, msg: Any, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        error = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if not isinstance(error, HttpProcessingError):
            self.logger.error(msg, *args, exc_info=exc_info, **kwargs)
            return
        self.logger.debug(msg, *args, exc_info=exc_info, **kwargs)
        now = time.monotonic()
        if now < self.quiet_until:
            self.suppressed += 1
            return
        reason = (error.message or "").strip().partition("\n")[0][:200]
        self.logger.warning(
            "malformed HTTP request refused (%s: %s); %d more since the last such line",
            error.code,
            reason,
            self.suppressed,
        )
        self.suppressed = 0
        self.quiet_until = now + self.every


class _LimitedSite(web.TCPSite):
    """aiohttp's TCP site, whose connections are counted and timed (:mod:`.connections`); it runs TLS itself."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        tls: ssl.SSLContext | None,
        reuse_port: bool,
        tally: Tally,
    ) -> None:
        super().__init__(runner, host, port, reuse_port=reuse_port or None)
        self._tls = tls
        self._tally = tally

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: LimitedProtocol(server, self._tally, self._tls),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]


def _fixed(body: bytes, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type)

    return serve


@web.middleware
async def _headers(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
    response = await handler(request)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    response.headers.setdefault("Cache-Control", "no-store")
    if response.content_type == "text/html":
        response.headers["Content-Security-Policy"] = _CONSOLE_POLICY
        response.headers["X-Frame-Options"] = "DENY"
    return response
