"""The skeleton of the server's grpc.aio interceptors: find the handler, wrap its behaviour, rebuild it.

An interceptor says only which calls it wraps and how (:meth:`HandlerInterceptor.wrap`);
looking the handler up, keeping its serializers and rebuilding a handler of the same
kind happen here, once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from offsetstore.core.calls import SERVICE
from offsetstore.server.call import Call
from offsetstore.server.policy import Next

__all__ = ["Behaviour", "HandlerInterceptor", "PolicyInterceptor", "handler_kind", "rpc_kind"]

#: A handler's behaviour: ``(request or request iterator, context)`` -> response, or an async iterator of them.
Behaviour = Callable[..., Any]

_FACTORIES = {
    "unary": (grpc.unary_unary_rpc_method_handler, "unary_unary"),
    "client_stream": (grpc.stream_unary_rpc_method_handler, "stream_unary"),
    "server_stream": (grpc.unary_stream_rpc_method_handler, "unary_stream"),
    "bidi_stream": (grpc.stream_stream_rpc_method_handler, "stream_stream"),
}


def rpc_kind(client_streaming: bool, server_streaming: bool) -> str:
    """go-grpc-prometheus' ``grpc_type`` of a method: unary, client_stream, server_stream or bidi_stream."""
    if client_streaming:
        return "bidi_stream" if server_streaming else "client_stream"
    return "server_stream" if server_streaming else "unary"


def handler_kind(handler: grpc.RpcMethodHandler[Any, Any]) -> str:
    """The :func:`rpc_kind` of a method handler."""
    return rpc_kind(handler.request_streaming, handler.response_streaming)


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    """A grpc.aio interceptor that wraps the behaviour of the handlers it chooses.

    Subclasses implement :meth:`wrap`. Unknown methods (no handler) pass through untouched,
    so gRPC answers them UNIMPLEMENTED.
    """

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        if handler is None:
            return None
        kind = handler_kind(handler)
        factory, attribute = _FACTORIES[kind]
        wrapped = self.wrap(details.method, kind, handler, getattr(handler, attribute))
        if wrapped is None:
            return handler
        return factory(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def wrap(
        self, method: str, kind: str, handler: grpc.RpcMethodHandler[Any, Any], behaviour: Behaviour
    ) -> Behaviour | None:
        """The behaviour to serve ``method`` with instead of ``behaviour``; None leaves the handler as it is."""
        raise NotImplementedError


class PolicyInterceptor(HandlerInterceptor):
    """An interceptor of the server's other services (health, reflection) that is a policy of the gate as well.

    The offset store's calls, gRPC and HTTP alike, it sees as a policy of the gate's chain
    (:meth:`__call__`, placed by the server outermost); their handlers it leaves alone, so
    that each call passes it once. Subclasses implement :meth:`__call__` and :meth:`wrap_other`.
    """

    _GATED = f"/{SERVICE.full_name}/"

    async def __call__(self, call: Call, next: Next) -> Message:
        raise NotImplementedError

    def wrap(
        self, method: str, kind: str, handler: grpc.RpcMethodHandler[Any, Any], behaviour: Behaviour
    ) -> Behaviour | None:
        if method.startswith(self._GATED):
            return None  # the gate's chain runs this policy for it
        return self.wrap_other(method, kind, handler, behaviour)

    def wrap_other(
        self, method: str, kind: str, handler: grpc.RpcMethodHandler[Any, Any], behaviour: Behaviour
    ) -> Behaviour | None:
        """As :meth:`HandlerInterceptor.wrap`, for a method of another service."""
        raise NotImplementedError
