"""The ``offsetstore groups`` commands: kafka-consumer-groups' experience over the gRPC client.

``offsetstore.cli.main`` mounts them with `configure_parser` and `run`; ``python -m
offsetstore.cli.groups list ...`` runs them on their own (the same commands without the
leading ``groups``). They talk to the server only through `OffsetStoreClient`.

Exit codes: 0 success, 1 an error (from the server, the connection or an input file),
2 a usage error (argparse's own code).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import grpc
from grpc_status import rpc_status

from offsetstore.cli import _broker
from offsetstore.client._sync import OffsetStoreClient
from offsetstore.core.durations import format_duration, parse_duration
from offsetstore.core.errors import (
    DeadlineExceededError,
    GroupNotFoundError,
    InvalidArgumentError,
    OffsetMismatchError,
    OffsetStoreError,
    PermissionDeniedError,
    StaleGenerationError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from offsetstore.core.types import (
    EARLIEST,
    LATEST,
    NO_OFFSET,
    Boundary,
    ChangeKind,
    ExpiredGroup,
    FetchResult,
    GroupDescription,
    OffsetChange,
    TopicPartition,
)

__all__ = ["configure_parser", "main", "run"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

SERVER_ENV = "OFFSETSTORE_SERVER"
TOKEN_ENV = "OFFSETSTORE_TOKEN"
DEFAULT_PORT = 50051
DEFAULT_SERVER = f"127.0.0.1:{DEFAULT_PORT}"
IMPORT_MEMBER_ID = "offsetstore-cli-import"
RESET_MEMBER_ID = "offsetstore-cli-reset"

# The server caps a page at its own maximum; asking for more only saves round trips.
_HISTORY_PAGE = 1000

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_CSV_HEADER = ("topic", "partition", "offset")
_OFFSET_RULE = "must be an integer >= 0, or -2 (earliest) or -1 (latest)"
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1

# java.time.Duration.parse's PnDTnHnMn.nS, which kafka-consumer-groups --by-duration takes.
_ISO_DURATION = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE,
)
# Lower case only: "1M" could be read as a month.
_SHORT_DURATION = re.compile(r"(?:(?P<days>\d+)d)?(?:(?P<hours>\d+)h)?(?:(?P<minutes>\d+)m)?(?:(?P<seconds>\d+)s)?")


# --- parsing of option values ---------------------------------------------------------
#
# Each raises argparse.ArgumentTypeError, so argparse reports a bad value as a usage error.


def _parse_topic_spec(spec: str) -> tuple[str, tuple[int, ...]]:
    """``orders`` -> ("orders", ()) (the whole topic); ``orders:0,1`` -> ("orders", (0, 1))."""
    topic, colon, parts = spec.partition(":")
    if not _TOPIC.fullmatch(topic):
        raise argparse.ArgumentTypeError(
            f"invalid topic {spec!r}: a topic is 1 to 249 of the characters A-Z a-z 0-9 . _ - "
            "(write TOPIC or TOPIC:P,P,...)"
        )
    if not colon:
        return topic, ()
    partitions: set[int] = set()
    for item in parts.split(","):
        item = item.strip()
        if not item.isascii() or not item.isdigit() or int(item) > _INT32_MAX:
            raise argparse.ArgumentTypeError(
                f"invalid partition {item!r} in {spec!r}: partitions are integers >= 0 (write TOPIC:0,1,2)"
            )
        partitions.add(int(item))
    return topic, tuple(sorted(partitions))


def _merge_topic_specs(specs: Iterable[tuple[str, tuple[int, ...]]]) -> dict[str, list[int]]:
    """The client's topic selection of repeated --topic options; an empty list is the whole topic."""
    whole: set[str] = set()
    merged: dict[str, set[int]] = {}
    for topic, partitions in specs:
        merged.setdefault(topic, set()).update(partitions)
        if not partitions:
            whole.add(topic)
    # A whole topic wins over some of its partitions: the operator asked for all of them.
    return {topic: [] if topic in whole else sorted(parts) for topic, parts in merged.items()}


def _parse_duration(text: str) -> timedelta:
    """A duration as kafka writes it (``PT1H30M``, ``P1D``) or shortly (``90s``, ``15m``, ``2h``, ``1d``)."""
    value = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        # "7" could be seconds or days; a reset that goes back the wrong amount is costly.
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: give a unit, e.g. {value}s, {value}m, {value}h, {value}d or PT{value}S"
        )
    match = _ISO_DURATION.fullmatch(value) or _SHORT_DURATION.fullmatch(value)
    parts = match.groupdict() if match else {}
    # Both patterns match strings with no number at all ("", "P", "PT"); so does "P1DT".
    if not any(parts.values()) or value.upper().endswith("T"):
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: write PnDTnHnMnS (e.g. PT1H30M, P1D) or 90s, 15m, 2h, 1d"
        )
    try:
        duration = timedelta(
            days=int(parts["days"] or 0),
            hours=int(parts["hours"] or 0),
            minutes=int(parts["minutes"] or 0),
            seconds=float((parts["seconds"] or "0").replace(",", ".")),
        )
        datetime.now(UTC) - duration
    except OverflowError:
        raise argparse.ArgumentTypeError(f"duration {text!r} is too long") from None
    return duration


def _parse_idle_for(text: str) -> timedelta:
    """An idle time above zero: ``90s``, ``15m``, ``12h``, ``7d`` or plain seconds."""
    try:
        value = parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"invalid idle time {text!r}: must be above zero")
    return value


