"""The Kafka offsets of a Spark Structured Streaming checkpoint: the last batch that has a commit.

A checkpoint directory holds ``offsets/N`` (written when batch N is planned: the offsets it
reads up to) and ``commits/N`` (written once batch N's sink is done). Each ``offsets/N`` is
Spark's ``OffsetSeq`` log entry: a version line (``v1``), a line of batch metadata (JSON), then
one line per source: ``-`` for a source with no offset yet, else the source's own JSON, which
for the Kafka source is ``{"topic": {"partition": next offset, ...}, ...}``. The next offset to
read is the stored convention: ``offsets/N`` of the last committed batch is where a successor
starts. A planned batch without a commit (the one in flight at a crash) is named, not adopted:
its records may or may not be in the sink, and a restart of the same job would run it again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from offsetstore.core.types import EARLIEST, LATEST, TopicPartition

__all__ = ["CheckpointError", "CheckpointOffsets", "read_checkpoint"]


class CheckpointError(ValueError):
    """A directory that is not a readable Spark checkpoint with a committed Kafka batch."""


@dataclass(frozen=True)
class CheckpointOffsets:
    """What a checkpoint says: the offsets after its last committed batch."""

    #: The last batch with a commit.
    batch: int
    #: Its end offsets: where the next batch starts.
    offsets: dict[TopicPartition, int]
    #: A batch planned after it but never committed (in flight when the job stopped), or None.
    in_flight: int | None


def _batches(directory: str) -> set[int]:
    # Spark writes N, and its Hadoop file system a hidden .N.crc beside it; a temp file is hidden too.
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return set()
    return {int(name) for name in names if name.isascii() and name.isdigit()}


def read_checkpoint(path: str) -> CheckpointOffsets:
    """The offsets of the last batch of ``path`` that has a commit; :class:`CheckpointError` says why not."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{path} is not a directory")
    planned = _batches(os.path.join(path, "offsets"))
    if not planned:
        raise CheckpointError(f"{path} has no offsets/ log: not a Structured Streaming checkpoint, or no batch ran")
    committed = _batches(os.path.join(path, "commits")) & planned
    if not committed:
        raise CheckpointError(
            f"{path} has no committed batch (batch {min(planned)} was planned but never committed): "
            "there is no position a successor could start from without replay"
        )
    batch = max(committed)
    later = [n for n in planned if n > batch]
    entry = os.path.join(path, "offsets", str(batch))
    return CheckpointOffsets(batch, _kafka_offsets(entry), min(later) if later else None)


def _kafka_offsets(entry: str) -> dict[TopicPartition, int]:
    with open(entry, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines or not lines[0].startswith("v"):
        raise CheckpointError(f"{entry} is not a Spark offset log entry (no version line)")
    found: dict[TopicPartition, int] = {}
    for number, line in enumerate(lines[2:], start=3):
        if line.strip() in ("", "-"):
            continue  # a source that had no offset yet
        try:
            source = json.loads(line)
        except json.JSONDecodeError:
            raise CheckpointError(f"{entry}: line {number} is not JSON") from None
        if not _is_kafka(source):
            raise CheckpointError(
                f"{entry}: line {number} is not a Kafka source's offsets ({{topic: {{partition: offset}}}}): "
                "only Kafka sources can be adopted"
            )
        for topic, partitions in source.items():
            for partition, offset in partitions.items():
                tp = TopicPartition(topic, int(partition))
                if tp in found:
                    raise CheckpointError(f"{entry}: {topic}:{partition} is read by two sources")
                if offset < 0 and offset not in (EARLIEST, LATEST):
                    raise CheckpointError(f"{entry}: {topic}:{partition} has offset {offset}")
                found[tp] = offset
    if not found:
        raise CheckpointError(f"{entry} has no Kafka offsets")
    return found


def _is_kafka(source: object) -> bool:
    return isinstance(source, dict) and all(
        isinstance(topic, str)
        and isinstance(parts, dict)
        and all(p.isascii() and p.isdigit() and type(o) is int for p, o in parts.items())
        for topic, parts in source.items()
    )
