"""ResetOffsets.source is free text checked before anything is written (issue 56, L3: a NUL was INTERNAL)."""

from __future__ import annotations

import logging

import grpc
import pytest

from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.service import rich_error


@pytest.mark.parametrize("dry_run", [False, True], ids=["apply", "dry_run"])
def test_a_nul_in_the_source_is_invalid_argument_and_writes_nothing(stub, client, group_id, topic, caplog, dry_run):
    client.commit_offsets(group_id, {(topic, 0): 50})
    before = client.fetch_offsets(group_id)
    request = pb.ResetOffsetsRequest(
        group_id=group_id,
        topics=[pb.TopicSelection(topic=topic, partitions=[0])],
        to_offsets=pb.OffsetTargets(offsets=[pb.PartitionOffset(topic=topic, partition=0, offset=7)]),
        source="kafka-group a\x00b",
        dry_run=dry_run,
    )
    with caplog.at_level(logging.INFO, logger="offsetstore"):
        code, info, fields = rich_error(lambda: stub.ResetOffsets(request))
    assert (code, info.reason, fields) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["source"])
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    after = client.fetch_offsets(group_id)
    assert (after.offsets, after.generation) == (before.offsets, before.generation)
    assert [c.kind.name for c in client.list_offset_history(group_id).items] == ["COMMIT"]
