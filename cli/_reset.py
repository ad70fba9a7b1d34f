"""``groups reset``: a selection of a group's offsets set to one target, as kafka-consumer-groups --reset-offsets."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from offsetstore.cli import _broker
from offsetstore.cli._errors import EXIT_ERROR, EXIT_OK, UsageError
from offsetstore.cli._group_state import (
    groups_of,
    known_ranges,
    out_of_range,
    selection_of,
    several,
    stored_offsets,
    topic_selection,
    warn_out_of_range,
)
from offsetstore.cli._render import (
    Output,
    change_json,
    offset_cell,
    offset_json,
    offsets_set_json,
    placeholder_name,
    table_time,
)
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import GroupNotFoundError
from offsetstore.core.types import EARLIEST, LATEST, NO_OFFSET, OffsetChange, ResetRequest, TopicPartition

#: A reset's plan: each selected partition's new offset (placeholders as their numbers).
Plan = list[tuple[TopicPartition, int]]


def cmd_reset(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    if args.export and out.json:
        out.error("Error: --export writes CSV: leave out --output json")
        return EXIT_ERROR
    shown = _ExportNotes(out) if args.export else out
    documents, plans = [], []
    try:
        if args.expected_generation is not None and (args.all_groups or several(args)):
            raise UsageError("--expected-generation is one group's generation: reset one group with it")
        selection = _selection(args)
        groups = groups_of(client, args)
        if not args.all_groups:
            for group in groups:  # before any change: a mistyped name among several stops them all
                _check_known(client, group, selection)
        for n, group in enumerate(groups):
            if n and not out.json:
                shown.line()
            document, plan = _reset_group(client, group, selection, args, shown)
            documents.append(document)
            plans.append((group, plan))
    except (UsageError, _broker.BrokerError) as error:
        out.error(f"Error: {error}")
        return EXIT_ERROR
    if args.export:
        out.out.write(_plan_csv(plans, with_group=several(args)))
    elif out.json:
        out.document(documents if several(args) else documents[0])
    elif args.all_groups and not documents:
        out.line("There are no groups.")
    return EXIT_OK


class _ExportNotes(Output):
    """Where ``reset --export`` shows what it says: the CSV alone on standard output, notes on standard error."""

    def __init__(self, out: Output) -> None:
        super().__init__("table", out.err, out.err)

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        pass  # the CSV is the table

    def line(self, text: str = "") -> None:
        if text:
            self.err.write(text + "\n")


def _plan_csv(plans: list[tuple[str, Plan]], *, with_group: bool) -> str:
    """kafka-consumer-groups' export: topic,partition,offset for one group, group first for several."""
    return "".join(
        f"{group},{tp.topic},{tp.partition},{offset}\n" if with_group else f"{tp.topic},{tp.partition},{offset}\n"
        for group, plan in plans
        for tp, offset in plan
    )


def _selection(args: argparse.Namespace) -> dict[str, list[int]] | None:
    selection = topic_selection(args)
    if args.bootstrap_server and selection is not None and any(not parts for parts in selection.values()):
        # kafka-consumer-groups: a whole topic is every partition the broker has.
        whole = [t for t, parts in selection.items() if not parts]
        selection = _broker.expand(selection, _broker.topic_partitions(args.bootstrap_server, whole))
    return selection


def _check_known(client: OffsetStoreClient, group: str, selection: dict[str, list[int]] | None) -> None:
    if not stored_offsets(client.fetch_offsets(group, selection)) and not _exists(client, group):
        _refuse_unknown(group, selection)


def _reset_target(args: argparse.Namespace, group: str) -> ResetRequest:
    """The reset the options ask of `group`, but for its topics; a time target resolves to an instant now."""
    request = ResetRequest(
        group, all_topics=args.all_topics, dry_run=not args.execute, expected_generation=args.expected_generation
    )
    if args.to_offset is not None:
        return replace(request, to_offset=args.to_offset)
    if args.shift_by is not None:
        return replace(request, shift_by=args.shift_by)
    if args.to_current:
        # Every offset shifted by nothing: it stays, and the applied reset fences live writers.
        return replace(request, shift_by=0)
    if args.to_boundary is not None:
        return replace(request, to_boundary=args.to_boundary)
    instant = args.to_datetime
    if instant is None:
        # Resolved now, not at parse time, so the instant is as close as can be to the call.
        instant = datetime.now(UTC) - args.by_duration
    return replace(request, to_commit_time=instant)


