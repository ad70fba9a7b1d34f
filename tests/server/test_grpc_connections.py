"""The gRPC port's connections (issue 56, M1): a handshake deadline, a cap per peer address, the descriptor limit.

grpc core kept an unfinished TLS handshake 120 s and capped nothing: 1,100 silent connections
from one address held a server limited to 1,024 descriptors at its limit, and no new gRPC call
(nor the HTTPS listener) got through for two minutes. The attacks aim at loopback only.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from offsetstore.client import OffsetStoreClient
from offsetstore.runtime.store import Store
from offsetstore.server.auth import server_credentials
from offsetstore.server.limits import Limits
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.fix_auth import PKI, fresh
from tests.fixtures.fix_server import ServerHandle, free_port
from tests.fixtures.waits import wait_for, wait_until_serving

DESCRIPTORS = 1024  # the serving process's limit, soft and hard: the default of most systems
ATTACKERS = 1100
HANDSHAKE_SECONDS = 2


@dataclass
class Served:
    address: str
    https: str  # the HTTP listener's /openapi.json
    pid: int  # the serving process's
    log: Path


def serving_process(supervisor: int) -> int:
    """The pid of the supervisor's serving process (spawned: ``multiprocessing.spawn`` on its command line)."""

    def found() -> bool:
        # Any of the supervisor's threads may have spawned it: every task's children.
        for task in Path(f"/proc/{supervisor}/task").iterdir():
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                        pids.append(int(child))
                        return True
        return False

    pids: list[int] = []
    wait_for(found, "the serving process", 30)
    return pids[0]


