"""One tenant's wide commits fill neither the group commit's flushers nor another tenant's batches (issue 56, H2).

Before, the batches were formed first come, first served over every principal, up to
10,000 offsets: a tenant committing 999 partitions a call from eight threads (under
admission's 1,000-partition rest) filled every batch, and another tenant's one-partition
commits rode in them (its p99 36-63 ms -> 875-1,243 ms). Against a real ``offsetstore
serve`` with tokens and its default limits: the victim's commit p99 quiet, then under the
wide tenant's load, in one run.
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

#: Seconds of the victim's commits, quiet and loaded: a few hundred calls each, ~8 s a case.
QUIET, LOADED = 2.0, 4.0

TOKENS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("wide", "victim")}
TOKENS_FILE = """
[principals.wide]
token_sha256 = "{wide}"
grants = [{{ prefix = "w-", permissions = ["commit"] }}]

[principals.victim]
token_sha256 = "{victim}"
grants = [{{ prefix = "v-", permissions = ["commit"] }}]
"""


def _metadata(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]}"),)


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@pytest.fixture(scope="module")
def served(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``offsetstore serve`` with the two tenants' tokens and its default limits (two flushers)."""
    directory = tmp_path_factory.mktemp("fair")
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
@pytest.mark.parametrize(("threads", "partitions"), [(8, 999), (4, 999), (4, 10_000)])
def test_a_tenants_wide_commits_keep_another_tenants_commits_within_5x(
    served: Served, threads: int, partitions: int
) -> None:
    quiet = _victim(served.address, QUIET)
    stop = threading.Event()
    started = threading.Barrier(threads + 1)
    wide_commits: list[int] = []

    def wide() -> None:
        group = f"w-{uuid.uuid4().hex[:8]}"
        with grpc.insecure_channel(served.address) as channel:
            stub = pb_grpc.OffsetStoreServiceStub(channel)
            n = 0
            first = True
            while not stop.is_set():
                n += 1
                request = pb.CommitOffsetsRequest(
                    group_id=group,
                    offsets=[pb.OffsetCommit(topic="t", partition=p, offset=n) for p in range(partitions)],
                )
                stub.CommitOffsets(request, metadata=_metadata("wide"), timeout=60)
                wide_commits.append(partitions)
                if first:  # the load is on once every thread's first commit is in
                    first = False
                    started.wait(60)

    workers = [threading.Thread(target=wide) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        started.wait(60)
        loaded = _victim(served.address, LOADED)
    finally:
        stop.set()
        for worker in workers:
            worker.join(120)
    print(
        f"\nvictim commit p50/p99 quiet {sorted(quiet)[len(quiet) // 2] * 1000:.1f}/{_p99(quiet) * 1000:.1f} ms, "
        f"under {threads} threads of {partitions:,}-partition commits "
        f"{sorted(loaded)[len(loaded) // 2] * 1000:.1f}/{_p99(loaded) * 1000:.1f} ms; "
        f"victim commits {len(quiet) / QUIET:.0f}/s quiet, {len(loaded) / LOADED:.0f}/s loaded; "
        f"wide commits {len(wide_commits)}"
    )
    assert wide_commits, "the wide tenant's commits never finished"
    # Measured on a shared two-core machine (load 5-8), p99 quiet -> loaded: before, 8 threads of
    # 999 14-24 -> 555-770 ms and 4 threads 19-23 -> 293-352 ms; after, 7-63 -> 40-97 ms and
    # 5-25 -> 37-64 ms. (10,000-partition calls: 15-25 ms both, admission's rest after a wide call;
    # with the budget of cost per second that replaced the rest, 49-56 -> 61-70 ms at load 10-14.)
    # The bound, 5x quiet, with a floor for a quick quiet run: 200 ms at least.
    assert _p99(loaded) < 5 * max(_p99(quiet), 0.04)
