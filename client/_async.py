"""The asyncio offsetstore client: OffsetStoreClient's methods, awaitable, over grpc.aio.

Deadlines and retries are those of the blocking client (see ``_sync`` and ``_channel``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import grpc
import grpc.aio

from offsetstore.client import _base
from offsetstore.client._methods import ClientMethods
from offsetstore.core.errors import OffsetStoreError, from_rpc_error
from offsetstore.core.types import GroupSummary

__all__ = ["AsyncOffsetStoreClient"]

R = TypeVar("R")
Params = ParamSpec("Params")


def _awaited(method: Callable[Params, R]) -> Callable[Params, Coroutine[Any, Any, R]]:
    """A shared method as a coroutine function, with its signature and docstring: here ``_call`` awaits."""

    @functools.wraps(method)
    async def awaited(*args: Params.args, **kwargs: Params.kwargs) -> R:
        return await method(*args, **kwargs)  # type: ignore[misc]

    return awaited


class AsyncOffsetStoreClient(ClientMethods):
    """The asyncio twin of `OffsetStoreClient`; use it with ``async with``, or await `close()`."""

    _grpc = grpc.aio

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncOffsetStoreClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, method: Any, request: Any, result: Callable[[Any], R], timeout: float | None) -> R:
        try:
            response = await method(request, **self._call_kwargs(timeout))
        except grpc.RpcError as e:  # grpc.aio.AioRpcError is one
            raise from_rpc_error(e, unknown_outcome=_base.unknown_outcome(request)) from e
        return result(response)

    async def _read_pages(
        self, read: Callable[[str], Awaitable[Any]], merge: Callable[[list[Any]], R], timeout: float | None
    ) -> R:
        steps = _base.paged_read(merge, self._timeout(timeout))
        try:
            step = next(steps)
            while True:
                try:
                    # A page token is read; a number is seconds to wait.
                    answer = await (read(step) if isinstance(step, str) else asyncio.sleep(step))
                except OffsetStoreError as error:
                    step = steps.throw(error)
                else:
                    step = steps.send(answer)
        except StopIteration as done:
            return done.value

    commit_offsets = _awaited(ClientMethods.commit_offsets)
    fetch_offsets = _awaited(ClientMethods.fetch_offsets)
    reset_offsets = _awaited(ClientMethods.reset_offsets)
    delete_offsets = _awaited(ClientMethods.delete_offsets)
    join_group = _awaited(ClientMethods.join_group)
    list_groups = _awaited(ClientMethods.list_groups)
    list_topics = _awaited(ClientMethods.list_topics)
    expire_groups = _awaited(ClientMethods.expire_groups)
    describe_group = _awaited(ClientMethods.describe_group)
    list_offset_history = _awaited(ClientMethods.list_offset_history)
    report_watermarks = _awaited(ClientMethods.report_watermarks)
    observe_offsets = _awaited(ClientMethods.observe_offsets)
    health = _awaited(ClientMethods.health)

    async def iter_groups(
        self, prefix: str = "", *, page_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[GroupSummary]:
        """Every group whose id starts with `prefix`, fetching page after page."""
        token = ""
        while True:
            page = await self.list_groups(prefix, page_size=page_size, page_token=token, timeout=timeout)
            for group in page.items:
                yield group
            token = page.next_page_token
            if not token:
                return
