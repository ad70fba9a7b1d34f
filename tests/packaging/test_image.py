"""The image, built from the Dockerfile with podman and run as a user runs it.

One build per session (``podman build --format docker``: the OCI format has no HEALTHCHECK),
then a container on the machine's PostgreSQL (a scratch database of its own): its HEALTHCHECK
kept and passing, not root, a commit and a fetch through the Python client, metrics, and a
SIGTERM that lets a call in flight finish before the container exits 0.

Where podman is missing (``../shared/machine/containers.sh`` sets it up on our machines) the
tests skip, saying so; under CI they fail instead. The Python base image is
$OFFSETSTORE_TEST_PYTHON_IMAGE, else ``localhost/debian-python:3.11`` where that script made it
(no image registry is reachable there), else the Dockerfile's own default.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
import sqlalchemy as sa

from offsetstore.client import OffsetStoreClient
from offsetstore.runtime import migrate
from tests.fixtures.dockerfile import Stage, env_of, exec_form, healthcheck_command, read_dockerfile
from tests.fixtures.fix_db import group_locked, new_database, stored_offsets
from tests.fixtures.fix_server import free_port
from tests.fixtures.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]
PODMAN = shutil.which("podman")
#: The base image ../shared/machine/containers.sh builds from Debian's packages.
LOCAL_PYTHON_IMAGE = "localhost/debian-python:3.11"
#: The machine's PostgreSQL (make postgres), where OFFSETSTORE_TEST_DATABASE_URL names no TCP server:
#: the embedded one listens on a private Unix socket only, which the container cannot reach.
MACHINE_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
#: What the image adds to its Python base: the virtualenv (150 MB today). Arrow or Spark would double it.
ADDED_BYTES = 250_000_000

# One group of its own (not the packaging directory's): it builds nothing in the source tree, so
# it need not wait for the wheels the other packaging tests build there.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("image")]


def _unavailable(reason: str) -> NoReturn:
    """Skips the test where something it needs is missing; CI must have it, so there it fails."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI runs the image's tests: .ci/run sets podman up)", pytrace=False)
    pytest.skip(reason)


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    done = subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


@dataclass(frozen=True)
class Image:
    tag: str
    final: Stage
    build_seconds: float
    size: int
    base_size: int


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    if PODMAN is None:
        _unavailable("podman is not installed (bash ../shared/machine/containers.sh sets it up)")
    stages = read_dockerfile()
    base = os.environ.get("OFFSETSTORE_TEST_PYTHON_IMAGE")
    if base is None:
        base = (
            LOCAL_PYTHON_IMAGE if podman("image", "exists", LOCAL_PYTHON_IMAGE, check=False).returncode == 0 else None
        )
    tag = f"localhost/offsetstore-test:{uuid.uuid4().hex[:12]}"
    # No layers kept: COPY . . changes with any source edit, so a cache would seldom serve, and each
    # run would leave its ~150 MB of intermediate images behind in podman's store.
    command = ["build", "--layers=false", "--network=host", "--format", "docker", "--tag", tag]
    if base is not None:
        command += ["--build-arg", f"PYTHON_IMAGE={base}"]
    # pip inside the build reaches the package index as this machine does (its CAs and its settings).
    command += [
        arg
        for path in ("/etc/ssl/certs", "/etc/pip.conf")
        if Path(path).exists()
        for arg in ("-v", f"{path}:{path}:ro")
    ]
    started = time.monotonic()
    built = podman(*command, str(ROOT), timeout=1200, check=False)
    build_seconds = time.monotonic() - started
    try:
        assert built.returncode == 0, f"podman build failed:\n{built.stdout[-4000:]}\n{built.stderr[-4000:]}"
        [inspected] = json.loads(podman("image", "inspect", tag).stdout)
        [from_image] = json.loads(podman("image", "inspect", base or stages[-1].image).stdout)
        yield Image(tag, stages[-1], build_seconds, inspected["Size"], from_image["Size"])
    finally:
        podman("rmi", "--force", tag, check=False)


@pytest.fixture
def container_database_url() -> Iterator[str]:
    """A new, empty database on a PostgreSQL that the container reaches over TCP, dropped afterwards."""
    url = os.environ.get("OFFSETSTORE_TEST_DATABASE_URL")
    server = (
        migrate.normalize_url(url) if url and sa.make_url(migrate.normalize_url(url)).host else MACHINE_DATABASE_URL
    )
    engine = sa.create_engine(server, poolclass=sa.NullPool)
    try:
        with engine.connect():
            pass
    except sa.exc.OperationalError as error:
        _unavailable(f"no PostgreSQL over TCP at {sa.make_url(server)!r} (make postgres): {error.orig}")
    finally:
        engine.dispose()
    with new_database(server) as scratch:
        yield scratch


