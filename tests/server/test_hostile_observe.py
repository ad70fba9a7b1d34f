"""One tenant observing 10,000 partitions a call does not slow another tenant's commits (issue 57, hostile tenants).

ObserveOffsets writes each moved position and a history entry of it: a tenant reporting
10,000 partitions that all move, call after call from several threads, is the widest write an
observer can make. Against a real ``offsetstore serve`` with tokens and its default limits (as
tests/server/test_fair_batches.py measures the wide commits): the victim's one-partition
commit p99 quiet, then under that load, in one run. (A tenant without a grant on the group
cannot observe into it: tests/server/test_observe.py.)
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest

from offsetstore.server.auth import hash_token
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.fix_server import Served, start_serve

pytestmark = pytest.mark.slow

#: Seconds of the victim's commits, quiet and loaded.
QUIET, LOADED = 2.0, 4.0
#: The observing tenant's threads and the partitions of each of its calls.
THREADS, PARTITIONS = 4, 10_000

TOKENS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("observer", "victim")}
TOKENS_FILE = """
[principals.observer]
token_sha256 = "{observer}"
grants = [{{ prefix = "o-", permissions = ["commit"] }}]

[principals.victim]
token_sha256 = "{victim}"
grants = [{{ prefix = "v-", permissions = ["commit"] }}]
"""


def _metadata(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]}"),)


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _p50(latencies: list[float]) -> float:
    return sorted(latencies)[len(latencies) // 2]


@pytest.fixture(scope="module")
def served(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``offsetstore serve`` with the two tenants' tokens and its default limits."""
    directory = tmp_path_factory.mktemp("hostile-observe")
    tokens = directory / "tokens.toml"
    tokens.write_text(TOKENS_FILE.format(**{name: hash_token(token) for name, token in TOKENS.items()}))
    server = start_serve(
        directory / "data", *("--database-url", module_database_url, "--no-migrate", "--tokens-file", str(tokens))
    )
    try:
        yield server
    finally:
        server.terminate()


def _victim(address: str, seconds: float) -> list[float]:
    """The victim's one-partition commits, one after another, for ``seconds``: each one's latency."""
    group = f"v-{uuid.uuid4().hex[:8]}"
    latencies = []
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.OffsetStoreServiceStub(channel)
        stop_at = time.monotonic() + seconds
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            request = pb.CommitOffsetsRequest(
                group_id=group, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=n)]
            )
            started = time.monotonic()
            stub.CommitOffsets(request, metadata=_metadata("victim"), timeout=30)
            latencies.append(time.monotonic() - started)
    return latencies


@pytest.mark.alone
def test_a_tenant_observing_10000_partitions_a_call_keeps_another_tenants_commits_within_5x(served: Served) -> None:
    quiet = _victim(served.address, QUIET)
    stop = threading.Event()
    started = threading.Barrier(THREADS + 1)
    observed: list[int] = []  # positions each finished call changed
    took: list[float] = []  # each finished call's seconds
    refused: list[str] = []  # admission's answers: the tenant held to its budget, which is the point

    def observer() -> None:
        group = f"o-{uuid.uuid4().hex[:8]}"
        with grpc.insecure_channel(served.address) as channel:
            stub = pb_grpc.OffsetStoreServiceStub(channel)
            n = 0
            first = True
            while not stop.is_set():
                n += 1  # every partition moves: 10,000 positions and 10,000 history entries a call
                request = pb.ObserveOffsetsRequest(
                    group_id=group,
                    offsets=[pb.OffsetCommit(topic="t", partition=p, offset=n) for p in range(PARTITIONS)],
                    source="kafka:hostile/" + group,
                )
                began = time.monotonic()
                call = stub.ObserveOffsets.future(request, metadata=_metadata("observer"), timeout=60)
                while not stop.wait(0.05) and not call.done():
                    pass
                if not call.done():  # measured: the call in flight is cancelled, not waited for (~10 s each)
                    call.cancel()
                    return
                try:
                    observed.append(call.result().changed)
                    took.append(time.monotonic() - began)
                except grpc.RpcError as error:
                    if error.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    refused.append(error.code().name)
                if first:  # the load is on once every thread's first call is answered
                    first = False
                    started.wait(120)

    workers = [threading.Thread(target=observer) for _ in range(THREADS)]
    for worker in workers:
        worker.start()
    try:
        started.wait(120)
        loaded = _victim(served.address, LOADED)
    finally:
        stop.set()
        for worker in workers:
            worker.join(120)
    print(
        f"\nvictim commit p50/p99 quiet {_p50(quiet) * 1000:.1f}/{_p99(quiet) * 1000:.1f} ms, under {THREADS} "
        f"threads of {PARTITIONS:,}-partition ObserveOffsets {_p50(loaded) * 1000:.1f}/{_p99(loaded) * 1000:.1f} ms "
        f"(p99 ratio {_p99(loaded) / _p99(quiet):.1f}); victim commits {len(quiet) / QUIET:.0f}/s quiet, "
        f"{len(loaded) / LOADED:.0f}/s loaded; observe calls {len(observed)} ({sum(observed):,} positions, "
        f"{_p50(took):.2f} s each at the median), "
        f"{len(refused)} refused by admission"
    )
    assert observed and max(observed) == PARTITIONS, "the observing tenant's calls never wrote"
    # The bound of the wide commits (tests/server/test_fair_batches.py): 5x quiet, with a 40 ms floor.
    assert _p99(loaded) < 5 * max(_p99(quiet), 0.04)
