"""``groups export`` and ``groups import``: a group's offsets as kafka-consumer-groups' topic,partition,offset file."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from offsetstore.cli._errors import EXIT_ERROR, EXIT_OK, UsageError
from offsetstore.cli._group_state import known_ranges, out_of_range, selection_of, stored_offsets, warn_out_of_range
from offsetstore.cli._render import Output, offset_cell, offset_json, offsets_set_json
from offsetstore.cli._values import DIGITS_RULE, INT32_MAX, INT64_MAX, TOPIC, ascii_int
from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import EARLIEST, LATEST, NO_OFFSET, TopicPartition

_CSV_HEADER = ("topic", "partition", "offset")
_CSV_GROUP_HEADER = ("group", *_CSV_HEADER)
_OFFSET_RULE = "must be an integer >= 0, or -2 (earliest) or -1 (latest)"


class OffsetsFileError(ValueError):
    """An offsets file that cannot be imported; ``problems`` are (line number, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[int, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: line {n}: {message}" if n else f"{source}: {message}" for n, message in problems]
        super().__init__("\n".join(lines))


def parse_offsets_csv(lines: Iterable[str], source: str = "<input>") -> dict[TopicPartition, int]:
    """The ``topic,partition,offset`` lines of kafka-consumer-groups' export, in file order.

    Blank lines are skipped and a ``topic,partition,offset`` header is tolerated as the first
    line. Every problem of the file is reported with its line number, and any problem rejects
    the whole file, so that nothing is imported from a file that is partly wrong.
    """
    return _parse_csv(lines, source, grouped=False)[None]


def parse_plan_csv(lines: Iterable[str], source: str = "<input>") -> dict[str | None, dict[TopicPartition, int]]:
    """Either of kafka-consumer-groups' files: ``topic,partition,offset`` (one group, keyed None) or
    ``group,topic,partition,offset`` (several, keyed by group, which its ``--export`` of several
    groups writes). The first line with offsets decides which; the rules are parse_offsets_csv's."""
    rows = list(lines)
    first = next((_fields(line) for line in rows if line.strip() and not _is_header(_fields(line))), [])
    return _parse_csv(rows, source, grouped=len(first) == len(_CSV_GROUP_HEADER))


def _fields(line: str) -> list[str]:
    return [f.strip() for f in line.strip().split(",")]


def _is_header(fields: list[str]) -> bool:
    return tuple(f.lower() for f in fields) in (_CSV_HEADER, _CSV_GROUP_HEADER)


def _parse_csv(lines: Iterable[str], source: str, *, grouped: bool) -> dict[str | None, dict[TopicPartition, int]]:
    plans: dict[str | None, dict[TopicPartition, int]] = {}
    seen_on: dict[tuple[str | None, TopicPartition], int] = {}
    problems: list[tuple[int, str]] = []
    expected = ",".join(_CSV_GROUP_HEADER if grouped else _CSV_HEADER)
    first = True
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        fields = _fields(line)
        if first and _is_header(fields):
            first = False
            continue
        first = False
        if len(fields) != len(expected.split(",")):
            problems.append((number, f"expected {expected}, got {line!r}"))
            continue
        group = fields.pop(0) if grouped else None
        if group == "":
            problems.append((number, "the group is empty"))
            continue
        topic, partition_text, offset_text = fields
        if not TOPIC.fullmatch(topic):
            problems.append((number, f"invalid topic {topic!r}"))
            continue
        if not partition_text.isascii() or not partition_text.isdigit() or int(partition_text) > INT32_MAX:
            problems.append((number, f"invalid partition {partition_text!r}: must be an integer >= 0"))
            continue
        offset = ascii_int(offset_text)
        if offset is None:
            problems.append((number, f"invalid offset {offset_text!r}: {_OFFSET_RULE}; {DIGITS_RULE}"))
            continue
        if offset not in (EARLIEST, LATEST) and not 0 <= offset <= INT64_MAX:
            problems.append((number, f"invalid offset {offset_text!r}: {_OFFSET_RULE}"))
            continue
        tp = TopicPartition(topic, int(partition_text))
        if (group, tp) in seen_on:
            owner = "" if group is None else f"{group} "
            problems.append((number, f"{owner}{tp.topic}:{tp.partition} already given on line {seen_on[group, tp]}"))
            continue
        seen_on[group, tp] = number
        plans.setdefault(group, {})[tp] = offset
    if not problems and not plans:
        problems.append((0, "no offsets to import"))
    if problems:
        raise OffsetsFileError(source, problems)
    return plans


def cmd_export(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    fetched = client.fetch_offsets(args.group)
    if not fetched.offsets and fetched.generation == 0:
        out.error(f"Error: group {args.group} does not exist.")
        return EXIT_ERROR
    rows = sorted((tp.topic, tp.partition, o.offset) for tp, o in fetched.offsets.items())
    if out.json:
        document = [{"topic": t, "partition": p, **offset_json("offset", o, stored=True)} for t, p, o in rows]
        text = json.dumps(document, indent=2) + "\n"
    else:
        text = "".join(f"{t},{p},{o}\n" for t, p, o in rows)
    if args.file in (None, "-"):
        out.out.write(text)
        return EXIT_OK
    try:
        with open(args.file, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as e:
        out.error(f"Error: cannot write {args.file}: {e.strerror or e}")
        return EXIT_ERROR
    out.error(f"Exported {len(rows)} offset(s) of group {args.group} to {args.file}.")
    return EXIT_OK


def _read_offsets_file(path: str) -> dict[str | None, dict[TopicPartition, int]]:
    if path == "-":
        return parse_plan_csv(sys.stdin, "<stdin>")
    # utf-8-sig: a file saved by a spreadsheet may start with a byte order mark.
    with open(path, encoding="utf-8-sig") as f:
        return parse_plan_csv(f, path)


def cmd_import(client: OffsetStoreClient, args: argparse.Namespace, out: Output) -> int:
    try:
        plans = _read_offsets_file(args.file)
        targets = _import_targets(plans, args.group, args.file, out)
    except OffsetsFileError as e:
        out.error(f"Error: {e}\nNothing was imported.")
        return EXIT_ERROR
    except UsageError as e:
        out.error(f"Error: {e}")
        return EXIT_ERROR
    except OSError as e:
        out.error(f"Error: cannot read {args.file}: {e.strerror or e}")
        return EXIT_ERROR
    except UnicodeDecodeError as e:
        out.error(f"Error: {args.file} is not UTF-8 text: {e.reason}")
        return EXIT_ERROR
    documents = []
    for n, (group, new) in enumerate(targets.items()):
        if n and not out.json:
            out.line()
        documents.append(_import_group(client, group, new, args, out))
    if out.json:
        out.document(documents if args.group is None else documents[0])
    return EXIT_OK


def _import_targets(
    plans: dict[str | None, dict[TopicPartition, int]], group: str | None, source: str, out: Output
) -> dict[str, dict[TopicPartition, int]]:
    """Which group gets which offsets: GROUP gets a one-group file, or its own lines of a file of several."""
    if None in plans:
        if group is None:
            raise UsageError(
                f"{source} has no group column (topic,partition,offset): name the group, import GROUP FILE"
            )
        return {group: plans[None]}
    named = {g: offsets for g, offsets in plans.items() if g is not None}
    if group is None:
        return named
    if group not in named:
        raise UsageError(f"{source} has no offsets of group {group} (it has {', '.join(sorted(named))})")
    others = len(named) - 1
    if others:
        out.error(
            f"Importing the lines of group {group} only; {others} other group(s) in {source} are left as they are."
        )
    return {group: named[group]}


def _import_group(
    client: OffsetStoreClient, group: str, new: dict[TopicPartition, int], args: argparse.Namespace, out: Output
) -> dict | None:
    outside = out_of_range(new, known_ranges(client, group, list(new), None))
    warn_out_of_range(out, group, outside, new, args.clamp)
    if args.clamp:
        new = {**new, **outside}
    before = client.fetch_offsets(group, selection_of(new))
    stored = stored_offsets(before)
    previous = {tp: stored.get(tp, NO_OFFSET) for tp in new}
    generation = _apply_import(client, group, new) if args.execute else before.generation
    rows = sorted((tp, previous[tp], offset) for tp, offset in new.items())
    if out.json:
        return {
            "group_id": group,
            "generation": generation,
            "dry_run": not args.execute,
            "changes": offsets_set_json(rows, previous_stored=stored),
        }
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"),
        (
            (group, tp.topic, tp.partition, offset_cell(old, stored=tp in stored), offset_cell(off, stored=True))
            for tp, old, off in rows
        ),
    )
    out.line()
    if args.execute:
        out.line(
            f"Applied: imported {len(rows)} offset(s); group {group} is now at generation {generation}; "
            "writers of older generations are fenced."
        )
    else:
        out.line("Dry run: nothing changed. Run again with --execute to apply.")
    return None


def import_operands(args: argparse.Namespace) -> tuple[str | None, str]:
    """(group, file) of ``import GROUP FILE``, of the older ``import FILE --group GROUP``, or of
    ``import FILE`` (None: the file names its groups, group,topic,partition,offset)."""
    operands = args.operands
    if len(operands) == 2 and args.group is None:
        return operands[0], operands[1]
    if len(operands) == 1:
        return args.group, operands[0]
    raise UsageError("write: offsetstore groups import GROUP FILE (FILE - reads standard input)")


def _apply_import(client: OffsetStoreClient, group_id: str, new: dict[TopicPartition, int]) -> int:
    """Sets the offsets of `new` in one reset; returns the group's generation after.

    One ResetOffsets with a different offset per partition: placeholders resolve as a reset
    to that end does, the generation moves on (a live fenced writer cannot overwrite the
    imported offsets), and the history records an operator's reset, which the status
    verdict never mistakes for a consumer's commit.
    """
    return client.reset_offsets(group_id, to_offsets=new).generation
