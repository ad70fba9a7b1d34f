"""``groups describe``: a group's offsets and lag, its latest member (--members) or its state (--state)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from offsetstore.cli._errors import EXIT_ERROR, EXIT_OK
from offsetstore.cli._group_state import named_groups, several
from offsetstore.cli._render import Output, json_time, offset_cell, offset_json, table_time, text_cell, unknown_cell
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import GroupNotFoundError
from offsetstore.core.types import GroupDescription, GroupStatus


def cmd_describe(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    groups: list[GroupDescription] = []
    missing: list[str] = []
    if args.all_groups:
        for summary in client.iter_groups():
            try:
                groups.append(client.describe_group(summary.group_id))
            except GroupNotFoundError:
                continue  # deleted since it was listed
    elif not several(args):
        groups = [client.describe_group(args.group)]
    else:
        # As kafka-consumer-groups does with several --group: each one that exists is shown.
        for name in named_groups(args):
            try:
                groups.append(client.describe_group(name))
            except GroupNotFoundError:
                missing.append(name)
    if args.members:
        _describe_members(groups, args, out)
    elif args.state:
        _describe_state(groups, args, out)
    else:
        _describe_offsets(groups, args, out)
    for name in missing:
        out.error(f"Error: group {name} does not exist.")
    return EXIT_ERROR if missing else EXIT_OK


def _describe_offsets(groups: list[GroupDescription], args: argparse.Namespace, out: Output) -> None:
    if out.json:
        documents = [_describe_json(g) for g in groups]
        out.document(documents if several(args) else documents[0])
        return
    out.table(
        (
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "METADATA",
            "COMMIT-TIME",
            # Last: scripts read the columns before them by position.
            "LAG-SECONDS",
            "STATUS",
        ),
        (
            (
                group.group_id,
                p.topic,
                p.partition,
                offset_cell(p.offset, stored=True),
                unknown_cell(p.log_end_offset),
                "-" if p.offset_past_log_end else unknown_cell(p.lag),
                text_cell(group.member_id),
                text_cell(group.member_host),
                text_cell(p.metadata),
                table_time(p.commit_time),
                "-" if p.lag_seconds < 0 else f"{p.lag_seconds:.1f}",
                status_cell(p.status),
            )
            for group in groups
            for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))
        ),
    )
    empty = [g for g in groups if not g.partitions]
    none = args.all_groups and not groups
    if empty or none:
        out.line()
    for group in empty:
        out.line(f"Group {group.group_id} has no offsets (generation {group.generation}).")
    if none:
        out.line("There are no groups.")
    bound = [g for g in groups if g.kafka_cluster_id]
    if bound:
        out.line()
    for group in bound:
        out.line(f"Group {group.group_id} is bound to Kafka cluster {group.kafka_cluster_id}.")
    for group in groups:
        if group.observed:
            out.error(observed_note(group.group_id, group.observed_source))
        if group.observed_lost_partitions:
            out.error(
                f"Warning: {group.group_id}: its source no longer has the positions of "
                f"{group.observed_lost_partitions} partition(s) (a Kafka group's offsets expired or deleted) since "
                f"{table_time(group.observed_lost_time)}; their last observed positions are kept here. Put them back "
                f"with: offsetstore groups export {group.group_id} --to-kafka-group KAFKA_GROUP --bootstrap-server "
                "HOST:PORT --execute"
            )
        for warning in _past_end_warnings(group):
            out.error(warning)
        for note in _unconfirmed_notes(group):
            out.error(note)


def _describe_json(group: GroupDescription) -> dict[str, Any]:
    return {
        "group_id": group.group_id,
        "generation": group.generation,
        # kafka-consumer-groups' CONSUMER-ID and HOST: the member and peer of the latest JoinGroup.
        "member_id": group.member_id,
        "member_host": group.member_host,
        "status": group.status.name,
        "status_reason": group.status_reason,
        "observed": group.observed,
        "observed_source": group.observed_source,
        "observed_lost_partitions": group.observed_lost_partitions,
        "observed_lost_time": json_time(group.observed_lost_time),
        # The Kafka cluster the group's offsets belong to (its writers' or a switch's); "" when bound to none.
        "kafka_cluster_id": group.kafka_cluster_id,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                **offset_json("offset", p.offset, stored=True),
                "metadata": p.metadata,
                "commit_time": json_time(p.commit_time),
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "lag": p.lag,
                "offset_past_log_end": p.offset_past_log_end,
                "lag_seconds": p.lag_seconds,
                "lag_seconds_status": p.lag_seconds_status.name,
                "status": p.status.name,
                "status_reason": p.status_reason,
                "watermark_time": json_time(p.watermark_time),
                # The record before the offset, as its writer fingerprinted it (groups switch finds it on B).
                "fingerprint": None
                if p.fingerprint is None
                else {"timestamp_ms": p.fingerprint.timestamp_ms, "digest": p.fingerprint.digest.hex()},
            }
            for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))
        ],
    }


def _last_active(group: GroupDescription) -> datetime | None:
    """The latest creation, join, reset or commit of the group."""
    times = [t for t in (group.active_time, *(p.commit_time for p in group.partitions)) if t is not None]
    return max(times, default=None)


def _state(group: GroupDescription) -> str:
    """Kafka's STATE column as far as the store can tell: it knows offsets, not live members."""
    if not group.partitions:
        return "Empty"
    if any(p.offset_past_log_end for p in group.partitions):
        return "PastLogEnd"
    return "Stable"


