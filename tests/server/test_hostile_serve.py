"""Hostile tenants (issue 14) against a real ``offsetstore serve``: /metrics, huge requests and reads, a load test.

Each test runs a real server with authentication on (the PKI, tokens file and raw call
helpers of ``tests/fixtures/fix_auth.py``), attacks it as one tenant and checks what the others see.
Every attack is bounded in count and time and aims at 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from offsetstore.client import (
    OffsetStoreClient,
    ResourceExhaustedError,
)
from offsetstore.core.errors import from_rpc_error
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from offsetstore.server.app import SERVICE_NAME
from offsetstore.server.auth import AccessControl, AuthConfig
from offsetstore.server.limits import Limits
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.fix_auth import PKI, TOKENS, bearer, fresh
from tests.fixtures.fix_server import ServerHandle, free_port
from tests.fixtures.streams import open_reflection_streams
from tests.fixtures.waits import wait_for, wait_until_serving

INT64_MAX = 2**63 - 1
ROOT = Path(__file__).resolve().parents[2]


# --- the real `offsetstore serve`, tokens on, for the attacks from outside ----------------------


@dataclass
class Served:
    address: str
    metrics_url: str
    log: Path
    pid: int


@pytest.fixture(scope="module")
def served(module_database_url: str, pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``offsetstore serve`` with a tokens file, few workers and a small pool: easy to starve.

    On a database of this module's own, so that what a scrape costs does not depend on
    what the rest of the suite left in the shared one.
    """
    directory = tmp_path_factory.mktemp("served")
    address, metrics_port = f"127.0.0.1:{free_port()}", free_port()
    log = directory / "serve.log"
    args = [
        *("serve", "--database-url", module_database_url, "--no-migrate", "--listen", address),
        *("--metrics-listen", f"127.0.0.1:{metrics_port}", "--tokens-file", str(pki.tokens_file)),
        *("--max-workers", "8", "--pool-size", "4", "--group-metrics-limit", "50"),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "offsetstore.cli.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "OFFSETSTORE_DATA_DIR": str(directory)},
        )
    try:
        with OffsetStoreClient(address, timeout=5) as anonymous:
            wait_until_serving(anonymous, process, log.read_text)
        yield Served(address, f"http://127.0.0.1:{metrics_port}/metrics", log, process.pid)
    finally:
        process.terminate()
        assert process.wait(30) == 0, log.read_text()


WARM_UP = 5


def timed_commits(address: str, count: int, *, timeout: float) -> list[float]:
    """Latencies (s) of ``count`` commits by a well-behaved token holder; any error fails the test.

    The first few, which also open the channel's connection, are not timed.
    """
    group = fresh()
    latencies = []
    with OffsetStoreClient(address, token=TOKENS["committer"], timeout=timeout) as committer:
        for offset in range(WARM_UP + count):
            started = time.perf_counter()
            committer.commit_offsets(group, {("orders", 0): offset})
            if offset >= WARM_UP:
                latencies.append(time.perf_counter() - started)
    return latencies


# --- 3. /metrics cannot starve the database pool -------------------------------------------


def scrape(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


@pytest.mark.slow
@pytest.mark.alone
def test_slow_metrics_connections_cannot_starve_token_holders(served: Served) -> None:
    assert "offsetstore_database_up 1.0" in scrape(served.metrics_url)
    host, port = served.metrics_url.split("/")[2].split(":")
    slow: list[socket.socket] = []
    try:
        for _ in range(300):  # connect, send half a request, wait
            s = socket.create_connection((host, int(port)), timeout=5)
            with contextlib.suppress(OSError):
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)

        def release() -> None:
            for s in slow:
                with contextlib.suppress(OSError):
                    s.sendall(b"\r\n")

        releasing = threading.Thread(target=release)
        releasing.start()
        latencies = timed_commits(served.address, 50, timeout=2)
        with OffsetStoreClient(served.address, timeout=2) as anonymous:
            assert anonymous.health() == "SERVING"
        releasing.join(30)
        assert max(latencies) < 2
    finally:
        for s in slow:
            s.close()
    # Prometheus gets through again, once the connections the attack held are dropped.
    stop_at = time.monotonic() + 30
    while True:
        try:
            assert "offsetstore_database_up 1.0" in scrape(served.metrics_url)
            break
        except OSError:
            assert time.monotonic() < stop_at
            time.sleep(0.5)


