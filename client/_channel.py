"""Channel options shared by both clients: the gRPC service config that retries idempotent calls.

Only calls that can be repeated without changing their outcome are retried, and only on
UNAVAILABLE, by gRPC itself (``retryPolicy`` in the service config), never by a loop of ours:
FetchOffsets, ListGroups, DescribeGroup, ListOffsetHistory and ReportWatermarks (the latter
only records the latest watermarks, so a repeat is harmless).

CommitOffsets, ResetOffsets, DeleteOffsets and JoinGroup are never retried. UNAVAILABLE can
come after the server did the work and only the reply was lost: a repeated compare-and-set
commit would then fail with OFFSET_MISMATCH against its own write, a repeated reset or
JoinGroup would bump the generation twice, and a repeated delete would report nothing
deleted. Their callers get StoreUnavailableError and decide, knowing the outcome is unknown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from offsetstore.core.calls import FACTS
from offsetstore.v1 import offset_store_pb2

__all__ = ["RETRIED_METHODS", "SERVICE", "channel_options", "service_config"]

#: Full name of the offset store service, as the service config names it.
SERVICE: str = offset_store_pb2.DESCRIPTOR.services_by_name["OffsetStoreService"].full_name

#: The idempotent RPCs gRPC retries on UNAVAILABLE: those whose idempotency_level is
#: NO_SIDE_EFFECTS or IDEMPOTENT in the .proto (:mod:`offsetstore.core.calls`).
RETRIED_METHODS = tuple(name for name, facts in FACTS.items() if facts.retried)

_RETRY_POLICY = {
    "maxAttempts": 4,
    "initialBackoff": "0.1s",
    "maxBackoff": "2s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}


def service_config() -> str:
    """The JSON service config: a retry policy for RETRIED_METHODS and for nothing else."""
    config = {
        "methodConfig": [
            {
                "name": [{"service": SERVICE, "method": m} for m in RETRIED_METHODS],
                "retryPolicy": _RETRY_POLICY,
            }
        ]
    }
    return json.dumps(config)


def channel_options(options: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The channel options of a client: ours, then the caller's, which win on the same key."""
    merged: dict[str, Any] = {
        # Retries are on by default in gRPC, but a process-wide setting could turn them off.
        "grpc.enable_retries": 1,
        "grpc.service_config": service_config(),
    }
    merged.update(options)
    return list(merged.items())
