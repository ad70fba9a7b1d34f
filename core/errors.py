"""The offsetstore exception tree, shared by the client, the server and the Spark sink.

Each error knows the gRPC status and ``google.rpc.ErrorInfo`` reason it travels as,
so the server sends exactly what the client turns back into the same exception::

    OffsetStoreError
     ├── InvalidArgumentError   INVALID_ARGUMENT     reason INVALID_ARGUMENT (+ BadRequest)
     ├── StaleGenerationError   FAILED_PRECONDITION  reason STALE_GENERATION
     ├── GroupObservedError     FAILED_PRECONDITION  reason GROUP_OBSERVED (a commit or sink to an observed group)
     ├── GroupCommittedError    FAILED_PRECONDITION  reason GROUP_COMMITTED (observing a committed group)
     ├── OffsetMismatchError    ABORTED              reason OFFSET_MISMATCH
     ├── ClusterMismatchError   FAILED_PRECONDITION  reason CLUSTER_MISMATCH
     ├── GroupChangedError      ABORTED              reason GROUP_CHANGED
     ├── GroupNotFoundError     NOT_FOUND            reason GROUP_NOT_FOUND
     ├── StoreUnavailableError  UNAVAILABLE          reason STORE_UNAVAILABLE (a write: outcome unknown)
     ├── DeadlineExceededError  DEADLINE_EXCEEDED    (the call's deadline passed; outcome unknown)
     ├── UnauthenticatedError   UNAUTHENTICATED      reason UNAUTHENTICATED
     ├── PermissionDeniedError  PERMISSION_DENIED    reason PERMISSION_DENIED
     ├── ResourceExhaustedError RESOURCE_EXHAUSTED   reason RESOURCE_EXHAUSTED (+ RetryInfo)
     │    ├── GroupQuotaError    RESOURCE_EXHAUSTED   reason GROUP_QUOTA (no RetryInfo: retrying does not help)
     │    └── PartitionQuotaError RESOURCE_EXHAUSTED  reason PARTITION_QUOTA (no RetryInfo either)
     └── InternalError          INTERNAL, and any status not listed above
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = [
    "DOMAIN",
    "ClusterMismatchError",
    "DeadlineExceededError",
    "FieldViolation",
    "GroupChangedError",
    "GroupCommittedError",
    "GroupNotFoundError",
    "GroupObservedError",
    "GroupQuotaError",
    "InternalError",
    "InvalidArgumentError",
    "OffsetMismatchError",
    "OffsetStoreError",
    "PartitionQuotaError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "StaleGenerationError",
    "StoreUnavailableError",
    "UnauthenticatedError",
    "from_rpc_error",
]

#: The ErrorInfo domain of every offsetstore error.
DOMAIN = "offsetstore.v1"


@dataclass(frozen=True)
class FieldViolation:
    """A bad field of a request, named by its path (``offsets[2].partition``)."""

    field: str
    description: str


class OffsetStoreError(Exception):
    """Base of every offsetstore error."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL
    reason: ClassVar[str] = ""

    def __init__(self, message: str, *, metadata: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})

    def to_status(self) -> grpc.Status:
        """The rich gRPC status the server sends for this error."""
        status = status_pb2.Status(code=self.code.value[0], message=self.message)
        if self.reason:
            info = error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN, metadata=self.metadata)
            status.details.add().Pack(info)
        self._add_details(status)
        return rpc_status.to_status(status)

    def _add_details(self, status: status_pb2.Status) -> None:
        pass

    @classmethod
    def _from_details(cls, message: str, metadata: dict[str, str], details: list[Any]) -> OffsetStoreError:
        return cls(message, metadata=metadata)


class InvalidArgumentError(OffsetStoreError):
    """The request is malformed; ``violations`` names the bad fields. Nothing was written."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    def __init__(
        self,
        message: str,
        *,
        violations: list[FieldViolation] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.violations: list[FieldViolation] = list(violations or [])

    @classmethod
    def field(cls, field: str, description: str) -> InvalidArgumentError:
        """An error about one field."""
        return cls(f"{field}: {description}", violations=[FieldViolation(field, description)])

    def _add_details(self, status: status_pb2.Status) -> None:
        if self.violations:
            bad = error_details_pb2.BadRequest()
            for v in self.violations:
                bad.field_violations.add(field=v.field, description=v.description)
            status.details.add().Pack(bad)

    @classmethod
    def _from_details(cls, message: str, metadata: dict[str, str], details: list[Any]) -> OffsetStoreError:
        violations = [
            FieldViolation(v.field, v.description)
            for d in details
            if isinstance(d, error_details_pb2.BadRequest)
            for v in d.field_violations
        ]
        return cls(message, violations=violations, metadata=metadata)


class StaleGenerationError(OffsetStoreError):
    """The writer's generation is not the group's current one: a newer writer or a reset fenced it."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "STALE_GENERATION"

    @property
    def current_generation(self) -> int | None:
        value = self.metadata.get("current_generation")
        return int(value) if value is not None else None


