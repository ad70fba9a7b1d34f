"""How the groups commands show results: tables as kafka-consumer-groups prints them, JSON with the contract's field names."""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from offsetstore.core.types import EARLIEST, LATEST, NO_OFFSET, ChangeKind, OffsetChange, TopicPartition


def terminal_safe(value: str, *, keep: str = "") -> str:
    """``value`` with each character a terminal would act on written as its Python escape (``\\x1b``, ``\\n``).

    Group ids, adoption sources, actors and metadata are a tenant's free text: raw, an escape
    sequence in one sets the terminal's title or erases the row above, a newline fakes a row.
    Controls, format characters (bidi overrides) and separators other than the space are
    escaped (``str.isprintable``); ``keep`` names those to leave (a message's own newlines).
    """
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in value)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart, headers first, as kafka-consumer-groups prints them; every cell terminal-safe."""
    cells = [list(map(str, headers))] + [[terminal_safe(str(c)) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def table_time(value: datetime | None) -> str:
    """Milliseconds in UTC, the form --to-datetime takes back."""
    if value is None:
        return "-"
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def json_time(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def placeholder_name(value: int, *, stored: bool) -> str | None:
    """The name of a placeholder offset, None for a real one.

    -2 is always the earliest placeholder. -1 is the latest placeholder where it is a stored
    offset, but "no offset" where the contract uses it for none (changes, fetches).
    """
    if value == EARLIEST:
        return "earliest"
    if value == LATEST and stored:
        return "latest"
    return None


def offset_cell(value: int, *, stored: bool = False) -> str:
    """An offset for a table: a placeholder by its name, "no offset" as -, else the number."""
    name = placeholder_name(value, stored=stored)
    if name is not None:
        return name
    return "-" if value == NO_OFFSET else str(value)


def offset_json(key: str, value: int, *, stored: bool) -> dict[str, Any]:
    """``{key: value, key_placeholder: name}``: JSON keeps the number and names a placeholder."""
    return {key: value, f"{key}_placeholder": placeholder_name(value, stored=stored)}


def offsets_set_json(
    rows: Iterable[tuple[TopicPartition, int, int]], *, previous_stored: Container[TopicPartition]
) -> list[dict[str, Any]]:
    """The changes of offsets set partition by partition, from (partition, previous, new) rows."""
    return [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            **offset_json("previous_offset", old, stored=tp in previous_stored),
            **offset_json("new_offset", new, stored=True),
        }
        for tp, old, new in rows
    ]


def unknown_cell(value: int) -> str:
    return "-" if value == -1 else str(value)


def text_cell(value: str) -> str:
    # Metadata is free text; a newline or tab in it would break the table's rows.
    if not value:
        return "-"
    return value.encode("unicode_escape").decode("ascii") if not value.isprintable() else value


def kind_name(kind: int) -> str:
    try:
        return ChangeKind(kind).name
    except ValueError:
        return str(kind)  # a kind newer than this client


def change_json(change: OffsetChange, *, previous_stored: bool, new_stored: bool) -> dict[str, Any]:
    return {
        "topic": change.topic,
        "partition": change.partition,
        **offset_json("previous_offset", change.previous_offset, stored=previous_stored),
        **offset_json("new_offset", change.new_offset, stored=new_stored),
        "kind": f"CHANGE_KIND_{kind_name(change.kind)}",
        "generation": change.generation,
        "change_time": json_time(change.change_time),
        "actor": change.actor,
        "source": change.source,
    }


class Output:
    """Where a command writes: its result to ``out``, notes and errors to ``err``."""

    def __init__(self, fmt: str, out: TextIO, err: TextIO) -> None:
        self.json = fmt == "json"
        self.out = out
        self.err = err

    def document(self, value: object) -> None:
        self.out.write(json.dumps(value, indent=2) + "\n")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.out.write(format_table(headers, rows) + "\n")

    def line(self, text: str = "") -> None:
        self.out.write(terminal_safe(text, keep="\n") + "\n")

    def error(self, text: str) -> None:
        self.err.write(terminal_safe(text, keep="\n") + "\n")