def _parse_datetime(text: str) -> datetime:
    """An ISO 8601 instant as kafka-consumer-groups takes it; without a UTC offset it is UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid date-time {text!r}: write ISO 8601, e.g. 2024-01-31T10:00:00.000, "
            "2024-01-31T10:00:00Z or 2024-01-31T12:00:00+02:00 (no offset means UTC)"
        ) from None
    if value.tzinfo is None:
        # kafka-consumer-groups reads a time without an offset as UTC; so do we.
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if not 0 <= value <= _INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def _int64(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text} is out of range")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


# --- the import file ------------------------------------------------------------------


class _OffsetsFileError(ValueError):
    """An offsets file that cannot be imported; ``problems`` are (line number, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[int, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: line {n}: {message}" if n else f"{source}: {message}" for n, message in problems]
        super().__init__("\n".join(lines))


def _parse_offsets_csv(lines: Iterable[str], source: str = "<input>") -> dict[TopicPartition, int]:
    """The ``topic,partition,offset`` lines of kafka-consumer-groups' export, in file order.

    Blank lines are skipped and a ``topic,partition,offset`` header is tolerated as the first
    line. Every problem of the file is reported with its line number, and any problem rejects
    the whole file, so that nothing is imported from a file that is partly wrong.
    """
    offsets: dict[TopicPartition, int] = {}
    seen_on: dict[TopicPartition, int] = {}
    problems: list[tuple[int, str]] = []
    first = True
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if first and tuple(f.lower() for f in fields) == _CSV_HEADER:
            first = False
            continue
        first = False
        if len(fields) != 3:
            problems.append((number, f"expected topic,partition,offset, got {line!r}"))
            continue
        topic, partition_text, offset_text = fields
        if not _TOPIC.fullmatch(topic):
            problems.append((number, f"invalid topic {topic!r}"))
            continue
        if not partition_text.isascii() or not partition_text.isdigit() or int(partition_text) > _INT32_MAX:
            problems.append((number, f"invalid partition {partition_text!r}: must be an integer >= 0"))
            continue
        try:
            offset = int(offset_text)
        except ValueError:
            problems.append((number, f"invalid offset {offset_text!r}: {_OFFSET_RULE}"))
            continue
        if offset not in (EARLIEST, LATEST) and not 0 <= offset <= _INT64_MAX:
            problems.append((number, f"invalid offset {offset_text!r}: {_OFFSET_RULE}"))
            continue
        tp = TopicPartition(topic, int(partition_text))
        if tp in seen_on:
            problems.append((number, f"{tp.topic}:{tp.partition} already given on line {seen_on[tp]}"))
            continue
        seen_on[tp] = number
        offsets[tp] = offset
    if not problems and not offsets:
        problems.append((0, "no offsets to import"))
    if problems:
        raise _OffsetsFileError(source, problems)
    return offsets


# --- output ---------------------------------------------------------------------------


def _format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart, headers first, as kafka-consumer-groups prints them."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _table_time(value: datetime | None) -> str:
    """Milliseconds in UTC, the form --to-datetime takes back."""
    if value is None:
        return "-"
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _json_time(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _placeholder(value: int, *, stored: bool) -> str | None:
    """The name of a placeholder offset, None for a real one.

    -2 is always the earliest placeholder. -1 is the latest placeholder where it is a stored
    offset, but "no offset" where the contract uses it for none (changes, fetches).
    """
    if value == EARLIEST:
        return "earliest"
    if value == LATEST and stored:
        return "latest"
    return None


def _offset_cell(value: int, *, stored: bool = False) -> str:
    """An offset for a table: a placeholder by its name, "no offset" as -, else the number."""
    name = _placeholder(value, stored=stored)
    if name is not None:
        return name
    return "-" if value == NO_OFFSET else str(value)


def _offset_json(key: str, value: int, *, stored: bool) -> dict[str, Any]:
    """``{key: value, key_placeholder: name}``: JSON keeps the number and names a placeholder."""
    return {key: value, f"{key}_placeholder": _placeholder(value, stored=stored)}


def _unknown_cell(value: int) -> str:
    return "-" if value == -1 else str(value)


def _text_cell(value: str) -> str:
    # Metadata is free text; a newline or tab in it would break the table's rows.
    if not value:
        return "-"
    return value.encode("unicode_escape").decode("ascii") if not value.isprintable() else value


def _change_json(change: OffsetChange, *, previous_stored: bool, new_stored: bool) -> dict[str, Any]:
    return {
        "topic": change.topic,
        "partition": change.partition,
        **_offset_json("previous_offset", change.previous_offset, stored=previous_stored),
        **_offset_json("new_offset", change.new_offset, stored=new_stored),
        "kind": f"CHANGE_KIND_{_kind_name(change.kind)}",
        "generation": change.generation,
        "change_time": _json_time(change.change_time),
        "actor": change.actor,
    }


class _Output:
    """Where a command writes: its result to ``out``, notes and errors to ``err``."""

    def __init__(self, fmt: str, out: TextIO, err: TextIO) -> None:
        self.json = fmt == "json"
        self.out = out
        self.err = err

    def document(self, value: object) -> None:
        self.out.write(json.dumps(value, indent=2) + "\n")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.out.write(_format_table(headers, rows) + "\n")

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, text: str) -> None:
        self.err.write(text + "\n")


# --- the commands ---------------------------------------------------------------------


def _expired_rows(groups: Sequence[ExpiredGroup], out: _Output) -> list[dict[str, Any]] | None:
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
                "last_active_time": _json_time(g.last_active_time),
            }
            for g in groups
        ]
    out.table(
        ("GROUP", "GENERATION", "PARTITIONS", "LAST-ACTIVE", "IDLE"),
        ((g.group_id, g.generation, g.partition_count, _table_time(g.last_active_time), idle(g)) for g in groups),
    )
    return None


def _cmd_list(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
    if args.idle_for is not None:
        # What expiry would take: a preview of ExpireGroups, which needs admin on the prefix.
        rows = _expired_rows(client.expire_groups(args.idle_for, prefix=args.prefix), out)
        if rows is not None:
            out.document(rows)
        return EXIT_OK
    groups = list(client.iter_groups(args.prefix))
    if out.json:
        out.document(
            [
                {
                    "group_id": g.group_id,
                    "generation": g.generation,
                    "partition_count": g.partition_count,
                    "last_commit_time": _json_time(g.last_commit_time),
                    "total_lag": g.total_lag,
                }
                for g in groups
            ]
        )
        return EXIT_OK
    out.table(
        ("GROUP", "GENERATION", "PARTITIONS", "LAST-COMMIT", "TOTAL-LAG"),
        (
            (g.group_id, g.generation, g.partition_count, _table_time(g.last_commit_time), _unknown_cell(g.total_lag))
            for g in groups
        ),
    )
    return EXIT_OK


def _cmd_expire(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
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


def _describe_json(group: GroupDescription) -> dict[str, Any]:
    return {
        "group_id": group.group_id,
        "generation": group.generation,
        # kafka-consumer-groups' CONSUMER-ID and HOST: the member and peer of the latest JoinGroup.
        "member_id": group.member_id,
        "member_host": group.member_host,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                **_offset_json("offset", p.offset, stored=True),
                "metadata": p.metadata,
                "commit_time": _json_time(p.commit_time),
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "lag": p.lag,
                "offset_past_log_end": p.offset_past_log_end,
                "lag_seconds": p.lag_seconds,
                "lag_seconds_status": p.lag_seconds_status.name,
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
    return [
        f"Warning: {group.group_id} {p.topic}:{p.partition}: offset {p.offset} is past the log end "
        f"{p.log_end_offset}; its lag is not 0 but unknown, and nothing is read until the log reaches it. "
        "An offset from another topic or cluster, or a log recreated since? "
        f"Fix it with: offsetstore groups reset {group.group_id} --topic {p.topic}:{p.partition} "
        "--to-latest (or --to-offset N) --execute"
        for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))
        if p.offset_past_log_end
    ]


def _cmd_describe(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
    if args.all_groups:
        groups: list[GroupDescription] = []
        for summary in client.iter_groups():
            try:
                groups.append(client.describe_group(summary.group_id))
            except GroupNotFoundError:
                continue  # deleted since it was listed
    else:
        groups = [client.describe_group(args.group)]
    if args.members:
        return _describe_members(groups, args, out)
    if args.state:
        return _describe_state(groups, args, out)
    if out.json:
        documents = [_describe_json(g) for g in groups]
        out.document(documents if args.all_groups else documents[0])
        return EXIT_OK
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
            # Last: scripts read the columns before it by position.
            "LAG-SECONDS",
        ),
        (
            (
                group.group_id,
                p.topic,
                p.partition,
                _offset_cell(p.offset, stored=True),
                _unknown_cell(p.log_end_offset),
                "-" if p.offset_past_log_end else _unknown_cell(p.lag),
                _text_cell(group.member_id),
                _text_cell(group.member_host),
                _text_cell(p.metadata),
                _table_time(p.commit_time),
                "-" if p.lag_seconds < 0 else f"{p.lag_seconds:.1f}",
            )
            for group in groups
            for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))
        ),
    )
    empty = [g for g in groups if not g.partitions]
    if empty or not groups:
        out.line()
    for group in empty:
        out.line(f"Group {group.group_id} has no offsets (generation {group.generation}).")
    if not groups:
        out.line("There are no groups.")
    for group in groups:
        for warning in _past_end_warnings(group):
            out.error(warning)
    return EXIT_OK


