"""Moving a group to another Kafka cluster: each partition's offset there, found as exactly as the facts allow (issue 58).

A committed offset on cluster A means nothing on cluster B, whose copy of the topic has other
offsets (transaction markers are not copied, B's log may start later, MirrorMaker may rename the
topic). :func:`plan_switch` finds, per partition, the offset on B to resume from, by the best
method the facts allow:

``exact``
    The group's writer stored a fingerprint of the record before the offset (its timestamp and a
    digest of key, value and headers, :mod:`.fingerprints`). B's time index gives the first offset
    with that timestamp or later, and a short scan from there finds the record; the target is the
    next offset. Nothing is re-read and nothing skipped.
``offset-syncs``
    MirrorMaker 2's ``mm2-offset-syncs.<alias>.internal`` topic pairs upstream offsets with
    downstream ones. From the last pair at or before the offset the target is conservative, as
    MirrorMaker's own translation is: it may re-read up to the distance to that pair, never skip.
``timestamp``
    The fingerprint's timestamp alone (the record was not found on B): the first record on B at
    that time or later. Conservative, re-reads unknown.
``identity``
    Offset-preserving replication (asked for with ``offset_preserving``): the same offset.

A partition none of them places has no target, and a switch refuses to run until it has one.
With A reachable (``source``), the plan also counts per partition the records A holds past the
group's offset that B lacks (``missing``): replication that has not caught up, or never will.
With A unreachable (a failover), it names the gap it can know from the last log end of A the store
saw (the watermark a consumer on A reported, in the group's description): that end minus the offset
on A that B's end corresponds to, where an exact placement ties the two (the fingerprinted record
is at ``source_offset - 1`` on A and ``target_offset - 1`` on B, and B's copy has no control
records). It is the gap A held when that end was seen: equal to the loss when it was seen after the
last acknowledged write, less when A was written after it. On a transactional topic the markers
and aborted records after B's end take offsets too, so there it is a bound in offsets.
The switch itself is one ResetOffsets with ``to_offsets`` and ``switch_to_cluster_id``: fenced,
recorded as CHANGE_KIND_SWITCH, and it binds the group to B. :class:`SwitchPlanner` plans many
groups over one set of clients; its reads of Kafka, batched over all of a group's partitions, are
:mod:`._switch_reads`'s.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from offsetstore.core.types import GroupDescription, PartitionStatus, RecordFingerprint, TopicPartition
from offsetstore.kafka_integration._messages import kafka_cluster_id
from offsetstore.kafka_integration._switch_reads import (
    digests,
    find_records,
    log_ends,
    offset_for_time,
    offset_syncs,
    reader,
)

if TYPE_CHECKING:
    import confluent_kafka

__all__ = ["PartitionSwitch", "SwitchPlan", "SwitchPlanner", "plan_switch", "topic_mapper"]

#: The methods, best first.
METHODS = ("exact", "offset-syncs", "timestamp", "identity")


@dataclass(frozen=True)
class PartitionSwitch:
    """One partition's move: where the group is on A and where it resumes on B."""

    topic: str
    partition: int
    #: The topic's name on B (a replication policy may rename it).
    target_topic: str
    #: The group's offset on A.
    source_offset: int
    #: The offset to resume from on B; -1 when no method placed it.
    target_offset: int
    #: The method that placed it (:data:`METHODS`), or "none".
    method: str
    #: At most this many records are read again on B; None: not known (a conservative method).
    rereads: int | None
    #: Records A holds past ``source_offset`` that B lacks; None: not counted (A not asked).
    missing: int | None = None
    #: Why a better method did not apply, or what else is worth saying.
    note: str = ""
    #: How ``missing`` was had: "read" (A and B read past the offsets, by digest), "watermark" (A unreachable: from
    #: ``known_log_end``, A's last log end the store saw), or "" (not counted).
    missing_basis: str = ""
    #: A's last log end the store saw (a reported watermark), where ``missing`` comes from it.
    known_log_end: int | None = None


@dataclass(frozen=True)
class SwitchPlan:
    """A group's switch from cluster ``from_cluster_id`` to ``to_cluster_id``, per partition."""

    group_id: str
    #: The group's generation the plan was made at: the switch applies only while it is current.
    generation: int
    from_cluster_id: str
    to_cluster_id: str
    partitions: list[PartitionSwitch] = field(default_factory=list)

    @property
    def to_offsets(self) -> dict[TopicPartition, int]:
        """The targets on B, for ResetOffsets' ``to_offsets``."""
        return {TopicPartition(p.target_topic, p.partition): p.target_offset for p in self.partitions}

    @property
    def unplaced(self) -> list[PartitionSwitch]:
        return [p for p in self.partitions if p.target_offset < 0]

    @property
    def source(self) -> str:
        """What the history records beside both cluster ids: the methods used."""
        used = collections.Counter(p.method for p in self.partitions)
        return "methods " + ", ".join(f"{m} x{used[m]}" for m in (*METHODS, "none") if used[m])


