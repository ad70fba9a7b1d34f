"""``--command-config``: a profile of the groups commands' connection options, as kafka-consumer-groups keeps one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offsetstore.cli import groups as cli
from offsetstore.cli._profile import PROFILE_ENV
from tests.fixtures.fix_server import ServerHandle

NOWHERE = "127.0.0.1:1"  # nothing listens there


@pytest.fixture
def profile(tmp_path: Path, server: ServerHandle) -> Path:
    path = tmp_path / "offsetstore.properties"
    path.write_text(f"# the team's store\nserver = {server.address}\noutput=json\ntimeout=20\n")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_profile_gives_the_server_and_output(client, group_id, profile, capsys, monkeypatch) -> None:
    client.commit_offsets(group_id, {("orders", 0): 5})
    monkeypatch.setenv("OFFSETSTORE_SERVER", NOWHERE)  # the profile, asked for, wins over the environment
    code, out, err = run(capsys, "describe", group_id, "--command-config", str(profile))
    assert code == 0, err
    assert out.lstrip().startswith("{") and group_id in out
    # An option given on the command line wins over the profile.
    code, out, _ = run(capsys, "describe", group_id, "--command-config", str(profile), "--output", "table")
    assert code == 0 and out.startswith("GROUP")


def test_the_profile_from_the_environment(client, group_id, profile, capsys, monkeypatch) -> None:
    client.commit_offsets(group_id, {("orders", 0): 5})
    monkeypatch.setenv(PROFILE_ENV, str(profile))
    code, out, err = run(capsys, "export", group_id)
    assert code == 0, err
    assert [(o["topic"], o["partition"], o["offset"]) for o in json.loads(out)] == [("orders", 0, 5)]


def test_a_bad_profile_is_one_error_naming_its_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "p.properties"
    path.write_text(f"server={NOWHERE}\nsever=typo\n")
    code, out, err = run(capsys, "list", "--command-config", str(path))
    assert (code, out) == (1, "")
    assert err.startswith(f"Error: {path}: line 2: unknown key 'sever'")
    code, _, err = run(capsys, "list", "--command-config", str(tmp_path / "missing.properties"))
    assert code == 1 and "cannot read the profile" in err


def test_paths_in_a_profile_are_read_from_its_folder(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "p.properties").write_text(f"server={NOWHERE}\ntls-ca=ca.pem\n")
    code, _, err = run(capsys, "list", "--command-config", str(folder / "p.properties"))
    assert code == 1
    assert f"cannot read the CA file {folder / 'ca.pem'}" in err
