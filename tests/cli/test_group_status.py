"""Issue 36: the status verdict through DescribeGroup, the CLI and /metrics, and no false anomaly."""

from __future__ import annotations

import uuid

import pytest

from offsetstore.client import Watermark
from offsetstore.core.types import GroupStatus
from offsetstore.server import metrics


@pytest.fixture
def topic() -> str:
    """A topic no other test uses: watermarks are shared by all groups."""
    return f"st-{uuid.uuid4().hex[:12]}"


def test_a_commit_past_an_older_log_end_is_no_anomaly(store, client, groups, group_id, topic) -> None:
    """The issue's walk: the consumer reported log end 64, 40 more records came, it committed 75, describe at once."""
    client.report_watermarks([Watermark(topic, 0, 0, 64)])
    client.commit_offsets(group_id, {(topic, 0): 75})

    table = groups("describe", group_id)
    assert table.code == 0, table.err
    assert "Fix it with" not in table.err
    assert "Warning:" not in table.err
    assert f"Note: {group_id} {topic}:0: caught up: offset 75 is past the log end 64 seen" in table.err
    assert "(unconfirmed until a newer log end)" in table.err
    assert table.out.splitlines()[1].split()[-1] == "OK"
    state = groups("describe", group_id, "--state", "--output", "json").json()
    assert (state["state"], state["status"]) == ("Stable", "OK")
    (partition,) = groups("describe", group_id, "--output", "json").json()["partitions"]
    assert partition["offset_past_log_end"] is False
    registry = metrics.build_registry(store, group_limit=100000)
    assert registry.get_sample_value("offsetstore_group_partitions_past_log_end", {"group": group_id}) == 0
    assert registry.get_sample_value("offsetstore_group_status", {"group": group_id, "status": "OK"}) == 1

    # The consumer's next report: the log end passed the offset, all is well.
    client.report_watermarks([Watermark(topic, 0, 0, 104)])
    described = client.describe_group(group_id)
    assert (described.status, described.partitions[0].status, described.partitions[0].lag) == (
        GroupStatus.OK,
        GroupStatus.OK,
        29,
    )


def test_a_log_end_seen_after_the_commit_confirms_the_anomaly(store, client, groups, group_id, topic) -> None:
    client.commit_offsets(group_id, {(topic, 0): 500, (topic, 1): 5})
    client.report_watermarks([Watermark(topic, 0, 0, 100), Watermark(topic, 1, 0, 100)])

    described = client.describe_group(group_id)
    assert [p.status for p in described.partitions] == [GroupStatus.PAST_END, GroupStatus.OK]
    assert described.status == GroupStatus.PAST_END
    assert described.status_reason == f"{topic}:0: offset 500 is past the log end 100 seen after the commit"
    table = groups("describe", group_id)
    assert f"Fix it with: offsetstore groups reset {group_id} --topic {topic}:0" in table.err
    registry = metrics.build_registry(store, group_limit=100000)
    assert registry.get_sample_value("offsetstore_group_partitions_past_log_end", {"group": group_id}) == 1
    assert registry.get_sample_value("offsetstore_group_status", {"group": group_id, "status": "PAST_END"}) == 1
    assert registry.get_sample_value("offsetstore_group_status", {"group": group_id, "status": "OK"}) is None


def test_lost_records_and_list_state(client, groups, group_id, topic) -> None:
    lost, fine = f"{group_id}-lost", f"{group_id}-fine"
    client.commit_offsets(lost, {(topic, 0): 10})
    client.commit_offsets(fine, {(topic, 0): 60})
    client.report_watermarks([Watermark(topic, 0, 50, 60)])

    assert (
        client.describe_group(lost).status_reason
        == f"{topic}:0: offset 10 is below the log start 50: 40 records deleted unread"
    )
    listed = groups("list", "--prefix", group_id, "--state", "lost,past_end", "--output", "json").json()
    assert [(g["group_id"], g["status"]) for g in listed] == [(lost, "LOST")]
    everyone = groups("list", "--prefix", group_id, "--state").out
    assert [line.split()[:2] for line in everyone.splitlines()[1:]] == [[fine, "OK"], [lost, "LOST"]]
    with pytest.raises(SystemExit):
        groups("list", "--state", "sleepy")