def topic_mapper(
    topic_map: Mapping[str, str] | None = None, policy: str = "identity", source_alias: str = ""
) -> Callable[[str], str]:
    """A topic's name on B: an explicit map first, else MirrorMaker 2's ``default`` (``alias.topic``) or ``identity`` policy."""
    explicit = dict(topic_map or {})
    if policy not in ("default", "identity"):
        raise ValueError(f"unknown replication policy {policy!r}: default or identity")
    if policy == "default" and not source_alias:
        raise ValueError("the default replication policy needs the source cluster's alias")

    def name(topic: str) -> str:
        if topic in explicit:
            return explicit[topic]
        return f"{source_alias}.{topic}" if policy == "default" else topic

    return name


def plan_switch(
    description: GroupDescription,
    target: Mapping[str, Any],
    *,
    source: Mapping[str, Any] | None = None,
    topic_name: Callable[[str], str] = lambda t: t,
    offset_preserving: bool = False,
    scan_limit: int = 10_000,
    wait_seconds: float = 0.0,
    timeout: float = 10.0,
) -> SwitchPlan:
    """Each partition of ``description`` placed on cluster ``target`` (a confluent-kafka client config).

    ``source``, cluster A's client config when A is reachable, lets the plan count the records B
    lacks and read offset syncs kept on A (MirrorMaker's default). Without it the gap is named from
    A's last log end the store saw (each partition's watermark in ``description``), where it can be.
    ``wait_seconds`` waits that long at most for a fingerprinted record that B does not hold yet
    (replication catching up).
    """
    with SwitchPlanner(target, source=source, topic_name=topic_name, offset_preserving=offset_preserving,
                       scan_limit=scan_limit, wait_seconds=wait_seconds, timeout=timeout) as planner:  # fmt: skip
        return planner.plan(description)


