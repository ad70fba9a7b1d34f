"""The Connect protocol's unary calls over HTTP/1.1, served by the server's gate.

``POST /offsetstore.v1.OffsetStoreService/<Method>`` with ``Content-Type: application/json``
(proto3 JSON) or ``application/proto`` (binary). The call is made a
:class:`~offsetstore.server.call.Call` by a thin adapter (:class:`HttpCall`) and handed to
the gate's chain, the same policies a gRPC call passes (metrics and traces included): the
request headers are the call's metadata (``Authorization: Bearer ...``),
``Connect-Timeout-Ms`` or ``grpc-timeout`` its deadline, the TCP peer and the TLS client
certificate its peer and identity. Nothing about who may do what is decided here.

A method whose ``idempotency_level`` is ``NO_SIDE_EFFECTS`` (a read; :mod:`offsetstore.core.calls`)
may also be called as Connect's GET: ``GET /offsetstore.v1.OffsetStoreService/<Method>?encoding=json
&message=<the request, URL-encoded>`` (``&base64=1`` for a base64url message, ``encoding=proto``
for binary), which a browser, a proxy or ``curl`` can make and cache; any other method
answers 405.

A failed call answers the Connect error JSON with the HTTP status the protocol gives its
code; its details are the gRPC status details, each as ``{"type", "value" (base64), "debug"}``,
so ``google.rpc.ErrorInfo``'s ``reason`` reads the same as over gRPC.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

import grpc
from aiohttp import web
from google.protobuf import any_pb2, json_format, symbol_database
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from offsetstore.core.calls import FACTS
from offsetstore.core.errors import InvalidArgumentError, ResourceExhaustedError
from offsetstore.server.call import Call, Metadata
from offsetstore.server.policies.read import REQUEST_CLASSES
from offsetstore.server.policy import Next
from offsetstore.server.status import status_of
from offsetstore.storage.validate import MAX_PARTITIONS
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = ["CONNECT_CODES", "JSON", "PROTO", "ConnectTransport", "HttpCall", "error_document"]

SERVICE = pb.DESCRIPTOR.services_by_name["OffsetStoreService"]

JSON = "application/json"
PROTO = "application/proto"

#: Each gRPC status code's Connect name and HTTP status (the Connect protocol's table).
CONNECT_CODES: Mapping[grpc.StatusCode, tuple[str, int]] = {
    grpc.StatusCode.CANCELLED: ("canceled", 499),
    grpc.StatusCode.UNKNOWN: ("unknown", 500),
    grpc.StatusCode.INVALID_ARGUMENT: ("invalid_argument", 400),
    grpc.StatusCode.DEADLINE_EXCEEDED: ("deadline_exceeded", 504),
    grpc.StatusCode.NOT_FOUND: ("not_found", 404),
    grpc.StatusCode.ALREADY_EXISTS: ("already_exists", 409),
    grpc.StatusCode.PERMISSION_DENIED: ("permission_denied", 403),
    grpc.StatusCode.RESOURCE_EXHAUSTED: ("resource_exhausted", 429),
    grpc.StatusCode.FAILED_PRECONDITION: ("failed_precondition", 400),
    grpc.StatusCode.ABORTED: ("aborted", 409),
    grpc.StatusCode.OUT_OF_RANGE: ("out_of_range", 400),
    grpc.StatusCode.UNIMPLEMENTED: ("unimplemented", 501),
    grpc.StatusCode.INTERNAL: ("internal", 500),
    grpc.StatusCode.UNAVAILABLE: ("unavailable", 503),
    grpc.StatusCode.DATA_LOSS: ("data_loss", 500),
    grpc.StatusCode.UNAUTHENTICATED: ("unauthenticated", 401),
}

#: Tokens a JSON body may hold: a request of 10,000 partitions spells each in at most 24
#: (an entry's brackets, five names and values, their colons and commas). A body with more
#: is refused before ``json.loads`` builds an object for each: 10 MB of ``{},`` would be 3.3
#: million dicts (issue 34).
MAX_JSON_TOKENS = 32 * MAX_PARTITIONS + 256
# One token per match, each where the last ended: a whole string (escapes included;
# possessive, so one pass however long), an opening bracket or comma, or a run of anything
# else (numbers, literals, colons, closing brackets, blanks). An unterminated string matches
# nothing, and the body is refused there: no position is scanned twice.
_JSON_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[{,]|[^"\[{,]++')

_GRPC_TIMEOUT = re.compile(r"^(\d{1,8})([HMSmun])$")
_GRPC_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# Keep the gate's own DEADLINE_EXCEEDED (with its log line) the usual answer; this one only
# ends a call that outlived its deadline anyway.
_DEADLINE_GRACE_SECONDS = 1.0


class HttpCall:
    """The HTTP adapter: one Connect request, as the gate's policies read a transport (:class:`~offsetstore.server.call.Transport`)."""

    __slots__ = ("_deadline", "_done", "_message", "_request")

    def __init__(self, request: web.Request, timeout: float | None, message: Callable[[], Awaitable[bytes]]) -> None:
        self._request = request
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._message = message
        self._done = False

    def invocation_metadata(self) -> Metadata:
        """The request headers, names lower-cased: ``Authorization: Bearer ...``, ``traceparent``."""
        return tuple((k.lower(), v) for k, v in self._request.headers.items())

    def peer(self) -> str:
        """``ipv4:HOST:PORT`` or ``ipv6:[HOST]:PORT``, as gRPC names a peer."""
        transport = self._request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        if not peer:
            return "unknown"
        host, port = peer[0], peer[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        """The verified client certificate's CN and URI SANs, under gRPC's keys (empty without one)."""
        transport = self._request.transport
        cert = transport.get_extra_info("peercert") if transport is not None else None
        if not cert:
            return {}
        names = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
        uris = [value for kind, value in cert.get("subjectAltName", ()) if kind == "URI"]
        return {
            "x509_common_name": [n.encode() for n in names[-1:]],  # the most specific CN, as gRPC reports
            "peer_uri": [u.encode() for u in uris],
        }

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def active(self) -> bool:
        transport = self._request.transport
        return not (self._done or transport is None or transport.is_closing())

    async def message(self) -> bytes | None:
        return await self._message()

    def finish(self) -> None:
        self._done = True


class ConnectTransport:
    """Answers Connect unary calls with ``run``, the gate's chain (:attr:`offsetstore.server.gate.Gate.run`).

    An HTTP call passes the same policies as a gRPC call (metrics and traces included), in
    the same order: only how it arrives and how its status is written differ.
    """

    def __init__(self, run: Next, *, max_message_bytes: int) -> None:
        self.run = run
        self.max_message_bytes = max_message_bytes
        self.methods = {m.name: m for m in SERVICE.methods}

    @property
    def max_body_bytes(self) -> int:
        """What the HTTP server reads of a body at most: ``--max-message-bytes``, JSON or binary."""
        return self.max_message_bytes

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The aiohttp handler of ``POST`` (and, for a read, ``GET``) ``/offsetstore.v1.OffsetStoreService/{method}``."""
        method = self.methods.get(request.match_info.get("method", ""))
        if method is None:
            return _error(grpc.StatusCode.UNIMPLEMENTED, "no such method of offsetstore.v1.OffsetStoreService", 404)
        facts = FACTS[method.name]
        query: bytes | None = None  # a GET's request message
        if request.method == "GET":
            if not facts.read_only:
                response = _error(grpc.StatusCode.UNIMPLEMENTED, f"{method.name} changes the store: POST it", 405)
                response.headers["Allow"] = "POST"
                return response
            try:
                codec, query = _query_message(request.query)
            except InvalidArgumentError as error:
                return _error(grpc.StatusCode.INVALID_ARGUMENT, error.message, 400)
            if codec is None:
                return _error(grpc.StatusCode.INVALID_ARGUMENT, "a GET needs encoding=json or encoding=proto", 400)
        else:
            codec = _codec(request.headers.get("Content-Type", ""))
        if codec is None:
            response = _error(grpc.StatusCode.UNKNOWN, f"the content type must be {JSON} or {PROTO}", 415)
            response.headers["Accept-Post"] = f"{JSON}, {PROTO}"
            return response
        try:
            timeout = _timeout(request.headers)
        except ValueError as error:
            return _error(grpc.StatusCode.INVALID_ARGUMENT, str(error), 400)
        if timeout == 0:  # the deadline has passed already: the protocol's answer, not the store's 503
            return _error(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed (a timeout of 0)", 504)
        request_class = REQUEST_CLASSES[method.name]
        limit = self.max_message_bytes
        transport = HttpCall(
            request, timeout, functools.partial(_message, request, request_class, method.name, codec, limit, query)
        )
        bound = asyncio.timeout(None if timeout is None else timeout + _DEADLINE_GRACE_SECONDS)
        try:
            async with bound:
                answer = await self.run(Call(facts, transport=transport))
        except Exception as error:
            if isinstance(error, TimeoutError) and bound.expired():
                return _error(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed", 504)
            return _failed(status_of(error))
        finally:
            transport.finish()
        if codec == PROTO:
            return web.Response(body=answer.SerializeToString(), content_type=PROTO)
        return web.Response(body=_to_json(answer), content_type=JSON)


def _codec(content_type: str) -> str | None:
    kind = content_type.partition(";")[0].strip().lower()
    return kind if kind in (JSON, PROTO) else None


def _timeout(headers: Mapping[str, str]) -> float | None:
    """The call's timeout in seconds from ``Connect-Timeout-Ms`` or ``grpc-timeout``; the shorter wins."""
    found: list[float] = []
    connect = headers.get("Connect-Timeout-Ms")
    if connect is not None:
        if not connect.isdigit() or len(connect) > 10:
            raise ValueError("Connect-Timeout-Ms must be a positive integer of at most 10 digits")
        found.append(int(connect) / 1000)
    grpc_timeout = headers.get("grpc-timeout")
    if grpc_timeout is not None:
        match = _GRPC_TIMEOUT.match(grpc_timeout)
        if match is None:
            raise ValueError("grpc-timeout must be up to 8 digits and a unit (H, M, S, m, u, n)")
        found.append(int(match.group(1)) * _GRPC_UNITS[match.group(2)])
    return min(found) if found else None


def _query_message(query: Mapping[str, str]) -> tuple[str | None, bytes]:
    """(codec, message) of a Connect GET's query: ``encoding``, ``message``, ``base64``; a bad one is INVALID_ARGUMENT."""
    codec = {"json": JSON, "proto": PROTO}.get(query.get("encoding", ""))
    message = query.get("message", "").encode()
    if query.get("base64") == "1":
        try:
            message = base64.urlsafe_b64decode(message + b"=" * (-len(message) % 4))
        except ValueError:
            raise InvalidArgumentError.field("message", "is not base64url") from None
    return codec, message


async def _message(
    request: web.Request,
    request_class: type[Message],
    method: str,
    codec: str,
    limit: int,
    query: bytes | None = None,
) -> bytes:
    """The call's one request message, binary; read only when the gate asks (authenticated, admitted, permitted).

    ``query`` is a GET's message, from its URL (which the HTTP server bounds); else the body is read.
    """
    if query is not None:
        body = query
    elif request.content_length is not None and request.content_length > limit:
        raise _too_large(method, limit)  # refused from its header, unread
    else:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(method, limit) from None
    if codec == JSON:
        # Off the event loop: parsing the largest valid body is about a second of Python,
        # which would hold every gRPC and HTTP call of the process.
        body = await asyncio.to_thread(_from_json, body, request_class, method)
    if len(body) > limit:
        raise _too_large(method, limit)
    return body


def _from_json(body: bytes, request_class: type[Message], method: str) -> bytes:
    """The binary request of a JSON body, or INVALID_ARGUMENT; a body of too many tokens is refused before it is parsed."""
    at = tokens = 0
    while at < len(body):
        token = _JSON_TOKEN.match(body, at)
        if token is None:
            raise InvalidArgumentError(f"the body is not a {method} request in proto3 JSON: an unterminated string")
        at = token.end()
        tokens += 1
        if tokens > MAX_JSON_TOKENS:
            raise InvalidArgumentError.field(
                "body", f"more JSON than a {method} request of at most {MAX_PARTITIONS} partitions holds"
            )
    message = request_class()
    try:
        json_format.Parse(body or b"{}", message)
    except (json_format.ParseError, UnicodeDecodeError, ValueError, RecursionError) as error:
        text = str(error)
        shown = text if len(text) <= 300 else text[:300] + "..."
        raise InvalidArgumentError(f"the body is not a {method} request in proto3 JSON: {shown}") from None
    return message.SerializeToString()


def _too_large(method: str, limit: int) -> ResourceExhaustedError:
    return ResourceExhaustedError(
        f"the {method} request is larger than the {limit} bytes a request may be", metadata={"limit": "message_bytes"}
    )


def _to_json(message: Message) -> bytes:
    document = json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def error_document(code: grpc.StatusCode, message: str, details: Iterable[any_pb2.Any] = ()) -> dict[str, object]:
    """The Connect error JSON of a status: ``{"code", "message", "details": [{"type", "value", "debug"}]}``."""
    document: dict[str, object] = {"code": CONNECT_CODES.get(code, ("unknown", 500))[0], "message": message}
    entries = []
    for any_ in details:
        type_name = any_.type_url.rpartition("/")[2]
        entry: dict[str, object] = {"type": type_name, "value": base64.b64encode(any_.value).decode().rstrip("=")}
        try:
            detail = symbol_database.Default().GetSymbol(type_name)()
            detail.ParseFromString(any_.value)
            entry["debug"] = json_format.MessageToDict(detail)
        except (KeyError, ValueError, RuntimeError):
            pass  # a type this server does not know: the bytes alone
        entries.append(entry)
    if entries:
        document["details"] = entries
    return document


def _failed(status: grpc.Status) -> web.Response:
    """The Connect error of the status a call ended with (:func:`offsetstore.server.status.status_of`)."""
    code = status.code
    details = status_pb2.Status()
    for key, value in status.trailing_metadata or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            details.ParseFromString(value)
    response = _error(code, status.details, CONNECT_CODES.get(code, ("unknown", 500))[1], details.details)
    for any_ in details.details:
        if any_.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            any_.Unpack(info)
            response.headers["Retry-After"] = str(max(1, math.ceil(info.retry_delay.ToMilliseconds() / 1000)))
    return response


def _error(code: grpc.StatusCode, message: str, http_status: int, details: Iterable[any_pb2.Any] = ()) -> web.Response:
    return web.json_response(error_document(code, message, details), status=http_status)