def _describe_members(groups: list[GroupDescription], args: argparse.Namespace, out: _Output) -> int:
    # The store knows the latest JoinGroup of a group, not every live member as a Kafka coordinator does.
    rows = [
        {
            "group_id": g.group_id,
            "member_id": g.member_id,
            "member_host": g.member_host,
            "generation": g.generation,
            "last_active_time": _json_time(_last_active(g)),
            "partition_count": len(g.partitions),
        }
        for g in groups
    ]
    if out.json:
        out.document(rows if args.all_groups else rows[0])
        return EXIT_OK
    out.table(
        ("GROUP", "CONSUMER-ID", "HOST", "GENERATION", "LAST-ACTIVE", "#PARTITIONS"),
        (
            (
                g.group_id,
                _text_cell(g.member_id),
                _text_cell(g.member_host),
                g.generation,
                _table_time(_last_active(g)),
                len(g.partitions),
            )
            for g in groups
        ),
    )
    out.line()
    out.line(
        "CONSUMER-ID and HOST are the latest member to join (JoinGroup); offsetstore keeps no list of live members."
    )
    return EXIT_OK


def _describe_state(groups: list[GroupDescription], args: argparse.Namespace, out: _Output) -> int:
    rows = [
        {
            "group_id": g.group_id,
            "state": _state(g),
            "generation": g.generation,
            "reset_count": g.reset_count,
            "partition_count": len(g.partitions),
            "last_active_time": _json_time(_last_active(g)),
        }
        for g in groups
    ]
    if out.json:
        out.document(rows if args.all_groups else rows[0])
        return EXIT_OK
    out.table(
        ("GROUP", "STATE", "GENERATION", "RESETS", "#PARTITIONS", "LAST-ACTIVE"),
        (
            (g.group_id, _state(g), g.generation, g.reset_count, len(g.partitions), _table_time(_last_active(g)))
            for g in groups
        ),
    )
    out.line()
    out.line(
        "STATE: Empty (no offsets), Stable (offsets, none past its log end) or PastLogEnd (see describe's "
        "warnings). LAST-ACTIVE: the latest join, reset or commit."
    )
    return EXIT_OK


def _selection(args: argparse.Namespace) -> dict[str, list[int]] | None:
    return _merge_topic_specs(args.topics) if args.topics else None


def _stored_offsets(fetched: FetchResult) -> dict[TopicPartition, int]:
    """The fetched partitions that hold an offset, placeholders included.

    A named partition without an offset comes back as -1 with no commit time; a stored -1
    (the latest placeholder) has one.
    """
    return {tp: o.offset for tp, o in fetched.offsets.items() if o.commit_time is not None}


def _reset_target(args: argparse.Namespace) -> tuple[dict[str, Any], datetime | None]:
    """The reset_offsets keyword of the chosen target, and the instant a time target resolved to."""
    if args.to_offset is not None:
        return {"to_offset": args.to_offset}, None
    if args.shift_by is not None:
        return {"shift_by": args.shift_by}, None
    if args.to_current:
        # Every offset shifted by nothing: it stays, and the applied reset fences live writers.
        return {"shift_by": 0}, None
    if args.to_boundary is not None:
        return {"to_boundary": args.to_boundary}, None
    instant = args.to_datetime
    if instant is None:
        # Resolved now, not at parse time, so the instant is as close as can be to the call.
        instant = datetime.now(UTC) - args.by_duration
    return {"to_commit_time": instant}, instant


def _reset_group(client: OffsetStoreClient, group: str, args: argparse.Namespace, out: _Output) -> dict | None:
    """Resets one group as the options say; returns its JSON document (None in table mode)."""
    target, instant = _reset_target(args)
    selection = _selection(args)
    if args.bootstrap_server and selection is not None and any(not parts for parts in selection.values()):
        # kafka-consumer-groups: a whole topic is every partition the broker has.
        whole = [t for t, parts in selection.items() if not parts]
        selection = _broker.expand(selection, _broker.topic_partitions(args.bootstrap_server, whole))
    fetched = client.fetch_offsets(group, selection)
    # Read first only to name placeholders: a -1 that was stored is the latest one, not "none".
    before = _stored_offsets(fetched)
    existed = _exists(client, group)
    per_partition = _per_partition_target(client, group, args, selection, before, instant, out)
    if per_partition is not None:
        return _reset_each(client, group, args, out, before, per_partition, existed, fetched.generation, instant)
    whole_topics = selection is not None and any(not parts for parts in selection.values())
    if not before and not existed and whole_topics and not args.all_groups:
        raise _UsageError(
            f"group {group} has no offsets for that selection, and the store does not know a topic's "
            "partitions: name them (--topic TOPIC:0,1,2) or give --bootstrap-server to ask the broker"
        )
    result = client.reset_offsets(
        group, topics=selection, all_topics=args.all_topics, dry_run=not args.execute, **target
    )
    changes = sorted(result.changes, key=lambda c: (c.topic, c.partition))
    # A shift moves from an offset; a placeholder with no known watermark has none, and keeps it.
    changed = {TopicPartition(c.topic, c.partition) for c in changes}
    kept = sorted(
        (tp, off)
        for tp, off in before.items()
        if "shift_by" in target and tp not in changed and off in (EARLIEST, LATEST)
    )

    def previous_stored(c: OffsetChange) -> bool:
        return TopicPartition(c.topic, c.partition) in before

    if out.json:
        return {
            "group_id": group,
            "generation": result.generation,
            "dry_run": result.dry_run,
            # A reset never deletes: a new -1 is the latest placeholder.
            "changes": [_change_json(c, previous_stored=previous_stored(c), new_stored=True) for c in changes],
            "kept_placeholders": [
                {"topic": tp.topic, "partition": tp.partition, **_offset_json("offset", off, stored=True)}
                for tp, off in kept
            ],
        }
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"),
        (
            (
                group,
                c.topic,
                c.partition,
                _offset_cell(c.previous_offset, stored=previous_stored(c)),
                _offset_cell(c.new_offset, stored=True),
            )
            for c in changes
        ),
    )
    out.line()
    if instant is not None:
        out.line(f"Target: the offsets the group had committed at {_table_time(instant)}.")
    for tp, off in kept:
        name = _placeholder(off, stored=True)
        end = "start" if off == EARLIEST else "end"
        hint = "" if args.to_current else " Give it an offset with --to-offset."
        out.line(
            f"{tp.topic}:{tp.partition} holds the {name} placeholder and no log {end} is known, so there is "
            f"nothing to shift from: it stays {name}.{hint}"
        )
    if not changes and not kept:
        out.line(f"No partition selected: group {group} has no offsets for that selection.")
    _applied_line(out, group, result.dry_run, existed, result.generation, bool(changes))
    return None