def _reset_group(
    client: OffsetStoreClient,
    group: str,
    selection: dict[str, list[int]] | None,
    args: argparse.Namespace,
    out: Output,
) -> tuple[dict | None, Plan]:
    """Resets one group as the options say; returns its JSON document (None in table mode) and its plan."""
    target = _reset_target(args, group)
    instant = target.to_commit_time
    fetched = client.fetch_offsets(group, selection)
    # Read first only to name placeholders: a -1 that was stored is the latest one, not "none".
    before = stored_offsets(fetched)
    existed = _exists(client, group)
    per_partition = _per_partition_target(client, group, args, selection, before, instant, out)
    if per_partition is not None:
        return _reset_each(client, group, args, out, before, per_partition, existed, fetched.generation, instant)
    # Without a broker the server knows the log ranges (the store's watermarks): it warns and
    # clamps. With one, the broker's ranges were checked above and the server is not asked to.
    server_ranges = not args.bootstrap_server
    result = client.reset_offsets(
        group, **replace(target, topics=selection, clamp=args.clamp and server_ranges).keywords()
    )
    if server_ranges:
        asked = {TopicPartition(o.topic, o.partition): o.offset for o in result.out_of_range}
        bounds = {TopicPartition(o.topic, o.partition): o.bound for o in result.out_of_range}
        warn_out_of_range(out, group, bounds, asked, args.clamp)
    changes = sorted(result.changes, key=lambda c: (c.topic, c.partition))
    # A shift moves from an offset; a placeholder with no known watermark has none, and keeps it.
    changed = {TopicPartition(c.topic, c.partition) for c in changes}
    kept = sorted(
        (tp, off)
        for tp, off in before.items()
        if target.shift_by is not None and tp not in changed and off in (EARLIEST, LATEST)
    )

    plan = sorted([*((TopicPartition(c.topic, c.partition), c.new_offset) for c in changes), *kept])

    def previous_stored(c: OffsetChange) -> bool:
        return TopicPartition(c.topic, c.partition) in before

    if out.json:
        return {
            "group_id": group,
            "generation": result.generation,
            "dry_run": result.dry_run,
            "group_existed": existed,
            "out_of_range": [
                {"topic": o.topic, "partition": o.partition, "offset": o.offset, "bound": o.bound, "clamped": o.clamped}
                for o in result.out_of_range
            ],
            # A reset never deletes: a new -1 is the latest placeholder.
            "changes": [change_json(c, previous_stored=previous_stored(c), new_stored=True) for c in changes],
            "kept_placeholders": [
                {"topic": tp.topic, "partition": tp.partition, **offset_json("offset", off, stored=True)}
                for tp, off in kept
            ],
        }, plan
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"),
        (
            (
                group,
                c.topic,
                c.partition,
                offset_cell(c.previous_offset, stored=previous_stored(c)),
                offset_cell(c.new_offset, stored=True),
            )
            for c in changes
        ),
    )
    out.line()
    if instant is not None:
        out.line(f"Target: the offsets the group had committed at {table_time(instant)}.")
    for tp, off in kept:
        name = placeholder_name(off, stored=True)
        end = "start" if off == EARLIEST else "end"
        hint = "" if args.to_current else " Give it an offset with --to-offset."
        out.line(
            f"{tp.topic}:{tp.partition} holds the {name} placeholder and no log {end} is known, so there is "
            f"nothing to shift from: it stays {name}.{hint}"
        )
    if not changes and not kept:
        out.line(f"No partition selected: group {group} has no offsets for that selection.")
    _applied_line(out, group, result.dry_run, existed, result.generation, bool(changes))
    return None, plan


def _refuse_unknown(group: str, selection: dict[str, list[int]] | None) -> None:
    """A group that does not exist is reset only where the command names its partitions.

    As with kafka-consumer-groups, a reset of an unknown group with its topic's partitions
    creates it (pre-positioning a consumer before its first start); a mistyped name with
    ``--all-topics`` or a bare topic is far likelier than that intent, so it is said first.
    """
    if selection is not None and all(selection.values()):
        return
    hint = (
        "--all-topics selects the topics it has"
        if selection is None
        else "the store does not know a topic's partitions"
    )
    raise UsageError(
        f"group {group} does not exist ({hint}); `offsetstore groups list` shows the groups that do. "
        "To create it with these offsets, name its partitions (--topic TOPIC:0,1,2) or give "
        "--bootstrap-server to ask the broker for them"
    )


