"""``groups adopt`` (positions taken over from a Kafka group, a Spark checkpoint, a CSV file or an observed group) and the way back out.

An adoption is one ResetOffsets with a different offset per partition (``to_offsets``) and a
``source``: one transaction that bumps the generation (so nothing older can overwrite it) and
that the history records as CHANGE_KIND_ADOPT naming where the offsets came from. It is shown
first (the default is a dry run), each offset beside its partition's log start and end.

The way out (``groups export --format spark``, ``--to-kafka-group``) writes the store's offsets
where the other system reads them: Spark's ``startingOffsets`` JSON, or a Kafka group's
committed offsets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime

from offsetstore.cli import _broker, _offsets_file
from offsetstore.cli._errors import EXIT_ERROR, EXIT_OK, UsageError
from offsetstore.cli._group_state import known_ranges, selection_of, stored_offsets, topic_selection
from offsetstore.cli._offsets_file import OffsetsFileError, parse_plan_csv
from offsetstore.cli._render import Output, offset_cell, unknown_cell
from offsetstore.cli._spark_checkpoint import CheckpointError, read_checkpoint
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import GroupNotFoundError, OffsetStoreError
from offsetstore.core.types import EARLIEST, LATEST, TopicPartition, Watermark

Offsets = dict[TopicPartition, int]

#: The command's description in its --help.
ADOPT_HELP = (
    "Take a running pipeline's positions over without replay: the offsets a Kafka group committed, the "
    "offsets of a Spark checkpoint's last committed batch, or a kafka-consumer-groups CSV file. The dry run "
    "(the default) shows each offset beside its partition's log start and end (from --bootstrap-server, else "
    "the store's watermarks) and flags one before the start or past the end. --execute sets them all in one "
    "reset: the generation moves on (live writers of the group are fenced) and the history records the "
    "adoption (CHANGE_KIND_ADOPT) with its source (a file or checkpoint by its absolute path); with "
    "--bootstrap-server it also reports the log start and end it read to the store, as a watermark reporter "
    "does, so the group's status verdict is known at once. Partitions the source does not name keep their "
    "offsets. Stop the old consumer first; 'export' is the way back out."
)


def cmd_adopt(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    try:
        offsets, source = _read_source(client, args, out)
        offsets = _selected(offsets, topic_selection(args), source)
        ranges = known_ranges(client, args.group, sorted(offsets), args.bootstrap_server)
        if args.bootstrap_server and args.from_kafka_group and args.execute:
            members = _broker.group_members(args.bootstrap_server, args.from_kafka_group)
            if members:
                raise UsageError(
                    f"Kafka group {args.from_kafka_group} has {members} live member(s): stop its consumers first, "
                    "or they keep consuming (and committing to Kafka) after the adoption. A consumer that was "
                    "killed stays a member until its session times out (session.timeout.ms, 45 s by default): "
                    "run again then. Nothing changed"
                )
    except (UsageError, _broker.BrokerError, OffsetsFileError, CheckpointError) as error:
        out.error(f"Error: {error}")
        return EXIT_ERROR
    except OSError as error:
        out.error(f"Error: cannot read {error.filename}: {error.strerror or error}")
        return EXIT_ERROR
    notes = _range_notes(offsets, ranges)
    if args.clamp:
        offsets = {tp: notes[tp][0] if tp in notes else o for tp, o in offsets.items()}
    before = stored_offsets(client.fetch_offsets(args.group, selection_of(offsets)))
    result = client.reset_offsets(
        args.group,
        to_offsets=offsets,
        source=source,
        dry_run=not args.execute,
        expected_generation=args.expected_generation,
        # Without a broker the store's watermarks are the ranges, and the server clamps to them.
        clamp=args.clamp and not args.bootstrap_server,
    )
    reported = 0
    if args.bootstrap_server and not result.dry_run:
        reported = _report_log_ends(client, ranges, args.bootstrap_server, out)
    for o in result.out_of_range:
        # The store knows watermarks of partitions the group has no offset for yet.
        tp = TopicPartition(o.topic, o.partition)
        if tp not in notes:
            notes.update(_range_notes({tp: o.offset}, {tp: (o.bound, -1) if o.offset < o.bound else (-1, o.bound)}))
    rows = sorted(offsets.items())
    if out.json:
        out.document(
            {
                "group_id": args.group,
                "source": source,
                "generation": result.generation,
                "dry_run": result.dry_run,
                "watermarks_reported": reported,
                "offsets": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "previous_offset": before.get(tp),
                        "offset": off,
                        "log_start_offset": ranges.get(tp, (-1, -1))[0],
                        "log_end_offset": ranges.get(tp, (-1, -1))[1],
                        "note": notes.get(tp, (None, ""))[1],
                    }
                    for tp, off in rows
                ],
            }
        )
        return EXIT_OK
    out.line(f"Source: {source}")
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START", "LOG-END", "NOTE"),
        (
            (
                args.group,
                tp.topic,
                tp.partition,
                offset_cell(before.get(tp, -1), stored=tp in before),
                offset_cell(off, stored=True),
                unknown_cell(ranges.get(tp, (-1, -1))[0]),
                unknown_cell(ranges.get(tp, (-1, -1))[1]),
                notes.get(tp, (None, ""))[1],
            )
            for tp, off in rows
        ),
    )
    out.line()
    if not ranges or all(r == (-1, -1) for r in ranges.values()):
        out.line("No log start or end is known for these partitions: give --bootstrap-server to check them.")
    if notes and not args.clamp:
        out.line(f"{len(notes)} offset(s) lie outside the log (NOTE): add --clamp to set the nearer bound instead.")
    if result.dry_run:
        out.line(
            "Dry run: nothing changed. Run again with --execute to adopt; add "
            f"--expected-generation {result.generation} to adopt only if the group is still at this generation."
        )
    else:
        out.line(
            f"Adopted {len(rows)} offset(s): group {args.group} is now at generation {result.generation} (writers "
            f"of older generations are fenced); its history records the adoption from {source}."
        )
        if reported:
            out.line(
                f"Reported the log start and end of {reported} partition(s), read from {args.bootstrap_server}, "
                "to the store: the group's status verdict is known at once."
            )
    return EXIT_OK


def _report_log_ends(
    client: OffsetStoreClient, ranges: dict[TopicPartition, tuple[int, int]], bootstrap: str, out: Output
) -> int:
    """Hands the store the log ends just read from the broker, as a watermark reporter would; returns how many.

    Without them the group would read UNCONFIRMED "no log end known" until a reporter
    (or the server's own reader) came by, though the adoption had just seen them.
    """
    marks = [Watermark(tp.topic, tp.partition, low, high) for tp, (low, high) in sorted(ranges.items()) if high >= 0]
    if not marks:
        return 0
    try:
        client.report_watermarks(marks)
    except OffsetStoreError as error:
        # The adoption stands; only the verdict waits for a reporter.
        out.error(f"Note: the log ends read from {bootstrap} were not reported to the store: {error.message}")
        return 0
    return len(marks)


def _observed(client: OffsetStoreClient, group: str) -> tuple[Offsets, str]:
    """An observed group's last observed positions, and the words that name them in the history."""
    try:
        described = client.describe_group(group)
    except GroupNotFoundError:
        raise UsageError(f"group {group} does not exist: nothing observed to adopt") from None
    if not described.observed:
        raise UsageError(f"group {group} is not observed: its positions are committed here already")
    offsets = stored_offsets(client.fetch_offsets(group))
    if not offsets:
        raise UsageError(f"observed group {group} has no positions yet: nothing to adopt")
    return offsets, f"observed {described.observed_source}"


def _read_source(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> tuple[Offsets, str]:
    """The offsets the chosen source holds and the words that name it in the history."""
    if args.file_group is not None and not args.from_file:
        raise UsageError("--file-group picks a group's lines of a --from-file FILE: give --from-file too")
    if args.from_observed:
        return _observed(client, args.group)
    if args.from_kafka_group:
        if not args.bootstrap_server:
            raise UsageError("--from-kafka-group needs --bootstrap-server HOST:PORT, the Kafka cluster of the group")
        found = _broker.group_offsets(args.bootstrap_server, args.from_kafka_group)
        if not found:
            raise UsageError(
                f"Kafka group {args.from_kafka_group} has no committed offsets at {args.bootstrap_server}: "
                "nothing to adopt (is the group id right?)"
            )
        return found, f"kafka group {args.from_kafka_group} at {args.bootstrap_server}"
    if args.from_spark_checkpoint:
        checkpoint = read_checkpoint(args.from_spark_checkpoint)
        if checkpoint.in_flight is not None:
            out.error(
                f"Note: batch {checkpoint.in_flight} was planned but not committed (in flight when the job stopped): "
                f"adopting the end of batch {checkpoint.batch}, so its records are read again by the new job."
            )
        # The history outlives the shell it was typed in: the path as it was resolved then.
        where = os.path.abspath(args.from_spark_checkpoint)
        return checkpoint.offsets, f"spark checkpoint {where} batch {checkpoint.batch}"
    plans = _read_file(args.from_file)
    shown = "standard input" if args.from_file == "-" else os.path.abspath(args.from_file)
    if None in plans:
        if args.file_group is not None:
            raise UsageError(
                f"{args.from_file} has no group column (topic,partition,offset): --file-group is for a "
                "group,topic,partition,offset file"
            )
        return plans[None], f"file {shown}"
    # A group,topic,partition,offset file names Kafka's groups, which need not be called as the one adopting.
    wanted = args.file_group if args.file_group is not None else args.group
    if wanted not in plans:
        named = sorted(g for g in plans if g is not None)
        hint = ""
        if args.file_group is None:
            pick = named[0] if len(named) == 1 else "NAME"
            hint = f": add --file-group {pick} to adopt those lines into {args.group}"
        raise UsageError(f"{args.from_file} has no offsets of group {wanted} (it has {', '.join(named)}){hint}")
    return plans[wanted], f"file {shown} (group {wanted})"


def _read_file(path: str) -> dict[str | None, Offsets]:
    if path == "-":
        return parse_plan_csv(sys.stdin, "<stdin>")
    with open(path, encoding="utf-8-sig") as f:
        return parse_plan_csv(f, path)


def _selected(offsets: Offsets, selection: dict[str, list[int]] | None, source: str) -> Offsets:
    if selection is None:
        return offsets
    kept = {
        tp: o
        for tp, o in offsets.items()
        if tp.topic in selection and (not selection[tp.topic] or tp.partition in selection[tp.topic])
    }
    if not kept:
        raise UsageError(f"{source} has no offsets for the --topic selection")
    return kept


def _range_notes(
    offsets: Offsets, ranges: dict[TopicPartition, tuple[int, int]]
) -> dict[TopicPartition, tuple[int, str]]:
    """Each offset outside its known log range: (the bound it passed, what the table says)."""
    notes = {}
    for tp, offset in offsets.items():
        start, end = ranges.get(tp, (-1, -1))
        if offset < 0:
            continue
        if start >= 0 and offset < start:
            notes[tp] = (start, f"before the log start: {start - offset} record(s) deleted unread")
        elif end >= 0 and offset > end:
            notes[tp] = (end, f"past the log end by {offset - end}")
    return notes


# --- the way out ---------------------------------------------------------------------


def cmd_export(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    """``groups export``: CSV (kafka-consumer-groups'), Spark's startingOffsets, or a Kafka group's offsets."""
    if args.at is None and args.to_kafka_group is None and args.format == "csv":
        return _offsets_file.cmd_export(client, args, out)
    if args.at is not None:
        offsets = _positions_at(client, args.group, args.at)
        if not offsets:
            out.error(f"Error: group {args.group} had no offsets at {args.at.isoformat()}.")
            return EXIT_ERROR
    else:
        fetched = client.fetch_offsets(args.group)
        if not fetched.offsets and fetched.generation == 0:
            out.error(f"Error: group {args.group} does not exist.")
            return EXIT_ERROR
        offsets = {tp: o.offset for tp, o in fetched.offsets.items()}
    if args.to_kafka_group is not None:
        return _to_kafka_group(args, offsets, out)
    if args.format == "csv":  # kafka-consumer-groups' topic,partition,offset, as the plain export writes it
        text = "".join(f"{tp.topic},{tp.partition},{o}\n" for tp, o in sorted(offsets.items()))
    else:
        document: dict[str, dict[str, int]] = {}
        for tp, offset in sorted(offsets.items()):
            # Spark's startingOffsets takes -2 (earliest) and -1 (latest) as they are.
            document.setdefault(tp.topic, {})[str(tp.partition)] = offset
        text = json.dumps(document, separators=(",", ":")) + "\n"
    if args.file in (None, "-"):
        out.out.write(text)
        return EXIT_OK
    try:
        with open(args.file, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        out.error(f"Error: cannot write {args.file}: {e.strerror or e}")
        return EXIT_ERROR
    shape = "Spark startingOffsets" if args.format == "spark" else "CSV"
    out.error(f"Exported {len(offsets)} offset(s) of group {args.group} to {args.file} as {shape}.")
    return EXIT_OK


def _positions_at(client: OffsetStoreClient, group: str, at: datetime) -> Offsets:
    """The group's positions at ``at``, from its history: a dry-run reset to that commit time changes nothing.

    An observed group's history is its pipeline's (Spark batches, Kafka commits): the positions
    to restart it, or another pipeline, from that instant. A partition that had none then is -2
    (earliest), as the reset would store; an instant older than the kept history is refused.
    """
    preview = client.reset_offsets(group, all_topics=True, to_commit_time=at, dry_run=True)
    return {TopicPartition(c.topic, c.partition): c.new_offset for c in preview.changes}


def _to_kafka_group(args: argparse.Namespace, offsets: Offsets, out: Output) -> int:
    kafka_group = args.to_kafka_group
    try:
        if not args.bootstrap_server:
            raise UsageError("--to-kafka-group needs --bootstrap-server HOST:PORT, the Kafka cluster of the group")
        placeholders = [tp for tp, o in offsets.items() if o in (EARLIEST, LATEST)]
        # Kafka stores no placeholder: each resolves to the broker's log start or end now.
        marks = _broker.watermarks(args.bootstrap_server, placeholders) if placeholders else {}
        resolved = {tp: marks[tp][0 if o == EARLIEST else 1] if tp in marks else o for tp, o in offsets.items()}
        if args.execute:
            members = _broker.group_members(args.bootstrap_server, kafka_group)
            if members:
                raise UsageError(
                    f"Kafka group {kafka_group} has {members} live member(s): stop its consumers first (a killed "
                    "consumer stays a member until its session times out). Nothing changed"
                )
            _broker.set_group_offsets(args.bootstrap_server, kafka_group, resolved)
    except (UsageError, _broker.BrokerError) as error:
        out.error(f"Error: {error}")
        return EXIT_ERROR
    out.table(
        ("KAFKA-GROUP", "TOPIC", "PARTITION", "OFFSET"),
        ((kafka_group, tp.topic, tp.partition, o) for tp, o in sorted(resolved.items())),
    )
    out.line()
    if args.execute:
        out.line(f"Committed {len(resolved)} offset(s) as Kafka group {kafka_group} at {args.bootstrap_server}.")
    else:
        out.line(
            "Dry run: nothing changed. Run again with --execute to commit these as the Kafka group's offsets "
            "(the Kafka group must have no live members)."
        )
    return EXIT_OK
