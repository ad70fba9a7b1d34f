"""``serve --processes N`` admits a principal no more than one process would (issue 34 finding 9)."""

from __future__ import annotations

import concurrent.futures
import urllib.request
import uuid
from collections.abc import Iterator

import grpc
import psutil
import pytest

from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.fix_auth import PKI, bearer
from tests.fixtures.fix_db import group_locked
from tests.fixtures.fix_server import Served, start_serve
from tests.fixtures.fix_tenants import wait_until

pytestmark = pytest.mark.slow

#: The per-principal call limit of the server under test.
MAX_CALLS = 2
#: Connections the principal opens: SO_REUSEPORT spreads them over both processes (all on one
#: has a chance of 2 in 2**16, and the test says so).
CONNECTIONS = 16


@pytest.fixture(scope="module")
def two_processes(module_database_url: str, pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_serve(
        tmp_path_factory.mktemp("processes") / "data",
        *("--database-url", module_database_url, "--no-migrate", "--tokens-file", str(pki.tokens_file)),
        *("--processes", "2", "--max-calls-per-principal", str(MAX_CALLS), "--statement-timeout-ms", "20000"),
    )
    try:
        yield served
    finally:
        assert served.terminate() == 0, served.output()


def _channel(address: str) -> grpc.Channel:
    # Not shared through grpc's global subchannel pool: a connection of its own.
    channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel


def _commit(channel: grpc.Channel, group: str) -> grpc.StatusCode:
    stub = pb_grpc.OffsetStoreServiceStub(channel)
    request = pb.CommitOffsetsRequest(group_id=group, offsets=[pb.OffsetCommit(topic="t-topic", partition=0, offset=1)])
    try:
        stub.CommitOffsets(request, metadata=bearer("committer"), timeout=60)
    except grpc.RpcError as error:
        return error.code()  # type: ignore[attr-defined]
    return grpc.StatusCode.OK


def _connections_per_process(served: Served, *, listening: bool = False) -> list[int]:
    """Connections (or listening sockets) on the gRPC port of each serving process."""
    port = int(served.address.rsplit(":", 1)[1])
    return [
        sum(1 for c in child.net_connections("tcp") if c.laddr.port == port and bool(c.raddr) != listening)
        for child in psutil.Process(served.process.pid).children()
        if "spawn_main" in " ".join(child.cmdline())
    ]


def _started_commits(metrics: str) -> float:
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("grpc_server_started_total{") and 'grpc_method="CommitOffsets"' in line
    )


def test_two_serving_processes_admit_no_more_calls_of_a_principal_than_its_limit(
    two_processes: Served, module_database_url: str
) -> None:
    group = f"t-procs-{uuid.uuid4().hex[:8]}"
    # Health answers from the first process that listens: wait for the second's listener too.
    wait_until(lambda: _connections_per_process(two_processes, listening=True) == [1, 1], 60)
    channels = [_channel(two_processes.address) for _ in range(CONNECTIONS)]
    try:
        spread = _connections_per_process(two_processes)
        assert len(spread) == 2 and min(spread) > 0, spread  # the principal reaches both processes
        assert _commit(channels[0], group) == grpc.StatusCode.OK
        # Every admitted commit waits on the held group, so it stays admitted while the others
        # arrive; the lock goes once the server has started every call (/metrics sums both processes).
        with (
            group_locked(module_database_url, group) as lock,
            concurrent.futures.ThreadPoolExecutor(CONNECTIONS) as pool,
        ):
            calls = [pool.submit(_commit, channel, group) for channel in channels]
            wait_until(lambda: _started_commits(two_processes.metrics) >= CONNECTIONS + 1, 60)
            wait_until(lambda: lock.waiting() > 0, 60)
            lock.release()
            codes = [c.result() for c in calls]
    finally:
        for channel in channels:
            channel.close()
    admitted = sum(code != grpc.StatusCode.RESOURCE_EXHAUSTED for code in codes)
    print(
        f"connections per process {spread}: {admitted} of {CONNECTIONS} concurrent calls of one principal admitted (limit {MAX_CALLS})"
    )
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
    assert admitted <= MAX_CALLS
    assert admitted >= 1
