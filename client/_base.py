"""What the sync and asyncio clients share: settings, the requests and results of every call, paging.

Each call builds its request with a ``*_request`` function and turns the response into plain
values with a ``*_result`` function of this module; ``_methods`` writes every call once with
them, and each client only makes the call, blocking or awaited.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from grpc_health.v1 import health_pb2

from offsetstore.core import convert, convert_requests
from offsetstore.core.calls import BY_REQUEST
from offsetstore.core.errors import GroupChangedError, ResourceExhaustedError
from offsetstore.core.types import (
    CommittedOffset,
    ExpiredGroup,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    OffsetCommit,
    Page,
    RecordFingerprint,
    ResetRequest,
    TopicPartition,
    Topics,
    TopicSummary,
    Watermark,
)
from offsetstore.v1 import offset_store_pb2 as pb

R = TypeVar("R")
#: A page of a paged read.
P = TypeVar("P", FetchResult, GroupDescription)

_TOKEN = re.compile(r"[\x21-\x7e]+")

#: Entries per page of fetch_offsets and describe_group. A page ends at this many or at the
#: server's --max-response-bytes (1 MiB by default), whichever comes first; the server reads
#: at most this many rows for a page, however large the group.
PAGE_SIZE = 1000
#: Times a paged read starts again when a join or a reset came between its pages.
PAGED_READ_ATTEMPTS = 3

#: The offsets ``commit_offsets`` takes: OffsetCommit values, or {(topic, partition): offset}.
Offsets = Iterable[OffsetCommit] | Mapping[tuple[str, int], int]


def unknown_outcome(request: Any) -> str | None:
    """What to say when `request` (a write) got no answer, and how to find out (its unknown_outcome
    fact, :mod:`offsetstore.core.calls`); None for a read or a preview, which changed nothing."""
    facts = BY_REQUEST.get(type(request).__name__)
    if facts is None or not facts.unknown_outcome or facts.previews(request):
        return None
    return facts.unknown_outcome


class ClientBase:
    """Settings common to both clients."""

    def __init__(
        self, target: str, *, timeout: float, metadata: Sequence[tuple[str, str]], token: str | None = None
    ) -> None:
        self._target = target
        self._default_timeout = timeout
        if token is not None:
            if not _TOKEN.fullmatch(token):
                raise ValueError("a bearer token is one or more printable ASCII characters, no spaces")
            metadata = (*metadata, ("authorization", f"Bearer {token}"))
        self._metadata = tuple(metadata)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._target!r})"

    def _timeout(self, timeout: float | None) -> float:
        """The deadline of a call in seconds: its own, else the client's."""
        return self._default_timeout if timeout is None else timeout

    def _call_kwargs(self, timeout: float | None) -> dict[str, Any]:
        return {"timeout": self._timeout(timeout), "metadata": self._metadata or None}


def commit_offsets_request(
    group_id: str,
    offsets: Offsets,
    generation: int,
    fingerprints: Mapping[tuple[str, int], RecordFingerprint] | None = None,
) -> pb.CommitOffsetsRequest:
    if isinstance(offsets, Mapping):
        commits = [OffsetCommit(topic, partition, offset) for (topic, partition), offset in offsets.items()]
    else:
        commits = list(offsets)
    return pb.CommitOffsetsRequest(
        group_id=group_id,
        offsets=[convert.offset_commit_to_proto(c) for c in commits],
        generation=generation,
        fingerprints=convert_requests.fingerprints_to_proto(fingerprints) if fingerprints else (),
    )


def observe_offsets_request(
    group_id: str,
    offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
    source: str,
    lost: Iterable[tuple[str, int]] = (),
) -> pb.ObserveOffsetsRequest:
    return pb.ObserveOffsetsRequest(
        lost=[pb.TopicPartition(topic=topic, partition=partition) for topic, partition in lost],
        group_id=group_id,
        offsets=[
            pb.OffsetCommit(topic=topic, partition=partition, offset=offset)
            for (topic, partition), offset in offsets.items()
        ],
        source=source,
    )


def observe_offsets_result(response: pb.ObserveOffsetsResponse) -> int:
    return response.changed


def commit_offsets_result(
    response: pb.CommitOffsetsResponse, request: pb.CommitOffsetsRequest | None = None
) -> dict[TopicPartition, CommittedOffset]:
    """The committed offsets, each with the metadata ``request`` sent (the server does not echo it)."""
    committed = convert.committed_offsets_from_proto(response.offsets)
    if request is not None:
        sent = {(c.topic, c.partition): c.metadata for c in request.offsets if c.metadata}
        for key, value in committed.items():
            if key in sent:
                committed[key] = dataclasses.replace(value, metadata=sent[key])
    return committed


def fetch_offsets_request(group_id: str, topics: Topics, page_token: str = "") -> pb.FetchOffsetsRequest:
    return pb.FetchOffsetsRequest(
        group_id=group_id,
        topics=convert_requests.selections_to_proto(topics),
        page_size=PAGE_SIZE,
        page_token=page_token,
    )


fetch_offsets_result = convert.fetch_result_from_proto


def wait_for_budget(error: ResourceExhaustedError, waited: float, limit: float) -> bool:
    """Whether a paged read whose later page was refused with ``error`` (the caller's byte
    budget or call limit, with a retry hint) after ``waited`` seconds should wait and ask again."""
    return error.retry_after is not None and waited + error.retry_after <= limit


