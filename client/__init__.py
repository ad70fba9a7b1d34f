"""Python clients of the offsetstore gRPC service, blocking and asyncio, with plain values and typed errors."""

from ._async import AsyncOffsetStoreClient
from ._sync import OffsetStoreClient
from .errors import (
    DeadlineExceededError,
    FieldViolation,
    GroupNotFoundError,
    InternalError,
    InvalidArgumentError,
    OffsetMismatchError,
    OffsetStoreError,
    PermissionDeniedError,
    StaleGenerationError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from .types import (
    EARLIEST,
    LATEST,
    NO_OFFSET,
    Boundary,
    ChangeKind,
    CommittedOffset,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    OffsetCommit,
    Page,
    PartitionStatus,
    ResetResult,
    TopicPartition,
    Watermark,
)

__all__ = [
    "AsyncOffsetStoreClient",
    "OffsetStoreClient",
    # values
    "Boundary",
    "ChangeKind",
    "CommittedOffset",
    "FetchResult",
    "GroupDescription",
    "GroupSummary",
    "OffsetChange",
    "OffsetCommit",
    "Page",
    "PartitionStatus",
    "ResetResult",
    "TopicPartition",
    "Watermark",
    "NO_OFFSET",
    "EARLIEST",
    "LATEST",
    # errors
    "OffsetStoreError",
    "FieldViolation",
    "DeadlineExceededError",
    "GroupNotFoundError",
    "InternalError",
    "InvalidArgumentError",
    "OffsetMismatchError",
    "PermissionDeniedError",
    "StaleGenerationError",
    "StoreUnavailableError",
    "UnauthenticatedError",
]