def _applied_line(out: _Output, group: str, dry_run: bool, existed: bool, generation: int, changed: bool) -> None:
    if dry_run:
        out.line("Dry run: nothing changed. Run again with --execute to apply.")
    elif not existed and changed:
        out.line(f"Created group {group} at generation {generation} with these offsets.")
    elif changed or existed:
        out.line(f"Applied: group {group} is now at generation {generation}; writers of older generations are fenced.")


class _UsageError(Exception):
    """A command that cannot do what was asked; the message says what to give instead."""


def _selected_partitions(
    selection: dict[str, list[int]] | None, before: dict[TopicPartition, int]
) -> list[TopicPartition]:
    """What a reset of `selection` touches: the named partitions and the group's in whole topics."""
    chosen = set(before)
    for topic, parts in (selection or {}).items():
        chosen.update(TopicPartition(topic, p) for p in parts)
    return sorted(chosen)


def _known_ranges(
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


def _out_of_range(
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


def _warn_out_of_range(out: _Output, group: str, outside: dict[TopicPartition, int], offsets, clamp: bool) -> None:
    for tp, bound in sorted(outside.items()):
        side = "past the log end" if offsets[tp] > bound else "before the log start"
        action = f"set to {bound} (--clamp)" if clamp else f"set as asked; add --clamp to set {bound} instead"
        out.error(f"Warning: {group} {tp.topic}:{tp.partition}: offset {offsets[tp]} is {side} {bound}: {action}.")


def _per_partition_target(
    client: OffsetStoreClient,
    group: str,
    args: argparse.Namespace,
    selection: dict[str, list[int]] | None,
    before: dict[TopicPartition, int],
    instant: datetime | None,
    out: _Output,
) -> dict[TopicPartition, int] | None:
    """The offsets per partition where a target is not one number for all, else None (one ResetOffsets)."""
    if args.bootstrap_server and instant is not None:
        partitions = _selected_partitions(selection, before)
        return _broker.offsets_for_times(args.bootstrap_server, partitions, instant)
    if args.to_offset is None:
        return None
    partitions = _selected_partitions(selection, before)
    wanted = dict.fromkeys(partitions, args.to_offset)
    outside = _out_of_range(wanted, _known_ranges(client, group, partitions, args.bootstrap_server))
    _warn_out_of_range(out, group, outside, wanted, args.clamp)
    if not (args.clamp and outside):
        return None
    return {**wanted, **outside}


def _set_offsets(client: OffsetStoreClient, group: str, new: dict[TopicPartition, int], existed: bool) -> int:
    """Sets a different offset per partition; returns the generation after.

    ResetOffsets takes one target for all; so a reset to the current offsets fences live
    writers and counts as a reset (a Spark query derives a fresh checkpoint from it), then one
    commit with that generation sets every offset in one transaction. A writer joining in
    between makes the commit fail with STALE_GENERATION rather than be overwritten.
    """
    selection: dict[str, list[int]] = {}
    for tp in new:
        selection.setdefault(tp.topic, []).append(tp.partition)
    generation = client.reset_offsets(group, topics=selection, shift_by=0).generation
    if not existed:
        generation = client.join_group(group, RESET_MEMBER_ID)
    client.commit_offsets(group, new, generation=generation)
    return generation


def _reset_each(
    client: OffsetStoreClient,
    group: str,
    args: argparse.Namespace,
    out: _Output,
    before: dict[TopicPartition, int],
    new: dict[TopicPartition, int],
    existed: bool,
    generation_before: int,
    instant: datetime | None,
) -> dict | None:
    rows = sorted((tp, before.get(tp, NO_OFFSET), offset) for tp, offset in new.items())
    generation = _set_offsets(client, group, new, existed) if args.execute and new else generation_before
    if out.json:
        return {
            "group_id": group,
            "generation": generation,
            "dry_run": not args.execute,
            "changes": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    **_offset_json("previous_offset", old, stored=tp in before),
                    **_offset_json("new_offset", off, stored=True),
                }
                for tp, old, off in rows
            ],
        }
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"),
        ((group, tp.topic, tp.partition, _offset_cell(old, stored=tp in before), off) for tp, old, off in rows),
    )
    out.line()
    if instant is not None:
        out.line(
            f"Target: each partition's first record with a timestamp at or after {_table_time(instant)}, "
            f"from the broker at {args.bootstrap_server} (the log end where none is that recent)."
        )
    if not rows:
        out.line(f"No partition selected: group {group} has no offsets for that selection.")
    _applied_line(out, group, not args.execute, existed, generation, bool(rows))
    return None


def _groups_of(client: OffsetStoreClient, args: argparse.Namespace) -> list[str]:
    if getattr(args, "all_groups", False):
        return [g.group_id for g in client.iter_groups()]
    return [args.group]


