"""The HTTP listener's connections, bounded as ``/metrics``'s are: caps in all and per peer, deadlines, a lifetime.

aiohttp closes nothing that never sends a request for an hour (its keep-alive timeout), and
asyncio gives a TLS handshake a minute: 1,100 silent connections took every descriptor of a
server limited to 1,024, and with them every new gRPC connection (issue 34, finding 6).
Here each TCP connection is counted at accept, before its TLS handshake, which the listener
runs itself under a deadline:

- at most ``max_connections`` at once, ``max_per_peer`` of them from one address; more are
  closed at once, so that nothing the listener accepts can take the descriptors gRPC needs;
- the TLS handshake within ``request_seconds``, then each request's headers within
  ``request_seconds`` of the connection's start or of the previous answer (aiohttp's
  keep-alive timer, which a byte now and then does not reset): idle and slowloris alike;
- ``connection_seconds`` at most in all, whatever the connection does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ConnectionLimits", "LimitedProtocol", "Tally"]


@dataclass(frozen=True)
class ConnectionLimits:
    """What the HTTP listener allows its connections; see the module docstring."""

    max_connections: int = 256
    """Connections at once; more are closed at once. A descriptor each, and the process has 1,024 by default."""

    max_per_peer: int = 32
    """Connections one peer address may hold at once (behind a proxy: the proxy's)."""

    request_seconds: float = 10.0
    """To finish the TLS handshake, and then each request's headers (the first, and after an answer)."""

    connection_seconds: float = 600.0
    """A connection's life at most; browsers and clients reconnect by themselves."""


class Tally:
    """The connections open now, in all and per peer address; everything runs on one event loop."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.total = 0
        self.peers: dict[str, int] = {}

    def enter(self, peer: str) -> bool:
        held = self.peers.get(peer, 0)
        if self.total >= self.limits.max_connections or held >= self.limits.max_per_peer:
            return False
        self.total += 1
        self.peers[peer] = held + 1
        return True

    def leave(self, peer: str) -> None:
        self.total -= 1
        held = self.peers.pop(peer, 1) - 1
        if held > 0:
            self.peers[peer] = held


class LimitedProtocol(asyncio.Protocol):
    """One accepted connection: counted in, its TLS handshake run under the deadline, then aiohttp's protocol.

    ``make_inner`` is aiohttp's protocol factory (its ``web.Server``), called once the
    connection is admitted (and, with ``ssl_context``, its handshake done).

    With TLS, the accepted TCP transport is only the door: it is counted, then closed before
    it reads a byte, and a duplicate of its socket goes to the loop's own TLS
    (``connect_accepted_socket``), under the handshake deadline; this same protocol is then the
    TLS connection's. ``start_tls`` on the accepted transport instead needed it paused from
    ``connection_made`` on, and uvloop starts reading right after ``connection_made`` returns:
    a ClientHello read in that turn went to this protocol, not to TLS, and the handshake
    stalled until its deadline (the client saw an EOF).
    """

    def __init__(
        self, make_inner: Callable[[], asyncio.Protocol], tally: Tally, ssl_context: ssl.SSLContext | None
    ) -> None:
        self.make_inner = make_inner
        self.tally = tally
        self.ssl_context = ssl_context
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.BaseTransport | None = None
        self.peer: str | None = None  # set while counted in
        self._expiry: asyncio.TimerHandle | None = None
        self._door_open = False  # with TLS: the accepted transport, closed unread, not yet told lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.peer is not None:  # with TLS: the loop's TLS connection, its handshake done
            self.transport = transport
            self._start(transport)
            return
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if peername else "unknown"
        if not self.tally.enter(peer):
            _abort(transport)  # full, or this peer holds its share: refused before anything is read
            return
        self.peer = peer
        loop = asyncio.get_running_loop()
        self._expiry = loop.call_later(self.tally.limits.connection_seconds, self._expire)
        if self.ssl_context is None:
            self.transport = transport
            self._start(transport)
            return
        try:
            secured = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
        except OSError:
            _abort(transport)
            self._leave()
            return
        self._door_open = True
        _abort(transport)  # from connection_made: the loop never starts reading it
        loop.create_task(self._handshake(secured))

    async def _handshake(self, secured: socket.socket) -> None:
        assert self.ssl_context is not None
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: self,
                secured,
                ssl=self.ssl_context,
                ssl_handshake_timeout=self.tally.limits.request_seconds,
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            # The loop owns the socket once given it, and closes it with its transport (uvloop
            # from libuv's close callback, later: closing it here could close a reused number).
            self._leave()

    def _start(self, transport: asyncio.BaseTransport) -> None:
        self.inner = self.make_inner()
        self.inner.connection_made(transport)

    def _expire(self) -> None:
        self._expiry = None
        if self.transport is not None:
            _abort(self.transport)

    def _leave(self) -> None:
        if self.peer is not None:
            self.tally.leave(self.peer)
            self.peer = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    # --- what asyncio tells the protocol, passed on to aiohttp's ---
    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._door_open:  # the door's close, told first (it was closed before TLS began)
            self._door_open = False
            return
        self._leave()
        self.transport = None
        if self.inner is not None:
            self.inner.connection_lost(exc)


def _abort(transport: Any) -> None:
    with contextlib.suppress(Exception):
        transport.abort()
