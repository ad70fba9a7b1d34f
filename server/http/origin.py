"""Who may address the HTTP listener: a Host allow-list against DNS rebinding, and an Origin check on calls.

DNS rebinding: a page the operator opens on ``attacker.example`` has its name re-resolved
to 127.0.0.1, and its script then calls the loopback listener as its own origin: with
tokens off (the default) it could reset and delete every group (issue 34, finding 8). The
browser still says which name it thinks it talks to, in ``Host``. So the listener answers
only requests whose Host is

- an IP address (a page loaded from an address is that address's own origin: nothing to
  rebind), ``localhost``, or the host the listener was told to listen on;
- or a name of ``OFFSETSTORE_HTTP_ALLOWED_HOSTS`` (comma-separated; ``.example.com`` allows
  every name under it), for a listener reached by DNS name;

and answers any other **421 Misdirected Request** before anything runs. A request without
Host (no browser sends one) passes. A call (POST) carrying ``Origin`` must come from the
origin it addresses (``Origin``'s host and port are ``Host``'s; not the scheme, which a proxy
ending TLS changes): a page of another origin gets **403**, whatever its token. Preflights
(OPTIONS) stay 405: CORS is off.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from aiohttp import web

from offsetstore.server.http.connect import error_document

__all__ = ["HostGuard", "host_of"]

# The RPCs' paths: a GET of a read is a call too, checked for its origin as a POST is.
_SERVICE_PATH = "/offsetstore.v1.OffsetStoreService/"

log = logging.getLogger(__name__)

#: Names of this machine's loopback that need no setting.
LOOPBACK_NAMES = frozenset({"localhost"})


def host_of(authority: str) -> str:
    """The host of a ``Host`` header or an origin's authority, lowercase, without port or brackets."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    host, sep, port = authority.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else authority


class HostGuard:
    """The aiohttp middleware of the module docstring, for a listener on ``listen_host`` with ``extra`` names."""

    def __init__(self, listen_host: str, extra: Iterable[str] = ()) -> None:
        names = {n.strip().lower().rstrip(".") for n in extra if n.strip()}
        self.names = frozenset(names | LOOPBACK_NAMES | {host_of(listen_host)})
        self.suffixes = tuple(n for n in self.names if n.startswith("."))

    def allows(self, host: str) -> bool:
        """Whether a request addressed to ``host`` (see :func:`host_of`) is answered."""
        if host in self.names or any(host.endswith(s) for s in self.suffixes):
            return True
        try:
            ipaddress.ip_address(host.partition("%")[0])
        except ValueError:
            return False
        return True

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> Any:
        authority = request.headers.get("Host")
        if authority is not None and not self.allows(host_of(authority)):
            log.debug("http request for a foreign host refused", extra={"host": authority[:100]})
            return _refuse(
                421,
                "this server does not answer for that Host; add the name to OFFSETSTORE_HTTP_ALLOWED_HOSTS "
                "if it is yours",
            )
        origin = request.headers.get("Origin")
        if origin is not None and (
            request.method == "POST" or (request.method == "GET" and request.path.startswith(_SERVICE_PATH))
        ):
            scheme, _, rest = origin.partition("://")
            if not rest or authority is None or rest.strip().lower() != authority.strip().lower():
                log.debug("http call from another origin refused", extra={"origin": origin[:100]})
                return _refuse(403, "calls are taken from this server's own origin only (no CORS)")
        return await handler(request)


def _refuse(status: int, message: str) -> web.Response:
    return web.json_response(error_document(grpc.StatusCode.PERMISSION_DENIED, message), status=status)