class SwitchPlanner:
    """:func:`plan_switch` for many groups: B's (and A's) clients, B's cluster id and the offset syncs read once.

    A context manager; :meth:`plan` plans one group. The offset syncs are those read on entry:
    a planner kept open long plans by older syncs (conservative still, with larger bounds).
    """

    def __init__(
        self,
        target: Mapping[str, Any],
        *,
        source: Mapping[str, Any] | None = None,
        topic_name: Callable[[str], str] = lambda t: t,
        offset_preserving: bool = False,
        scan_limit: int = 10_000,
        wait_seconds: float = 0.0,
        timeout: float = 10.0,
    ) -> None:
        self.target, self.source = target, source
        self.topic_name = topic_name
        self.offset_preserving = offset_preserving
        self.scan_limit, self.wait_seconds, self.timeout = scan_limit, wait_seconds, timeout
        self.to_cluster_id = ""
        self._stack = ExitStack()
        self._b: confluent_kafka.Consumer | None = None
        self._a: confluent_kafka.Consumer | None = None
        self._syncs: dict[TopicPartition, list[tuple[int, int]]] = {}

    def __enter__(self) -> SwitchPlanner:
        with ExitStack() as stack:
            self._b = b = stack.enter_context(reader(self.target))
            self.to_cluster_id = kafka_cluster_id(b, self.timeout)
            self._syncs = offset_syncs(b, self.timeout)
            if self.source is not None:
                self._a = a = stack.enter_context(reader(self.source))
                for key, pairs in offset_syncs(a, self.timeout).items():
                    self._syncs.setdefault(key, pairs)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self._a = self._b = None

    def plan(self, description: GroupDescription) -> SwitchPlan:
        """Each partition of ``description`` placed on B."""
        b, a = self._b, self._a
        assert b is not None, "enter the planner first"
        targets = [TopicPartition(self.topic_name(p.topic), p.partition) for p in description.partitions]
        # Every fingerprinted record looked up at once: one time-index request, one scan of all partitions.
        wanted = {
            tp_b: p.fingerprint
            for p, tp_b in zip(description.partitions, targets, strict=True)
            if p.offset >= 0 and p.fingerprint is not None
        }
        found = find_records(b, wanted, self.scan_limit, self.timeout)
        deadline = time.monotonic() + self.wait_seconds
        while any(v is None for v in found.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
            missing = {tp: wanted[tp] for tp, v in found.items() if v is None}
            found.update(find_records(b, missing, self.scan_limit, self.timeout))
        moves = [
            _place(
                b,
                p.topic,
                p.partition,
                tp_b,
                p.offset,
                p.fingerprint,
                found.get(tp_b),
                self._syncs,
                self.offset_preserving,
                self.scan_limit,
                self.timeout,
            )  # fmt: skip
            for p, tp_b in zip(description.partitions, targets, strict=True)
        ]
        if a is not None:
            moves = _count_missing(a, b, moves, self.timeout)
        else:
            moves = _gaps_from_watermarks(b, moves, description.partitions, self.timeout)
        return SwitchPlan(
            description.group_id, description.generation, description.kafka_cluster_id, self.to_cluster_id, moves
        )


def _place(
    b: confluent_kafka.Consumer,
    topic: str,
    partition: int,
    tp_b: TopicPartition,
    offset: int,
    fp: RecordFingerprint | None,
    found: tuple[int, int] | None,
    syncs: Mapping[TopicPartition, list[tuple[int, int]]],
    offset_preserving: bool,
    scan_limit: int,
    timeout: float,
) -> PartitionSwitch:
    def move(target: int, method: str, rereads: int | None, note: str = "") -> PartitionSwitch:
        return PartitionSwitch(topic, partition, tp_b.topic, offset, target, method, rereads, None, note)

    notes = []
    if offset < 0:
        return move(offset, "identity", None, "a placeholder (-2 earliest, -1 latest) means the same on B")
    if fp is not None:
        if found is not None:
            at, copies = found
            return move(
                at + 1, "exact", copies - 1, f"{copies} identical records: the first taken" if copies > 1 else ""
            )
        notes.append(f"the fingerprinted record (timestamp {fp.timestamp_ms}) is not within {scan_limit} records on B")
    else:
        notes.append("no fingerprint stored for this offset")
    pairs = syncs.get(TopicPartition(topic, partition), [])
    before = [(u, d) for u, d in pairs if u <= offset]
    if before:
        upstream, downstream = max(before)
        if upstream == offset:
            return move(downstream, "offset-syncs", 0, "; ".join(notes))
        # Records upstream+1 .. offset-1 are somewhere after downstream: resume right after it.
        return move(downstream + 1, "offset-syncs", offset - upstream - 1, "; ".join(notes))
    if pairs:
        notes.append("every offset sync is past the offset")
    if fp is not None:
        at = offset_for_time(b, tp_b, fp.timestamp_ms, timeout)
        return move(at, "timestamp", None, "; ".join(notes))
    if offset_preserving:
        return move(offset, "identity", 0, "; ".join(notes))
    return move(-1, "none", None, "; ".join(notes))


def _count_missing(
    a: confluent_kafka.Consumer, b: confluent_kafka.Consumer, moves: list[PartitionSwitch], timeout: float
) -> list[PartitionSwitch]:
    """``moves`` with the records A holds past the group's offset that B lacks past the target, counted by digest."""
    placed = [m for m in moves if m.source_offset >= 0 and m.target_offset >= 0]
    on_a = digests(a, {TopicPartition(m.topic, m.partition): m.source_offset for m in placed}, timeout)
    on_b = digests(b, {TopicPartition(m.target_topic, m.partition): m.target_offset for m in placed}, timeout)
    counted = {
        id(m): sum(
            (on_a[TopicPartition(m.topic, m.partition)] - on_b[TopicPartition(m.target_topic, m.partition)]).values()
        )
        for m in placed
    }
    return [
        PartitionSwitch(**{**m.__dict__, "missing": counted[id(m)], "missing_basis": "read"}) if id(m) in counted else m
        for m in moves
    ]


def _gaps_from_watermarks(
    b: confluent_kafka.Consumer, moves: list[PartitionSwitch], statuses: Sequence[PartitionStatus], timeout: float
) -> list[PartitionSwitch]:
    """``moves`` with the records A held past B's end, from A's last log end the store saw (A unreachable).

    B's log end is asked only for the partitions where the gap can be named: placed exactly, with a
    log end of A reported.
    """
    pairs = list(zip(moves, statuses, strict=True))
    named = [m for m, s in pairs if m.method == "exact" and s.watermark_time is not None and s.log_end_offset >= 0]
    ends = log_ends(b, {TopicPartition(m.target_topic, m.partition) for m in named}, timeout)
    return [_gap_from_watermark(m, s, ends.get(TopicPartition(m.target_topic, m.partition))) for m, s in pairs]


def _gap_from_watermark(move: PartitionSwitch, status: PartitionStatus, end_b: int | None) -> PartitionSwitch:
    """``move`` with the records A held past B's end ``end_b``, from A's last log end the store saw; as it was where unknown.

    Only an exact placement ties an offset on A to one on B: B's records from ``target_offset`` on are
    A's from ``source_offset`` on, one for one (B's copy has no control records), so B's end is A's
    ``source_offset + (B's end - target_offset)``.
    """
    if status.watermark_time is None or status.log_end_offset < 0:
        return _noted(move, "A unreachable and no log end of A reported to the store: the gap is not known")
    if move.method != "exact" or end_b is None:
        return _noted(move, "A unreachable and the record is not placed exactly: the gap is not known")
    at_a = move.source_offset + max(0, end_b - move.target_offset)
    gap = max(0, status.log_end_offset - at_a)
    seen = f"A's log end {status.log_end_offset} seen {status.watermark_time.isoformat(timespec='seconds')}"
    return PartitionSwitch(
        **{
            **_noted(move, f"{seen}; B ends at A's {at_a}").__dict__,
            "missing": gap,
            "missing_basis": "watermark",
            "known_log_end": status.log_end_offset,
        }
    )


def _noted(move: PartitionSwitch, note: str) -> PartitionSwitch:
    return PartitionSwitch(**{**move.__dict__, "note": "; ".join(n for n in (move.note, note) if n)})
