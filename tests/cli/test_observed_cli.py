"""Observed groups in the CLI (issue 57): marked in list and describe, adopted in one step with --from-observed."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from offsetstore.client import ChangeKind, OffsetStoreClient, TopicPartition
from tests.fixtures.fix_cli import Run

SOURCE = "spark:4f1c-query"


def test_list_and_describe_mark_an_observed_group(
    groups: Callable[..., Run], client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 5}, source=SOURCE)
    client.commit_offsets(f"{group_id}-c", {(topic, 0): 5})
    listed = groups("list", "--prefix", group_id)
    header, *rows = listed.out.splitlines()
    assert header.split()[-1] == "OBSERVED"
    assert {row.split()[0]: row.split()[-1] for row in rows if row.strip()} == {group_id: SOURCE, f"{group_id}-c": "-"}
    as_json = groups("list", "--prefix", group_id, "--output", "json").json()
    assert {(g["group_id"], g["observed"], g["observed_source"]) for g in as_json} == {
        (group_id, True, SOURCE),
        (f"{group_id}-c", False, ""),
    }
    described = groups("describe", group_id)
    assert described.code == 0 and f"Note: {group_id} is observed (read from {SOURCE})" in described.err
    assert f"groups adopt {group_id} --from-observed --execute" in described.err
    assert groups("describe", group_id, "--output", "json").json()["observed_source"] == SOURCE
    assert "observed" not in groups("describe", f"{group_id}-c").err


def test_adopt_from_observed_makes_a_committed_group_from_its_last_position(
    groups: Callable[..., Run], client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 5, (topic, 1): 8}, source=SOURCE)
    client.observe_offsets(group_id, {(topic, 0): 7, (topic, 1): 8}, source=SOURCE)
    preview = groups("adopt", group_id, "--from-observed")
    assert preview.code == 0 and "Dry run" in preview.out
    assert client.describe_group(group_id).observed
    done = groups("adopt", group_id, "--from-observed", "--execute")
    assert done.code == 0, done.err
    assert f"observed {SOURCE}" in done.out
    described = client.describe_group(group_id)
    assert not described.observed
    assert {(p.partition, p.offset) for p in described.partitions} == {(0, 7), (1, 8)}
    newest = client.list_offset_history(group_id).items[:2]
    assert {(c.partition, c.new_offset, c.kind, c.source) for c in newest} == {
        (0, 7, ChangeKind.ADOPT, f"observed {SOURCE}"),
        (1, 8, ChangeKind.ADOPT, f"observed {SOURCE}"),
    }
    client.commit_offsets(group_id, {(topic, 0): 9})  # its writers take over from here
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 9
    again = groups("adopt", group_id, "--from-observed")
    assert again.code != 0 and "is not observed" in again.err


def test_a_reset_of_an_observed_group_is_refused_with_the_way_to_adopt_it(
    groups: Callable[..., Run], client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 5}, source=SOURCE)
    refused = groups("reset", group_id, "--topic", topic, "--to-offset", "1", "--execute")
    assert refused.code != 0 and "--from-observed" in refused.err
    assert client.fetch_offsets(group_id).offsets[TopicPartition(topic, 0)].offset == 5


def test_export_at_an_instant_gives_the_observed_positions_then_as_spark_json_and_csv(
    groups: Callable[..., Run], client: OffsetStoreClient, group_id: str, topic: str
) -> None:
    client.observe_offsets(group_id, {(topic, 0): 5, (topic, 1): 8}, source=SOURCE)
    between = datetime.now(UTC)
    client.observe_offsets(group_id, {(topic, 0): 9, (topic, 1): 12}, source=SOURCE)
    spark = groups("export", group_id, "--at", between.isoformat(), "--format", "spark")
    assert spark.code == 0, spark.err
    assert json.loads(spark.out) == {topic: {"0": 5, "1": 8}}
    csv = groups("export", group_id, "--at", between.isoformat())
    assert csv.out.splitlines() == [f"{topic},0,5", f"{topic},1,8"]
    now = groups("export", group_id, "--format", "spark")
    assert json.loads(now.out) == {topic: {"0": 9, "1": 12}}
    # Nothing changed: the export's dry-run reset of an observed group writes nothing.
    assert client.describe_group(group_id).observed
    assert [c.kind for c in client.list_offset_history(group_id).items] == [ChangeKind.OBSERVED] * 4