@pytest.fixture
def served(module_database_url: str, pki: PKI, tmp_path: Path) -> Iterator[Served]:
    """``offsetstore serve`` over TLS with 1,024 descriptors at most (soft and hard) and a short handshake deadline.

    The deadline is given by its variable: a server without the setting ignores it (the same
    attack runs against the old code).
    """
    address, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    log = tmp_path / "serve.log"
    args = [
        *("serve", "--database-url", module_database_url, "--no-migrate", "--listen", address),
        *("--metrics-listen", "", "--http-listen", http, "--pool-size", "4", "--max-workers", "8"),
        *("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key)),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    env["OFFSETSTORE_GRPC_HANDSHAKE_TIMEOUT"] = str(HANDSHAKE_SECONDS)
    command = " ".join(f"'{a}'" for a in (sys.executable, "-m", "offsetstore.cli.main", *args))
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["/bin/sh", "-c", f"ulimit -n {DESCRIPTORS} && exec {command}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "OFFSETSTORE_DATA_DIR": str(tmp_path)},
        )
    try:
        with OffsetStoreClient(address, timeout=5, credentials=pki.channel_credentials()) as client:
            wait_until_serving(client, process, log.read_text)
        yield Served(address, f"https://{http}/openapi.json", serving_process(process.pid), log)
    finally:
        process.terminate()
        assert process.wait(60) == 0, log.read_text()


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def still_open(sockets: list[socket.socket], seconds: float) -> int:
    """Waits up to ``seconds`` for the server to close every one of ``sockets`` (end of file or reset); how many did not."""
    stop_at = time.monotonic() + seconds
    left = list(sockets)
    while left and (wait := stop_at - time.monotonic()) > 0:
        poller = select.poll()
        for s in left:
            poller.register(s, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(wait * 1000)}
        for s in [s for s in left if s.fileno() in ready]:
            with contextlib.suppress(OSError):
                assert not s.recv(1), "a silent connection got an answer"
            left.remove(s)
    return len(left)


def closed_by_server(sockets: list[socket.socket], seconds: float) -> float:
    """Waits until the server has closed every one of ``sockets``; returns how long it took."""
    started = time.monotonic()
    left = still_open(sockets, seconds)
    assert not left, f"{left} of {len(sockets)} silent connections still open after {seconds} s"
    return time.monotonic() - started


@pytest.mark.slow
def test_silent_connections_from_one_address_neither_exhaust_descriptors_nor_starve_another(
    served: Served, pki: PKI
) -> None:
    baseline = descriptors(served.pid)
    host, _, port = served.address.rpartition(":")
    target = (host, int(port))
    silent: list[socket.socket] = []
    refused = 0
    peak = [baseline]
    attacking, watching = threading.Event(), threading.Event()
    attacking.set()
    watching.set()
    attack_seconds = 0.0

    def attack() -> None:
        nonlocal refused, attack_seconds
        try:
            for _ in range(ATTACKERS):
                try:
                    s = socket.create_connection(target, timeout=1, source_address=("127.0.0.2", 0))
                except OSError:
                    refused += 1  # the server closed it at once, or the kernel's backlog is full
                    continue
                silent.append(s)
        finally:
            attack_seconds = time.monotonic() - started
            attacking.clear()

    def watch() -> None:
        while watching.is_set():
            with contextlib.suppress(OSError):
                peak[0] = max(peak[0], descriptors(served.pid))
            time.sleep(0.02)  # sampling, not synchronisation

    latencies: list[float] = []
    errors: list[str] = []
    https, https_answers = ssl.create_default_context(cafile=str(pki.ca.cert)), 0
    attacker, watcher = threading.Thread(target=attack), threading.Thread(target=watch)
    started = time.monotonic()
    attacker.start()
    watcher.start()
    try:
        group = fresh()
        # The victim, from 127.0.0.1: a new connection for each call while the attack runs, and a while after.
        # A connection refused while a burst holds every slot (before the cap per peer closes it) is
        # tried again by the channel, as gRPC clients do (wait_for_ready): its wait counts in the latency.
        while attacking.is_set() or time.monotonic() - started < 5:
            began = time.perf_counter()
            request = pb.CommitOffsetsRequest(
                group_id=group, offsets=[pb.OffsetCommit(topic="orders", partition=0, offset=len(latencies))]
            )
            try:
                with grpc.secure_channel(served.address, pki.channel_credentials()) as channel:
                    pb_grpc.OffsetStoreServiceStub(channel).CommitOffsets(request, timeout=10, wait_for_ready=True)
            except grpc.RpcError as error:
                errors.append(f"{error.code()}: {error.details()}")
            latencies.append(time.perf_counter() - began)
            if len(latencies) % 10 == 1:  # and the HTTPS listener, which shares the process's descriptors
                try:
                    with urllib.request.urlopen(served.https, timeout=10, context=https) as answer:
                        assert b"openapi" in answer.read()
                    https_answers += 1
                except OSError as error:
                    errors.append(f"HTTPS: {error!r}")
        watching.clear()
        watcher.join()
        # Those the cap per peer left are silent: the server closes them at the handshake deadline.
        left = still_open(silent, HANDSHAKE_SECONDS + 10)
        closing = time.monotonic() - started - attack_seconds
    finally:
        attacking.clear()
        watching.clear()
        attacker.join()
        for s in silent:
            s.close()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(
        f"\n{ATTACKERS} silent connections from 127.0.0.2 in {attack_seconds:.1f} s "
        f"({len(silent)} accepted, {refused} refused); the serving process's descriptors: "
        f"{baseline} before, {peak[0]} at most (limit {DESCRIPTORS}); the victim: {len(latencies)} calls "
        f"on new connections, {len(errors)} failed, p50 {latencies[len(latencies) // 2] * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, {https_answers} HTTPS answers; silent connections still open {closing:.1f} s after the attack: {left}"
    )
    assert not errors, errors[:3]
    assert p99 < 5
    assert peak[0] < DESCRIPTORS
    assert left == 0
    wait_for(lambda: descriptors(served.pid) < baseline + 32, "the serving process's descriptors back", 10)


def test_a_peers_connections_beyond_its_cap_are_closed_and_another_peer_is_served(store: Store, pki: PKI) -> None:
    limits = Limits(max_connections_per_peer=4, grpc_handshake_timeout=60)
    credentials = server_credentials(pki.server.cert, pki.server.key)
    with ServerHandle(store, limits=limits, credentials=credentials) as server:
        held = [
            socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=("127.0.0.2", 0))
            for _ in range(10)
        ]
        try:
            # Six are closed, four stay (their handshake deadline is a minute away).
            wait_for(lambda: still_open(held, 0.05) <= 4, "the connections beyond the cap closed", 5)
            assert still_open(held, 0.5) == 4
            with OffsetStoreClient(server.address, timeout=10, credentials=pki.channel_credentials()) as victim:
                assert victim.health() == "SERVING"
        finally:
            for s in held:
                s.close()


def test_a_silent_tls_connection_is_closed_at_the_handshake_deadline(store: Store, pki: PKI) -> None:
    credentials = server_credentials(pki.server.cert, pki.server.key)
    with ServerHandle(store, limits=Limits(grpc_handshake_timeout=1), credentials=credentials) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as silent:
            assert 0.5 < closed_by_server([silent], 10) < 5


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    script = """
import logging, resource
logging.basicConfig(level=logging.INFO, format="%(message)s")
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 2048))  # as a shell's ulimit leaves it
from offsetstore.server.grpc_connections import raise_descriptor_limit
print(raise_descriptor_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
raise_descriptor_limit()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["2048", "2048", "2048"]
    assert done.stderr.count("descriptor limit raised") == 1, done.stderr  # said once, not on the second call
