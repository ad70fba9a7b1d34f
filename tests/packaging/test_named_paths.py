"""Every repository file a docstring, a comment or DEVELOPERS.md names (``server/app.py``) exists: a moved module leaves no stale pointer."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The folders whose files the prose names; a path starting elsewhere is someone else's (psycopg_pool/pool.py).
FOLDERS = (
    "bench",
    "cli",
    "client",
    "connect_integration",
    "core",
    "kafka_integration",
    "migrations",
    "proto",
    "runtime",
    "scripts",
    "server",
    "sink",
    "spark_integration",
    "storage",
    "tests",
)
PATH = re.compile(r"(?<![\w/.\-])((?:[A-Za-z_][\w\-]*/)+[A-Za-z_]\w*\.py)\b")


def named(text: str) -> list[str]:
    """The repository paths ``text`` names."""
    return [p for p in PATH.findall(text) if p.split("/")[0] in FOLDERS]


def prose(path: Path) -> list[tuple[int, str]]:
    """The comments and string literals (docstrings among them) of a Python file, with their lines."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            found.append((token.start[0], token.string))
    return found


def test_the_pattern_finds_a_named_path_and_not_a_foreign_one() -> None:
    assert named("see server/app.py, and psycopg_pool/pool.py") == ["server/app.py"]


def test_every_path_named_in_code_and_developers_md_exists() -> None:
    stale = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in prose(path):
                stale += [f"{path.relative_to(ROOT)}:{line}: {p}" for p in named(text) if not (ROOT / p).exists()]
    developers = (ROOT / "DEVELOPERS.md").read_text()
    stale += [f"DEVELOPERS.md: {p}" for p in named(developers) if not (ROOT / p).exists()]
    assert stale == [], "paths named that do not exist:\n" + "\n".join(stale)
