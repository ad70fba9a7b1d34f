import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from offsetstore.v1 import options_pb2 as _options_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Boundary(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BOUNDARY_UNSPECIFIED: _ClassVar[Boundary]
    BOUNDARY_EARLIEST: _ClassVar[Boundary]
    BOUNDARY_LATEST: _ClassVar[Boundary]

class LagSecondsStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LAG_SECONDS_STATUS_UNSPECIFIED: _ClassVar[LagSecondsStatus]
    LAG_SECONDS_STATUS_KNOWN: _ClassVar[LagSecondsStatus]
    LAG_SECONDS_STATUS_NO_SAMPLES: _ClassVar[LagSecondsStatus]
    LAG_SECONDS_STATUS_OFFSET_UNKNOWN: _ClassVar[LagSecondsStatus]
    LAG_SECONDS_STATUS_PAST_LOG_END: _ClassVar[LagSecondsStatus]

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_KIND_UNSPECIFIED: _ClassVar[ChangeKind]
    CHANGE_KIND_COMMIT: _ClassVar[ChangeKind]
    CHANGE_KIND_RESET: _ClassVar[ChangeKind]
    CHANGE_KIND_DELETE: _ClassVar[ChangeKind]
    CHANGE_KIND_EXPIRE: _ClassVar[ChangeKind]
    CHANGE_KIND_ADOPT: _ClassVar[ChangeKind]
    CHANGE_KIND_OBSERVED: _ClassVar[ChangeKind]
    CHANGE_KIND_SWITCH: _ClassVar[ChangeKind]

class GroupStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_STATUS_UNSPECIFIED: _ClassVar[GroupStatus]
    GROUP_STATUS_OK: _ClassVar[GroupStatus]
    GROUP_STATUS_IDLE: _ClassVar[GroupStatus]
    GROUP_STATUS_LAGGING: _ClassVar[GroupStatus]
    GROUP_STATUS_STALLED: _ClassVar[GroupStatus]
    GROUP_STATUS_STOPPED: _ClassVar[GroupStatus]
    GROUP_STATUS_LOST: _ClassVar[GroupStatus]
    GROUP_STATUS_PAST_END: _ClassVar[GroupStatus]
    GROUP_STATUS_UNCONFIRMED: _ClassVar[GroupStatus]
BOUNDARY_UNSPECIFIED: Boundary
BOUNDARY_EARLIEST: Boundary
BOUNDARY_LATEST: Boundary
LAG_SECONDS_STATUS_UNSPECIFIED: LagSecondsStatus
LAG_SECONDS_STATUS_KNOWN: LagSecondsStatus
LAG_SECONDS_STATUS_NO_SAMPLES: LagSecondsStatus
LAG_SECONDS_STATUS_OFFSET_UNKNOWN: LagSecondsStatus
LAG_SECONDS_STATUS_PAST_LOG_END: LagSecondsStatus
CHANGE_KIND_UNSPECIFIED: ChangeKind
CHANGE_KIND_COMMIT: ChangeKind
CHANGE_KIND_RESET: ChangeKind
CHANGE_KIND_DELETE: ChangeKind
CHANGE_KIND_EXPIRE: ChangeKind
CHANGE_KIND_ADOPT: ChangeKind
CHANGE_KIND_OBSERVED: ChangeKind
CHANGE_KIND_SWITCH: ChangeKind
GROUP_STATUS_UNSPECIFIED: GroupStatus
GROUP_STATUS_OK: GroupStatus
GROUP_STATUS_IDLE: GroupStatus
GROUP_STATUS_LAGGING: GroupStatus
GROUP_STATUS_STALLED: GroupStatus
GROUP_STATUS_STOPPED: GroupStatus
GROUP_STATUS_LOST: GroupStatus
GROUP_STATUS_PAST_END: GroupStatus
GROUP_STATUS_UNCONFIRMED: GroupStatus

class TopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class TopicSelection(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class OffsetCommit(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata", "expected_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    expected_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., expected_offset: _Optional[int] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata", "commit_time")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_time: _timestamp_pb2.Timestamp
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class OffsetChange(_message.Message):
    __slots__ = ("topic", "partition", "previous_offset", "new_offset", "kind", "generation", "change_time", "actor", "source")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_TIME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    previous_offset: int
    new_offset: int
    kind: ChangeKind
    generation: int
    change_time: _timestamp_pb2.Timestamp
    actor: str
    source: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., previous_offset: _Optional[int] = ..., new_offset: _Optional[int] = ..., kind: _Optional[_Union[ChangeKind, str]] = ..., generation: _Optional[int] = ..., change_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class Watermark(_message.Message):
    __slots__ = ("topic", "partition", "log_start_offset", "log_end_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ...) -> None: ...

class GroupSummary(_message.Message):
    __slots__ = ("group_id", "generation", "partition_count", "last_commit_time", "total_lag", "observed", "observed_source", "observed_lost_partitions")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_SOURCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_LOST_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation: int
    partition_count: int
    last_commit_time: _timestamp_pb2.Timestamp
    total_lag: int
    observed: bool
    observed_source: str
    observed_lost_partitions: int
    def __init__(self, group_id: _Optional[str] = ..., generation: _Optional[int] = ..., partition_count: _Optional[int] = ..., last_commit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., total_lag: _Optional[int] = ..., observed: _Optional[bool] = ..., observed_source: _Optional[str] = ..., observed_lost_partitions: _Optional[int] = ...) -> None: ...

class PartitionStatus(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata", "commit_time", "log_end_offset", "lag", "offset_past_log_end", "log_start_offset", "lag_seconds", "lag_seconds_status", "status", "status_reason", "watermark_time", "lag_history", "fingerprint")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    OFFSET_PAST_LOG_END_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_TIME_FIELD_NUMBER: _ClassVar[int]
    LAG_HISTORY_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_time: _timestamp_pb2.Timestamp
    log_end_offset: int
    lag: int
    offset_past_log_end: bool
    log_start_offset: int
    lag_seconds: float
    lag_seconds_status: LagSecondsStatus
    status: GroupStatus
    status_reason: str
    watermark_time: _timestamp_pb2.Timestamp
    lag_history: _containers.RepeatedCompositeFieldContainer[LagPoint]
    fingerprint: RecordFingerprint
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., log_end_offset: _Optional[int] = ..., lag: _Optional[int] = ..., offset_past_log_end: _Optional[bool] = ..., log_start_offset: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., lag_seconds_status: _Optional[_Union[LagSecondsStatus, str]] = ..., status: _Optional[_Union[GroupStatus, str]] = ..., status_reason: _Optional[str] = ..., watermark_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lag_history: _Optional[_Iterable[_Union[LagPoint, _Mapping]]] = ..., fingerprint: _Optional[_Union[RecordFingerprint, _Mapping]] = ...) -> None: ...

class RecordFingerprint(_message.Message):
    __slots__ = ("offset", "timestamp_ms", "digest")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    offset: int
    timestamp_ms: int
    digest: bytes
    def __init__(self, offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., digest: _Optional[bytes] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "offsets", "generation", "fingerprints")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetCommit]
    generation: int
    fingerprints: _containers.RepeatedCompositeFieldContainer[PartitionFingerprint]
    def __init__(self, group_id: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[OffsetCommit, _Mapping]]] = ..., generation: _Optional[int] = ..., fingerprints: _Optional[_Iterable[_Union[PartitionFingerprint, _Mapping]]] = ...) -> None: ...

class PartitionFingerprint(_message.Message):
    __slots__ = ("topic", "partition", "fingerprint")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    fingerprint: RecordFingerprint
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., fingerprint: _Optional[_Union[RecordFingerprint, _Mapping]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class FetchOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "topics", "page_size", "page_token")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicSelection]
    page_size: int
    page_token: str
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicSelection, _Mapping]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class FetchOffsetsResponse(_message.Message):
    __slots__ = ("offsets", "generation", "next_page_token")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    generation: int
    next_page_token: str
    def __init__(self, offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ..., generation: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResetOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "topics", "all_topics", "to_offset", "shift_by", "to_boundary", "to_commit_time", "to_offsets", "dry_run", "expected_generation", "clamp", "source", "switch_to_cluster_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ALL_TOPICS_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHIFT_BY_FIELD_NUMBER: _ClassVar[int]
    TO_BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    TO_COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    TO_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CLAMP_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SWITCH_TO_CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicSelection]
    all_topics: bool
    to_offset: int
    shift_by: int
    to_boundary: Boundary
    to_commit_time: _timestamp_pb2.Timestamp
    to_offsets: OffsetTargets
    dry_run: bool
    expected_generation: int
    clamp: bool
    source: str
    switch_to_cluster_id: str
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicSelection, _Mapping]]] = ..., all_topics: _Optional[bool] = ..., to_offset: _Optional[int] = ..., shift_by: _Optional[int] = ..., to_boundary: _Optional[_Union[Boundary, str]] = ..., to_commit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., to_offsets: _Optional[_Union[OffsetTargets, _Mapping]] = ..., dry_run: _Optional[bool] = ..., expected_generation: _Optional[int] = ..., clamp: _Optional[bool] = ..., source: _Optional[str] = ..., switch_to_cluster_id: _Optional[str] = ...) -> None: ...