def _cmd_reset(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
    documents = []
    try:
        for n, group in enumerate(_groups_of(client, args)):
            if n and not out.json:
                out.line()
            documents.append(_reset_group(client, group, args, out))
    except (_UsageError, _broker.BrokerError) as error:
        out.error(f"Error: {error}")
        return EXIT_ERROR
    if out.json:
        out.document(documents if args.all_groups else documents[0])
    elif args.all_groups and not documents:
        out.line("There are no groups.")
    return EXIT_OK


def _delete_group(client: OffsetStoreClient, group: str, args: argparse.Namespace, out: _Output) -> dict | None:
    selection = _selection(args)
    before = _stored_offsets(client.fetch_offsets(group, selection))
    if args.execute:
        deleted = sorted(client.delete_offsets(group, topics=selection, all_topics=args.all_topics))
    else:
        deleted = sorted(before)
    # The offsets read just before; a commit racing the delete is not shown, but is deleted.
    rows = [(tp, before.get(tp, NO_OFFSET)) for tp in deleted]
    if out.json:
        return {
            "group_id": group,
            "dry_run": not args.execute,
            "deleted": [
                {"topic": tp.topic, "partition": tp.partition, **_offset_json("offset", off, stored=tp in before)}
                for tp, off in rows
            ],
        }
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "OFFSET"),
        ((group, tp.topic, tp.partition, _offset_cell(off, stored=tp in before)) for tp, off in rows),
    )
    out.line()
    verb = "Deleted" if args.execute else "Would delete"
    if not deleted:
        out.line(f"Nothing to delete: group {group} has no offsets for that selection.")
    elif args.all_topics:
        out.line(f"{verb} group {group} and its {len(deleted)} offset(s).")
    else:
        out.line(f"{verb} {len(deleted)} offset(s) of group {group}.")
    if not args.execute:
        out.line("Dry run: nothing changed. Run again with --execute to delete.")
    return None