class GroupObservedError(OffsetStoreError):
    """The group's positions are observed (a pipeline keeps its own): nothing commits to it.

    Nothing was written. An adoption (``groups adopt GROUP --from-observed``) makes it a
    committed group first; ``metadata["observed_source"]`` says where its positions are read.
    """

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "GROUP_OBSERVED"


class GroupCommittedError(OffsetStoreError):
    """Observed positions were sent for a group whose positions are committed to offsetstore.

    Nothing was written: observing would overwrite what its writers committed. Observe it
    under another group id, or delete the group first.
    """

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "GROUP_COMMITTED"


class OffsetMismatchError(OffsetStoreError):
    """A compare-and-set found another offset stored than the one expected."""

    code = grpc.StatusCode.ABORTED
    reason = "OFFSET_MISMATCH"

    @property
    def stored_offset(self) -> int | None:
        value = self.metadata.get("stored_offset")
        return int(value) if value is not None else None


class ClusterMismatchError(OffsetStoreError):
    """The group is bound to another Kafka cluster than the one its writer reads; nothing was written.

    ``metadata`` carries ``bound_cluster_id`` (the group's) and ``cluster_id`` (the writer's).
    Moving a group to another cluster is ``offsetstore groups switch``, which rebinds it.
    """

    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "CLUSTER_MISMATCH"


class GroupChangedError(OffsetStoreError):
    """A join or a reset came between two pages of one read; read again from the first page."""

    code = grpc.StatusCode.ABORTED
    reason = "GROUP_CHANGED"


class GroupNotFoundError(OffsetStoreError):
    code = grpc.StatusCode.NOT_FOUND
    reason = "GROUP_NOT_FOUND"


class StoreUnavailableError(OffsetStoreError):
    """The server or its database could not be reached or timed out.

    The outcome of a write is unknown, and its message says so: it may or may not have been
    applied. Fetch (or describe the group) to find out before writing again.
    """

    code = grpc.StatusCode.UNAVAILABLE
    reason = "STORE_UNAVAILABLE"


class DeadlineExceededError(OffsetStoreError):
    """The call's deadline passed before the server answered.

    The outcome of a write is unknown, and its message says so: the server may have committed
    it just before or after the deadline passed. Fetch (or describe the group) to find out
    before writing again; a blind retry of a compare-and-set commit can fail against itself.
    """

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class UnauthenticatedError(OffsetStoreError):
    """The call carried no credentials the server accepts (a missing, malformed or unknown token)."""

    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class PermissionDeniedError(OffsetStoreError):
    """The caller is known but may not do this to this group; nothing was read or written."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "PERMISSION_DENIED"


class ResourceExhaustedError(OffsetStoreError):
    """The server refused the call before it ran, to protect other callers; retry after ``retry_after`` seconds.

    ``metadata["limit"]`` names the limit that was reached (``streams``, ``principal_calls``,
    ``principal_bytes``, ``history_rows``). ``response_bytes`` (no ``retry_after``) is not for retrying: the
    answer is larger than one response may be; ask for it in pages.
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RESOURCE_EXHAUSTED"

    def __init__(
        self, message: str, *, retry_after: float | None = None, metadata: dict[str, str] | None = None
    ) -> None:
        metadata = dict(metadata or {})
        ms = None if retry_after is None else _delay_ms(retry_after)
        if ms is not None:
            metadata.setdefault("retry_after_ms", str(ms))
        super().__init__(message, metadata=metadata)
        #: The delay as it travels (whole milliseconds), so that the server's error and the client's agree.
        self.retry_after = None if ms is None else ms / 1000

    def _add_details(self, status: status_pb2.Status) -> None:
        if self.retry_after is not None:
            info = error_details_pb2.RetryInfo()
            info.retry_delay.FromMilliseconds(_delay_ms(self.retry_after))
            status.details.add().Pack(info)

    @classmethod
    def _from_details(cls, message: str, metadata: dict[str, str], details: list[Any]) -> OffsetStoreError:
        delays = [d.retry_delay.ToMilliseconds() / 1000 for d in details if isinstance(d, error_details_pb2.RetryInfo)]
        return cls(message, retry_after=delays[0] if delays else None, metadata=metadata)


