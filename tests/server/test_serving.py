"""The asyncio serving stack (issue 21): no call holds a worker, tenants wait behind themselves, every core serves.

Each test runs the real ``offsetstore serve`` on the session's PostgreSQL and attacks it
from processes of its own, bounded in count and time, on 127.0.0.1 only. Latency bounds
compare a well-behaved tenant's p99 quiet and loaded in the same run, with a wide margin.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.client import OffsetStoreClient
from tests.fixtures.fix_auth import PKI, TOKENS, fresh
from tests.fixtures.waits import wait_for, wait_until_serving

# Opens COUNT calls of METHOD that send their headers and never their request, holds them
# for SECONDS, and says how many the server ended before that (refused, or timed out).
STALLER = """
import asyncio, sys
import grpc
address, method, count, seconds, token, ca, key, cert = sys.argv[1:9]
count, seconds = int(count), float(seconds)

async def main():
    if ca:
        creds = grpc.ssl_channel_credentials(open(ca, "rb").read(), open(key, "rb").read(), open(cert, "rb").read())
        channels = [grpc.aio.secure_channel(address, creds) for _ in range(10)]
    else:
        channels = [grpc.aio.insecure_channel(address) for _ in range(10)]
    metadata = (("authorization", "Bearer " + token),) if token else None
    calls = [channels[i % 10].stream_unary(method)(metadata=metadata) for i in range(count)]
    await asyncio.gather(*(c.wait_for_connection() for c in calls), return_exceptions=True)
    print("ready", flush=True)
    await asyncio.sleep(seconds)
    print(sum(c.done() for c in calls), flush=True)
    for c in calls:
        c.cancel()
    for channel in channels:
        await channel.close()

asyncio.run(main())
"""

# Sends the widest valid commit (10,000 partitions) or report (10,000 watermarks) in a loop,
# each built once and sent again and again, as an attacker would (it costs the sender nothing).
WIDE = """
import sys, time
import grpc
from offsetstore.v1 import offset_store_pb2 as pb, offset_store_pb2_grpc as pb_grpc
address, token, kind, group, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
metadata = (("authorization", "Bearer " + token),)
if kind == "commit":
    requests = [pb.CommitOffsetsRequest(group_id=group, offsets=[
        pb.OffsetCommit(topic="t-wide", partition=p, offset=n) for p in range(10_000)]) for n in (1, 2)]
else:
    requests = [pb.ReportWatermarksRequest(watermarks=[
        pb.Watermark(topic="t-wide", partition=p, log_start_offset=0, log_end_offset=n)
        for p in range(10_000)]) for n in (1, 2)]
done = 0
with grpc.insecure_channel(address) as channel:
    stub = pb_grpc.OffsetStoreServiceStub(channel)
    send = stub.CommitOffsets if kind == "commit" else stub.ReportWatermarks
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        try:
            send(requests[done % 2], metadata=metadata, timeout=60)
            done += 1
            if done == 1:
                print("biting", flush=True)  # the test measures once every attacker's first call is through
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            time.sleep(0.05)
print(done)
"""


@dataclass
class Served:
    address: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(
    database_url: str, directory: Path, *args: str, client: dict | None = None, port: int = 0
) -> Iterator[Served]:
    """``offsetstore serve`` on the session's database until the block ends (SIGTERM, exit 0)."""
    directory.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{port or free_port()}"
    log = directory / f"serve-{address.rpartition(':')[2]}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    command = [sys.executable, "-m", "offsetstore.cli.main", "serve", "--database-url", database_url]
    command += ["--no-migrate", "--listen", address, "--metrics-listen", "", *args]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    served = Served(address, process, log)
    try:
        with OffsetStoreClient(address, timeout=5, **(client or {})) as probe:
            wait_until_serving(probe, process, served.output)
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, served.output()


def p99(latencies: list[float]) -> float:
    return sorted(latencies)[int(len(latencies) * 0.99) - 1]


