"""Conversions of the requests whose fields the storage core reads as they are: selections, reset targets, fingerprints.

Beside :mod:`offsetstore.core.convert` (the values): a client builds these requests from the
values of offsetstore.core.types, the server reads them back, checking what only the wire
can get wrong (a timestamp out of range, an unknown boundary) and naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from offsetstore.core.convert import (
    boundary_from_proto,
    boundary_to_proto,
    datetime_to_timestamp,
    timestamp_to_datetime,
)
from offsetstore.core.errors import InvalidArgumentError
from offsetstore.core.types import RecordFingerprint, ResetRequest, TopicPartition, Topics
from offsetstore.v1 import offset_store_pb2 as pb


def selections_to_proto(topics: Topics) -> list[pb.TopicSelection]:
    """The TopicSelection messages of a selection (see `Topics`); None selects everything."""
    if topics is None:
        return []
    if isinstance(topics, Mapping):
        return [pb.TopicSelection(topic=t, partitions=list(ps)) for t, ps in topics.items()]
    if isinstance(topics, str):
        # A bare string is one topic, not an iterable of one-letter topics.
        return [pb.TopicSelection(topic=topics)]
    out: list[pb.TopicSelection] = []
    # Pairs of one topic gather into one selection, at the place of the topic's first pair.
    by_topic: dict[str, pb.TopicSelection] = {}
    for item in topics:
        if isinstance(item, str):
            out.append(pb.TopicSelection(topic=item))
            continue
        topic, partition = item
        selection = by_topic.get(topic)
        if selection is None:
            selection = by_topic[topic] = pb.TopicSelection(topic=topic)
            out.append(selection)
        selection.partitions.append(partition)
    return out


def selections_from_proto(messages: Iterable[pb.TopicSelection]) -> list[tuple[str, tuple[int, ...]]]:
    """(topic, partitions) per message, in request order; no partitions means every partition of the topic.

    A list, not a dict: a topic named twice stays twice, so the storage core can reject
    it naming ``topics[i]`` exactly.
    """
    return [(m.topic, tuple(m.partitions)) for m in messages]


def timestamp_field(message: Any, field: str) -> datetime | None:
    """``message.field`` as a datetime, None when unset; a timestamp out of range names the field."""
    if not message.HasField(field):
        return None
    try:
        return timestamp_to_datetime(getattr(message, field))
    except (ValueError, OverflowError, OSError):
        raise InvalidArgumentError.field(field, "is not a valid timestamp") from None


def reset_request_to_proto(value: ResetRequest) -> pb.ResetOffsetsRequest:
    """The request a client sends; two targets are refused here, none is left for the server to refuse."""
    if len(value.targets) > 1:
        raise InvalidArgumentError.field("target", "give exactly one target")
    request = pb.ResetOffsetsRequest(
        group_id=value.group_id,
        topics=selections_to_proto(cast(Topics, value.topics)),  # a client's request: built from Topics
        all_topics=value.all_topics,
        dry_run=value.dry_run,
        clamp=value.clamp,
        source=value.source,
        switch_to_cluster_id=value.switch_to_cluster_id,
    )
    if value.expected_generation is not None:
        request.expected_generation = value.expected_generation
    if value.to_offset is not None:
        request.to_offset = value.to_offset
    elif value.shift_by is not None:
        request.shift_by = value.shift_by
    elif value.to_boundary is not None:
        request.to_boundary = boundary_to_proto(value.to_boundary)
    elif value.to_commit_time is not None:
        request.to_commit_time.CopyFrom(datetime_to_timestamp(value.to_commit_time))
    elif value.to_offsets is not None:
        targets = sorted(value.to_offsets.items())
        request.to_offsets.SetInParent()  # an empty map is still this target, for the server to refuse
        request.to_offsets.offsets.extend(
            pb.PartitionOffset(topic=tp.topic, partition=tp.partition, offset=off) for tp, off in targets
        )
        if value.topics is None and not value.all_topics:
            # The selection is the partitions given: what the call's cost and quota count.
            request.topics.extend(selections_to_proto([(tp.topic, tp.partition) for tp, _ in targets]))
    return request


def reset_request_from_proto(request: pb.ResetOffsetsRequest) -> ResetRequest:
    """The request the server received, its target checked for what only the wire can get wrong."""
    target = request.WhichOneof("target")
    to_boundary = None
    if target == "to_boundary":
        try:
            to_boundary = boundary_from_proto(request.to_boundary)
        except ValueError:
            raise InvalidArgumentError.field("to_boundary", "must be BOUNDARY_EARLIEST or BOUNDARY_LATEST") from None
    return ResetRequest(
        request.group_id,
        selections_from_proto(request.topics),
        all_topics=request.all_topics,
        to_offset=request.to_offset if target == "to_offset" else None,
        shift_by=request.shift_by if target == "shift_by" else None,
        to_boundary=to_boundary,
        to_commit_time=timestamp_field(request, "to_commit_time") if target == "to_commit_time" else None,
        dry_run=request.dry_run,
        expected_generation=request.expected_generation if request.HasField("expected_generation") else None,
        clamp=request.clamp,
        to_offsets=_offset_targets(request.to_offsets) if target == "to_offsets" else None,
        source=request.source,
        switch_to_cluster_id=request.switch_to_cluster_id,
    )


def _offset_targets(message: pb.OffsetTargets) -> dict[TopicPartition, int]:
    """The offsets of ``to_offsets``; a partition given twice is refused here, naming it (a dict would keep one)."""
    found: dict[TopicPartition, int] = {}
    for i, o in enumerate(message.offsets):
        tp = TopicPartition(o.topic, o.partition)
        if tp in found:
            raise InvalidArgumentError.field(f"to_offsets.offsets[{i}]", f"{o.topic}:{o.partition} is given twice")
        found[tp] = o.offset
    return found


def fingerprints_to_proto(values: Mapping[tuple[str, int], RecordFingerprint]) -> list[pb.PartitionFingerprint]:
    """A commit's fingerprints, {(topic, partition): fingerprint}, as CommitOffsetsRequest.fingerprints."""
    return [
        pb.PartitionFingerprint(
            topic=topic,
            partition=partition,
            fingerprint=pb.RecordFingerprint(offset=fp.offset, timestamp_ms=fp.timestamp_ms, digest=fp.digest),
        )
        for (topic, partition), fp in values.items()
    ]


def fingerprints_from_proto(
    messages: Iterable[pb.PartitionFingerprint],
) -> list[tuple[TopicPartition, RecordFingerprint]]:
    """(partition, fingerprint) per message, in request order (the storage core checks them, naming ``fingerprints[i]``)."""
    out = []
    for i, m in enumerate(messages):
        if not m.HasField("fingerprint"):
            raise InvalidArgumentError.field(f"fingerprints[{i}].fingerprint", "is required")
        fp = m.fingerprint
        out.append((TopicPartition(m.topic, m.partition), RecordFingerprint(fp.offset, fp.timestamp_ms, fp.digest)))
    return out
