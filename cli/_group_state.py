"""What several groups commands read before they act: the selected topics, the stored offsets, the known log ranges."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence

from offsetstore.cli import _broker
from offsetstore.cli._render import Output
from offsetstore.cli._values import merge_topic_specs
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import GroupNotFoundError
from offsetstore.core.types import FetchResult, TopicPartition


def topic_selection(args: argparse.Namespace) -> dict[str, list[int]] | None:
    return merge_topic_specs(args.topics) if args.topics else None


def selection_of(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """The client's topic selection of exactly these partitions."""
    selection: dict[str, list[int]] = {}
    for tp in partitions:
        selection.setdefault(tp.topic, []).append(tp.partition)
    return selection


def stored_offsets(fetched: FetchResult) -> dict[TopicPartition, int]:
    """The fetched partitions that hold an offset, placeholders included.

    A named partition without an offset comes back as -1 with no commit time; a stored -1
    (the latest placeholder) has one.
    """
    return {tp: o.offset for tp, o in fetched.offsets.items() if o.commit_time is not None}


def groups_of(client: OffsetStoreClient, args: argparse.Namespace) -> list[str]:
    if getattr(args, "all_groups", False):
        return [g.group_id for g in client.iter_groups()]
    return named_groups(args)


def named_groups(args: argparse.Namespace) -> list[str]:
    """The groups the command names: GROUP, or each --group once in the order given."""
    if getattr(args, "groups", None):
        return list(dict.fromkeys(args.groups))
    return [args.group]


def several(args: argparse.Namespace) -> bool:
    """Whether the command was asked about groups in the plural (--all-groups, --group): JSON is then a list."""
    return bool(getattr(args, "all_groups", False) or getattr(args, "groups", None))


def known_ranges(
    client: OffsetStoreClient, group: str, partitions: Sequence[TopicPartition], bootstrap: str | None
) -> dict[TopicPartition, tuple[int, int]]:
    """(log start, log end) per partition, -1 where unknown: from the broker if given, else the store's."""
    if bootstrap:
        return _broker.watermarks(bootstrap, partitions)
    try:
        described = client.describe_group(group).partitions
    except GroupNotFoundError:
        return {}
    wanted = set(partitions)
    return {
        tp: (p.log_start_offset, p.log_end_offset)
        for p in described
        if (tp := TopicPartition(p.topic, p.partition)) in wanted
    }


def out_of_range(
    offsets: dict[TopicPartition, int], ranges: dict[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, int]:
    """The offsets outside their known [log start, log end], each with the bound it passed."""
    found = {}
    for tp, offset in offsets.items():
        start, end = ranges.get(tp, (-1, -1))
        if offset < 0:
            continue  # a placeholder resolves to a bound by itself
        if end >= 0 and offset > end:
            found[tp] = end
        elif start >= 0 and offset < start:
            found[tp] = start
    return found


def warn_out_of_range(out: Output, group: str, outside: dict[TopicPartition, int], offsets, clamp: bool) -> None:
    for tp, bound in sorted(outside.items()):
        side = "past the log end" if offsets[tp] > bound else "before the log start"
        action = f"set to {bound} (--clamp)" if clamp else f"set as asked; add --clamp to set {bound} instead"
        out.error(f"Warning: {group} {tp.topic}:{tp.partition}: offset {offsets[tp]} is {side} {bound}: {action}.")
