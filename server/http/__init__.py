"""HTTP/JSON for offsetstore.v1 (the Connect protocol, unary) and the web console, on ``--http-listen``.

Every call goes through the server's gate (:mod:`offsetstore.server.gate`), as a gRPC call
does: the same authentication, grants, limits, quotas, metrics and error details. See
docs/http.md.
"""

from offsetstore.server.http.connect import CONNECT_CODES, ConnectTransport
from offsetstore.server.http.connections import ConnectionLimits
from offsetstore.server.http.describe import openapi
from offsetstore.server.http.listener import HttpConfig, HttpListener, http_ssl_context

__all__ = [
    "CONNECT_CODES",
    "ConnectionLimits",
    "ConnectTransport",
    "HttpConfig",
    "HttpListener",
    "http_ssl_context",
    "openapi",
]
