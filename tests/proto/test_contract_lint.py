"""The proto passes buf lint, and scripts/check_contract.sh refuses breaking changes to v1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO = Path("proto/offsetstore/v1/offset_store.proto")
BUF = shutil.which("buf", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))

pytestmark = pytest.mark.skipif(BUF is None, reason="buf not installed (PyPI buf-bin, in the dev extra)")


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BUF": str(BUF), "BUF_LOG_FORMAT": "text"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_buf_lint_passes() -> None:
    result = run(str(BUF), "lint", "--error-format", "text")
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_lint_uses_standard_rules_without_exceptions() -> None:
    # Guards against "fixing" lint by switching rules off.
    text = (ROOT / "buf.yaml").read_text()
    assert "STANDARD" in text
    assert "except" not in text and "ignore" not in text


# --- buf breaking, through the script CI runs, in a scratch repository ---------------


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


def copy_contract(repo: Path) -> None:
    """The .proto files of offsetstore.v1 (the service imports its options' file)."""
    (repo / PROTO.parent).mkdir(parents=True)
    for proto in (ROOT / PROTO.parent).glob("*.proto"):
        shutil.copy(proto, repo / PROTO.parent / proto.name)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding the contract, buf.yaml and the script, one commit deep."""
    repo = tmp_path / "repo"
    copy_contract(repo)
    shutil.copy(ROOT / "buf.yaml", repo / "buf.yaml")
    (repo / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "check_contract.sh", repo / "scripts" / "check_contract.sh")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "contract")
    return repo


def edit_and_commit(repo: Path, old: str, new: str) -> None:
    path = repo / PROTO
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    git(repo, "commit", "-q", "-am", "edit")


def check(repo: Path) -> subprocess.CompletedProcess[str]:
    return run("bash", "scripts/check_contract.sh", cwd=repo)


def test_first_commit_skips_breaking_with_a_message(repo: Path) -> None:
    result = check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipping buf breaking" in result.stdout


def test_additions_pass(repo: Path) -> None:
    edit_and_commit(repo, "  string member_id = 2;\n", "  string member_id = 2;\n  string client_name = 9;\n")
    result = check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "buf breaking against HEAD~1" in result.stdout


def test_declaring_an_idempotency_level_where_there_was_none_passes(repo: Path) -> None:
    # A promise added (buf reports any change of the option); changing a declared one fails below.
    edit_and_commit(
        repo,
        "rpc JoinGroup(JoinGroupRequest) returns (JoinGroupResponse) {\n",
        "rpc JoinGroup(JoinGroupRequest) returns (JoinGroupResponse) {\n    option idempotency_level = IDEMPOTENT;\n",
    )
    result = check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'from "IDEMPOTENCY_UNKNOWN" to "IDEMPOTENT"' in result.stdout


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("int64 generation = 3;", "int64 fencing_generation = 3;", 'changed name from "generation"'),
        ("int64 generation = 3;", "reserved 3;", 'field "3" with name "generation"'),
        ("int64 offset = 3;\n  // Free text", "int32 offset = 3;\n  // Free text", "changed type"),
        (
            "  rpc ReportWatermarks(ReportWatermarksRequest) returns (ReportWatermarksResponse) {\n"
            "    option idempotency_level = IDEMPOTENT;\n"
            "    option (call) = {\n"
            "      permission: PERMISSION_COMMIT\n"
            "      scope: SCOPE_TOPICS\n"
            "      cost: COST_RULE_ENTRIES\n"
            '      cost_field: "watermarks"\n'
            "    };\n"
            "  }\n",
            "",
            "ReportWatermarks",
        ),
        (
            "option idempotency_level = IDEMPOTENT;",
            "option idempotency_level = NO_SIDE_EFFECTS;",
            'changed option "idempotency_level" from "IDEMPOTENT" to "NO_SIDE_EFFECTS"',
        ),
    ],
    ids=["rename", "delete", "retype", "drop-rpc", "change-a-declared-idempotency-level"],
)
def test_breaking_changes_fail(repo: Path, old: str, new: str, message: str) -> None:
    edit_and_commit(repo, old, new)
    result = check(repo)
    assert result.returncode == 100, result.stdout + result.stderr
    assert message in result.stdout


def test_a_base_without_proto_skips_breaking(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("before the contract\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    copy_contract(repo)
    shutil.copy(ROOT / "buf.yaml", repo / "buf.yaml")
    (repo / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "check_contract.sh", repo / "scripts" / "check_contract.sh")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "contract")
    result = check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "has no proto/; skipping buf breaking" in result.stdout


def test_shallow_clone_deepens_to_compare(repo: Path, tmp_path: Path) -> None:
    edit_and_commit(repo, "int64 generation = 3;", "int64 fencing_generation = 3;")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", repo.as_uri(), str(clone))
    result = check(clone)
    assert result.returncode == 100, result.stdout + result.stderr
    assert 'changed name from "generation"' in result.stdout
