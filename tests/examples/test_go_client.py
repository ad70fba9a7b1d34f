"""docs/go.md for real: its snippets, with stubs that buf generates from the proto, compiled by Go and run against a server.

The Go modules come from the Go module proxy on the first run (pinned below) and from
Go's module cache after that. Without a Go toolchain the tests skip saying so; under CI
they fail, since the machine has one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient
from tests.fixtures.doc_snippets import snippets
from tests.fixtures.fix_server import ServerHandle
from tests.fixtures.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("go_client") / "driver.go"
PLUGINS = (
    "google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12",
    "google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1",
)
GO_MOD = """module example.com/consumer

go 1.21

require (
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)
"""

# A first run on a fresh machine downloads and compiles grpc-go and the plugins: minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        if os.environ.get("CI"):
            pytest.fail("no Go toolchain on a CI machine")
        pytest.skip("no Go toolchain (go) installed: docs/go.md is not compiled")
    return go


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def consumer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The doc's snippets and the driver, built into one program."""
    go = _go()
    gobin = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "offsetstore" / "go-bin"
    env = {**os.environ, "GOBIN": str(gobin), "GOFLAGS": "-mod=mod",
           "PATH": os.pathsep.join([str(gobin), os.path.dirname(go), os.path.dirname(sys.executable), os.environ["PATH"]])}  # fmt: skip
    work = tmp_path_factory.mktemp("go")
    for plugin in PLUGINS:
        if not (gobin / plugin.split("@")[0].rsplit("/", 1)[1]).is_file():
            _run([go, "install", plugin], work, env)

    (buf_gen,) = snippets(ROOT / "docs" / "go.md", "yaml")
    (work / "buf.gen.yaml").write_text(buf_gen.replace("path/to/offsetstore/proto", str(ROOT / "proto")))
    _run(["buf", "generate"], work, env)
    (work / "go.mod").write_text(GO_MOD)
    for i, code in enumerate(snippets(ROOT / "docs" / "go.md", "go")):
        (work / f"snippet{i}.go").write_text(f"package main\n\n{code}")
    shutil.copy(DRIVER, work / "driver.go")
    _run([go, "mod", "tidy"], work, env)
    _run([go, "build", "-o", "consumer", "."], work, env)
    return work / "consumer"


@pytest.fixture
def group() -> str:
    return f"go-{uuid.uuid4().hex[:10]}"


def test_compare_and_set_and_violations_as_the_guide_reads_them(
    consumer: Path, server: ServerHandle, client: OffsetStoreClient, group: str
) -> None:
    done = subprocess.run([consumer, server.address, group, "cas"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # Nothing stored: expected -1 commits 7. Then expected 3 is refused, and the error says 7 is stored.
    assert lines[:2] == ["cas -1 7 false <nil>", "cas 3 7 true <nil>"], lines
    assert [line for line in lines if line.startswith("violation")] == ["violation offsets[0].partition"], lines
    assert client.fetch_offsets(group).offsets[("go-orders", 0)].offset == 7


def test_the_commit_loop_commits_until_a_reset_fences_it(
    consumer: Path, server: ServerHandle, client: OffsetStoreClient, group: str
) -> None:
    with subprocess.Popen([consumer, server.address, group, "consume"], stdout=subprocess.PIPE, text=True) as process:
        try:
            wait_for(lambda: sum(o.offset for o in client.fetch_offsets(group).offsets.values()) >= 150,
                     "the Go loop committed 150 records")  # fmt: skip
            reset = client.reset_offsets(group, all_topics=True, to_offset=0)
            out, _ = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 3, out  # ErrFenced: the next commit met STALE_GENERATION
    assert "fenced" in out
    # The fenced loop wrote nothing after the reset: every partition is where the operator put it.
    fetched = client.fetch_offsets(group)
    assert {k: v.offset for k, v in fetched.offsets.items()} == {("go-orders", p): 0 for p in range(3)}
    assert fetched.generation == reset.generation
