"""``groups list`` and ``groups expire``: the groups, and the groups idle long enough to expire."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from offsetstore.cli._describe import status_cell
from offsetstore.cli._errors import EXIT_OK
from offsetstore.cli._render import Output, json_time, table_time, text_cell, unknown_cell
from offsetstore.client import OffsetStoreClient
from offsetstore.core.durations import format_duration
from offsetstore.core.errors import GroupNotFoundError
from offsetstore.core.types import ExpiredGroup, GroupStatus, GroupSummary, TopicSummary


def _expired_rows(groups: Sequence[ExpiredGroup], out: Output) -> list[dict[str, Any]] | None:
    """Writes the idle groups as a table (returns None), or returns them for a JSON document."""
    now = datetime.now(UTC)

    def idle(g: ExpiredGroup) -> str:
        if g.last_active_time is None:
            return "-"
        return format_duration(max(0, int((now - g.last_active_time).total_seconds())))

    if out.json:
        return [
            {
                "group_id": g.group_id,
                "generation": g.generation,
                "partition_count": g.partition_count,
                "last_active_time": json_time(g.last_active_time),
            }
            for g in groups
        ]
    out.table(
        ("GROUP", "GENERATION", "PARTITIONS", "LAST-ACTIVE", "IDLE"),
        ((g.group_id, g.generation, g.partition_count, table_time(g.last_active_time), idle(g)) for g in groups),
    )
    return None


def _observed_cell(g: GroupSummary) -> str:
    """Where an observed group is read, and how many of its positions the source lost; - for a committed group."""
    if not g.observed:
        return "-"
    lost = f"(LOST:{g.observed_lost_partitions})" if g.observed_lost_partitions else ""
    return text_cell(g.observed_source) + lost


def cmd_list(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    if args.idle_for is not None:
        # What expiry would take: a preview of ExpireGroups, which needs admin on the prefix.
        rows = _expired_rows(client.expire_groups(args.idle_for, prefix=args.prefix), out)
        if rows is not None:
            out.document(rows)
        return EXIT_OK
    groups = list(client.iter_groups(args.prefix))
    if args.state is not None:
        return _list_states(client, groups, args.state, out)
    if out.json:
        out.document(
            [
                {
                    "group_id": g.group_id,
                    "generation": g.generation,
                    "partition_count": g.partition_count,
                    "last_commit_time": json_time(g.last_commit_time),
                    "total_lag": g.total_lag,
                    "observed": g.observed,
                    "observed_source": g.observed_source,
                    "observed_lost_partitions": g.observed_lost_partitions,
                }
                for g in groups
            ]
        )
        return EXIT_OK
    out.table(
        # OBSERVED last, so the columns before it keep their places: where an observed group's
        # positions are read (its pipeline keeps them), with (LOST:N) when its source lost N of
        # them, - for a group committed here.
        ("GROUP", "GENERATION", "PARTITIONS", "LAST-COMMIT", "TOTAL-LAG", "OBSERVED"),
        (
            (
                g.group_id,
                g.generation,
                g.partition_count,
                table_time(g.last_commit_time),
                unknown_cell(g.total_lag),
                _observed_cell(g),
            )
            for g in groups
        ),
    )
    return EXIT_OK


def _list_states(
    client: OffsetStoreClient, groups: Sequence[GroupSummary], wanted: frozenset[GroupStatus], out: Output
) -> int:
    # As kafka-consumer-groups --list --state, each group is described: the verdict is over its partitions.
    rows = []
    for g in groups:
        try:
            d = client.describe_group(g.group_id)
        except GroupNotFoundError:
            continue  # deleted since it was listed
        if d.status in wanted:
            rows.append((g, d))
    if out.json:
        out.document(
            [
                {
                    "group_id": g.group_id,
                    "status": d.status.name,
                    "status_reason": d.status_reason,
                    "total_lag": g.total_lag,
                }
                for g, d in rows
            ]
        )
        return EXIT_OK
    out.table(
        ("GROUP", "STATUS", "TOTAL-LAG", "REASON"),
        ((g.group_id, status_cell(d.status), unknown_cell(g.total_lag), text_cell(d.status_reason)) for g, d in rows),
    )
    return EXIT_OK


def cmd_topics(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    topics: list[TopicSummary] = []
    token = ""
    while True:
        page = client.list_topics(args.group, page_token=token)
        topics.extend(page.items)
        token = page.next_page_token
        if not token:
            break
    if not topics:
        # An unknown group is an error here as for describe, history and reset (a typo is likelier
        # than a group without offsets): DescribeGroup says which, GROUP_NOT_FOUND.
        client.describe_group(args.group)
    if out.json:
        out.document(
            [
                {
                    "topic": t.topic,
                    "partition_count": t.partition_count,
                    "last_commit_time": json_time(t.last_commit_time),
                    "total_lag": t.total_lag,
                }
                for t in topics
            ]
        )
        return EXIT_OK
    out.table(
        ("TOPIC", "PARTITIONS", "LAST-COMMIT", "TOTAL-LAG"),
        ((t.topic, t.partition_count, table_time(t.last_commit_time), unknown_cell(t.total_lag)) for t in topics),
    )
    return EXIT_OK


def cmd_expire(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    groups = client.expire_groups(args.idle_for, prefix=args.prefix, execute=args.execute)
    rows = _expired_rows(groups, out)
    if rows is not None:
        out.document({"dry_run": not args.execute, "idle_for": format_duration(args.idle_for), "groups": rows})
        return EXIT_OK
    out.line()
    idle = format_duration(args.idle_for)
    if not groups:
        out.line(f"Nothing to expire: no group has been idle for {idle}.")
    elif args.execute:
        out.line(f"Expired {len(groups)} group(s) idle for {idle}; their history shows CHANGE_KIND_EXPIRE.")
    else:
        out.line(f"Would expire {len(groups)} group(s) idle for {idle}.")
    if not args.execute:
        out.line("Dry run: nothing changed. Run again with --execute to expire.")
    return EXIT_OK
