"""Bounds a client cannot get around: message size, page size, calls queued; the server serves on.

The per-request partition limit (10,000) is covered for every RPC in test_bad_input.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import psycopg
import pytest
import sqlalchemy as sa

from offsetstore.client import OffsetStoreClient
from offsetstore.runtime.store import Store
from offsetstore.server.limits import MAX_MESSAGE_BYTES, Limits
from offsetstore.storage.validate import MAX_METADATA_BYTES, MAX_PAGE_SIZE, MAX_PARTITIONS, MAX_TOPIC_CHARS
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_server import ServerHandle

SERVICE = pb.DESCRIPTOR.services_by_name["OffsetStoreService"].full_name
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def raw(channel: grpc.Channel, method: str) -> grpc.UnaryUnaryMultiCallable:
    """A call that sends bytes as given and returns the response's bytes."""
    return channel.unary_unary(f"/{SERVICE}/{method}")


def largest_commit(group_id: str) -> pb.CommitOffsetsRequest:
    """The largest CommitOffsets the contract allows: every field at its widest."""
    topic = "t" * MAX_TOPIC_CHARS
    metadata = "m" * MAX_METADATA_BYTES
    return pb.CommitOffsetsRequest(
        group_id=group_id.ljust(255, "x"),
        generation=INT64_MAX,
        offsets=[
            pb.OffsetCommit(
                topic=topic, partition=INT32_MAX - p, offset=INT64_MAX, metadata=metadata, expected_offset=INT64_MAX
            )
            for p in range(MAX_PARTITIONS)
        ],
    )


def test_the_largest_valid_request_passes_the_size_limit(server: ServerHandle, client: OffsetStoreClient) -> None:
    group = f"big-{uuid.uuid4().hex[:8]}"
    request = largest_commit(group)
    assert request.ByteSize() <= MAX_MESSAGE_BYTES
    # Spoil only the very last byte's worth of meaning: the server must read all of it to refuse it.
    request.offsets[-1].metadata = request.offsets[-1].metadata[:-1] + "\x00"
    assert request.ByteSize() == largest_commit(group).ByteSize()
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            raw(channel, "CommitOffsets")(request.SerializeToString(), timeout=60)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert f"offsets[{MAX_PARTITIONS - 1}].metadata" in refused.value.details()  # type: ignore[attr-defined]
    assert client.fetch_offsets(request.group_id).offsets == {}


@pytest.mark.parametrize("method", ["CommitOffsets", "FetchOffsets", "ListGroups", "ReportWatermarks"])
def test_an_oversize_request_is_resource_exhausted_and_the_server_serves_on(
    server: ServerHandle, client: OffsetStoreClient, method: str
) -> None:
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            raw(channel, method)(b"\x00" * (MAX_MESSAGE_BYTES + 1), timeout=60)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert client.health() == "SERVING"
    group = f"after-{uuid.uuid4().hex[:8]}"
    client.commit_offsets(group, {("orders", 0): 1})
    assert client.fetch_offsets(group).offsets[("orders", 0)].offset == 1


def test_a_smaller_configured_limit_refuses_before_anything_is_written(store: Store) -> None:
    group = f"limit-{uuid.uuid4().hex[:8]}"
    with ServerHandle(store, limits=Limits(max_workers=2, max_message_bytes=64 * 1024)) as small:
        with OffsetStoreClient(small.address) as client:
            with pytest.raises(Exception) as refused:
                client.commit_offsets(group, {("orders", p): 1 for p in range(5000)})
            assert refused.value.__cause__.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[union-attr]
            assert client.fetch_offsets(group).offsets == {}
            client.commit_offsets(group, {("orders", p): 1 for p in range(10)})
            assert len(client.fetch_offsets(group).offsets) == 10


def test_garbage_from_many_clients_at_once_is_refused_and_the_server_serves_on(
    server: ServerHandle, client: OffsetStoreClient
) -> None:
    codes: list[grpc.StatusCode] = []
    lock = threading.Lock()

    def flood(seed: int) -> None:
        # Bytes that cannot be a protobuf message: a field with wire type 7 does not exist.
        garbage = bytes([0x0F, seed % 256]) * (1 << 20)
        with grpc.insecure_channel(server.address) as channel:
            for method in ("CommitOffsets", "ResetOffsets", "ListOffsetHistory"):
                try:
                    raw(channel, method)(garbage, timeout=60)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as error:
                    code = error.code()  # type: ignore[attr-defined]
                with lock:
                    codes.append(code)

    threads = [threading.Thread(target=flood, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert codes and set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
    assert client.health() == "SERVING"


def test_page_sizes_are_capped(client: OffsetStoreClient, group_id: str) -> None:
    client.commit_offsets(group_id, {("orders", p): 1 for p in range(MAX_PAGE_SIZE + 1)})
    page = client.list_offset_history(group_id, page_size=INT32_MAX)
    assert len(page.items) == MAX_PAGE_SIZE and page.next_page_token
    rest = client.list_offset_history(group_id, page_size=INT32_MAX, page_token=page.next_page_token)
    assert len(rest.items) == 1 and not rest.next_page_token
    assert len(client.list_groups(group_id, page_size=INT32_MAX).items) == 1


@pytest.fixture
def one_worker_server(store: Store) -> Iterator[ServerHandle]:
    with ServerHandle(store, limits=Limits(max_workers=1)) as server:
        yield server


def test_calls_beyond_the_queue_are_refused_at_once_not_piled_up(
    one_worker_server: ServerHandle, database_url: str, group_id: str
) -> None:
    """While a slow database holds the only worker, new calls queue up to a bound, then get RESOURCE_EXHAUSTED."""
    with OffsetStoreClient(one_worker_server.address, timeout=60) as client:
        client.commit_offsets(group_id, {("orders", 0): 1})
        conninfo = sa.make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(conninfo) as locker:
            locker.execute("SELECT 1 FROM offsetstore.groups WHERE group_id = %s FOR UPDATE", (group_id,))
            with grpc.insecure_channel(one_worker_server.address) as channel:
                stub = raw(channel, "CommitOffsets")
                request = pb.CommitOffsetsRequest(
                    group_id=group_id, offsets=[pb.OffsetCommit(topic="orders", partition=0, offset=2)]
                ).SerializeToString()
                calls = [stub.future(request, timeout=60) for _ in range(40)]
                # The bound (8 calls for one worker) is reached while the database still holds the first.
                _wait_until(
                    lambda: sum(_code(c, wait=False) == grpc.StatusCode.RESOURCE_EXHAUSTED for c in calls) >= 40 - 8
                )
                locker.rollback()
                codes = [_code(c, wait=True) for c in calls]
        assert set(codes) <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OK}
        assert client.health() == "SERVING"
        client.commit_offsets(group_id, {("orders", 0): 3})


def _code(call: grpc.Future, *, wait: bool) -> grpc.StatusCode | None:
    if not wait and not call.done():
        return None
    try:
        call.result(timeout=60)
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        return error.code()  # type: ignore[attr-defined]


def _wait_until(condition: Callable[[], bool], seconds: float = 30) -> None:
    stop_at = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < stop_at, "condition not met in time"
        time.sleep(0.02)