def _cmd_delete(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
    documents = []
    for n, group in enumerate(_groups_of(client, args)):
        if n and not out.json:
            out.line()
        documents.append(_delete_group(client, group, args, out))
    if out.json:
        out.document(documents if args.all_groups else documents[0])
    elif args.all_groups and not documents:
        out.line("There are no groups.")
    return EXIT_OK


def _history_stored(changes: Sequence[OffsetChange]) -> list[tuple[bool, bool]]:
    """For each change (newest first), whether its previous and its new offset were stored ones.

    The contract writes -1 for "none" in a change, which the latest placeholder also is. A
    commit, and a reset (which never deletes), store their new offset; a delete or expiry
    does not. A previous offset was stored if the partition's change just before it stored one,
    which only the listed changes can tell: beyond them, -1 is shown as none.
    """
    stores = (ChangeKind.COMMIT, ChangeKind.RESET)
    last_stored: dict[tuple[str, int], bool] = {}
    result: list[tuple[bool, bool]] = []
    for change in reversed(changes):
        key = (change.topic, change.partition)
        new_stored = change.kind in stores
        result.append((last_stored.get(key, False), new_stored))
        last_stored[key] = new_stored
    result.reverse()
    return result


def _cmd_history(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
    changes: list[OffsetChange] = []
    token = ""
    while True:
        wanted = _HISTORY_PAGE if args.limit == 0 else min(_HISTORY_PAGE, args.limit - len(changes))
        page = client.list_offset_history(
            args.group,
            topics=_selection(args),
            since=args.since,
            until=args.until,
            page_size=wanted,
            page_token=token,
        )
        changes.extend(page.items)
        token = page.next_page_token
        if not token or (args.limit and len(changes) >= args.limit):
            break
    if args.limit:
        del changes[args.limit :]
    if not changes and args.since is None and args.until is None and args.topics is None:
        if client.fetch_offsets(args.group).generation == 0 and not _known_group(client, args.group):
            out.error(f"Error: group {args.group} does not exist (no offsets and no history).")
            return EXIT_ERROR
    stored = _history_stored(changes)
    if out.json:
        out.document(
            {
                "group_id": args.group,
                "changes": [
                    _change_json(c, previous_stored=p, new_stored=n) for c, (p, n) in zip(changes, stored, strict=True)
                ],
            }
        )
        return EXIT_OK
    out.table(
        ("TIME", "KIND", "TOPIC", "PARTITION", "PREVIOUS", "NEW", "GENERATION", "ACTOR"),
        (
            (
                _table_time(c.change_time),
                _kind_name(c.kind),
                c.topic,
                c.partition,
                _offset_cell(c.previous_offset, stored=p),
                _offset_cell(c.new_offset, stored=n),
                c.generation,
                c.actor or "-",
            )
            for c, (p, n) in zip(changes, stored, strict=True)
        ),
    )
    return EXIT_OK


def _exists(client: OffsetStoreClient, group: str) -> bool:
    """Whether the group is live (DescribeGroup finds it), with or without offsets."""
    try:
        client.describe_group(group)
    except GroupNotFoundError:
        return False
    return True


def _known_group(client: OffsetStoreClient, group: str) -> bool:
    """Whether the group id was ever used: a deleted group is NOT_FOUND with its generation kept."""
    try:
        client.describe_group(group)
    except GroupNotFoundError as error:
        return "generation" in error.metadata
    return True


def _kind_name(kind: int) -> str:
    try:
        return ChangeKind(kind).name
    except ValueError:
        return str(kind)  # a kind newer than this client


def _cmd_export(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
    fetched = client.fetch_offsets(args.group)
    if not fetched.offsets and fetched.generation == 0:
        out.error(f"Error: group {args.group} does not exist.")
        return EXIT_ERROR
    rows = sorted((tp.topic, tp.partition, o.offset) for tp, o in fetched.offsets.items())
    if out.json:
        document = [{"topic": t, "partition": p, **_offset_json("offset", o, stored=True)} for t, p, o in rows]
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


def _read_offsets_file(path: str) -> dict[TopicPartition, int]:
    if path == "-":
        return _parse_offsets_csv(sys.stdin, "<stdin>")
    # utf-8-sig: a file saved by a spreadsheet may start with a byte order mark.
    with open(path, encoding="utf-8-sig") as f:
        return _parse_offsets_csv(f, path)


def _apply_import(client: OffsetStoreClient, group_id: str, new: dict[TopicPartition, int]) -> int:
    """Sets the offsets of `new`; returns the group's generation after.

    A commit takes only real offsets, so placeholders are set by resets to that end, each of
    which bumps the generation; the real offsets are then committed with the generation the
    last step returned. Without placeholders the group is joined first, which bumps the
    generation like a reset does. Either way a live fenced writer cannot overwrite the
    imported offsets with its older generation afterwards, and a writer that joins in between
    makes the commit fail with STALE_GENERATION instead of being overwritten.
    """
    generation = 0
    for placeholder, boundary in ((EARLIEST, Boundary.EARLIEST), (LATEST, Boundary.LATEST)):
        selection: dict[str, list[int]] = {}
        for tp, offset in new.items():
            if offset == placeholder:
                selection.setdefault(tp.topic, []).append(tp.partition)
        if selection:
            generation = client.reset_offsets(group_id, topics=selection, to_boundary=boundary).generation
    real = {tp: offset for tp, offset in new.items() if offset >= 0}
    if real:
        if not generation:
            generation = client.join_group(group_id, IMPORT_MEMBER_ID)
        client.commit_offsets(group_id, real, generation=generation)
    return generation


def _import_operands(args: argparse.Namespace) -> tuple[str, str]:
    """(group, file) of ``import GROUP FILE``, or of the older ``import FILE --group GROUP``."""
    operands = args.operands
    if len(operands) == 2 and args.group is None:
        return operands[0], operands[1]
    if len(operands) == 1 and args.group is not None:
        return args.group, operands[0]
    raise _UsageError("write: offsetstore groups import GROUP FILE (FILE - reads standard input)")


def _cmd_import(client: OffsetStoreClient, args: argparse.Namespace, out: _Output) -> int:
    try:
        new = _read_offsets_file(args.file)
    except _OffsetsFileError as e:
        out.error(f"Error: {e}\nNothing was imported.")
        return EXIT_ERROR
    except OSError as e:
        out.error(f"Error: cannot read {args.file}: {e.strerror or e}")
        return EXIT_ERROR
    except UnicodeDecodeError as e:
        out.error(f"Error: {args.file} is not UTF-8 text: {e.reason}")
        return EXIT_ERROR
    outside = _out_of_range(new, _known_ranges(client, args.group, list(new), None))
    _warn_out_of_range(out, args.group, outside, new, args.clamp)
    if args.clamp:
        new.update(outside)
    selection: dict[str, list[int]] = {}
    for tp in new:
        selection.setdefault(tp.topic, []).append(tp.partition)
    before = client.fetch_offsets(args.group, selection)
    stored = _stored_offsets(before)
    previous = {tp: stored.get(tp, NO_OFFSET) for tp in new}
    generation = _apply_import(client, args.group, new) if args.execute else before.generation
    rows = sorted((tp, previous[tp], offset) for tp, offset in new.items())
    if out.json:
        out.document(
            {
                "group_id": args.group,
                "generation": generation,
                "dry_run": not args.execute,
                "changes": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        **_offset_json("previous_offset", old, stored=tp in stored),
                        **_offset_json("new_offset", off, stored=True),
                    }
                    for tp, old, off in rows
                ],
            }
        )
        return EXIT_OK
    out.table(
        ("GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"),
        (
            (args.group, tp.topic, tp.partition, _offset_cell(old, stored=tp in stored), _offset_cell(off, stored=True))
            for tp, old, off in rows
        ),
    )
    out.line()
    if args.execute:
        out.line(
            f"Applied: imported {len(rows)} offset(s); group {args.group} is now at generation {generation}; "
            "writers of older generations are fenced."
        )
    else:
        out.line("Dry run: nothing changed. Run again with --execute to apply.")
    return EXIT_OK


_COMMANDS: dict[str, Callable[[OffsetStoreClient, argparse.Namespace, _Output], int]] = {
    "list": _cmd_list,
    "describe": _cmd_describe,
    "reset": _cmd_reset,
    "delete": _cmd_delete,
    "history": _cmd_history,
    "export": _cmd_export,
    "import": _cmd_import,
    "expire": _cmd_expire,
}


# --- errors ---------------------------------------------------------------------------


def _server_answered(error: OffsetStoreError) -> bool:
    """Whether the server sent this error, rather than gRPC failing to reach it.

    The server attaches a google.rpc.Status to every error it sends; a connection failure
    has none. The client chains the gRPC error it converted as the cause.
    """
    cause = error.__cause__
    if not isinstance(cause, grpc.Call):
        return True
    try:
        return rpc_status.from_call(cause) is not None
    except ValueError:
        return True


def _error_message(error: OffsetStoreError, args: argparse.Namespace, server: str) -> str:
    group = getattr(args, "group", None)
    if isinstance(error, GroupNotFoundError) and group is not None:
        return f"Error: group {group} does not exist."
    if isinstance(error, InvalidArgumentError):
        lines = [f"Error: {error.message}"]
        # A one-field error's message already is "field: description".
        violations = (f"{v.field}: {v.description}" for v in error.violations)
        lines += [f"  {v}" for v in violations if v not in error.message]
        return "\n".join(lines)
    if isinstance(error, StaleGenerationError):
        current = error.current_generation
        suffix = f" (current generation {current})" if current is not None else ""
        return f"Error: {error.message}{suffix}. Another writer or a reset changed the group meanwhile."
    if isinstance(error, OffsetMismatchError):
        stored = error.stored_offset
        return f"Error: {error.message}" + (f" (stored offset {stored})" if stored is not None else "")
    if isinstance(error, UnauthenticatedError):
        return f"Error: {error.message}\nGive a token with {TOKEN_ENV}, --token-file or --token."
    if isinstance(error, PermissionDeniedError):
        return f"Error: {error.message}. Ask for a grant on the group's prefix in the server's tokens file."
    if isinstance(error, StoreUnavailableError):
        if not _server_answered(error):
            return (
                f"Error: cannot reach the offsetstore server at {server}: {error.message}\n"
                f"Is it running? Point to another one with --server or {SERVER_ENV}; "
                "a server that serves TLS needs --tls or --tls-ca (and --tls-cert/--tls-key for mutual TLS)."
            )
        return f"Error: the offsetstore server at {server} is unavailable: {error.message}"
    if isinstance(error, DeadlineExceededError):
        # The client's message says whether a write may have been applied, and how to find out.
        return f"Error: no answer from the offsetstore server at {server} in time (see --timeout): {error.message}"
    return f"Error: {error.message}"


# --- the parser -----------------------------------------------------------------------


def _add_common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # The options are accepted both before and after the subcommand. On the subcommand they
    # default to SUPPRESS, because a subparser's defaults would overwrite a value given before it.
    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        default=default(None),
        help=f"offsetstore server to talk to (env {SERVER_ENV}, default {DEFAULT_SERVER}; the port defaults to {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_positive_seconds,
        default=default(None),
        help="deadline of each call to the server (default: the client's, 10 seconds)",
    )
    parser.add_argument(
        "--output",
        choices=("table", "json"),
        default=default("table"),
        help="a readable table (default), or one JSON document with the contract's field names",
    )
    parser.add_argument(
        "--tls", action="store_true", default=default(False), help="talk TLS, trusting the system's CA certificates"
    )
    parser.add_argument(
        "--tls-ca", metavar="PEM", default=default(None), help="talk TLS, trusting the CA certificates in this file"
    )
    parser.add_argument(
        "--tls-cert", metavar="PEM", default=default(None), help="client certificate for mutual TLS (with --tls-key)"
    )
    parser.add_argument("--tls-key", metavar="PEM", default=default(None), help="private key of --tls-cert")
    parser.add_argument(
        "--token",
        default=default(None),
        help=f"bearer token to send (env {TOKEN_ENV}, which other users of the machine cannot see, unlike this option)",
    )
    parser.add_argument(
        "--token-file", metavar="FILE", default=default(None), help="read the bearer token from the first line of FILE"
    )


