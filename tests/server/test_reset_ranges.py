"""A reset's offsets outside the known log range: said in every answer (dry run or not), set as asked or clamped."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from offsetstore.client import Boundary, OffsetOutOfRange, OffsetStoreClient, Watermark

if TYPE_CHECKING:
    from tests.fixtures.fix_http import HttpServer


@pytest.fixture
def topic(client: OffsetStoreClient) -> str:
    """A topic of its own (watermarks are every group's) whose partitions 0 and 1 hold offsets 100 to 200."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    client.report_watermarks([Watermark(name, 0, 100, 200), Watermark(name, 1, 100, 200)])
    return name


def offsets_of(client: OffsetStoreClient, group_id: str) -> dict[tuple[str, int], int]:
    return {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}


def test_an_offset_past_the_log_end_is_set_as_asked_and_said_so(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 150, (topic, 1): 150})
    dry = client.reset_offsets(group_id, topics=[topic], to_offset=250, dry_run=True)
    said = [OffsetOutOfRange(topic, 0, 250, 200, False), OffsetOutOfRange(topic, 1, 250, 200, False)]
    assert dry.out_of_range == said
    assert offsets_of(client, group_id) == {(topic, 0): 150, (topic, 1): 150}

    applied = client.reset_offsets(group_id, topics=[topic], to_offset=250)
    assert applied.out_of_range == said
    assert offsets_of(client, group_id) == {(topic, 0): 250, (topic, 1): 250}


def test_clamp_sets_the_nearer_bound(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 150})
    dry = client.reset_offsets(group_id, topics={topic: [0, 1]}, to_offset=50, clamp=True, dry_run=True)
    assert dry.out_of_range == [OffsetOutOfRange(topic, 0, 50, 100, True), OffsetOutOfRange(topic, 1, 50, 100, True)]
    assert [c.new_offset for c in dry.changes] == [100, 100]
    client.reset_offsets(group_id, topics={topic: [0, 1]}, to_offset=50, clamp=True)
    assert offsets_of(client, group_id) == {(topic, 0): 100, (topic, 1): 100}


def test_an_offset_inside_the_range_or_a_boundary_says_nothing(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 150})
    assert client.reset_offsets(group_id, topics=[topic], to_offset=200).out_of_range == []
    assert client.reset_offsets(group_id, topics=[topic], to_offset=100).out_of_range == []
    assert client.reset_offsets(group_id, topics=[topic], to_boundary=Boundary.EARLIEST).out_of_range == []
    # No watermark known: nothing to compare with.
    other = f"t-{uuid.uuid4().hex[:12]}"
    assert client.reset_offsets(group_id, topics={other: [0]}, to_offset=10**9).out_of_range == []


def test_a_shift_below_the_log_start_is_said_and_clamped_on_request(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 120})
    shifted = client.reset_offsets(group_id, topics=[topic], shift_by=-50, dry_run=True)
    assert shifted.out_of_range == [OffsetOutOfRange(topic, 0, 70, 100, False)]
    client.reset_offsets(group_id, topics=[topic], shift_by=-50, clamp=True)
    assert offsets_of(client, group_id) == {(topic, 0): 100}


def test_a_time_whose_offset_the_log_no_longer_holds_is_said(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 150})
    instant = client.list_offset_history(group_id).items[0].change_time
    client.commit_offsets(group_id, {(topic, 0): 190})
    client.report_watermarks([Watermark(topic, 0, 160, 200)])  # retention dropped the log below 160
    result = client.reset_offsets(group_id, topics=[topic], to_commit_time=instant, dry_run=True)
    assert result.out_of_range == [OffsetOutOfRange(topic, 0, 150, 160, False)]


def test_http_answers_carry_the_out_of_range_list(http_server: HttpServer) -> None:
    group, name = f"http-range-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:12]}"
    marks = [{"topic": name, "partition": 0, "logStartOffset": "100", "logEndOffset": "200"}]
    assert http_server.curl("ReportWatermarks", {"watermarks": marks})[0] == 200
    body = {"groupId": group, "topics": [{"topic": name, "partitions": [0]}], "toOffset": "900", "dryRun": True}
    status, answer = http_server.curl("ResetOffsets", body)
    assert status == 200, answer
    assert answer["outOfRange"] == [{"topic": name, "partition": 0, "offset": "900", "bound": "200", "clamped": False}]
