"""Positions of a change-data-capture engine in the offset store: names, metadata and LSNs.

A connector's source partition (Debezium's PostgreSQL connector has one, ``{"server": prefix}``)
is one (topic, partition 0) of the group named for the connector. Its offset is the LSN just
past the commit of the last transaction delivered, plus one: the store's "next offset" is the
first commit LSN not yet delivered. Its metadata keeps the engine's own position map whole, as
JSON ``{"partition": {...}, "offset": {...}, "next": N}``; the Java store
(``OffsetStoreBackingStore``) hands that map back to the engine at start, and when ``next`` no
longer equals the stored offset (an operator reset it) resumes by the LSN instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from offsetstore.storage import database_url

__all__ = ["format_lsn", "jdbc_url", "metadata_of", "parse_lsn", "position_of", "topic_of"]

_BAD = re.compile(r"[^A-Za-z0-9._-]")


def topic_of(partition: Mapping[str, Any]) -> str:
    """The topic naming a source partition: its values ordered by key, joined with '.', other characters as '_'.

    The Java store names partitions the same way (``OffsetStoreBackingStore.topicOf``).
    """
    name = _BAD.sub("_", ".".join(_text(partition[k]) for k in sorted(partition)))
    return (name or "_")[:249]


def _text(value: Any) -> str:
    # As Java's String.valueOf prints them, for the values partitions hold.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def metadata_of(partition: Mapping[str, Any], offset: Mapping[str, Any], next_offset: int) -> str:
    """The metadata stored with a position: the engine's map whole, and the offset it was stored at."""
    return json.dumps(
        {"partition": dict(partition), "offset": dict(offset), "next": next_offset}, separators=(",", ":")
    )


def position_of(metadata: str) -> dict[str, Any] | None:
    """The engine's map a metadata string holds, or None (empty after a reset, or not ours)."""
    if not metadata:
        return None
    try:
        found = json.loads(metadata)
    except ValueError:
        return None
    offset = found.get("offset") if isinstance(found, dict) else None
    return offset if isinstance(offset, dict) else None


def parse_lsn(text: str) -> int:
    """PostgreSQL's ``X/Y`` LSN notation (or a plain integer) as the integer offsets use."""
    text = text.strip()
    if "/" in text:
        high, _, low = text.partition("/")
        return (int(high, 16) << 32) + int(low, 16)
    return int(text)


def format_lsn(value: int) -> str:
    """An integer LSN in PostgreSQL's ``X/Y`` notation."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def jdbc_url(url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL of a libpq or SQLAlchemy URL, and the user and password as JDBC properties."""
    params = database_url.parse(url)
    hosts = params.get("host", "localhost").split(",")
    ports = params.get("port", "5432").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    where = ",".join(f"{h}:{p}" for h, p in zip(hosts, ports, strict=True))
    properties = {k: params[k] for k in ("user", "password") if params.get(k)}
    return f"jdbc:postgresql://{where}/{params.get('dbname', 'postgres')}", properties
