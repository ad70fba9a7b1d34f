"""The Flink sink's record digest is Python's (kafka_integration/fingerprints.py) byte for byte: one definition, two languages.

A switch finds on cluster B the record the sink fingerprinted only if both sides frame the same
bytes (length prefixes, nulls, the header count) and hash them the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from offsetstore.flink_integration import compile_java, flink_classpath, sink_classpath
from offsetstore.kafka_integration.fingerprints import digest
from offsetstore.kafka_integration.maven import MissingPiece

pytestmark = [pytest.mark.flink]

CHECK = Path(__file__).resolve().parent / "java" / "FingerprintCheck.java"

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]

#: Block edges of SHA-256 (64 bytes, and 55/56 where its padding needs a second block; the 4-byte prefixes count),
#: nulls, empties, headers, non-ASCII.
RECORDS: list[Record] = [
    (None, None, []),
    (b"", b"", []),
    (b"k", b"v", []),
    (None, b"w" * 43, []),  # 4 + 4 + 43 + 4 = 55: the longest that pads within one block
    (None, b"x" * 44, []),  # 56: the padding spills into a second block
    (b"", b"z" * 52, []),  # exactly 64 bytes: one full block
    (None, b"x" * 119, []),  # 131: past two blocks
    (b"a" * 200, b"b" * 1000, [("trace", b"1"), ("trace", None), ("ключ", "значение".encode())]),
    (b"\x00\xff" * 64, None, [("", b"")]),
    (b"key", b"v" * 100_000, [(f"h{i}", bytes([i]) * i) for i in range(40)]),
]


def _line(record: Record) -> str:
    key, value, headers = record
    fields = [f.hex() if f is not None else "-" for f in (key, value)]
    for name, data in headers:
        fields += [name.encode().hex(), data.hex() if data is not None else "-"]
    return "\t".join(fields)


def test_the_sinks_digest_is_pythons(tmp_path: Path) -> None:
    try:
        jars = flink_classpath(jdbc_connector=False)
        sink = sink_classpath()
        classes = compile_java([CHECK], [*jars, str(sink)], name="flink-fingerprint-check")
    except MissingPiece as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no Flink here: {e}")
    done = subprocess.run(
        [shutil.which("java") or "java", "-cp", os.pathsep.join([str(classes), str(sink), *jars]), "FingerprintCheck"],
        input="".join(_line(r) + "\n" for r in RECORDS),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    java = done.stdout.split()
    python = [digest(*r).hex() for r in RECORDS]
    assert java == python
    assert len(set(python)) == len(python)  # and the records are told apart
