"""ListTopics: a group's topics, through gRPC, both clients, HTTP/JSON and the CLI, with its bad input refused."""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest

from offsetstore.cli.groups import main as groups_main
from offsetstore.client import AsyncOffsetStoreClient, InvalidArgumentError, OffsetStoreClient, Watermark
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_auth import bearer, call, fresh
from tests.fixtures.fix_http import HttpServer
from tests.fixtures.fix_server import ServerHandle


def _name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def test_a_groups_topics_with_their_partitions_last_commit_and_lag(client: OffsetStoreClient) -> None:
    group, a, b = _name("g-"), _name("a-"), _name("b-")
    committed = client.commit_offsets(group, {(b, 0): 5, (a, 0): 10, (a, 1): 20})
    client.report_watermarks([Watermark(a, 0, 0, 15), Watermark(a, 1, 0, 20)])  # b's log end stays unknown

    page = client.list_topics(group)

    assert [(t.topic, t.partition_count, t.total_lag) for t in page.items] == [(a, 2, 5), (b, 1, -1)]
    assert page.items[0].last_commit_time == max(c.commit_time for tp, c in committed.items() if tp.topic == a)
    assert page.next_page_token == ""


def test_an_unknown_or_deleted_group_has_no_topics(client: OffsetStoreClient) -> None:
    assert client.list_topics(_name("g-")).items == []
    group = _name("g-")
    client.commit_offsets(group, {(_name("t-"), 0): 1})
    client.delete_offsets(group, all_topics=True)
    assert client.list_topics(group).items == []


def test_pages_of_topics_cover_each_topic_once(client: OffsetStoreClient) -> None:
    group = _name("g-")
    topics = sorted(_name(f"t{i}-") for i in range(5))
    client.commit_offsets(group, {(t, 0): 1 for t in topics})
    seen, token = [], ""
    while True:
        page = client.list_topics(group, page_size=2, page_token=token)
        assert len(page.items) <= 2
        seen += [t.topic for t in page.items]
        token = page.next_page_token
        if not token:
            break
    assert seen == topics


def test_the_async_client_lists_the_same_topics(server: ServerHandle, client: OffsetStoreClient) -> None:
    group, topic = _name("g-"), _name("t-")
    client.commit_offsets(group, {(topic, 3): 7})

    async def listed() -> list[tuple[str, int]]:
        async with AsyncOffsetStoreClient(server.address) as aclient:
            return [(t.topic, t.partition_count) for t in (await aclient.list_topics(group)).items]

    assert asyncio.run(listed()) == [(topic, 1)]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ListTopicsRequest(group_id=""), "group_id"),
        (pb.ListTopicsRequest(group_id="g" * 256), "group_id"),
        (pb.ListTopicsRequest(group_id="g", page_size=-1), "page_size"),
        (pb.ListTopicsRequest(group_id="g", page_token="not-a-token"), "page_token"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field(
    client: OffsetStoreClient, request_: pb.ListTopicsRequest, field: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        client.list_topics(request_.group_id, page_size=request_.page_size, page_token=request_.page_token)
    assert caught.value.reason == "INVALID_ARGUMENT"
    assert field in [v.field for v in caught.value.violations]


def test_it_needs_read_on_the_group(token_server: ServerHandle) -> None:
    mine, theirs = pb.ListTopicsRequest(group_id=fresh()), pb.ListTopicsRequest(group_id="other-group")
    assert call(token_server.address, "ListTopics", mine, bearer("reader"))[0] == grpc.StatusCode.OK
    assert call(token_server.address, "ListTopics", theirs, bearer("reader"))[0] == grpc.StatusCode.PERMISSION_DENIED
    assert call(token_server.address, "ListTopics", mine)[0] == grpc.StatusCode.UNAUTHENTICATED


def test_http_json_serves_it_from_the_proto(http_server: HttpServer, client: OffsetStoreClient) -> None:
    group, topic = _name("g-"), _name("t-")
    status, _ = http_server.curl("CommitOffsets", {"groupId": group, "offsets": [{"topic": topic, "offset": "4"}]})
    assert status == 200
    status, body = http_server.curl("ListTopics", {"groupId": group}, token="reader")
    assert status == 200
    assert [(t["topic"], t["partitionCount"]) for t in body["topics"]] == [(topic, 1)]
    status, body = http_server.curl("ListTopics", {"groupId": ""}, token="reader")
    assert (status, http_server.reason(body)) == (400, "INVALID_ARGUMENT")


def test_the_cli_lists_a_groups_topics(
    server: ServerHandle, client: OffsetStoreClient, capsys: pytest.CaptureFixture[str]
) -> None:
    group, topic = _name("g-"), _name("t-")
    client.commit_offsets(group, {(topic, 0): 3, (topic, 1): 4})
    assert groups_main(["topics", group, "--server", server.address, "--output", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(t["topic"], t["partition_count"]) for t in listed] == [(topic, 2)]
    assert groups_main(["topics", group, "--server", server.address]) == 0
    assert topic in capsys.readouterr().out