def test_metrics_connections_are_capped_and_timed_out(pki: PKI) -> None:
    from prometheus_client import CollectorRegistry, Counter

    from offsetstore.server import metrics

    registry = CollectorRegistry()
    Counter("probe", "a series to find", registry=registry).inc()
    served = metrics.MetricsHTTPServer(registry, "127.0.0.1:0", max_connections=2, timeout=1)
    try:
        idle = [socket.create_connection(("127.0.0.1", served.port), timeout=5) for _ in range(2)]
        wait_for(lambda: served.held() == 2, "both idle connections served", 10)
        third = socket.create_connection(("127.0.0.1", served.port), timeout=5)
        assert third.recv(1) == b""  # full: closed at once, no thread for it
        third.close()
        started = time.monotonic()
        assert idle[0].recv(1) == b""  # a silent connection is dropped after its timeout
        assert time.monotonic() - started < 5
        for s in idle:
            s.close()

        def scraped() -> bool:  # once the server has seen them closed, their slots serve again
            try:
                return "probe_total 1.0" in scrape(served.url)
            except OSError:
                return False

        wait_for(scraped, "a scrape served after the idle connections closed", 10)
    finally:
        served.shutdown()


# --- 7. anonymous requests are refused before they are read ---------------------------------


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def largest_commit() -> bytes:
    """The largest valid CommitOffsets request, serialized: 10,000 partitions with 4096 bytes of metadata."""
    topic, metadata = "t-" + "x" * 247, "m" * 4096
    offsets = [pb.OffsetCommit(topic=topic, partition=p, offset=INT64_MAX, metadata=metadata) for p in range(10_000)]
    return pb.CommitOffsetsRequest(group_id=fresh(), offsets=offsets).SerializeToString()


@pytest.mark.slow
def test_anonymous_huge_requests_are_refused_before_they_are_read(served: Served) -> None:
    payload = largest_commit()
    assert len(payload) > 40_000_000
    peak, sampling = [rss_bytes(served.pid)], threading.Event()
    baseline = peak[0]

    def sample() -> None:
        while not sampling.is_set():
            peak.append(rss_bytes(served.pid))
            time.sleep(0.01)

    def send(metadata: tuple[tuple[str, str], ...]) -> grpc.StatusCode:
        with grpc.insecure_channel(served.address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
            stub = channel.unary_unary(f"/{SERVICE_NAME}/CommitOffsets")
            try:
                stub(payload, metadata=metadata, timeout=30)
            except grpc.RpcError as error:
                return error.code()  # type: ignore[attr-defined]
        return grpc.StatusCode.OK

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        anonymous, forged = (), (("authorization", "Bearer forged"),)
        with ThreadPoolExecutor(6) as pool:
            codes = list(pool.map(send, [anonymous, forged] * 6))
    finally:
        sampling.set()
        sampler.join()
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}
    # 12 requests of 43 MB, 6 at a time: read in full they took ~480 MiB; refused unread, only
    # the transport's buffers (flow-control windows; 60-80 MiB seen).
    assert max(peak) - baseline < 150 << 20, f"the server grew by {(max(peak) - baseline) >> 20} MiB"
    timed_commits(served.address, 3, timeout=10)  # and the token holders are served on


# --- 8. one tenant's huge reads cannot take the server -----------------------------------------


def huge_group(engine: sa.Engine, partitions: int = 10_000) -> str:
    """A group of ``partitions`` partitions with 4096 bytes of metadata each (~44 MB to fetch), by SQL."""
    group = fresh("t-huge-")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO offsetstore.groups (group_id) VALUES (:g)"), {"g": group})
        conn.execute(
            sa.text(
                'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", metadata) '
                "SELECT :g, 't-' || repeat('x', 247), p, 1, repeat('m', 4096) FROM generate_series(0, :n - 1) p"
            ),
            {"g": group, "n": partitions},
        )
    return group


@pytest.mark.alone
def test_one_principal_gets_at_most_its_share_of_the_workers(store: Store, pki: PKI, engine: sa.Engine) -> None:
    group = huge_group(engine)
    auth = AccessControl(AuthConfig.load(pki.tokens_file))
    limits = Limits(max_workers=8, max_calls_per_principal=2, principal_bytes_per_second=0)  # concurrency alone
    with ServerHandle(store, auth=auth, limits=limits) as server:

        def fetch(_: int) -> object:
            big = [("grpc.max_receive_message_length", 64 << 20)]  # the client's default takes 4 MB
            with OffsetStoreClient(server.address, token=TOKENS["reader"], timeout=60, options=big) as reader:
                try:
                    return len(reader.fetch_offsets(group).offsets)
                except ResourceExhaustedError as error:
                    return error

        with ThreadPoolExecutor(8) as pool:
            fetches = pool.map(fetch, range(8))
            latencies = timed_commits(server.address, 20, timeout=10)  # another tenant, meanwhile
            outcomes = list(fetches)
    refused = [o for o in outcomes if isinstance(o, ResourceExhaustedError)]
    assert refused and all(o == 10_000 for o in outcomes if not isinstance(o, ResourceExhaustedError))
    assert {(e.metadata["limit"], e.retry_after) for e in refused} == {("principal_calls", 0.25)}
    assert len(latencies) == 20


