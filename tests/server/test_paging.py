"""FetchOffsets and DescribeGroup in pages: no answer is larger than --max-response-bytes.

A server whose responses may hold 64 KiB (the smallest limit it takes) makes groups of
a few dozen partitions span several pages. The pages are read with a raw stub, to see
each response as the server sent it, and with the Python client, which merges them.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import uuid
from collections.abc import Iterator

import grpc
import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.client import (
    AsyncOffsetStoreClient,
    GroupChangedError,
    InvalidArgumentError,
    OffsetCommit,
    OffsetStoreClient,
    ResourceExhaustedError,
)
from offsetstore.core.errors import from_rpc_error
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server.config import Settings
from offsetstore.server.limits import Limits
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.fix_server import ServerHandle

LIMIT = 64 * 1024
INT64_MAX = 2**63 - 1
TOPIC = "t" * 249  # the longest topic
METADATA = "\U0001d11e" * 1024  # 4096 bytes of four-byte characters: the most metadata
PARTITIONS = 60  # ~260 KB of offsets: five pages of 64 KiB


@pytest.fixture(scope="module")
def small(database_url: str) -> Iterator[ServerHandle]:
    store = Store.open(StoreConfig(database_url, hot_pool_size=4, max_response_bytes=LIMIT))
    server = ServerHandle(store, limits=Limits(max_workers=8)).start()
    yield server
    server.stop()
    store.dispose()


@pytest.fixture(scope="module")
def stub(small: ServerHandle) -> Iterator[pb_grpc.OffsetStoreServiceStub]:
    with grpc.insecure_channel(small.address) as channel:
        yield pb_grpc.OffsetStoreServiceStub(channel)


@pytest.fixture(scope="module")
def client(small: ServerHandle) -> Iterator[OffsetStoreClient]:
    with OffsetStoreClient(small.address, timeout=20) as client:
        yield client


def fresh() -> str:
    return f"g-paging-{uuid.uuid4().hex[:12]}"


def widest(client: OffsetStoreClient, partitions: int = PARTITIONS) -> str:
    """A group whose every offset is as large on the wire as an offset can be."""
    group = fresh()
    commits = [OffsetCommit(TOPIC, 2**31 - 1 - p, INT64_MAX - p, METADATA) for p in range(partitions)]
    client.commit_offsets(group, commits)
    return group


def call(method: grpc.UnaryUnaryMultiCallable, request: object) -> object:
    try:
        return method(request, timeout=20)
    except grpc.RpcError as error:
        raise from_rpc_error(error) from None


def fetch_pages(stub: pb_grpc.OffsetStoreServiceStub, group: str, page_size: int, **fields: object) -> list:
    pages, token = [], ""
    while True:
        page = call(
            stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group, page_size=page_size, page_token=token, **fields)
        )
        pages.append(page)
        token = page.next_page_token
        if not token:
            return pages


def test_pages_are_full_but_never_larger_than_the_limit(client: OffsetStoreClient, stub) -> None:
    group = widest(client)
    pages = fetch_pages(stub, group, page_size=10_000)
    sizes = [page.ByteSize() for page in pages]
    assert len(pages) >= 4 and max(sizes) <= LIMIT
    # Full, short of what the estimate keeps back: the envelope (8 KiB) and one entry.
    assert all(size > LIMIT - 8192 - 4500 for size in sizes[:-1])
    keys = [(o.topic, o.partition) for page in pages for o in page.offsets]
    assert keys == sorted(keys) and len(set(keys)) == PARTITIONS  # each once, in order
    assert all(o.metadata == METADATA for page in pages for o in page.offsets)


def test_page_size_caps_the_entries_of_a_page(client: OffsetStoreClient, stub) -> None:
    group = fresh()
    client.commit_offsets(group, {("orders", p): p for p in range(23)})
    pages = fetch_pages(stub, group, page_size=5)
    assert [len(page.offsets) for page in pages] == [5, 5, 5, 5, 3]
    assert [o.offset for page in pages for o in page.offsets] == list(range(23))


def test_an_unpaged_read_larger_than_the_limit_is_refused_not_cut(client: OffsetStoreClient, stub) -> None:
    group = widest(client)
    with pytest.raises(ResourceExhaustedError) as refused:
        call(stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group))
    assert refused.value.metadata["limit"] == "response_bytes"
    assert refused.value.retry_after is None  # waiting does not help: paging does
    with pytest.raises(ResourceExhaustedError):
        call(stub.DescribeGroup, pb.DescribeGroupRequest(group_id=group))
    small_group = fresh()
    client.commit_offsets(small_group, {("orders", 0): 1})
    assert len(call(stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=small_group)).offsets) == 1


def test_the_client_merges_the_pages(client: OffsetStoreClient) -> None:
    group = widest(client)
    fetched = client.fetch_offsets(group)
    assert len(fetched.offsets) == PARTITIONS and fetched.next_page_token == ""
    assert all(o.offset == INT64_MAX - (2**31 - 1 - p) for (_, p), o in fetched.offsets.items())
    described = client.describe_group(group)
    assert [(s.topic, s.partition) for s in described.partitions] == list(fetched.offsets)
    assert described.generation == fetched.generation and described.next_page_token == ""


def test_named_partitions_without_offsets_are_paged_in_their_place(client: OffsetStoreClient, stub) -> None:
    group = fresh()
    client.commit_offsets(group, {("a", p): 100 + p for p in range(0, 10, 2)} | {("b", 0): 7})
    # Every partition of "b", partitions 0-9 of "a": the odd ones have no offset.
    topics = [pb.TopicSelection(topic="a", partitions=range(10)), pb.TopicSelection(topic="b")]
    pages = fetch_pages(stub, group, page_size=3, topics=topics)
    assert [len(page.offsets) for page in pages] == [3, 3, 3, 2]
    got = [(o.topic, o.partition, o.offset) for page in pages for o in page.offsets]
    assert got == [("a", p, 100 + p if p % 2 == 0 else -1) for p in range(10)] + [("b", 0, 7)]
    fetched = client.fetch_offsets(group, {"a": range(10), "b": []})
    assert [(tp.topic, tp.partition, o.offset) for tp, o in fetched.offsets.items()] == got


def test_a_describe_is_paged_like_a_fetch(client: OffsetStoreClient, stub) -> None:
    group = fresh()
    client.commit_offsets(group, {("orders", p): p for p in range(12)})
    pages, token = [], ""
    while True:
        page = call(stub.DescribeGroup, pb.DescribeGroupRequest(group_id=group, page_size=5, page_token=token))
        pages.append(page)
        token = page.next_page_token
        if not token:
            break
    assert [len(p.partitions) for p in pages] == [5, 5, 2]
    assert {p.generation for p in pages} == {0} and {p.group_id for p in pages} == {group}
    assert [s.partition for p in pages for s in p.partitions] == list(range(12))


def test_a_join_or_a_reset_between_pages_fails_the_next_page(client: OffsetStoreClient, stub) -> None:
    group = fresh()
    client.commit_offsets(group, {("orders", p): p for p in range(6)})
    first = call(stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group, page_size=2))
    client.join_group(group)
    with pytest.raises(GroupChangedError) as changed:
        call(stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group, page_size=2, page_token=first.next_page_token))
    assert changed.value.metadata["current_generation"] == "1"
    first = call(stub.DescribeGroup, pb.DescribeGroupRequest(group_id=group, page_size=2))
    client.reset_offsets(group, all_topics=True, to_offset=0)
    with pytest.raises(GroupChangedError):
        call(stub.DescribeGroup, pb.DescribeGroupRequest(group_id=group, page_size=2, page_token=first.next_page_token))
    # Plain commits by the group's own writer do not: the next page simply shows them.
    first = call(stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group, page_size=2))
    client.commit_offsets(group, {("orders", 5): 55}, generation=2)
    rest = call(
        stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group, page_size=10, page_token=first.next_page_token)
    )
    assert [o.offset for o in rest.offsets] == [0, 0, 0, 55]


class JoinAfterFirstPage(grpc.UnaryUnaryClientInterceptor):
    """Joins the group once, right after the first page of a paged fetch came back."""

    def __init__(self, client: OffsetStoreClient) -> None:
        self.client, self.joined = client, 0

    def intercept_unary_unary(self, continuation, details, request):
        response = continuation(details, request)
        if details.method.endswith("/FetchOffsets") and not request.page_token and not self.joined:
            self.joined = self.client.join_group(request.group_id)
        return response


def test_the_client_reads_again_from_the_first_page_after_a_change(client: OffsetStoreClient, small) -> None:
    group = widest(client, partitions=30)  # two pages
    reader = OffsetStoreClient(small.address, timeout=20)
    joiner = JoinAfterFirstPage(client)
    reader._stub = pb_grpc.OffsetStoreServiceStub(grpc.intercept_channel(reader._channel, joiner))
    with reader:
        fetched = reader.fetch_offsets(group)
    assert joiner.joined == 1 and fetched.generation == 1  # the second read saw the join
    assert len(fetched.offsets) == 30


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"page_size": -1}, "page_size"),
        ({"page_size": 2, "page_token": "garbage!"}, "page_token"),
        ({"page_size": 2, "page_token": "WyJ4IiwgMCwgInQiLCAwXQ"}, "page_token"),  # ["x", 0, "t", 0]: forged
    ],
)
def test_bad_paging_fields_are_invalid_arguments(stub, request_fields: dict, field: str) -> None:
    for rpc, message in ((stub.FetchOffsets, pb.FetchOffsetsRequest), (stub.DescribeGroup, pb.DescribeGroupRequest)):
        with pytest.raises(InvalidArgumentError) as bad:
            call(rpc, message(group_id="orders-etl", **request_fields))
        assert [v.field for v in bad.value.violations] == [field]


def test_a_token_continues_only_the_request_that_made_it(client: OffsetStoreClient, stub) -> None:
    group, other = fresh(), fresh()
    for g in (group, other):
        client.commit_offsets(g, {("orders", p): p for p in range(4)})
    first = call(stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group, page_size=2))
    token = first.next_page_token
    misuses = [
        pb.FetchOffsetsRequest(group_id=other, page_size=2, page_token=token),
        pb.FetchOffsetsRequest(group_id=group, page_size=2, page_token=token, topics=[pb.TopicSelection(topic="x")]),
    ]
    for request in misuses:
        with pytest.raises(InvalidArgumentError):
            call(stub.FetchOffsets, request)
    with pytest.raises(InvalidArgumentError):  # a fetch's token is not a describe's
        call(stub.DescribeGroup, pb.DescribeGroupRequest(group_id=group, page_size=2, page_token=token))
    # A different page size may continue it.
    rest = call(stub.FetchOffsets, pb.FetchOffsetsRequest(group_id=group, page_size=100, page_token=token))
    assert [o.partition for o in rest.offsets] == [2, 3]


def test_a_token_cannot_be_forged_or_altered(client: OffsetStoreClient, stub, engine: sa.Engine) -> None:
    group = fresh()
    client.commit_offsets(group, {("orders", p): p for p in range(4)})
    for rpc, message in ((stub.FetchOffsets, pb.FetchOffsetsRequest), (stub.DescribeGroup, pb.DescribeGroupRequest)):
        first = call(rpc, message(group_id=group, page_size=2))
        payload, _, mac = first.next_page_token.partition(".")
        value = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        for changed in ([value[0], value[1] + 1, value[2], value[3]], [value[0], value[1], "orders\x00", 0]):
            altered = base64.urlsafe_b64encode(json.dumps(changed).encode()).decode().rstrip("=")
            # The same signature over another content; the content alone; signed with another key.
            foreign = base64.urlsafe_b64encode(hmac.new(b"k" * 32, altered.encode(), "sha256").digest()[:16])
            for token in (f"{altered}.{mac}", altered, f"{altered}.{foreign.decode().rstrip('=')}"):
                with pytest.raises(InvalidArgumentError) as bad:  # never INTERNAL, whatever it holds
                    call(rpc, message(group_id=group, page_size=2, page_token=token))
                assert [v.field for v in bad.value.violations] == ["page_token"]
    # The key is the store's, in its database: every server on it takes the others' tokens.
    with engine.connect() as conn:
        assert len(conn.exec_driver_sql("SELECT value FROM offsetstore.secrets").scalar_one()) == 32


def test_storage_callers_in_process_read_without_a_limit(client: OffsetStoreClient, engine: sa.Engine) -> None:
    group = widest(client)  # four times the server's limit
    with engine.connect() as conn:
        assert len(storage.fetch_offsets(conn, group).offsets) == PARTITIONS
        assert len(storage.describe_group(conn, group).partitions) == PARTITIONS


def test_the_async_client_merges_the_pages_too(client: OffsetStoreClient, small: ServerHandle) -> None:
    group = widest(client)

    async def read() -> tuple[int, int]:
        async with AsyncOffsetStoreClient(small.address, timeout=20) as reader:
            fetched = await reader.fetch_offsets(group)
            described = await reader.describe_group(group)
            return len(fetched.offsets), len(described.partitions)

    assert asyncio.run(read()) == (PARTITIONS, PARTITIONS)


def test_the_response_limit_is_a_serve_setting_within_bounds() -> None:
    assert Settings.load({}, {}).max_response_bytes == 2**20
    assert (
        Settings.load({"max_response_bytes": None}, {"OFFSETSTORE_MAX_RESPONSE_BYTES": "65536"}).max_response_bytes
        == 65536
    )
    assert (
        Settings.load({"max_response_bytes": 2**22}, {"OFFSETSTORE_MAX_RESPONSE_BYTES": "65536"}).max_response_bytes
        == 2**22
    )
    for bad in (1000, 2**26 + 1):  # pages too small to hold the widest entry; beyond what the server sends
        with pytest.raises(ValueError, match="OFFSETSTORE_MAX_RESPONSE_BYTES"):
            Settings(max_response_bytes=bad)
