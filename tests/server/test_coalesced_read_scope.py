"""Reads that ride one statement keep each caller's own scope: a grant is checked per call, before the batch."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc

from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_auth import bearer, call, fresh
from tests.fixtures.fix_server import ServerHandle


def test_concurrent_reads_of_callers_with_different_scopes_each_get_their_own_answer(
    token_server: ServerHandle,
) -> None:
    mine, foreign, shared = fresh("t-"), fresh("u-"), fresh("shared-")
    stored = {mine: 1, foreign: 2, shared: 3}
    for group, offset in stored.items():
        request = pb.CommitOffsetsRequest(
            group_id=group, offsets=[pb.OffsetCommit(topic="t-x", partition=0, offset=offset)]
        )
        assert call(token_server.address, "CommitOffsets", request, bearer("root"))[0] == grpc.StatusCode.OK

    calls = [
        ("reader", mine, grpc.StatusCode.OK),
        ("reader", foreign, grpc.StatusCode.PERMISSION_DENIED),
        ("reader", shared, grpc.StatusCode.PERMISSION_DENIED),
        ("admin", shared, grpc.StatusCode.OK),
        ("admin", mine, grpc.StatusCode.OK),
        ("committer", foreign, grpc.StatusCode.PERMISSION_DENIED),
        ("committer", mine, grpc.StatusCode.OK),
        ("root", foreign, grpc.StatusCode.OK),
    ] * 8
    channel = grpc.insecure_channel(token_server.address)
    fetch = channel.unary_unary(
        "/offsetstore.v1.OffsetStoreService/FetchOffsets",
        request_serializer=pb.FetchOffsetsRequest.SerializeToString,
        response_deserializer=pb.FetchOffsetsResponse.FromString,
    )

    def one(who: str, group: str) -> tuple[grpc.StatusCode, list[int]]:
        # A principal's calls beyond its share are refused (RESOURCE_EXHAUSTED): sent again, as a client's retry policy would.
        while True:
            try:
                response = fetch(pb.FetchOffsetsRequest(group_id=group), metadata=bearer(who), timeout=20)
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # type: ignore[attr-defined]
                    return error.code(), []  # type: ignore[attr-defined]
                continue
            return grpc.StatusCode.OK, [o.offset for o in response.offsets]

    with channel, ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(lambda c: one(c[0], c[1]), calls))
    for (who, group, status), (got, offsets) in zip(calls, answers, strict=True):
        assert got == status, (who, group)
        if got == grpc.StatusCode.OK:
            assert offsets == [stored[group]], (who, group)