@pytest.mark.alone
def test_a_principal_reading_huge_responses_in_a_loop_gets_its_byte_budget(
    store: Store, pki: PKI, engine: sa.Engine
) -> None:
    group = huge_group(engine)  # ~44 MB a fetch: 43 pages of 1 MiB
    auth = AccessControl(AuthConfig.load(pki.tokens_file))
    # Bursts of 8 MiB. A refusal needs pages faster than the refill (one 1 MiB page in 0.5 s):
    # at 8 MiB/s a loaded machine served them slower than that and the budget never ran out.
    rate = 2 * 2**20
    with ServerHandle(store, auth=auth, limits=Limits(max_workers=8, principal_bytes_per_second=rate)) as server:
        with (
            OffsetStoreClient(server.address, token=TOKENS["reader"], timeout=60) as reader,
            OffsetStoreClient(server.address, token=TOKENS["root"], timeout=60) as root,
            grpc.insecure_channel(server.address) as channel,
        ):
            # Its pages overdraw the burst; the client waits for the budget between them.
            assert len(reader.fetch_offsets(group).offsets) == 10_000
            # A reader that does not wait: pages at once, until refused (the budget is spent).
            stub, metadata, page_token = pb_grpc.OffsetStoreServiceStub(channel), bearer("reader"), ""
            for _ in range(43):
                request = pb.FetchOffsetsRequest(group_id=group, page_size=10_000, page_token=page_token)
                try:
                    page_token = stub.FetchOffsets(request, metadata=metadata, timeout=10).next_page_token
                except grpc.RpcError as error:
                    refused = from_rpc_error(error)
                    break
            else:
                pytest.fail("43 pages of 1 MiB at once, right after 44 MB, and no refusal")
            assert isinstance(refused, ResourceExhaustedError) and refused.metadata["limit"] == "principal_bytes"
            assert 0 < refused.retry_after < 2  # one page's overdraft at 2 MiB/s
            topic = "t-" + "x" * 247
            assert len(root.fetch_offsets(group, {topic: range(1000)}).offsets) == 1000  # a budget of its own
            time.sleep(refused.retry_after + 0.2)
            assert len(reader.fetch_offsets(group, {topic: range(100)}).offsets) == 100  # refilled
            # The whole group again needs ~20 s of budget: the client waits for it within the
            # call's timeout in all, not the client's 60 s, and then gives up.
            with pytest.raises(ResourceExhaustedError) as paced:
                reader.fetch_offsets(group, timeout=2)
            assert paced.value.metadata["limit"] == "principal_bytes"


# --- the load test: one abusive client, one well-behaved token holder --------------------------


# Pages through the group over and over with a raw stub, as fast as the server lets it:
# it sleeps only for what a refusal's retry hint says.
ABUSIVE_FETCHER = """
import signal, sys, time
import grpc
from offsetstore.client import ResourceExhaustedError
from offsetstore.core.errors import from_rpc_error
from offsetstore.v1 import offset_store_pb2 as pb, offset_store_pb2_grpc as pb_grpc
address, token, group, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
pages = refused = 0
signal.signal(signal.SIGTERM, signal.default_int_handler)  # terminate() ends the loop, not the report
try:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.OffsetStoreServiceStub(channel)
        metadata, page_token = (("authorization", "Bearer " + token),), ""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            request = pb.FetchOffsetsRequest(group_id=group, page_size=10_000, page_token=page_token)
            try:
                page_token = stub.FetchOffsets(request, metadata=metadata, timeout=30).next_page_token
                pages += 1
            except grpc.RpcError as error:
                refusal = from_rpc_error(error)
                if not isinstance(refusal, ResourceExhaustedError):
                    raise
                refused += 1
                time.sleep(refusal.retry_after or 0.25)
            if pages + refused == 1:
                print("biting", flush=True)  # its first call answered: the test measures from now
except KeyboardInterrupt:
    pass
print(pages, refused)
"""


