"""The one place where an error becomes a gRPC status, and the one way a handler ends a call with it.

Every path of the server that refuses or fails a call (the gate of offsetstore.v1, the
stream guard of reflection) hands its error to :func:`fail`, which asks :func:`status_of`:

- an :class:`~offsetstore.core.errors.OffsetStoreError` travels as its rich status
  (``google.rpc.Status`` with ErrorInfo and the like, see ``OffsetStoreError.to_status``);
- a :class:`CallEnded` is a bare status the server chose (a stream past its time);
- anything else is a bare INTERNAL: the traceback is the caller's to log, never sent.
"""

from __future__ import annotations

import collections
from typing import Any

import grpc

from offsetstore.core.errors import OffsetStoreError

__all__ = ["INTERNAL_DETAILS", "CallEnded", "Status", "fail", "status_of"]

#: What a caller is told of an unexpected error.
INTERNAL_DETAILS = "internal error"


class Status(collections.namedtuple("Status", ("code", "details", "trailing_metadata")), grpc.Status):
    """A status to end a call with: code, details and trailing metadata (as ``rpc_status.to_status`` makes)."""


class CallEnded(Exception):
    """The server ends a call with a bare status of its choosing; no ErrorInfo travels."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def status_of(error: BaseException) -> grpc.Status:
    """The status ``error`` ends its call with (see the module docstring)."""
    if isinstance(error, OffsetStoreError):
        return error.to_status()
    if isinstance(error, CallEnded):
        return Status(error.code, error.details, ())
    return Status(grpc.StatusCode.INTERNAL, INTERNAL_DETAILS, ())


def fail(context: grpc.aio.ServicerContext[Any, Any], error: BaseException) -> None:
    """Ends the call with ``error``'s status when the handler returns; nothing is sent before.

    Not ``context.abort``: under grpc.aio that sends the status at once, before the
    interceptors around the handler (the metrics) have seen the call end.
    """
    status = status_of(error)
    context.set_code(status.code)
    context.set_details(status.details)
    context.set_trailing_metadata(status.trailing_metadata)
