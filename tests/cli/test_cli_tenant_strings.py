"""A tenant's strings reach an operator's terminal escaped, and a typed token no process's argv (issue 56, L2 and L4).

Group ids, adoption sources and actors are free text: an escape sequence in one set the
terminal's title, or moved the cursor up and erased the row above, in ``groups list`` and
``groups history``; a newline in a group id made a fake completion candidate. The completion
passed the line's words, a ``--token`` among them, as arguments of the ``offsetstore`` it runs,
where ``ps`` shows them to every user of the machine.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient, TopicPartition
from tests.fixtures.completion import completions
from tests.fixtures.fix_auth import TOKENS
from tests.fixtures.fix_server import ServerHandle

TITLE = "\x1b]0;pwned\x07"  # sets the terminal's title
HIDE = "\x1b[1A\x1b[2K"  # cursor up, erase the line: hides the row above


def test_list_and_history_show_a_tenants_strings_escaped(client: OffsetStoreClient, groups, group_id: str) -> None:
    hostile = f"{group_id}-{TITLE}x\nfake-row"
    client.commit_offsets(hostile, {("t-a", 0): 5})
    client.reset_offsets(hostile, to_offsets={TopicPartition("t-a", 0): 3}, source=f"kafka {HIDE}")

    listed = groups("list", "--prefix", group_id)
    history = groups("history", hostile)
    described = groups("describe", hostile)
    for run in (listed, history, described):
        assert run.code == 0, run.err
        assert "\x1b" not in run.out and "\x07" not in run.out, run.out
        assert not [line for line in run.out.splitlines() if line.startswith("fake-row")]  # no row of its own
    assert f"{group_id}-\\x1b]0;pwned\\x07x\\nfake-row" in listed.out
    assert "kafka \\x1b[1A\\x1b[2K" in history.out


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    """A folder whose ``offsetstore`` records its arguments, then runs the real one: the first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    wrapper = folder / "offsetstore"
    wrapper.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" >> {tmp_path / "argv"}\nexec {sys.executable} -m offsetstore.cli.main "$@"\n'
    )
    wrapper.chmod(0o755)
    return folder


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_a_token_typed_on_the_line_never_reaches_argv(token_server: ServerHandle, argv_log: Path) -> None:
    group = f"t-{uuid.uuid4().hex[:12]}"
    with OffsetStoreClient(token_server.address, token=TOKENS["committer"]) as committer:
        committer.commit_offsets(group, {("t-topic", 0): 1})
    path = f"{argv_log}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    for token in (f"--token {TOKENS['admin']}", f"--token={TOKENS['admin']}"):
        line = f"offsetstore groups describe --server {token_server.address} {token} {group}"
        assert completions(line, {"PATH": path}) == [group]  # the token still reached the server
    argv = (argv_log.parent / "argv").read_text()
    assert "completion" in argv  # the wrapper ran
    assert TOKENS["admin"] not in argv, argv


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_a_group_id_with_a_control_character_is_no_completion_candidate(
    server: ServerHandle, client: OffsetStoreClient, group_id: str
) -> None:
    plain, hostile = f"{group_id}-plain", f"{group_id}-x\n{group_id}-fake"
    for name in (plain, hostile, f"{group_id}-{TITLE}"):
        client.commit_offsets(name, {("t-a", 0): 1})
    assert completions(f"offsetstore groups describe --server {server.address} {group_id}") == [plain]
