"""The gRPC servicer: a thin adapter from offsetstore.v1 messages to the AsyncStore.

Each method takes a decoded request and returns its response or raises a typed error;
the server's gate (:mod:`offsetstore.server.gate`) authenticates, admits and decodes the
call before, and maps every error to a status after, in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from offsetstore import storage
from offsetstore.core import convert, convert_requests
from offsetstore.core.errors import InvalidArgumentError
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server.auth import current_principal
from offsetstore.v1 import offset_store_pb2 as pb

log = logging.getLogger(__name__)

Result = TypeVar("Result")


class Caller(Protocol):
    """What a method reads of its call besides the request (the gate's :class:`~offsetstore.server.call.Call`)."""

    def peer(self) -> str: ...


def _actor(context: Caller) -> str:
    """Who a change is recorded as: the authenticated principal, or the peer while authentication is off."""
    return current_principal.get() or context.peer()


#: Entries converted between two turns of the event loop: well under a millisecond of work.
SLICE = 100


async def _in_slices(convert_one: Callable[[Any], Result], values: Sequence[Any]) -> list[Result]:
    """``[convert_one(v) for v in values]``, letting other calls run between slices of a wide request.

    A 10,000-partition commit is tens of milliseconds of conversion: in one piece, every
    other tenant's call would wait for all of it.
    """
    out: list[Result] = []
    for start in range(0, len(values), SLICE):
        if start:
            await asyncio.sleep(0)
        out.extend(convert_one(v) for v in values[start : start + SLICE])
    return out


class OffsetStoreServicer:
    """Implements offsetstore.v1.OffsetStoreService over an :class:`AsyncStore`; a method per RPC."""

    def __init__(self, store: AsyncStore) -> None:
        self.store = store

    async def CommitOffsets(self, request: pb.CommitOffsetsRequest, context: Caller) -> pb.CommitOffsetsResponse:
        committed = await self.store.commit_offsets(
            request.group_id,
            await _in_slices(convert.offset_commit_from_proto, request.offsets),
            generation=request.generation,
            actor=_actor(context),
            # Most commits carry none: an empty field costs one length check.
            fingerprints=convert_requests.fingerprints_from_proto(request.fingerprints) if request.fingerprints else (),
        )
        # Each partition's offset and commit time, not the metadata the caller sent: echoing it
        # would let a 44 MB request buy a 44 MB answer (contract, section 2).
        response = pb.CommitOffsetsResponse()
        for start in range(0, len(committed), SLICE):  # built in place, a slice at a time
            if start:
                await asyncio.sleep(0)
            for c in committed[start : start + SLICE]:
                entry = response.offsets.add(topic=c.topic, partition=c.partition, offset=c.offset)
                if c.commit_time is not None:
                    entry.commit_time.CopyFrom(convert.datetime_to_timestamp(c.commit_time))
        return response

    async def FetchOffsets(self, request: pb.FetchOffsetsRequest, context: Caller) -> pb.FetchOffsetsResponse:
        result = await self.store.fetch_offsets(
            request.group_id,
            convert_requests.selections_from_proto(request.topics),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return convert.fetch_result_to_proto(result)

    async def ResetOffsets(self, request: pb.ResetOffsetsRequest, context: Caller) -> pb.ResetOffsetsResponse:
        result = await self.store.reset_offsets(
            convert_requests.reset_request_from_proto(request), actor=_actor(context)
        )
        return convert.reset_result_to_proto(result)

    async def DeleteOffsets(self, request: pb.DeleteOffsetsRequest, context: Caller) -> pb.DeleteOffsetsResponse:
        deleted = await self.store.delete_offsets(
            request.group_id,
            convert_requests.selections_from_proto(request.topics),
            all_topics=request.all_topics,
            actor=_actor(context),
        )
        return pb.DeleteOffsetsResponse(deleted=[convert.topic_partition_to_proto(tp) for tp in deleted])

    async def JoinGroup(self, request: pb.JoinGroupRequest, context: Caller) -> pb.JoinGroupResponse:
        generation = await self.store.join_group(
            request.group_id, request.member_id, context.peer(), kafka_cluster_id=request.kafka_cluster_id
        )
        return pb.JoinGroupResponse(generation=generation)

    async def ListGroups(self, request: pb.ListGroupsRequest, context: Caller) -> pb.ListGroupsResponse:
        page = await self.store.list_groups(request.prefix, page_size=request.page_size, page_token=request.page_token)
        return pb.ListGroupsResponse(
            groups=[convert.group_summary_to_proto(g) for g in page.items], next_page_token=page.next_page_token
        )

    async def DescribeGroup(self, request: pb.DescribeGroupRequest, context: Caller) -> pb.DescribeGroupResponse:
        description = await self.store.describe_group(
            request.group_id,
            page_size=request.page_size,
            page_token=request.page_token,
            lag_history=request.include_lag_history,
        )
        return convert.group_description_to_proto(description)

    async def ListTopics(self, request: pb.ListTopicsRequest, context: Caller) -> pb.ListTopicsResponse:
        page = await self.store.read(
            storage.list_topics, request.group_id, page_size=request.page_size, page_token=request.page_token
        )
        return pb.ListTopicsResponse(
            topics=[convert.topic_summary_to_proto(t) for t in page.items], next_page_token=page.next_page_token
        )

    async def ListOffsetHistory(
        self, request: pb.ListOffsetHistoryRequest, context: Caller
    ) -> pb.ListOffsetHistoryResponse:
        page = await self.store.list_offset_history(
            request.group_id,
            convert_requests.selections_from_proto(request.topics),
            since=convert_requests.timestamp_field(request, "since"),
            until=convert_requests.timestamp_field(request, "until"),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return pb.ListOffsetHistoryResponse(
            changes=[convert.offset_change_to_proto(c) for c in page.items], next_page_token=page.next_page_token
        )

    async def ReportWatermarks(
        self, request: pb.ReportWatermarksRequest, context: Caller
    ) -> pb.ReportWatermarksResponse:
        await self.store.report_watermarks(await _in_slices(convert.watermark_from_proto, request.watermarks))
        return pb.ReportWatermarksResponse()

    async def ExpireGroups(self, request: pb.ExpireGroupsRequest, context: Caller) -> pb.ExpireGroupsResponse:
        if not request.HasField("idle_for"):
            raise InvalidArgumentError.field("idle_for", "is required")
        try:
            idle_for = request.idle_for.ToTimedelta()
        except (ValueError, OverflowError):
            raise InvalidArgumentError.field("idle_for", "is not a valid duration") from None
        groups = await self.store.expire_groups(
            idle_for, prefix=request.prefix, limit=request.limit, execute=request.execute, actor=_actor(context)
        )
        return pb.ExpireGroupsResponse(
            groups=[convert.expired_group_to_proto(g) for g in groups], executed=request.execute
        )

    async def ObserveOffsets(self, request: pb.ObserveOffsetsRequest, context: Caller) -> pb.ObserveOffsetsResponse:
        changed = await self.store.observe_offsets(
            request.group_id,
            await _in_slices(convert.offset_commit_from_proto, request.offsets),
            source=request.source,
            actor=_actor(context),
            lost=[convert.topic_partition_from_proto(tp) for tp in request.lost],
        )
        return pb.ObserveOffsetsResponse(changed=changed)
