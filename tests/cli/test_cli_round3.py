"""Issue 49's frictions of the CLI, each as a newcomer met it: a mistyped group, a usage error, a broker that is down."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from offsetstore.cli import groups as cli


@pytest.mark.parametrize("argv", [("topics",), ("delete", "--all-topics"), ("delete", "--topic", "orders")])
def test_topics_and_delete_of_a_group_that_does_not_exist_are_errors(groups, group_id, argv) -> None:
    command, *options = argv
    run = groups(command, f"{group_id}-typo", *options)
    assert run.code == 1, run.out
    assert f"group {group_id}-typo does not exist" in run.err
    assert "--execute" not in run.out


def test_topics_and_delete_of_a_live_group_without_offsets_are_no_errors(client, groups, group_id) -> None:
    client.join_group(group_id, "m")  # live, no offsets yet
    assert groups("topics", group_id).code == 0
    assert groups("delete", group_id, "--all-topics").code == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["reset", "g", "--to-offset", "1"],  # no selection
        ["reset", "g", "--all-topics"],  # no target
        ["adopt", "g"],  # no source
        ["delete", "g"],
    ],
)
def test_a_usage_error_is_two_lines(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert ": error: " in lines[0]
    assert lines[1].endswith("--help' for its options.")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_broker_that_is_down_is_one_line_not_librdkafkas_log(server, group_id) -> None:
    """The newcomer's walk printed 169 librdkafka lines over 10 s before the one good error line."""
    pytest.importorskip("confluent_kafka")
    offsetstore = Path(sys.executable).with_name("offsetstore")
    run = subprocess.run(
        [
            str(offsetstore),
            "groups",
            "--server",
            server.address,
            "reset",
            group_id,
            "--topic",
            "orders:0",
            "--to-datetime",
            "2026-01-01T00:00:00Z",
            "--bootstrap-server",
            f"127.0.0.1:{closed_port()}",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, "\n".join(lines[:10])
    assert lines[0].startswith("Error: the broker at 127.0.0.1:")


def test_the_completed_statuses_are_the_verdicts() -> None:
    from offsetstore.cli._values import STATUS_NAMES
    from offsetstore.core.types import GroupStatus

    assert set(STATUS_NAMES) == {s.name for s in GroupStatus if s != GroupStatus.UNSPECIFIED}
