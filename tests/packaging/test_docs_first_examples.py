"""Issue 49: a guide's first example runs as written, and each guide names its own group."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient
from offsetstore.server.app import OffsetStoreServer

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def first_python(path: Path) -> str:
    return next(body for lang, body in FENCE.findall(path.read_text()) if lang == "python")


@pytest.mark.parametrize("guide", ["docs/python.md", "docs/kafka.md"])
def test_a_guides_first_example_names_nothing_it_does_not_define(guide: str) -> None:
    """Undefined names (a ``database_url``, a ``to_row`` from nowhere) are what ruff's F821 finds."""
    ruff = Path(sys.executable).with_name("ruff")
    found = subprocess.run(
        [str(ruff), "check", "--isolated", "--select", "F821", "--stdin-filename", "snippet.py", "-"],
        input=first_python(ROOT / guide),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 0, found.stdout


def test_the_python_guides_first_example_runs_as_a_script(
    server: OffsetStoreServer, client: OffsetStoreClient, group_id: str
) -> None:
    """Copied into a file and run, it commits: a function with no caller would do nothing."""
    code = first_python(ROOT / "docs" / "python.md")
    code = code.replace("127.0.0.1:50051", server.address).replace("python-orders-etl", group_id)
    exec(compile(code, "<python.md>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the docs' own code
    committed = {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}
    assert committed == {("python-orders", 0): 2, ("python-orders", 1): 6}


def test_no_guide_uses_the_bare_group_id_orders_etl() -> None:
    """The README promises each guide names of its own; a reader who follows two must not mix their groups."""
    bare = re.compile(r"(?<![\w-])orders-etl(?![\w-])")
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in docs
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert not found, found
