"""What the admission weighs an aggregating read by comes from its RPC's declared ``scan``, on a real store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from offsetstore.core.calls import FACTS
from offsetstore.core.types import OffsetCommit
from offsetstore.runtime.store import Store
from offsetstore.server.call import Call
from offsetstore.server.scan_cost import ScanCost
from offsetstore.v1 import offset_store_pb2 as pb


@pytest.mark.parametrize(
    ("method", "request_of", "scanned"),
    [
        ("DescribeGroup", lambda g: pb.DescribeGroupRequest(group_id=g, page_size=1), 5),
        ("DescribeGroup", lambda g: pb.DescribeGroupRequest(group_id=g, page_size=1, page_token="x"), 0),
        ("ListTopics", lambda g: pb.ListTopicsRequest(group_id=g, page_size=1), 5),
        ("ListGroups", lambda g: pb.ListGroupsRequest(prefix=g, page_size=1), 5),
        ("FetchOffsets", lambda g: pb.FetchOffsetsRequest(group_id=g), 0),
        ("CommitOffsets", lambda g: pb.CommitOffsetsRequest(group_id=g), 0),
    ],
)
def test_a_read_is_weighed_by_the_partitions_its_declared_scan_reads(
    store: Store, group_id: str, topic: str, method: str, request_of: Callable[[str], Any], scanned: int
) -> None:
    store.commit_offsets(group_id, [OffsetCommit(topic, p, 1) for p in range(5)])
    call = Call(FACTS[method], request_of(group_id))
    assert store.wait(ScanCost(store.aio).of(call)) == scanned