class OffsetTargets(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ResetOffsetsResponse(_message.Message):
    __slots__ = ("changes", "generation", "dry_run", "out_of_range")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_RANGE_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[OffsetChange]
    generation: int
    dry_run: bool
    out_of_range: _containers.RepeatedCompositeFieldContainer[OffsetOutOfRange]
    def __init__(self, changes: _Optional[_Iterable[_Union[OffsetChange, _Mapping]]] = ..., generation: _Optional[int] = ..., dry_run: _Optional[bool] = ..., out_of_range: _Optional[_Iterable[_Union[OffsetOutOfRange, _Mapping]]] = ...) -> None: ...

class OffsetOutOfRange(_message.Message):
    __slots__ = ("topic", "partition", "offset", "bound", "clamped")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    CLAMPED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    bound: int
    clamped: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., bound: _Optional[int] = ..., clamped: _Optional[bool] = ...) -> None: ...

class DeleteOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "topics", "all_topics")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ALL_TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicSelection]
    all_topics: bool
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicSelection, _Mapping]]] = ..., all_topics: _Optional[bool] = ...) -> None: ...

class DeleteOffsetsResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, deleted: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "kafka_cluster_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    KAFKA_CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    kafka_cluster_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., kafka_cluster_id: _Optional[str] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("generation",)
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    def __init__(self, generation: _Optional[int] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups", "next_page_token")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupSummary]
    next_page_token: str
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group_id", "page_size", "page_token", "include_lag_history")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_LAG_HISTORY_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    page_size: int
    page_token: str
    include_lag_history: bool
    def __init__(self, group_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_lag_history: _Optional[bool] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("group_id", "generation", "partitions", "reset_count", "member_id", "member_host", "next_page_token", "active_time", "status", "status_reason", "observed", "observed_source", "observed_lost_partitions", "observed_lost_time", "kafka_cluster_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RESET_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_HOST_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_SOURCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_LOST_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_LOST_TIME_FIELD_NUMBER: _ClassVar[int]
    KAFKA_CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionStatus]
    reset_count: int
    member_id: str
    member_host: str
    next_page_token: str
    active_time: _timestamp_pb2.Timestamp
    status: GroupStatus
    status_reason: str
    observed: bool
    observed_source: str
    observed_lost_partitions: int
    observed_lost_time: _timestamp_pb2.Timestamp
    kafka_cluster_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionStatus, _Mapping]]] = ..., reset_count: _Optional[int] = ..., member_id: _Optional[str] = ..., member_host: _Optional[str] = ..., next_page_token: _Optional[str] = ..., active_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[GroupStatus, str]] = ..., status_reason: _Optional[str] = ..., observed: _Optional[bool] = ..., observed_source: _Optional[str] = ..., observed_lost_partitions: _Optional[int] = ..., observed_lost_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kafka_cluster_id: _Optional[str] = ...) -> None: ...