def _delay_ms(seconds: float) -> int:
    """A retry delay in the whole milliseconds it travels in: rounded up, so never shortened, and never 0 if positive.

    0 tells the caller to retry at once, which a refusal for a hair of a deficit does not mean.
    """
    if seconds <= 0:
        return 0
    # To the nanosecond first: binary noise (1.1 s is 1100.0000000000002 ms) is no extra millisecond.
    return max(1, math.ceil(round(seconds * 1000, 6)))


class GroupQuotaError(ResourceExhaustedError):
    """The call would create a group, and its principal already has as many as its quota allows.

    ``metadata`` carries ``max_groups`` and ``groups`` (the principal's live groups). Nothing
    was written, and retrying does not help: delete or expire groups, or ask for a higher quota.
    """

    reason = "GROUP_QUOTA"


class PartitionQuotaError(ResourceExhaustedError):
    """The call would add partitions to the store, beyond what its principal's quota allows.

    ``metadata`` carries ``max_partitions``, ``partitions`` (the principal's stored partitions)
    and ``new_partitions`` (what the call would add). Nothing was written, and retrying does
    not help: delete offsets or groups, or ask for a higher quota.
    """

    reason = "PARTITION_QUOTA"


class InternalError(OffsetStoreError):
    """Any other failure; ``status_code`` keeps the gRPC status it came with."""

    code = grpc.StatusCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        metadata: dict[str, str] | None = None,
        status_code: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.status_code = status_code or grpc.StatusCode.INTERNAL


_BY_REASON: dict[str, type[OffsetStoreError]] = {
    cls.reason: cls
    for cls in (
        InvalidArgumentError,
        StaleGenerationError,
        GroupObservedError,
        GroupCommittedError,
        OffsetMismatchError,
        ClusterMismatchError,
        GroupChangedError,
        GroupNotFoundError,
        StoreUnavailableError,
        UnauthenticatedError,
        PermissionDeniedError,
        ResourceExhaustedError,
        GroupQuotaError,
        PartitionQuotaError,
    )
}
_BY_CODE: dict[grpc.StatusCode, type[OffsetStoreError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        StaleGenerationError,
        GroupObservedError,
        GroupCommittedError,
        OffsetMismatchError,
        GroupNotFoundError,
        StoreUnavailableError,
        DeadlineExceededError,
        UnauthenticatedError,
        PermissionDeniedError,
    )
}
_UNPACKABLE = (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest, error_details_pb2.RetryInfo)


def _unpack(status: status_pb2.Status) -> list[Any]:
    out = []
    for any_detail in status.details:
        for kind in _UNPACKABLE:
            if any_detail.Is(kind.DESCRIPTOR):
                message = kind()
                any_detail.Unpack(message)
                out.append(message)
    return out


def from_rpc_error(error: grpc.RpcError, *, unknown_outcome: str | None = None) -> OffsetStoreError:
    """Rebuilds the typed error a server sent (works for sync and asyncio errors).

    `unknown_outcome` is said after the message of a `DeadlineExceededError` or a
    `StoreUnavailableError` (the call was a write, which may or may not have been applied).
    """
    code: grpc.StatusCode = error.code()
    message: str = error.details() or code.name
    details: list[Any] = []
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:
        status = None
    if status is not None:
        details = _unpack(status)
    info = next((d for d in details if isinstance(d, error_details_pb2.ErrorInfo) and d.domain == DOMAIN), None)
    metadata = dict(info.metadata) if info is not None else {}
    cls = _BY_REASON.get(info.reason) if info is not None else None
    if cls is None:
        cls = _BY_CODE.get(code)
    if cls is None:
        return InternalError(message, metadata=metadata, status_code=code)
    if unknown_outcome and issubclass(cls, DeadlineExceededError | StoreUnavailableError):
        message = f"{message}: {unknown_outcome}"
    return cls._from_details(message, metadata, details)