class Abuser:
    """One hostile principal doing everything above at once, on 127.0.0.1, for ``seconds`` at most.

    Its huge reads run in processes of their own: decoding their pages in the test's process
    would slow the token holder's client, not the server.
    """

    def __init__(self, served: Served, huge: str | None, seconds: float = 60) -> None:
        self.served, self.huge, self.seconds = served, huge or "", seconds
        self.fetchers_count = 4 if huge else 0
        self.stop = threading.Event()
        self.pages = self.refused = 0

    def __enter__(self) -> Abuser:
        self.channels, self.streams, self.hang = open_reflection_streams(self.served.address, 40)
        host, port = self.served.metrics_url.split("/")[2].split(":")
        self.slow = []
        for _ in range(200):
            s = socket.create_connection((host, int(port)), timeout=5)
            with contextlib.suppress(OSError):
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            self.slow.append(s)
        for s in self.slow:  # released all at once
            with contextlib.suppress(OSError):
                s.sendall(b"\r\n")
        args = [self.served.address, TOKENS["reader"], self.huge, str(self.seconds)]
        self.fetchers = [
            subprocess.Popen([sys.executable, "-c", ABUSIVE_FETCHER, *args], stdout=subprocess.PIPE, text=True)
            for _ in range(self.fetchers_count)
        ]
        try:
            for fetcher in self.fetchers:  # the load bites before measuring: each fetcher's first call answered
                assert fetcher.stdout is not None
                assert fetcher.stdout.readline().strip() == "biting", "a fetcher ended before its first call"
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for fetcher in self.fetchers:
            fetcher.terminate()
            out, _ = fetcher.communicate(timeout=60)
            if out.strip():
                pages, refused = map(int, out.split())
                self.pages, self.refused = self.pages + pages, self.refused + refused
        self.hang.set()
        for s in self.slow:
            s.close()
        for channel in self.channels:
            channel.close()


def p99(latencies: list[float]) -> float:
    return sorted(latencies)[int(len(latencies) * 0.99) - 1]


def measure(served: Served, huge: str | None) -> tuple[list[float], list[float], Abuser]:
    """The token holder's commit latencies alone, then while the abuser runs; any error fails the test."""
    timed_commits(served.address, 20, timeout=10)  # warm up the connection and the pool
    unloaded = timed_commits(served.address, 1000, timeout=10)
    with Abuser(served, huge) as abuser:
        loaded = timed_commits(served.address, 1000, timeout=10)
    print(
        f"token holder p99: unloaded {p99(unloaded) * 1000:.1f} ms, loaded {p99(loaded) * 1000:.1f} ms "
        f"(x{p99(loaded) / p99(unloaded):.1f}); the abuser read {abuser.pages} pages, was refused {abuser.refused}"
    )
    return unloaded, loaded, abuser


@pytest.mark.slow
@pytest.mark.alone
def test_a_token_holder_keeps_its_latency_while_an_abuser_holds_streams_and_connections(served: Served) -> None:
    # 40 idle reflection streams and 200 slow /metrics connections released at once.
    unloaded, loaded, _ = measure(served, None)
    assert p99(loaded) <= 5 * p99(unloaded)


@pytest.mark.slow
@pytest.mark.alone
def test_a_token_holder_keeps_its_latency_while_an_abuser_also_fetches_huge_groups(
    served: Served, module_database_url: str
) -> None:
    # The same, plus four processes reading a 44 MB group as fast as they are let: in pages
    # of 1 MiB (one response held the interpreter lock for all of 44 MB before), at the
    # principal's 4 MiB/s. The ratio is printed (pytest -s): 1.7x to 3x here.
    engine = sa.create_engine(module_database_url, poolclass=sa.NullPool)
    try:
        huge = huge_group(engine)
    finally:
        engine.dispose()
    unloaded, loaded, abuser = measure(served, huge)
    assert p99(loaded) <= 5 * p99(unloaded)
    assert abuser.refused > 0  # the per-principal limit held it back


def test_a_crowd_of_scrapers_costs_one_render() -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    class Counting:
        renders = 0

        def collect(self) -> list[GaugeMetricFamily]:
            Counting.renders += 1
            time.sleep(0.2)  # a big registry takes a while
            return [GaugeMetricFamily("probe", "a series to find", value=1)]

    registry = CollectorRegistry()
    registry.register(Counting())  # type: ignore[arg-type]
    # One address for all twelve: lift the per-peer cap (issue 22), this test is about renders.
    served = metrics.MetricsHTTPServer(registry, "127.0.0.1:0", max_connections=16, max_per_peer=16, cache_seconds=30)
    try:
        with ThreadPoolExecutor(12) as pool:
            bodies = list(pool.map(lambda _: scrape(served.url + "?name[]=other"), range(12)))
        assert all("probe 1.0" in body for body in bodies)
        assert Counting.renders == 1
    finally:
        served.shutdown()