def _past_end_warnings(group: GroupDescription) -> list[str]:
    # offset_past_log_end is confirmed only (a log end observed after the commit): the
    # fix-it advice fences the group and moves its offset, never on a log end older than it.
    return [
        f"Warning: {group.group_id} {p.topic}:{p.partition}: offset {p.offset} is past the log end "
        f"{p.log_end_offset}; its lag is not 0 but unknown, and nothing is read until the log reaches it. "
        "An offset from another topic or cluster, or a log recreated since? "
        f"Fix it with: offsetstore groups reset {group.group_id} --topic {p.topic}:{p.partition} "
        "--to-latest (or --to-offset N) --execute"
        for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))
        if p.offset_past_log_end
    ]


def _unconfirmed_notes(group: GroupDescription) -> list[str]:
    """An offset past a log end older than its commit: most likely a log end not reported yet, no advice."""
    return [
        f"Note: {group.group_id} {p.topic}:{p.partition}: {p.status_reason}"
        for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))
        if not p.offset_past_log_end and p.offset > p.log_end_offset >= 0
    ]


def observed_note(group_id: str, source: str) -> str:
    """What an observed group is, said under its table: its pipeline keeps its positions."""
    return (
        f"Note: {group_id} is observed (read from {source}): its pipeline keeps its positions, offsetstore "
        f"records them and refuses commits. Take it over with: offsetstore groups adopt {group_id} "
        "--from-observed --execute"
    )


def status_cell(status: GroupStatus) -> str:
    """A verdict in a table: its name, - for a server that gives none."""
    return "-" if status == GroupStatus.UNSPECIFIED else status.name


def _describe_members(groups: list[GroupDescription], args: argparse.Namespace, out: Output) -> None:
    # The store knows the latest JoinGroup of a group, not every live member as a Kafka coordinator does.
    rows = [
        {
            "group_id": g.group_id,
            "member_id": g.member_id,
            "member_host": g.member_host,
            "generation": g.generation,
            "last_active_time": json_time(_last_active(g)),
            "partition_count": len(g.partitions),
        }
        for g in groups
    ]
    if out.json:
        out.document(rows if several(args) else rows[0])
        return
    out.table(
        ("GROUP", "CONSUMER-ID", "HOST", "GENERATION", "LAST-ACTIVE", "#PARTITIONS"),
        (
            (
                g.group_id,
                text_cell(g.member_id),
                text_cell(g.member_host),
                g.generation,
                table_time(_last_active(g)),
                len(g.partitions),
            )
            for g in groups
        ),
    )
    out.line()
    out.line(
        "CONSUMER-ID and HOST are the latest member to join (JoinGroup); offsetstore keeps no list of live members."
    )


def _describe_state(groups: list[GroupDescription], args: argparse.Namespace, out: Output) -> None:
    rows = [
        {
            "group_id": g.group_id,
            "state": _state(g),
            "status": g.status.name,
            "status_reason": g.status_reason,
            "generation": g.generation,
            "reset_count": g.reset_count,
            "partition_count": len(g.partitions),
            "last_active_time": json_time(_last_active(g)),
        }
        for g in groups
    ]
    if out.json:
        out.document(rows if several(args) else rows[0])
        return
    out.table(
        ("GROUP", "STATE", "GENERATION", "RESETS", "#PARTITIONS", "LAST-ACTIVE", "STATUS", "REASON"),
        (
            (
                g.group_id,
                _state(g),
                g.generation,
                g.reset_count,
                len(g.partitions),
                table_time(_last_active(g)),
                status_cell(g.status),
                text_cell(g.status_reason),
            )
            for g in groups
        ),
    )
    out.line()
    out.line(
        "STATE: Empty (no offsets), Stable (offsets, none past its log end) or PastLogEnd (see describe's "
        "warnings). LAST-ACTIVE: the latest join, reset or commit. STATUS: the worst partition's verdict, "
        "OK, IDLE, LAGGING, STALLED, STOPPED, LOST, PAST_END or UNCONFIRMED (docs/operations.md)."
    )