def timed_commits(address: str, count: int, token: str, **client: object) -> list[float]:
    """Latencies of ``count`` commits of one partition by a well-behaved tenant; any error fails the test."""
    group = fresh()
    latencies = []
    with OffsetStoreClient(address, token=token, timeout=10, **client) as committer:  # type: ignore[arg-type]
        for offset in range(5 + count):  # the first few open the connection: not timed
            started = time.perf_counter()
            committer.commit_offsets(group, {("t-orders", 0): offset})
            if offset >= 5:
                latencies.append(time.perf_counter() - started)
    return latencies


def quiet_then_loaded(address: str, start_load, token: str, **client: object) -> tuple[float, float, object]:
    timed_commits(address, 20, token, **client)
    quiet = timed_commits(address, 1000, token, **client)
    with start_load() as load:
        loaded = timed_commits(address, 1000, token, **client)
    ratio = p99(loaded) / p99(quiet)
    print(f"victim p99: quiet {p99(quiet) * 1000:.2f} ms, loaded {p99(loaded) * 1000:.2f} ms (x{ratio:.1f})")
    return p99(quiet), p99(loaded), load


@contextlib.contextmanager
def stalled(address: str, method: str, count: int, token: str = "", tls: tuple[str, str, str] | None = None):
    """``count`` calls of ``method`` whose request never arrives, from a process of their own."""
    ca, key, cert = tls or ("", "", "")
    process = subprocess.Popen(
        [sys.executable, "-c", STALLER, address, method, str(count), "60", token, ca, key, cert],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.slow
@pytest.mark.alone
def test_calls_that_never_send_their_request_stop_no_one(database_url: str, pki: PKI, tmp_path: Path) -> None:
    # 200 anonymous health checks and 50 reads of a token holder, none sending its request.
    with serve(database_url, tmp_path, "--tokens-file", str(pki.tokens_file)) as served:

        @contextlib.contextmanager
        def attack():
            with (
                stalled(served.address, "/grpc.health.v1.Health/Check", 200),
                stalled(served.address, "/offsetstore.v1.OffsetStoreService/FetchOffsets", 50, TOKENS["reader"]),
            ):
                yield None

        quiet, loaded, _ = quiet_then_loaded(served.address, attack, TOKENS["committer"])
    assert loaded <= 5 * quiet


@pytest.mark.slow
@pytest.mark.alone
def test_stalled_calls_under_mutual_tls_with_a_certificate_without_grants(
    database_url: str, pki: PKI, tmp_path: Path
) -> None:
    tls = [*("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))]
    tls += ["--tls-client-ca", str(pki.ca.cert), "--tokens-file", str(pki.tokens_file)]
    client = {"credentials": pki.channel_credentials(pki.alice)}
    with serve(database_url, tmp_path, *tls, client=client) as served:
        mallory = (str(pki.ca.cert), str(pki.mallory.key), str(pki.mallory.cert))  # the right CA, no grants

        @contextlib.contextmanager
        def attack():
            with stalled(served.address, "/offsetstore.v1.OffsetStoreService/CommitOffsets", 250, tls=mallory):
                yield None

        quiet, loaded, _ = quiet_then_loaded(served.address, attack, TOKENS["committer"], **client)
    assert loaded <= 5 * quiet


@pytest.mark.slow
@pytest.mark.alone
def test_one_tenants_widest_commits_and_reports_do_not_stall_another(
    database_url: str, pki: PKI, tmp_path: Path
) -> None:
    with serve(database_url, tmp_path, "--tokens-file", str(pki.tokens_file)) as served:
        wide_group = fresh()

        @contextlib.contextmanager
        def attack():
            kinds = ["commit"] * 4 + ["report"]
            processes = [
                subprocess.Popen(
                    [sys.executable, "-c", WIDE, served.address, TOKENS["committer"], kind, wide_group, "120"],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for kind in kinds
            ]
            try:
                for process in processes:  # the load bites: each attacker's first wide call is through
                    assert process.stdout is not None
                    assert process.stdout.readline().strip() == "biting", "an attacker ended before its first call"
                yield processes
            finally:
                for process in processes:
                    process.send_signal(signal.SIGTERM)
                    process.communicate(timeout=60)

        quiet, loaded, _ = quiet_then_loaded(served.address, attack, TOKENS["admin"])
    assert loaded <= 5 * quiet


def _serving_processes(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_text()
                # The serving processes, not multiprocessing's resource tracker.
                if int(stat.rpartition(")")[2].split()[1]) == pid and "spawn_main" in command:
                    if "resource_tracker" not in command:
                        found.add(int(entry.name))
    return found


@pytest.mark.slow
def test_sigterm_under_load_loses_no_acknowledged_commit(database_url: str, engine: sa.Engine, tmp_path: Path) -> None:
    acknowledged: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    with serve(database_url, tmp_path, "--processes", "2", "--grace-seconds", "10") as served:
        stop = threading.Event()

        def commit_until_refused() -> None:
            group = fresh("sig-")
            acknowledged[group] = []
            try:
                with OffsetStoreClient(served.address, timeout=5) as client:
                    for offset in range(1, 100_000):
                        if stop.is_set():
                            return
                        client.commit_offsets(group, {("t-orders", 0): offset})
                        acknowledged[group].append(offset)
            except Exception as error:  # the server went away: expected once it drained
                errors.append(error)

        threads = [threading.Thread(target=commit_until_refused) for _ in range(8)]
        for thread in threads:
            thread.start()
        # Under load: the commits are flowing when the signal comes.
        wait_for(lambda: sum(len(o) for o in acknowledged.values()) > 200, "200 acknowledged commits", 60)
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(60) == 0, served.output()
        stop.set()
        for thread in threads:
            thread.join(60)
    assert sum(len(offsets) for offsets in acknowledged.values()) > 100
    with engine.connect() as conn:
        for group, offsets in acknowledged.items():
            stored = set(
                conn.execute(
                    sa.text("SELECT new_offset FROM offsetstore.offset_history WHERE group_id = :g"), {"g": group}
                ).scalars()
            )
            assert set(offsets) <= stored, group


@pytest.mark.slow
def test_sighup_without_a_tokens_file_is_no_reason_to_die(database_url: str, tmp_path: Path) -> None:
    # `kill -HUP` is the documented rotation step; a server without tokens has nothing to rotate.
    with serve(database_url, tmp_path) as served:
        served.process.send_signal(signal.SIGHUP)
        stop_at = time.monotonic() + 30
        while "nothing to reload" not in served.output():
            assert served.process.poll() is None, served.output()
            assert time.monotonic() < stop_at, served.output()
            time.sleep(0.1)
        with OffsetStoreClient(served.address, timeout=10) as client:
            assert client.health() == "SERVING"
            client.commit_offsets(fresh(), {("t-orders", 0): 1})


def test_a_database_that_cannot_be_reached_is_one_line_and_exit_code_2(database_url: str) -> None:
    missing = sa.make_url(database_url).set(database="offsetstore_no_such_database").render_as_string(False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    command = [sys.executable, "-m", "offsetstore.cli.main", "serve", "--database-url", missing]
    # No /metrics: its default port (9464) is a `make run`'s on this machine, and is checked first.
    command += ["--listen", f"127.0.0.1:{free_port()}", "--metrics-listen", ""]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the database" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_another_server_holds_is_one_line_and_exit_code_2(database_url: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
        command = [sys.executable, "-m", "offsetstore.cli.main", "serve", "--database-url", database_url]
        command += ["--listen", address, "--metrics-listen", ""]  # the default 9464 may be a `make run`'s
        done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is another offsetstore serving there?" in lines[0], done.stderr


@pytest.mark.slow
def test_a_killed_serving_process_is_replaced(database_url: str, tmp_path: Path) -> None:
    with serve(database_url, tmp_path, "--processes", "2") as served:
        before = _serving_processes(served.process.pid)
        assert len(before) == 2, served.output()
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        stop_at = time.monotonic() + 60
        while True:
            now = _serving_processes(served.process.pid)
            if len(now) == 2 and victim not in now:
                break
            assert time.monotonic() < stop_at, served.output()
            time.sleep(0.2)
        group = fresh()
        with OffsetStoreClient(served.address, timeout=10) as client:
            for offset in range(50):  # connections land on both processes
                client.commit_offsets(group, {("t-orders", 0): offset})
            assert client.fetch_offsets(group).offsets[("t-orders", 0)].offset == 49
    assert "serving process died; starting another" in served.output()