def paged_read(merge: Callable[[list[P]], R], limit: float) -> Generator[str | float, Any, R]:
    """A paged read as steps, which each client drives with its own I/O.

    Yields a page token and is sent that page (or thrown the error reading it raised), or
    yields seconds to wait and is sent None; returns ``merge`` of the pages. All pages are
    read again from the first if a join or a reset came between two of them. A later page
    refused for the caller's per-principal limits is asked for again when the server's retry
    hint says, for up to ``limit`` seconds in all: a large group is read at the budget's pace
    instead of from its first page again.
    """
    waited = 0.0
    for attempt in range(1, PAGED_READ_ATTEMPTS + 1):
        pages = [(yield "")]
        try:
            while pages[-1].next_page_token:
                try:
                    pages.append((yield pages[-1].next_page_token))
                except ResourceExhaustedError as error:
                    if not wait_for_budget(error, waited, limit):
                        raise
                    yield error.retry_after  # type: ignore[misc]
                    waited += error.retry_after  # type: ignore[operator]
        except GroupChangedError:
            if attempt == PAGED_READ_ATTEMPTS:
                raise
            continue
        return merge(pages)
    raise AssertionError("unreachable")


def merge_fetch_pages(pages: list[FetchResult]) -> FetchResult:
    """One result of a paged fetch's pages (the server keeps their generation the same)."""
    offsets = {}
    for page in pages:
        offsets.update(page.offsets)
    return FetchResult(offsets=offsets, generation=pages[0].generation)


def reset_offsets_request(group_id: str, **keywords: Any) -> pb.ResetOffsetsRequest:
    """The request of ``reset_offsets``' keywords: the one place they become a `ResetRequest`."""
    return convert_requests.reset_request_to_proto(ResetRequest(group_id, **keywords))


reset_offsets_result = convert.reset_result_from_proto


def delete_offsets_request(group_id: str, *, topics: Topics, all_topics: bool) -> pb.DeleteOffsetsRequest:
    return pb.DeleteOffsetsRequest(
        group_id=group_id, topics=convert_requests.selections_to_proto(topics), all_topics=all_topics
    )


def delete_offsets_result(response: pb.DeleteOffsetsResponse) -> list[TopicPartition]:
    return [convert.topic_partition_from_proto(tp) for tp in response.deleted]


def join_group_request(group_id: str, member_id: str, kafka_cluster_id: str = "") -> pb.JoinGroupRequest:
    return pb.JoinGroupRequest(group_id=group_id, member_id=member_id, kafka_cluster_id=kafka_cluster_id)


def join_group_result(response: pb.JoinGroupResponse) -> int:
    return response.generation


def list_groups_request(prefix: str, page_size: int, page_token: str) -> pb.ListGroupsRequest:
    return pb.ListGroupsRequest(prefix=prefix, page_size=page_size, page_token=page_token)


def list_groups_result(response: pb.ListGroupsResponse) -> Page[GroupSummary]:
    return Page([convert.group_summary_from_proto(g) for g in response.groups], response.next_page_token)


def list_topics_request(group_id: str, page_size: int, page_token: str) -> pb.ListTopicsRequest:
    return pb.ListTopicsRequest(group_id=group_id, page_size=page_size, page_token=page_token)


def list_topics_result(response: pb.ListTopicsResponse) -> Page[TopicSummary]:
    return Page([convert.topic_summary_from_proto(t) for t in response.topics], response.next_page_token)


def expire_groups_request(
    idle_for: timedelta | float, prefix: str, execute: bool, limit: int
) -> pb.ExpireGroupsRequest:
    request = pb.ExpireGroupsRequest(prefix=prefix, execute=execute, limit=limit)
    request.idle_for.FromTimedelta(idle_for if isinstance(idle_for, timedelta) else timedelta(seconds=idle_for))
    return request


def expire_groups_result(response: pb.ExpireGroupsResponse) -> list[ExpiredGroup]:
    return [convert.expired_group_from_proto(g) for g in response.groups]


def describe_group_request(group_id: str, page_token: str = "") -> pb.DescribeGroupRequest:
    return pb.DescribeGroupRequest(group_id=group_id, page_size=PAGE_SIZE, page_token=page_token)


describe_group_result = convert.group_description_from_proto


def merge_description_pages(pages: list[GroupDescription]) -> GroupDescription:
    """One description of a paged describe's pages."""
    return replace(pages[0], partitions=[p for page in pages for p in page.partitions], next_page_token="")


def list_offset_history_request(
    group_id: str,
    *,
    topics: Topics,
    since: datetime | None,
    until: datetime | None,
    page_size: int,
    page_token: str,
) -> pb.ListOffsetHistoryRequest:
    request = pb.ListOffsetHistoryRequest(
        group_id=group_id,
        topics=convert_requests.selections_to_proto(topics),
        page_size=page_size,
        page_token=page_token,
    )
    if since is not None:
        request.since.CopyFrom(convert.datetime_to_timestamp(since))
    if until is not None:
        request.until.CopyFrom(convert.datetime_to_timestamp(until))
    return request


def list_offset_history_result(response: pb.ListOffsetHistoryResponse) -> Page[OffsetChange]:
    return Page([convert.offset_change_from_proto(c) for c in response.changes], response.next_page_token)


def report_watermarks_request(watermarks: Iterable[Watermark]) -> pb.ReportWatermarksRequest:
    return pb.ReportWatermarksRequest(watermarks=[convert.watermark_to_proto(w) for w in watermarks])


def report_watermarks_result(response: pb.ReportWatermarksResponse) -> None:
    return None


def health_request() -> health_pb2.HealthCheckRequest:
    # The empty service name is the server as a whole.
    return health_pb2.HealthCheckRequest(service="")


def health_result(response: health_pb2.HealthCheckResponse) -> str:
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
