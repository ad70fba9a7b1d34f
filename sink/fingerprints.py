"""Record fingerprints: what identifies a Kafka record on any cluster that holds a copy of it (issue 58).

A fingerprint is the record's timestamp and a digest of its key, value and headers, each
length-prefixed (-1 for a null key or value), so that no two different records share an input:
the first 16 bytes of their SHA-256. SHA-256 because every language and PostgreSQL
(``sha256()``) have it built in: the Flink sink computes the same bytes in Java with the JDK
alone, and any other writer can. A replica made by MirrorMaker 2 keeps all four (its offsets are
what differ), so a switch finds the record on the other cluster by timestamp, then by digest.

The rule lives here, below every sink: the Kafka recipe digests its messages, the Spark sink the
rows of its batches, and ``groups switch`` the records it reads on the other cluster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

__all__ = ["digest"]

_NULL = (-1).to_bytes(4, "big", signed=True)


def _field(update: Callable[[bytes], object], data: bytes | str | None) -> None:
    if data is None:
        update(_NULL)
        return
    raw = data.encode() if isinstance(data, str) else data
    update(len(raw).to_bytes(4, "big", signed=True))
    update(raw)


def digest(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None) -> bytes:
    """The 16-byte digest of a record's key, value and headers (in their order)."""
    h = hashlib.sha256()
    _field(h.update, key)
    _field(h.update, value)
    h.update(len(headers or ()).to_bytes(4, "big"))
    for name, data in headers or ():
        _field(h.update, name)
        _field(h.update, data)
    return h.digest()[:16]
