"""Conversions between the offsetstore.v1 messages and the values of offsetstore.core.types.

Shared by the client and the server: both speak the contract in these values. The scalars
(timestamps, enums) are converted in :mod:`._convert_scalars` and re-exported here, so every
conversion of a value is imported from this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import cast

from offsetstore.core._convert_scalars import boundary_from_proto as boundary_from_proto
from offsetstore.core._convert_scalars import boundary_to_proto as boundary_to_proto
from offsetstore.core._convert_scalars import change_kind_from_proto as change_kind_from_proto
from offsetstore.core._convert_scalars import change_kind_to_proto as change_kind_to_proto
from offsetstore.core._convert_scalars import datetime_to_timestamp as datetime_to_timestamp
from offsetstore.core._convert_scalars import epoch_parts as _epoch_parts
from offsetstore.core._convert_scalars import get_time as _get_time
from offsetstore.core._convert_scalars import set_time as _set_time
from offsetstore.core._convert_scalars import timestamp_to_datetime as timestamp_to_datetime
from offsetstore.core.types import (
    CommittedOffset,
    ExpiredGroup,
    FetchResult,
    GroupDescription,
    GroupStatus,
    GroupSummary,
    LagSecondsStatus,
    OffsetChange,
    OffsetCommit,
    OffsetOutOfRange,
    PartitionStatus,
    RecordFingerprint,
    ResetResult,
    TopicPartition,
    TopicSummary,
    Watermark,
)
from offsetstore.v1 import offset_store_pb2 as pb

# Messages


def topic_partition_to_proto(value: tuple[str, int]) -> pb.TopicPartition:
    topic, partition = value
    return pb.TopicPartition(topic=topic, partition=partition)


def topic_partition_from_proto(message: pb.TopicPartition) -> TopicPartition:
    return TopicPartition(message.topic, message.partition)


def offset_commit_to_proto(value: OffsetCommit) -> pb.OffsetCommit:
    message = pb.OffsetCommit(
        topic=value.topic, partition=value.partition, offset=value.offset, metadata=value.metadata
    )
    # Presence matters: 0 and -1 are real compare-and-set values, None is a plain commit.
    if value.expected_offset is not None:
        message.expected_offset = value.expected_offset
    return message


def offset_commit_from_proto(message: pb.OffsetCommit) -> OffsetCommit:
    return OffsetCommit(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        metadata=message.metadata,
        expected_offset=message.expected_offset if message.HasField("expected_offset") else None,
    )


def committed_offset_to_proto(value: CommittedOffset) -> pb.CommittedOffset:
    message = pb.CommittedOffset(
        topic=value.topic, partition=value.partition, offset=value.offset, metadata=value.metadata
    )
    _set_time(message, "commit_time", value.commit_time)
    return message


def committed_offset_from_proto(message: pb.CommittedOffset) -> CommittedOffset:
    return CommittedOffset(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        metadata=message.metadata,
        commit_time=_get_time(message, "commit_time"),
    )


def offset_change_to_proto(value: OffsetChange) -> pb.OffsetChange:
    message = pb.OffsetChange(
        topic=value.topic,
        partition=value.partition,
        previous_offset=value.previous_offset,
        new_offset=value.new_offset,
        kind=change_kind_to_proto(value.kind),
        generation=value.generation,
        actor=value.actor,
        source=value.source,
    )
    _set_time(message, "change_time", value.change_time)
    return message


def offset_change_from_proto(message: pb.OffsetChange) -> OffsetChange:
    return OffsetChange(
        topic=message.topic,
        partition=message.partition,
        previous_offset=message.previous_offset,
        new_offset=message.new_offset,
        kind=change_kind_from_proto(message.kind),
        generation=message.generation,
        change_time=_get_time(message, "change_time"),
        actor=message.actor,
        source=message.source,
    )


def watermark_to_proto(value: Watermark) -> pb.Watermark:
    return pb.Watermark(
        topic=value.topic,
        partition=value.partition,
        log_start_offset=value.log_start_offset,
        log_end_offset=value.log_end_offset,
    )


def watermark_from_proto(message: pb.Watermark) -> Watermark:
    return Watermark(
        topic=message.topic,
        partition=message.partition,
        log_start_offset=message.log_start_offset,
        log_end_offset=message.log_end_offset,
    )


def group_summary_to_proto(value: GroupSummary) -> pb.GroupSummary:
    message = pb.GroupSummary(
        group_id=value.group_id,
        generation=value.generation,
        partition_count=value.partition_count,
        total_lag=value.total_lag,
        observed=value.observed,
        observed_source=value.observed_source,
        observed_lost_partitions=value.observed_lost_partitions,
    )
    _set_time(message, "last_commit_time", value.last_commit_time)
    return message


def group_summary_from_proto(message: pb.GroupSummary) -> GroupSummary:
    return GroupSummary(
        group_id=message.group_id,
        generation=message.generation,
        partition_count=message.partition_count,
        last_commit_time=_get_time(message, "last_commit_time"),
        total_lag=message.total_lag,
        observed=message.observed,
        observed_source=message.observed_source,
        observed_lost_partitions=message.observed_lost_partitions,
    )


def topic_summary_to_proto(value: TopicSummary) -> pb.TopicSummary:
    message = pb.TopicSummary(topic=value.topic, partition_count=value.partition_count, total_lag=value.total_lag)
    _set_time(message, "last_commit_time", value.last_commit_time)
    return message


def topic_summary_from_proto(message: pb.TopicSummary) -> TopicSummary:
    return TopicSummary(
        topic=message.topic,
        partition_count=message.partition_count,
        last_commit_time=_get_time(message, "last_commit_time"),
        total_lag=message.total_lag,
    )


def expired_group_to_proto(value: ExpiredGroup) -> pb.ExpiredGroup:
    message = pb.ExpiredGroup(
        group_id=value.group_id, generation=value.generation, partition_count=value.partition_count
    )
    _set_time(message, "last_active_time", value.last_active_time)
    return message


def expired_group_from_proto(message: pb.ExpiredGroup) -> ExpiredGroup:
    return ExpiredGroup(
        group_id=message.group_id,
        generation=message.generation,
        partition_count=message.partition_count,
        last_active_time=_get_time(message, "last_active_time"),
    )


def partition_status_to_proto(value: PartitionStatus) -> pb.PartitionStatus:
    message = pb.PartitionStatus(
        topic=value.topic,
        partition=value.partition,
        offset=value.offset,
        metadata=value.metadata,
        log_end_offset=value.log_end_offset,
        lag=value.lag,
        offset_past_log_end=value.offset_past_log_end,
        log_start_offset=value.log_start_offset,
        lag_seconds=value.lag_seconds,
        lag_seconds_status=cast(pb.LagSecondsStatus, int(value.lag_seconds_status)),  # the same numbers
        status=cast(pb.GroupStatus, int(value.status)),  # the same numbers
        status_reason=value.status_reason,
    )
    _set_time(message, "commit_time", value.commit_time)
    _set_time(message, "watermark_time", value.watermark_time)
    for at, seconds in value.lag_history:
        point = message.lag_history.add(lag_seconds=seconds)
        point.time.FromDatetime(at)
    if (fp := value.fingerprint) is not None:
        message.fingerprint.CopyFrom(
            pb.RecordFingerprint(offset=fp.offset, timestamp_ms=fp.timestamp_ms, digest=fp.digest)
        )
    return message


def partition_status_from_proto(message: pb.PartitionStatus) -> PartitionStatus:
    return PartitionStatus(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        metadata=message.metadata,
        commit_time=_get_time(message, "commit_time"),
        log_end_offset=message.log_end_offset,
        lag=message.lag,
        offset_past_log_end=message.offset_past_log_end,
        log_start_offset=message.log_start_offset,
        lag_seconds=message.lag_seconds,
        lag_seconds_status=_lag_seconds_status(message.lag_seconds_status),
        status=group_status_from_proto(message.status),
        status_reason=message.status_reason,
        watermark_time=_get_time(message, "watermark_time"),
        lag_history=tuple((p.time.ToDatetime(tzinfo=UTC), p.lag_seconds) for p in message.lag_history),
        fingerprint=_fingerprint(message),
    )


def _fingerprint(message: pb.PartitionStatus) -> RecordFingerprint | None:
    if not message.HasField("fingerprint"):
        return None
    fp = message.fingerprint
    return RecordFingerprint(fp.offset, fp.timestamp_ms, fp.digest)


def _lag_seconds_status(value: int) -> LagSecondsStatus:
    # A status this client does not know yet (a newer server's) reads as unspecified.
    try:
        return LagSecondsStatus(value)
    except ValueError:
        return LagSecondsStatus.UNSPECIFIED


def group_status_from_proto(value: int) -> GroupStatus:
    """A verdict this client does not know yet (a newer server's) reads as unspecified."""
    try:
        return GroupStatus(value)
    except ValueError:
        return GroupStatus.UNSPECIFIED


# Responses that map onto one value of types.py


def fetch_result_to_proto(value: FetchResult) -> pb.FetchOffsetsResponse:
    response = pb.FetchOffsetsResponse(generation=value.generation, next_page_token=value.next_page_token)
    # Built in place; the partitions of one commit share its time, so each distinct time is
    # converted once (most of a fetch's conversion cost was the per-partition timestamp).
    times: dict[datetime, tuple[int, int]] = {}
    add = response.offsets.add
    for o in value.offsets.values():
        entry = add(topic=o.topic, partition=o.partition, offset=o.offset, metadata=o.metadata)
        if (at := o.commit_time) is not None:
            parts = times.get(at)
            if parts is None:
                parts = times[at] = _epoch_parts(at)
            ts = entry.commit_time
            ts.SetInParent()  # present even at the epoch itself, whose fields are all zero
            ts.seconds, ts.nanos = parts
    return response


def fetch_result_from_proto(message: pb.FetchOffsetsResponse) -> FetchResult:
    return FetchResult(
        offsets=committed_offsets_from_proto(message.offsets),
        generation=message.generation,
        next_page_token=message.next_page_token,
    )


def committed_offsets_from_proto(messages: Iterable[pb.CommittedOffset]) -> dict[TopicPartition, CommittedOffset]:
    """Committed offsets keyed by (topic, partition), in the order received."""
    return {TopicPartition(m.topic, m.partition): committed_offset_from_proto(m) for m in messages}


def reset_result_to_proto(value: ResetResult) -> pb.ResetOffsetsResponse:
    return pb.ResetOffsetsResponse(
        changes=[offset_change_to_proto(c) for c in value.changes],
        generation=value.generation,
        dry_run=value.dry_run,
        out_of_range=[
            pb.OffsetOutOfRange(topic=o.topic, partition=o.partition, offset=o.offset, bound=o.bound, clamped=o.clamped)
            for o in value.out_of_range
        ],
    )


def reset_result_from_proto(message: pb.ResetOffsetsResponse) -> ResetResult:
    return ResetResult(
        changes=[offset_change_from_proto(c) for c in message.changes],
        generation=message.generation,
        dry_run=message.dry_run,
        out_of_range=[
            OffsetOutOfRange(o.topic, o.partition, o.offset, o.bound, o.clamped) for o in message.out_of_range
        ],
    )


def group_description_to_proto(value: GroupDescription) -> pb.DescribeGroupResponse:
    message = pb.DescribeGroupResponse(
        group_id=value.group_id,
        generation=value.generation,
        partitions=[partition_status_to_proto(p) for p in value.partitions],
        reset_count=value.reset_count,
        member_id=value.member_id,
        member_host=value.member_host,
        next_page_token=value.next_page_token,
        status=cast(pb.GroupStatus, int(value.status)),
        status_reason=value.status_reason,
        observed=value.observed,
        observed_source=value.observed_source,
        observed_lost_partitions=value.observed_lost_partitions,
        kafka_cluster_id=value.kafka_cluster_id,
    )
    _set_time(message, "active_time", value.active_time)
    _set_time(message, "observed_lost_time", value.observed_lost_time)
    return message


def group_description_from_proto(message: pb.DescribeGroupResponse) -> GroupDescription:
    return GroupDescription(
        group_id=message.group_id,
        generation=message.generation,
        partitions=[partition_status_from_proto(p) for p in message.partitions],
        reset_count=message.reset_count,
        member_id=message.member_id,
        member_host=message.member_host,
        next_page_token=message.next_page_token,
        active_time=_get_time(message, "active_time"),
        status=group_status_from_proto(message.status),
        status_reason=message.status_reason,
        observed=message.observed,
        observed_source=message.observed_source,
        observed_lost_partitions=message.observed_lost_partitions,
        observed_lost_time=_get_time(message, "observed_lost_time"),
        kafka_cluster_id=message.kafka_cluster_id,
    )