def _add_selection(parser: argparse.ArgumentParser, *, required: bool) -> None:
    topic = {
        "dest": "topics",
        "action": "append",
        "type": _parse_topic_spec,
        "metavar": "TOPIC[:P,...]",
        "help": "TOPIC or TOPIC:P,P,... (repeatable); a topic alone selects all of its partitions",
    }
    if not required:
        parser.add_argument("--topic", **{**topic, "help": topic["help"] + " (default: every topic)"})
        return
    selection = parser.add_mutually_exclusive_group(required=True)
    selection.add_argument("--topic", **topic)
    selection.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")


def _add_groups(parser: argparse.ArgumentParser, verb: str) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("group", metavar="GROUP", nargs="?", help=f"the group to {verb}")
    which.add_argument("--all-groups", action="store_true", help=f"{verb} every group (one after another)")


def _add_execute(parser: argparse.ArgumentParser) -> None:
    # One dest with explicit constants: a store_true and a store_false on one dest would
    # fight over its default.
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run",
        dest="execute",
        action="store_const",
        const=False,
        default=False,
        help="show what would change and change nothing (the default)",
    )
    mode.add_argument("--execute", dest="execute", action="store_const", const=True, help="apply the change")


_RESET_HELP = (
    "Reset the selected partitions to one target, like kafka-consumer-groups --reset-offsets. As there, "
    "nothing changes without --execute. An applied reset bumps the group's generation, so live fenced "
    "consumers stop instead of overwriting it: unlike Kafka, resetting a live group is safe. In tables "
    "'earliest' and 'latest' are the placeholders -2 and -1, which a reader resolves to the log's start "
    "or end; - is no offset."
)
_TO_DATETIME_HELP = (
    "the offsets the group had committed at that instant, from its history (e.g. 2024-01-31T10:00:00.000, "
    "2024-01-31T10:00:00Z or ...+02:00; a time without a UTC offset is taken as UTC): the group's own past "
    "position, where a partition that had no offset then gets the earliest placeholder (a reset never "
    "deletes an offset). With --bootstrap-server it means what kafka-consumer-groups means: the offsets of "
    "the first records with a timestamp at or after it"
)
_BOOTSTRAP_HELP = (
    "a Kafka broker to ask, as kafka-consumer-groups does (the kafka extra): --to-datetime and --by-duration "
    "then mean record timestamps (each partition's first record at or after the instant, offsets_for_times; "
    "the log end where none is that recent), a whole --topic means every partition the broker has, and "
    "--to-offset is checked against the broker's log start and end"
)
_CLAMP_HELP = (
    "set an offset outside the known [log start, log end] to the nearer bound (kafka-consumer-groups "
    "clamps silently; offsetstore warns and sets what you asked unless you give --clamp)"
)
_BY_DURATION_HELP = (
    "like --to-datetime at now minus DURATION: the offsets the group had committed then, from its history. "
    "PnDTnHnMnS as kafka takes it (PT1H30M, P1D) or 90s, 15m, 2h, 1d (a unit is required)"
)
_TO_CURRENT_HELP = (
    "keep each offset where it is (a placeholder resolves to a known watermark, an offset past a known "
    "log end is capped to it); applied, it only bumps the generation, which fences live writers"
)
_HISTORY_HELP = (
    "The group's audit trail, newest first. In PREVIOUS and NEW, - is no offset; 'earliest' and 'latest' "
    "are the placeholders -2 and -1. The contract writes both 'no offset' and the latest placeholder as -1; "
    "the table tells them apart from the partition's change before, where it is listed."
)
_EXPORT_HELP = (
    "Write the group's offsets as topic,partition,offset lines with no header, the format of "
    "kafka-consumer-groups --reset-offsets --export, which 'import' and kafka-consumer-groups --from-file "
    "read back. Placeholders are written as their numbers (-2 earliest, -1 latest). --output json writes "
    "a JSON list instead."
)
_IMPORT_HELP = (
    "Set the offsets of a topic,partition,offset file (kafka-consumer-groups --from-file; FILE - reads "
    "standard input), as 'export' writes it. Blank lines and a topic,partition,offset header are skipped; "
    "a malformed line rejects the whole file. Offsets are >= 0, or the placeholders -2 (earliest) and -1 "
    "(latest), which are set by a reset to that end (so they resolve to a known watermark, as "
    "'reset --to-earliest' does). With --execute: placeholders are reset first, else the group is joined "
    f"as '{IMPORT_MEMBER_ID}'; either bumps the generation and so fences live writers; then every real "
    "offset of the file is committed with that generation in one transaction. Partitions not in the file "
    "keep their offsets."
)
_IDLE_FOR_HELP = "groups with no commit, join or reset for this long: 90s, 15m, 12h, 7d or seconds"
_IDLE_FOR_LIST_HELP = (
    "list instead the groups idle (no commit, join or reset) for this long, which 'expire' and the "
    "server's --offsets-retention would expire (needs admin on --prefix)"
)
_EXPIRE_HELP = (
    "Expire the offsets of groups idle for --idle-for, as the server's --offsets-retention does (Kafka's "
    "offsets.retention.minutes): their offsets are removed and recorded in their history as "
    "CHANGE_KIND_EXPIRE; each group keeps its generation, so a rejoin gets a higher one. Nothing changes "
    "without --execute. At most 1000 groups, longest idle first; run again for more."
)
_DELETE_HELP = (
    "Delete the selected offsets (--all-topics deletes the group). Like 'reset' and 'import', and unlike "
    "kafka-consumer-groups, it only shows what it would delete until --execute is given."
)


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an unknown option is reported with this command's usage.

    argparse hands a subcommand's unknown arguments back to the top-level parser, which
    would print its own usage, not the one of the command the user got wrong.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        if getattr(namespace, "operands", None) is not None:
            try:
                namespace.group, namespace.file = _import_operands(namespace)
            except _UsageError as error:
                self.error(str(error))
        return namespace, extras


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Adds the ``groups`` subcommands and their options to `parser`; `run` executes the result."""
    parser.description = "Inspect and manage consumer groups, like kafka-consumer-groups, through an offsetstore."
    _add_common_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_common_options(common, suppress=True)
    sub = parser.add_subparsers(dest="groups_command", required=True, metavar="COMMAND", parser_class=_CommandParser)

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=summary, description=description)

    p = command("list", "list the groups", "List the groups with their generation, partitions, last commit and lag.")
    p.add_argument("--prefix", default="", help="only groups whose id starts with this")
    p.add_argument("--idle-for", type=_parse_idle_for, metavar="DURATION", help=_IDLE_FOR_LIST_HELP)

    p = command(
        "describe",
        "show a group's offsets and lag",
        "Show each partition's committed offset, log end, lag, the group's latest member (CONSUMER-ID and "
        "HOST: the member id and peer of its latest JoinGroup), metadata and commit time (- where unknown; "
        "'earliest' and 'latest' are the placeholders -2 and -1). An unknown group is an error.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("group", metavar="GROUP", nargs="?", help="the group to describe")
    which.add_argument("--all-groups", action="store_true", help="describe every group")
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--members",
        action="store_true",
        help="the group's latest member (CONSUMER-ID, HOST), generation, last activity and partition count",
    )
    view.add_argument(
        "--state",
        action="store_true",
        help="the group's state (Empty, Stable or PastLogEnd), generation, resets and last activity",
    )

    p = command("reset", "reset a group's offsets (dry run unless --execute)", _RESET_HELP)
    _add_groups(p, "reset")
    _add_selection(p, required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-offset", type=_nonnegative_int, metavar="N", help="set every selected partition to N")
    target.add_argument(
        "--shift-by",
        type=_int64,
        metavar="N",
        help="move each offset by N (negative allowed), floored at 0 and capped at the log end where it is "
        "known; a placeholder moves from its watermark, and stays as it is where none is known",
    )
    target.add_argument(
        "--to-earliest",
        dest="to_boundary",
        action="store_const",
        const=Boundary.EARLIEST,
        help="the log start where a watermark is known, else the -2 (earliest) placeholder",
    )
    target.add_argument(
        "--to-latest",
        dest="to_boundary",
        action="store_const",
        const=Boundary.LATEST,
        help="the log end where a watermark is known, else the -1 (latest) placeholder",
    )
    target.add_argument("--to-current", action="store_true", help=_TO_CURRENT_HELP)
    target.add_argument("--to-datetime", type=_parse_datetime, metavar="ISO8601", help=_TO_DATETIME_HELP)
    target.add_argument("--by-duration", type=_parse_duration, metavar="DURATION", help=_BY_DURATION_HELP)
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help=_BOOTSTRAP_HELP)
    p.add_argument("--clamp", action="store_true", help=_CLAMP_HELP)
    _add_execute(p)

    p = command("delete", "delete a group's offsets (dry run unless --execute)", _DELETE_HELP)
    _add_groups(p, "delete")
    _add_selection(p, required=True)
    _add_execute(p)

    p = command("history", "show a group's commits, resets and deletes", _HISTORY_HELP)
    p.add_argument("group", metavar="GROUP")
    _add_selection(p, required=False)
    p.add_argument("--since", type=_parse_datetime, metavar="ISO8601", help="changes from this on (no offset = UTC)")
    p.add_argument("--until", type=_parse_datetime, metavar="ISO8601", help="changes before this (no offset = UTC)")
    p.add_argument(
        "--limit", type=_nonnegative_int, default=100, metavar="N", help="at most N changes (default 100, 0 = all)"
    )

    p = command("export", "write a group's offsets as CSV", _EXPORT_HELP)
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--file", metavar="FILE", help="write to FILE instead of standard output")

    p = command("expire", "expire the offsets of idle groups (dry run unless --execute)", _EXPIRE_HELP)
    p.add_argument("--idle-for", type=_parse_idle_for, metavar="DURATION", required=True, help=_IDLE_FOR_HELP)
    p.add_argument("--prefix", default="", help="only groups whose id starts with this")
    _add_execute(p)

    p = command("import", "set a group's offsets from a CSV file (dry run unless --execute)", _IMPORT_HELP)
    p.add_argument("operands", nargs="+", metavar="GROUP FILE", help="the group to set the offsets of, and the file")
    p.add_argument("--group", metavar="GROUP", help=argparse.SUPPRESS)  # the older 'import FILE --group GROUP'
    p.add_argument("--clamp", action="store_true", help=_CLAMP_HELP)
    _add_execute(p)


class _SecurityOptionError(ValueError):
    """A TLS or token option that cannot be used."""


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise _SecurityOptionError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def _security_options(args: argparse.Namespace) -> dict[str, Any]:
    """The client's ``credentials`` and ``token`` from --tls*, --token, --token-file and OFFSETSTORE_TOKEN."""
    options: dict[str, Any] = {}
    tls_cert, tls_key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if (tls_cert is None) != (tls_key is None):
        raise _SecurityOptionError("--tls-cert and --tls-key go together")
    tls_ca = getattr(args, "tls_ca", None)
    if getattr(args, "tls", False) or tls_ca or tls_cert:
        options["credentials"] = grpc.ssl_channel_credentials(
            root_certificates=_read_file(tls_ca, "CA file") if tls_ca else None,
            private_key=_read_file(tls_key, "TLS key") if tls_key else None,
            certificate_chain=_read_file(tls_cert, "TLS certificate") if tls_cert else None,
        )
    token = getattr(args, "token", None)
    token_file = getattr(args, "token_file", None)
    if token is not None and token_file is not None:
        raise _SecurityOptionError("give --token or --token-file, not both")
    if token_file is not None:
        token = _read_file(token_file, "token file").decode("utf-8", "replace").partition("\n")[0].strip()
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is not None:
        token = token.strip()
        if not token or not token.isascii() or not token.isprintable() or " " in token:
            raise _SecurityOptionError("the bearer token must be printable ASCII without spaces")
        options["token"] = token
    return options


