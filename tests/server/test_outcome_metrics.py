"""The metrics count each call from the gate's outcome: a quota, a call limit and a stale generation are told apart."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from prometheus_client import CollectorRegistry

from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from offsetstore.server.auth import AccessControl, AuthConfig
from offsetstore.server.limits import Limits
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_auth import PKI, SERVICE, bearer, call, fresh
from tests.fixtures.fix_server import ServerHandle

WAIT_SECONDS = 20.0


class Served:
    def __init__(self, server: ServerHandle, registry: CollectorRegistry) -> None:
        self.server, self.registry = server, registry

    def errors(self, method: str, reason: str, limit: str = "") -> float:
        labels = {"grpc_method": method, "reason": reason, "limit": limit}
        return self.registry.get_sample_value("offsetstore_rpc_errors_total", labels) or 0.0

    def started(self, method: str) -> float:
        labels = {"grpc_service": SERVICE.full_name, "grpc_method": method, "grpc_type": "unary"}
        return self.registry.get_sample_value("grpc_server_started_total", labels) or 0.0

    def rejections(self, reason: str) -> float:
        return self.registry.get_sample_value("offsetstore_commit_rejections_total", {"reason": reason}) or 0.0


@pytest.fixture(scope="module")
def served(database_url: str, pki: PKI) -> Iterator[Served]:
    """Tokens, a group quota of 1, a partition quota of 1 and one call at a time per principal."""
    store = Store.open(StoreConfig(database_url, hot_pool_size=4))
    registry = metrics.build_registry(store)
    server = ServerHandle(
        store,
        interceptors=metrics.interceptors(registry),
        auth=AccessControl(AuthConfig.load(pki.tokens_file)),
        limits=Limits(max_groups_per_principal=1, max_partitions_per_principal=1, max_calls_per_principal=1),
    ).start()
    try:
        yield Served(server, registry)
    finally:
        server.stop()
        store.dispose()


def commit(group: str, *partitions: int) -> pb.CommitOffsetsRequest:
    return pb.CommitOffsetsRequest(
        group_id=group, offsets=[pb.OffsetCommit(topic="t-orders", partition=p, offset=1) for p in partitions]
    )


def test_quota_refusals_and_a_stale_generation_are_distinct_reasons(served: Served) -> None:
    address = served.server.address
    # root (admin on every group, under no quota) makes the committer's prefix hold 2 groups of 2 partitions.
    existing = fresh()
    assert call(address, "CommitOffsets", commit(existing, 0, 1), bearer("root"))[0] == grpc.StatusCode.OK
    assert call(address, "CommitOffsets", commit(fresh(), 0), bearer("root"))[0] == grpc.StatusCode.OK
    before = {r: served.rejections(r) for r in ("GROUP_QUOTA", "PARTITION_QUOTA", "STALE_GENERATION")}

    assert call(address, "CommitOffsets", commit(fresh(), 0), bearer("committer"))[1] == "GROUP_QUOTA"
    assert call(address, "CommitOffsets", commit(existing, 5), bearer("committer"))[1] == "PARTITION_QUOTA"
    stale = commit(existing, 0)
    stale.generation = 99
    assert call(address, "CommitOffsets", stale, bearer("committer"))[1] == "STALE_GENERATION"

    for reason in before:
        assert served.rejections(reason) == before[reason] + 1, reason
    assert served.errors("CommitOffsets", "GROUP_QUOTA", "max_groups") >= 1
    assert served.errors("CommitOffsets", "PARTITION_QUOTA", "max_partitions") >= 1


def test_a_call_limit_refusal_names_its_limit(served: Served) -> None:
    address = served.server.address
    release = threading.Event()
    channel = grpc.insecure_channel(address)
    held = channel.stream_unary(f"/{SERVICE.full_name}/FetchOffsets", request_serializer=lambda m: m)

    def body() -> Iterator[bytes]:
        release.wait(WAIT_SECONDS)  # the call is in (counted) and sends its request only when released
        yield pb.FetchOffsetsRequest(group_id=fresh()).SerializeToString()

    before = served.started("FetchOffsets")
    future = held.future(body(), metadata=bearer("reader"), timeout=WAIT_SECONDS)
    try:
        # Wait on the condition: the held call is in (counted before it reads its request), so the
        # reader's next call is refused. Probing earlier could take the one slot and refuse the held call.
        deadline = time.monotonic() + WAIT_SECONDS
        while served.started("FetchOffsets") == before and time.monotonic() < deadline:
            time.sleep(0.01)
        while True:
            code, reason, _ = call(address, "FetchOffsets", pb.FetchOffsetsRequest(group_id=fresh()), bearer("reader"))
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                break
        assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED")
        assert served.errors("FetchOffsets", "RESOURCE_EXHAUSTED", "principal_calls") >= 1
        assert served.errors("FetchOffsets", "RESOURCE_EXHAUSTED") == 0  # the zero series, no limit named
    finally:
        release.set()
        future.result()
        channel.close()
