"""Every call of the service, written once for both clients: build the request, call, convert the answer.

The call itself is the one thing the clients do differently: `OffsetStoreClient` blocks in
its ``_call`` and ``_read_pages``, `AsyncOffsetStoreClient` awaits in its own and makes each
method here a coroutine function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc
from grpc_health.v1 import health_pb2_grpc

from offsetstore.client import _base
from offsetstore.client._base import Offsets
from offsetstore.client._channel import channel_options
from offsetstore.core.types import (
    Boundary,
    CommittedOffset,
    ExpiredGroup,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    Page,
    RecordFingerprint,
    ResetResult,
    TopicPartition,
    Topics,
    TopicSummary,
    Watermark,
)
from offsetstore.v1 import offset_store_pb2_grpc

__all__ = ["ClientMethods"]


class ClientMethods(_base.ClientBase):
    """The channel and the public calls; a subclass says whose channels (``_grpc``) and does the I/O."""

    #: The module that makes the client's channels: ``grpc``, or ``grpc.aio`` for awaitable calls.
    _grpc: Any

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 10.0,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
        metadata: Sequence[tuple[str, str]] = (),
        token: str | None = None,
    ) -> None:
        super().__init__(target, timeout=timeout, metadata=metadata, token=token)
        opts = channel_options(options)
        if credentials is None:
            self._channel = self._grpc.insecure_channel(target, options=opts)
        else:
            self._channel = self._grpc.secure_channel(target, credentials, options=opts)
        self._stub = offset_store_pb2_grpc.OffsetStoreServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def _call(self, method: Any, request: Any, result: Callable[[Any], Any], timeout: float | None) -> Any:
        """``result`` of the response of ``method(request)``, or the call's error as an OffsetStoreError."""
        raise NotImplementedError

    def _read_pages(self, read: Callable[[str], Any], merge: Callable[[list[Any]], Any], timeout: float | None) -> Any:
        """Drives ``_base.paged_read`` with ``read`` (a page token -> the page)."""
        raise NotImplementedError

    def commit_offsets(
        self,
        group_id: str,
        offsets: Offsets,
        *,
        generation: int = 0,
        fingerprints: Mapping[tuple[str, int], RecordFingerprint] | None = None,
        timeout: float | None = None,
    ) -> dict[TopicPartition, CommittedOffset]:
        """Commits offsets in one transaction; a Mapping means {(topic, partition): offset}.

        `generation` 0 is unfenced; otherwise it must be the group's current one.
        `fingerprints` ({(topic, partition): RecordFingerprint}, each of the offset committed for
        its partition) are stored in the same transaction: what `groups switch` finds on another
        Kafka cluster (:func:`offsetstore.kafka_integration.fingerprints.last_fingerprints`).
        """
        request = _base.commit_offsets_request(group_id, offsets, generation, fingerprints)
        return self._call(
            self._stub.CommitOffsets, request, lambda response: _base.commit_offsets_result(response, request), timeout
        )

    def fetch_offsets(self, group_id: str, topics: Topics = None, *, timeout: float | None = None) -> FetchResult:
        """The group's committed offsets, of every partition or of the selected `topics`.

        A group larger than one response comes in pages, each with `timeout`, merged here.
        """

        def page(token: str) -> Any:
            request = _base.fetch_offsets_request(group_id, topics, token)
            return self._call(self._stub.FetchOffsets, request, _base.fetch_offsets_result, timeout)

        return self._read_pages(page, _base.merge_fetch_pages, timeout)

    def reset_offsets(
        self,
        group_id: str,
        *,
        topics: Topics = None,
        all_topics: bool = False,
        to_offset: int | None = None,
        shift_by: int | None = None,
        to_boundary: Boundary | None = None,
        to_commit_time: datetime | None = None,
        dry_run: bool = False,
        expected_generation: int | None = None,
        clamp: bool = False,
        to_offsets: Mapping[TopicPartition, int] | None = None,
        source: str = "",
        switch_to_cluster_id: str = "",
        timeout: float | None = None,
    ) -> ResetResult:
        """Resets the selected partitions to one target and bumps the generation (unless `dry_run`).

        With `expected_generation` (say, the generation a dry run answered), the reset applies only
        while the group is still at it; otherwise it raises `StaleGenerationError` (its
        `current_generation` says where the group is now) and changes nothing. An offset outside
        its partition's known log range is set as asked (to the nearer bound with `clamp`) and
        listed in the result's `out_of_range`.

        `to_offsets` is a target of its own: a different offset per partition (-2 and -1 resolve
        as `to_boundary` does), these partitions the selection, applied in one transaction. With
        a `source` (where the offsets came from) the reset is an adoption, which the history
        records as `ChangeKind.ADOPT` with that source. With `switch_to_cluster_id` the reset is a
        switch to that Kafka cluster (`ChangeKind.SWITCH`, both cluster ids in its source) and the
        group is bound to it (see ``offsetstore groups switch``).
        """
        request = _base.reset_offsets_request(
            group_id,
            topics=topics,
            all_topics=all_topics,
            to_offset=to_offset,
            shift_by=shift_by,
            to_boundary=to_boundary,
            to_commit_time=to_commit_time,
            dry_run=dry_run,
            expected_generation=expected_generation,
            clamp=clamp,
            to_offsets=to_offsets,
            source=source,
            switch_to_cluster_id=switch_to_cluster_id,
        )
        return self._call(self._stub.ResetOffsets, request, _base.reset_offsets_result, timeout)

    def delete_offsets(
        self, group_id: str, *, topics: Topics = None, all_topics: bool = False, timeout: float | None = None
    ) -> list[TopicPartition]:
        """Deletes the selected offsets (`all_topics` deletes the group); returns what was deleted."""
        request = _base.delete_offsets_request(group_id, topics=topics, all_topics=all_topics)
        return self._call(self._stub.DeleteOffsets, request, _base.delete_offsets_result, timeout)

    def join_group(
        self, group_id: str, member_id: str = "", *, kafka_cluster_id: str = "", timeout: float | None = None
    ) -> int:
        """Increments and returns the group's generation, fencing writers of older ones.

        With `kafka_cluster_id` (the cluster the writer reads), the join binds an unbound group
        to it; a group bound to another raises `ClusterMismatchError` and its generation stays.
        """
        request = _base.join_group_request(group_id, member_id, kafka_cluster_id)
        return self._call(self._stub.JoinGroup, request, _base.join_group_result, timeout)

    def list_groups(
        self, prefix: str = "", *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> Page[GroupSummary]:
        """One page of the groups whose id starts with `prefix`, ordered by id."""
        request = _base.list_groups_request(prefix, page_size, page_token)
        return self._call(self._stub.ListGroups, request, _base.list_groups_result, timeout)

    def list_topics(
        self, group_id: str, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> Page[TopicSummary]:
        """One page of the topics `group_id` has offsets for, ordered by topic; none for an unknown group."""
        request = _base.list_topics_request(group_id, page_size, page_token)
        return self._call(self._stub.ListTopics, request, _base.list_topics_result, timeout)

    def expire_groups(
        self,
        idle_for: timedelta | float,
        *,
        prefix: str = "",
        execute: bool = False,
        limit: int = 0,
        timeout: float | None = None,
    ) -> list[ExpiredGroup]:
        """Groups idle (no commit, join or reset) for `idle_for` (seconds or a timedelta), longest idle first.

        A preview unless `execute`: then their offsets expire, as the server's retention
        expires them, and the groups that did are returned. Needs admin on `prefix`.
        """
        request = _base.expire_groups_request(idle_for, prefix, execute, limit)
        return self._call(self._stub.ExpireGroups, request, _base.expire_groups_result, timeout)

    def describe_group(self, group_id: str, *, timeout: float | None = None) -> GroupDescription:
        """The group's partitions with offsets, log ends and lag; GroupNotFoundError if unknown."""

        def page(token: str) -> Any:
            request = _base.describe_group_request(group_id, token)
            return self._call(self._stub.DescribeGroup, request, _base.describe_group_result, timeout)

        return self._read_pages(page, _base.merge_description_pages, timeout)

    def list_offset_history(
        self,
        group_id: str,
        *,
        topics: Topics = None,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> Page[OffsetChange]:
        """One page of the group's changes, newest first, with `since` <= change_time < `until`."""
        request = _base.list_offset_history_request(
            group_id, topics=topics, since=since, until=until, page_size=page_size, page_token=page_token
        )
        return self._call(self._stub.ListOffsetHistory, request, _base.list_offset_history_result, timeout)

    def report_watermarks(self, watermarks: Iterable[Watermark], *, timeout: float | None = None) -> None:
        """Reports log watermarks, which feed lag and resets to a boundary."""
        request = _base.report_watermarks_request(watermarks)
        return self._call(self._stub.ReportWatermarks, request, _base.report_watermarks_result, timeout)

    def observe_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        *,
        source: str,
        lost: Iterable[TopicPartition] | Iterable[tuple[str, int]] = (),
        timeout: float | None = None,
    ) -> int:
        """Records the positions of a pipeline that keeps its own; returns how many partitions changed.

        `offsets` is {(topic, partition): next offset to consume}; `source` says where they were
        read (``spark:<query id>``, ``kafka:<cluster>/<group>``). The group is, or becomes, an
        observed group: commits to it raise GroupObservedError until it is adopted, and observing
        a group committed here raises GroupCommittedError. Repeating a call changes nothing, so
        it is retried like a read. `lost` names partitions whose position the source no longer has
        (a Kafka group's offsets expired or deleted): the group is flagged, their last observed
        positions kept.
        """
        request = _base.observe_offsets_request(group_id, offsets, source, lost)
        return self._call(self._stub.ObserveOffsets, request, _base.observe_offsets_result, timeout)

    def health(self, timeout: float | None = None) -> str:
        """The server's health status name ("SERVING", "NOT_SERVING")."""
        return self._call(self._health.Check, _base.health_request(), _base.health_result, timeout)