def test_the_image_keeps_its_healthcheck_user_and_size(image: Image) -> None:
    print(
        f"image: built in {image.build_seconds:.0f} s, {image.size / 1e6:.0f} MB ({image.base_size / 1e6:.0f} MB its base)"
    )
    [inspected] = json.loads(podman("image", "inspect", image.tag).stdout)
    config = inspected["Config"]
    # The Dockerfile's HEALTHCHECK survives the build (the OCI format would drop it, with a warning).
    assert inspected["Healthcheck"]["Test"] == ["CMD", *healthcheck_command(image.final)]  # podman's place for it
    assert config["User"] == image.final.last("USER") == "10001:10001"
    assert config["Entrypoint"] + config["Cmd"] == exec_form(image.final.last("ENTRYPOINT")) + exec_form(
        image.final.last("CMD")
    )
    assert image.size - image.base_size < ADDED_BYTES, (image.size, image.base_size)


def test_the_image_serves_commits_and_drains_on_sigterm(image: Image, container_database_url: str) -> None:
    listen, metrics = free_port(), free_port()
    name = f"offsetstore-test-{uuid.uuid4().hex[:12]}"
    # libpq's spelling, as a user passes it; no TLS, no tokens: on 127.0.0.1 only (host network).
    database = sa.make_url(container_database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    environment = {
        "OFFSETSTORE_DATABASE_URL": database,
        "OFFSETSTORE_LISTEN": f"127.0.0.1:{listen}",
        "OFFSETSTORE_METRICS_LISTEN": f"127.0.0.1:{metrics}",
        # The drain below holds a commit on a row lock while the signal comes: longer than the default 5 s.
        "OFFSETSTORE_STATEMENT_TIMEOUT_MS": "60000",
    }
    assert set(environment) - {"OFFSETSTORE_DATABASE_URL", "OFFSETSTORE_STATEMENT_TIMEOUT_MS"} <= set(
        env_of(image.final)
    )
    flags = [arg for item in environment.items() for arg in ("--env", "=".join(item))]
    engine = sa.create_engine(container_database_url, poolclass=sa.NullPool)
    podman("run", "--detach", "--name", name, "--network=host", *flags, image.tag)

    def logs() -> str:
        done = podman("logs", name, check=False)
        return done.stdout + done.stderr

    def records() -> list[dict]:
        return [json.loads(line) for line in logs().splitlines() if line.startswith("{")]

    try:
        # Its own HEALTHCHECK says healthy once it serves (podman runs the image's command in the container).
        def healthy() -> bool:
            state = json.loads(podman("inspect", "--format", "{{json .State}}", name).stdout)
            assert state["Running"], f"the container exited {state['ExitCode']}:\n{logs()}"
            return podman("healthcheck", "run", name, check=False).returncode == 0

        wait_for(healthy, "the container's HEALTHCHECK to pass", 120)
        assert podman("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip() == "healthy"

        # The server itself (the container's first process) runs as 10001, real and effective.
        status = podman("exec", name, "cat", "/proc/1/status").stdout
        [uids] = [line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")]
        assert set(uids) == {"10001"}, status
        who = podman("exec", name, "id").stdout.split()
        assert who[:2] == ["uid=10001(offsetstore)", "gid=10001(offsetstore)"], who

        group = f"image-{uuid.uuid4().hex[:12]}"
        with OffsetStoreClient(f"127.0.0.1:{listen}", timeout=60) as client:
            client.commit_offsets(group, {("orders", 0): 42, ("orders", 1): 7})
            fetched = client.fetch_offsets(group)
            assert {tp: c.offset for tp, c in fetched.offsets.items()} == {("orders", 0): 42, ("orders", 1): 7}
            assert stored_offsets(engine, group) == {("orders", 0): 42, ("orders", 1): 7}  # the database it was given

            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as response:
                body = response.read().decode()
            assert "offsetstore_database_up 1.0" in body
            assert re.search(r'grpc_server_handled_total\{[^}]*grpc_method="CommitOffsets"[^}]*\} 1\.0', body), body

            # SIGTERM (what `podman stop` / `docker stop` send) while a commit waits on the group's row lock:
            # the commit completes, then the container exits 0.
            outcome: list[object] = []
            with group_locked(container_database_url, group) as lock:
                committing = threading.Thread(
                    target=lambda: outcome.append(_commit_or_error(client, group, {("orders", 0): 43}))
                )
                committing.start()
                wait_for(lambda: lock.waiting() >= 1, "the commit to wait on the group's lock", 60)
                podman("kill", "--signal", "TERM", name)
                wait_for(
                    lambda: any(r.get("message") == "shutting down" for r in records()), "the server to see SIGTERM", 30
                )
                lock.release()
                committing.join(60)
            assert outcome == [None], outcome
        exit_code = podman("wait", name, timeout=90).stdout.strip()
        assert exit_code == "0", logs()
        assert stored_offsets(engine, group)[("orders", 0)] == 43
        logged = records()
        assert [r.get("signal") for r in logged if r.get("message") == "shutting down"] == ["SIGTERM"]
        assert logged[-1].get("message") == "stopped", logs()
        assert not [r for r in logged if r.get("level") in ("ERROR", "CRITICAL")], logs()
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
        engine.dispose()


def _commit_or_error(client: OffsetStoreClient, group: str, offsets: dict) -> object:
    try:
        client.commit_offsets(group, offsets)
    except Exception as error:  # noqa: BLE001 - the test reports it
        return error
    return None