def _applied_line(out: Output, group: str, dry_run: bool, existed: bool, generation: int, changed: bool) -> None:
    if dry_run and not existed and changed:
        out.line(f"Group {group} does not exist: --execute creates it with these offsets. Dry run: nothing changed.")
    elif dry_run:
        out.line(
            "Dry run: nothing changed. Run again with --execute to apply; add "
            f"--expected-generation {generation} to apply only if the group is still at this generation."
        )
    elif not existed and changed:
        out.line(f"Created group {group} at generation {generation} with these offsets.")
    elif changed or existed:
        out.line(f"Applied: group {group} is now at generation {generation}; writers of older generations are fenced.")


def _exists(client: OffsetStoreClient, group: str) -> bool:
    """Whether the group is live (DescribeGroup finds it), with or without offsets."""
    try:
        client.describe_group(group)
    except GroupNotFoundError:
        return False
    return True


def _selected_partitions(
    selection: dict[str, list[int]] | None, before: dict[TopicPartition, int]
) -> list[TopicPartition]:
    """What a reset of `selection` touches: the named partitions and the group's in whole topics."""
    chosen = set(before)
    for topic, parts in (selection or {}).items():
        chosen.update(TopicPartition(topic, p) for p in parts)
    return sorted(chosen)


def _per_partition_target(
    client: OffsetStoreClient,
    group: str,
    args: argparse.Namespace,
    selection: dict[str, list[int]] | None,
    before: dict[TopicPartition, int],
    instant: datetime | None,
    out: Output,
) -> dict[TopicPartition, int] | None:
    """The offsets per partition where a target is not one number for all, else None (one ResetOffsets)."""
    if args.bootstrap_server and instant is not None:
        partitions = _selected_partitions(selection, before)
        return _broker.offsets_for_times(args.bootstrap_server, partitions, instant)
    if args.to_offset is None or not args.bootstrap_server:
        return None  # one ResetOffsets; the server says (and with --clamp sets) what lies outside the log
    partitions = _selected_partitions(selection, before)
    wanted = dict.fromkeys(partitions, args.to_offset)
    outside = out_of_range(wanted, known_ranges(client, group, partitions, args.bootstrap_server))
    warn_out_of_range(out, group, outside, wanted, args.clamp)
    if not (args.clamp and outside):
        return None
    return {**wanted, **outside}


def _set_offsets(client: OffsetStoreClient, group: str, new: dict[TopicPartition, int], expected: int | None) -> int:
    """Sets a different offset per partition in one reset (``to_offsets``); returns the generation after.

    The reset fences live writers, counts as a reset (a Spark query derives a fresh checkpoint
    from it) and is recorded as one, never as a consumer's commit.
    """
    return client.reset_offsets(group, to_offsets=new, expected_generation=expected).generation


def _reset_each(
    client: OffsetStoreClient,
    group: str,
    args: argparse.Namespace,
    out: Output,
    before: dict[TopicPartition, int],
    new: dict[TopicPartition, int],
    existed: bool,
    generation_before: int,
    instant: datetime | None,
) -> tuple[dict | None, Plan]:
    rows = sorted((tp, before.get(tp, NO_OFFSET), offset) for tp, offset in new.items())
    plan = [(tp, offset) for tp, _, offset in rows]
    if args.expected_generation is not None and not args.execute:
        # This plan is the CLI's own; the server still says whether the group is at that generation.
        client.reset_offsets(
            group,
            topics=selection_of(new) or None,
            all_topics=not new,
            shift_by=0,
            dry_run=True,
            expected_generation=args.expected_generation,
        )
    generation = (
        _set_offsets(client, group, new, args.expected_generation) if args.execute and new else generation_before
    )
    if out.json:
        return {
            "group_id": group,
            "generation": generation,
            "dry_run": not args.execute,
            "group_existed": existed,
            "changes": offsets_set_json(rows, previous_stored=before),
        }, plan
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"),
        ((group, tp.topic, tp.partition, offset_cell(old, stored=tp in before), off) for tp, old, off in rows),
    )
    out.line()
    if instant is not None:
        out.line(
            f"Target: each partition's first record with a timestamp at or after {table_time(instant)}, "
            f"from the broker at {args.bootstrap_server} (the log end where none is that recent)."
        )
    if not rows:
        out.line(f"No partition selected: group {group} has no offsets for that selection.")
    _applied_line(out, group, not args.execute, existed, generation, bool(rows))
    return None, plan
