"""docs/adopt.md's commands are ones the CLI takes: each ``offsetstore groups`` line parses with the real parser."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from offsetstore.cli import main as cli_main

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adopt.md"
COMMAND = re.compile(r"^\s*\$ (offsetstore groups .*?)(?:\s+#.*)?$", re.MULTILINE)


def commands() -> list[str]:
    return COMMAND.findall(GUIDE.read_text())


def test_the_guide_shows_each_source_and_each_way_out() -> None:
    text = " ".join(commands())
    for option in (
        "--from-spark-checkpoint",
        "--from-kafka-group",
        "--from-file",
        "--format spark",
        "--to-kafka-group",
    ):
        assert option in text, option


@pytest.mark.parametrize("line", commands())
def test_each_command_of_the_guide_parses(line: str) -> None:
    args = cli_main._parser().parse_args(shlex.split(line)[1:])
    assert args.command == "groups"
