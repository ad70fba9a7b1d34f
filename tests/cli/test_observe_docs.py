"""docs/observe.md as a user reads it: its commands parse, and its Python snippet observes a group as printed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from offsetstore.cli import main as cli_main
from offsetstore.client import OffsetStoreClient
from tests.fixtures.doc_snippets import snippets
from tests.fixtures.fix_server import ServerHandle

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "observe.md"
COMMAND = re.compile(r"^\$ (offsetstore .*?)(?:\s+#[^\n]*)?$", re.MULTILINE)


def commands() -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", GUIDE.read_text())  # the console's line continuations
    return COMMAND.findall(joined)


def test_the_guide_shows_the_server_setting_the_flag_the_way_back_and_the_past() -> None:
    text = " ".join(commands())
    for words in ("--observe-kafka-groups", "groups list", "--to-kafka-group", "--at", "--format spark"):
        assert words in text, words


@pytest.mark.parametrize("line", commands())
def test_each_command_of_the_guide_parses(line: str) -> None:
    args = cli_main._parser().parse_args(shlex.split(line)[1:])
    assert args.command in ("groups", "serve")


def test_the_python_snippet_observes_a_group_as_printed(server: ServerHandle, client: OffsetStoreClient) -> None:
    (snippet,) = snippets(GUIDE, "python")
    client.delete_offsets("nightly-etl", all_topics=True)  # a rerun on the session's database starts anew
    exec(snippet.replace('"offsetstore:50051"', repr(server.address)), {})  # noqa: S102
    described = client.describe_group("nightly-etl")
    assert (described.observed, described.observed_source) == (True, "spark:5c1e0f2a-query")
    assert {(p.partition, p.offset) for p in described.partitions} == {(0, 1042), (1, 988)}
