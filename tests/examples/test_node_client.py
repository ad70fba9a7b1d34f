"""The Node.js example (examples/node) against a real server: fencing, compare-and-set, error details."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient
from tests.fixtures.fix_server import ServerHandle
from tests.fixtures.node_example import npm_installed

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node"
NODE = shutil.which("node")

needs_node = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (the example needs node >= 18)")


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """examples/node/node_modules, installed from package-lock.json by `npm ci` when missing."""
    return npm_installed(EXAMPLE, "@grpc/grpc-js")


def run_example(server: ServerHandle, group_id: str) -> tuple[dict, str]:
    result = subprocess.run(
        [str(NODE), str(EXAMPLE / "commit_loop.js"), "--target", server.address, "--group", group_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"commit_loop.js exited {result.returncode}:\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@needs_node
def test_node_commit_loop(node_modules: Path, server: ServerHandle, client: OffsetStoreClient, group_id: str) -> None:
    summary, log = run_example(server, group_id)

    # member-a committed two batches at generation 1, then member-b joined: a's third
    # commit was refused and the Node client read the reason from the ErrorInfo detail.
    a = summary["member_a"]
    assert a["fenced"] is True
    assert (a["code"], a["reason"]) == ("FAILED_PRECONDITION", "STALE_GENERATION")
    assert (a["generation"], a["current_generation"]) == (1, 2)
    assert a["positions"] == {"node-orders:0": 20, "node-orders:1": 20}

    # What a committed is the next offset to read; an untouched partition comes back as -1.
    assert summary["fetched"] == [
        {"topic": "node-orders", "partition": 0, "offset": 20},
        {"topic": "node-orders", "partition": 1, "offset": 20},
        {"topic": "node-orders", "partition": 2, "offset": -1},
    ]
    assert summary["generation"] == 2

    # member-b joined again (generation 3), resumed from there and ran its source dry.
    b = summary["member_b"]
    assert b["fenced"] is False and b["generation"] == 3
    assert b["positions"] == {"node-orders:0": 25, "node-orders:1": 30}

    # The compare-and-set from 25 to 30 won; the second one, still expecting 25, lost.
    assert summary["mismatch"] == {"code": "ABORTED", "reason": "OFFSET_MISMATCH", "stored_offset": 30}

    # Bad input: INVALID_ARGUMENT with a BadRequest naming the field.
    invalid = summary["invalid"]
    assert (invalid["code"], invalid["reason"]) == ("INVALID_ARGUMENT", "INVALID_ARGUMENT")
    assert [v["field"] for v in invalid["violations"]] == ["offsets[0].topic"]

    assert "fenced at generation 1; the group is at 2" in log

    # The Python client sees exactly what the Node client left behind.
    fetched = client.fetch_offsets(group_id)
    assert {tp: c.offset for tp, c in fetched.offsets.items()} == {("node-orders", 0): 30, ("node-orders", 1): 30}
    assert fetched.generation == 3


def test_package_lock_pins_what_package_json_names() -> None:
    package = json.loads((EXAMPLE / "package.json").read_text())
    lock = json.loads((EXAMPLE / "package-lock.json").read_text())
    for name, version in package["dependencies"].items():
        assert version[0].isdigit(), f"{name} is not pinned to an exact version: {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


@needs_node
def test_help_prints_the_usage_and_a_bad_option_exits_2(node_modules) -> None:
    shown = subprocess.run([str(NODE), str(EXAMPLE / "commit_loop.js"), "--help"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: node commit_loop.js")
    bad = subprocess.run([str(NODE), str(EXAMPLE / "commit_loop.js"), "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "Unknown option '--bogus'" in bad.stderr