def _with_default_port(server: str) -> str:
    """``host`` -> ``host:50051``: gRPC would dial port 443 for a target without a port."""
    if "://" in server or server.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return server  # a gRPC target URI says what it means
    if server.startswith("["):
        return server if "]:" in server else f"{server}:{DEFAULT_PORT}"
    if server.count(":") == 0:
        return f"{server}:{DEFAULT_PORT}"
    if server.count(":") > 1:
        return f"[{server}]:{DEFAULT_PORT}"  # a bare IPv6 address
    return server


def run(args: argparse.Namespace) -> int:
    """Executes the parsed ``groups`` command; returns the process exit code."""
    out = _Output(args.output, sys.stdout, sys.stderr)
    server = _with_default_port(args.server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER)
    options: dict[str, Any] = {} if args.timeout is None else {"timeout": args.timeout}
    try:
        options.update(_security_options(args))
    except _SecurityOptionError as error:
        out.error(f"Error: {error}")
        return EXIT_ERROR
    try:
        with OffsetStoreClient(server, **options) as client:
            return _COMMANDS[args.groups_command](client, args, out)
    except OffsetStoreError as error:
        out.error(_error_message(error, args, server))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (| head); say nothing, and keep Python from complaining at exit.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m offsetstore.cli.groups COMMAND ...``: the groups commands on their own."""
    parser = argparse.ArgumentParser(prog="python -m offsetstore.cli.groups")
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
