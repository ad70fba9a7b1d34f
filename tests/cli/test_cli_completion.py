"""``offsetstore completion bash``: the script bash runs, asked what it completes after each typed line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid

import pytest

from offsetstore.client import OffsetStoreClient
from tests.fixtures.completion import completions
from tests.fixtures.fix_auth import TOKENS
from tests.fixtures.fix_server import ServerHandle, free_port

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("offsetstore gr", ["groups"]),
        ("offsetstore groups re", ["reset"]),
        (
            "offsetstore groups reset g --to-",
            ["--to-offset", "--to-earliest", "--to-latest", "--to-current", "--to-datetime"],
        ),
        ("offsetstore groups describe --output ", ["table", "json"]),
        ("offsetstore --server h:1 groups describe --gr", ["--group"]),
        ("offsetstore serve --metrics-l", ["--metrics-listen"]),
        ("offsetstore completion ", ["bash", "--help"]),
        ("offsetstore --vers", ["--version"]),
    ],
)
def test_the_script_completes_commands_options_and_choices(line: str, offered: list[str]) -> None:
    assert completions(line) == offered


def test_an_option_that_takes_a_file_or_address_leaves_completion_to_bash() -> None:
    # Nothing offered: `complete -o default` then completes file names.
    assert completions("offsetstore groups import --tls-ca ") == []
    assert completions("offsetstore serve --listen ") == []


def test_state_completes_its_statuses() -> None:
    """Issue 49: ``--state`` took any word; its values are the verdicts."""
    assert completions("offsetstore groups list --state ") == [
        "LOST", "PAST_END", "STOPPED", "STALLED", "LAGGING", "UNCONFIRMED", "OK", "IDLE",
    ]  # fmt: skip
    assert completions("offsetstore groups list --state LA") == ["LAGGING"]


@pytest.fixture
def named_groups(client: OffsetStoreClient, group_id: str) -> list[str]:
    """Three groups of the server under one fresh prefix, and one that does not share it."""
    names = [f"{group_id}-orders", f"{group_id}-payments", f"{group_id}-returns"]
    for name in [*names, f"x{group_id}"]:
        client.commit_offsets(name, {("t", 0): 1})
    return names


def test_a_group_operand_completes_to_the_servers_groups(server: ServerHandle, named_groups: list[str]) -> None:
    """Issue 49: a group's name completes from the server the line names, as --state's values do."""
    prefix = named_groups[0].rpartition("-")[0]
    for command in ("describe", "history", "adopt"):  # one case of the script serves them all
        assert completions(f"offsetstore groups {command} --server {server.address} {prefix}") == named_groups
    assert completions(f"offsetstore groups --server {server.address} describe {prefix}-p") == [named_groups[1]]
    assert completions(f"offsetstore groups reset --server {server.address} --group {prefix}-r") == [named_groups[2]]
    # From the environment, as the command itself would reach it.
    assert completions(f"offsetstore groups describe {prefix}-o", {"OFFSETSTORE_SERVER": server.address}) == [
        named_groups[0]
    ]


def test_after_the_group_the_options_complete(server: ServerHandle, named_groups: list[str]) -> None:
    line = f"offsetstore groups describe --server {server.address} {named_groups[0]} --st"
    assert completions(line) == ["--state"]
    assert completions(f"offsetstore groups reset --server {server.address} {named_groups[0]} {named_groups[0]}") == []


def test_group_names_need_the_lines_token(token_server: ServerHandle) -> None:
    """The line's --token reaches the server; without one the server refuses and nothing is offered."""
    group = f"t-{uuid.uuid4().hex[:12]}"  # the tokens' grants are on groups starting with t-
    with OffsetStoreClient(token_server.address, token=TOKENS["committer"]) as committer:
        committer.commit_offsets(group, {("t-topic", 0): 1})
    line = f"offsetstore groups describe --server {token_server.address} --token {TOKENS['admin']} {group}"
    assert completions(line) == [group]
    assert completions(f"offsetstore groups describe --server {token_server.address} {group}") == []


def test_no_server_offers_nothing_quietly() -> None:
    """A server that is down: no names, no error on the terminal, and the TAB returns."""
    address = f"127.0.0.1:{free_port()}"
    assert completions(f"offsetstore groups describe --server {address} g") == []
    done = subprocess.run(
        [sys.executable, "-m", "offsetstore.cli.main", "completion", "--groups", "g", "bash", "--",
         "groups", "describe", "--server", address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
