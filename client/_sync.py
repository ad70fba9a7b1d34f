"""The blocking offsetstore client.

Every call has a deadline (the client's ``timeout``, or the call's own). Idempotent calls are
retried on UNAVAILABLE by gRPC's service config; commits, resets, deletes and JoinGroup are
not, because a repeat of one whose reply was lost would act twice (see ``_channel``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import grpc

from offsetstore.client import _base
from offsetstore.client._methods import ClientMethods
from offsetstore.core.errors import OffsetStoreError, from_rpc_error
from offsetstore.core.types import GroupSummary

__all__ = ["OffsetStoreClient"]

R = TypeVar("R")


class OffsetStoreClient(ClientMethods):
    """A client of an offsetstore server; use it as a context manager, or call `close()`.

    `timeout` is the default deadline of each call in seconds. `credentials` make the
    channel secure (``grpc.ssl_channel_credentials(...)``; with a client certificate for
    mutual TLS). `token` is sent as ``authorization: Bearer <token>`` with every call, and
    so is `metadata`. `options` are extra channel options. Failed calls raise the
    `OffsetStoreError` subclass of the server's error.
    """

    _grpc = grpc

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> OffsetStoreClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: Any, request: Any, result: Callable[[Any], R], timeout: float | None) -> R:
        try:
            response = method(request, **self._call_kwargs(timeout))
        except grpc.RpcError as e:
            raise from_rpc_error(e, unknown_outcome=_base.unknown_outcome(request)) from e
        return result(response)

    def _read_pages(self, read: Callable[[str], Any], merge: Callable[[list[Any]], R], timeout: float | None) -> R:
        steps = _base.paged_read(merge, self._timeout(timeout))
        try:
            step = next(steps)
            while True:
                try:
                    # A page token is read; a number is seconds to wait.
                    answer = read(step) if isinstance(step, str) else time.sleep(step)
                except OffsetStoreError as error:
                    step = steps.throw(error)
                else:
                    step = steps.send(answer)
        except StopIteration as done:
            return done.value

    def iter_groups(
        self, prefix: str = "", *, page_size: int = 0, timeout: float | None = None
    ) -> Iterator[GroupSummary]:
        """Every group whose id starts with `prefix`, fetching page after page."""
        token = ""
        while True:
            page = self.list_groups(prefix, page_size=page_size, page_token=token, timeout=timeout)
            yield from page.items
            token = page.next_page_token
            if not token:
                return