class ListOffsetHistoryRequest(_message.Message):
    __slots__ = ("group_id", "topics", "since", "until", "page_size", "page_token")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicSelection]
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicSelection, _Mapping]]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOffsetHistoryResponse(_message.Message):
    __slots__ = ("changes", "next_page_token")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[OffsetChange]
    next_page_token: str
    def __init__(self, changes: _Optional[_Iterable[_Union[OffsetChange, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReportWatermarksRequest(_message.Message):
    __slots__ = ("watermarks",)
    WATERMARKS_FIELD_NUMBER: _ClassVar[int]
    watermarks: _containers.RepeatedCompositeFieldContainer[Watermark]
    def __init__(self, watermarks: _Optional[_Iterable[_Union[Watermark, _Mapping]]] = ...) -> None: ...

class ReportWatermarksResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExpireGroupsRequest(_message.Message):
    __slots__ = ("idle_for", "prefix", "execute", "limit")
    IDLE_FOR_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    idle_for: _duration_pb2.Duration
    prefix: str
    execute: bool
    limit: int
    def __init__(self, idle_for: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., prefix: _Optional[str] = ..., execute: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ExpiredGroup(_message.Message):
    __slots__ = ("group_id", "generation", "partition_count", "last_active_time")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation: int
    partition_count: int
    last_active_time: _timestamp_pb2.Timestamp
    def __init__(self, group_id: _Optional[str] = ..., generation: _Optional[int] = ..., partition_count: _Optional[int] = ..., last_active_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ExpireGroupsResponse(_message.Message):
    __slots__ = ("groups", "executed")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ExpiredGroup]
    executed: bool
    def __init__(self, groups: _Optional[_Iterable[_Union[ExpiredGroup, _Mapping]]] = ..., executed: _Optional[bool] = ...) -> None: ...

class LagPoint(_message.Message):
    __slots__ = ("time", "lag_seconds")
    TIME_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    lag_seconds: float
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lag_seconds: _Optional[float] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("group_id", "page_size", "page_token")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    page_size: int
    page_token: str
    def __init__(self, group_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics", "next_page_token")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicSummary]
    next_page_token: str
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class TopicSummary(_message.Message):
    __slots__ = ("topic", "partition_count", "last_commit_time", "total_lag")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition_count: int
    last_commit_time: _timestamp_pb2.Timestamp
    total_lag: int
    def __init__(self, topic: _Optional[str] = ..., partition_count: _Optional[int] = ..., last_commit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class ObserveOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "offsets", "source", "lost")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    offsets: _containers.RepeatedCompositeFieldContainer[OffsetCommit]
    source: str
    lost: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, group_id: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[OffsetCommit, _Mapping]]] = ..., source: _Optional[str] = ..., lost: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class ObserveOffsetsResponse(_message.Message):
    __slots__ = ("changed",)
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: int
    def __init__(self, changed: _Optional[int] = ...) -> None: ...
