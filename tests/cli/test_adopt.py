"""``groups adopt`` from a file and a Spark checkpoint, the reset with a source under it, and the way back out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offsetstore.cli._spark_checkpoint import CheckpointError, read_checkpoint
from offsetstore.client import ChangeKind, InvalidArgumentError, OffsetStoreClient, Watermark
from offsetstore.core.types import TopicPartition


def offsets_of(client: OffsetStoreClient, group_id: str) -> dict[tuple[str, int], int]:
    return {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}


def write_checkpoint(root: Path, batches: dict[int, dict[str, dict[str, int]]], committed: list[int]) -> Path:
    """A checkpoint as Spark's HDFSMetadataLog writes it: offsets/N (v1, batch metadata, one line per source)
    and commits/N, with the hidden .N.crc files of Hadoop's local file system beside them."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"8a4e5c52-6d7e-4f39-9c1b-0d1a3e1f2b7c"}\n')
    for n, sources in batches.items():
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1700000000000 + n, "conf": {}}
        (root / "offsets" / str(n)).write_text("v1\n" + json.dumps(meta) + "\n" + json.dumps(sources))
        (root / "offsets" / f".{n}.crc").write_bytes(b"crc")
    for n in committed:
        (root / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def test_a_reset_with_a_source_is_one_adoption_in_the_history(client, group_id) -> None:
    client.commit_offsets(group_id, {("adopt-a", 0): 3, ("adopt-a", 2): 9})
    generation = client.fetch_offsets(group_id).generation
    source = "kafka group legacy at broker:9092"

    preview = client.reset_offsets(
        group_id,
        to_offsets={TopicPartition("adopt-a", 0): 40, TopicPartition("adopt-a", 1): 41},
        dry_run=True,
        source=source,
    )
    assert preview.dry_run and offsets_of(client, group_id) == {("adopt-a", 0): 3, ("adopt-a", 2): 9}
    result = client.reset_offsets(
        group_id, to_offsets={TopicPartition("adopt-a", 0): 40, TopicPartition("adopt-a", 1): 41}, source=source
    )

    assert result.generation == generation + 1
    # Partitions the source does not name keep their offsets.
    assert offsets_of(client, group_id) == {("adopt-a", 0): 40, ("adopt-a", 1): 41, ("adopt-a", 2): 9}
    newest = client.list_offset_history(group_id).items[:2]
    assert {(c.partition, c.previous_offset, c.new_offset, c.kind, c.source) for c in newest} == {
        (0, 3, 40, ChangeKind.ADOPT, source),
        (1, -1, 41, ChangeKind.ADOPT, source),
    }


def test_to_offsets_placeholders_resolve_like_a_boundary(client, group_id) -> None:
    client.report_watermarks([Watermark("adopt-b", 0, 5, 50), Watermark("adopt-b", 1, 7, 70)])
    client.reset_offsets(
        group_id,
        to_offsets={
            TopicPartition("adopt-b", 0): -2,
            TopicPartition("adopt-b", 1): -1,
            TopicPartition("adopt-b", 2): -2,
        },
    )
    assert offsets_of(client, group_id) == {("adopt-b", 0): 5, ("adopt-b", 1): 70, ("adopt-b", 2): -2}
    assert {c.kind for c in client.list_offset_history(group_id).items} == {ChangeKind.RESET}


@pytest.mark.parametrize(
    ("keywords", "field"),
    [
        ({"to_offsets": {}}, "to_offsets"),
        ({"to_offsets": {TopicPartition("adopt-c", 0): -3}}, "to_offsets.offsets[0].offset"),
        ({"to_offsets": {TopicPartition("adopt c", 0): 1}}, "to_offsets.offsets[0].topic"),
        ({"to_offsets": {TopicPartition("adopt-c", 0): 1}, "topics": {"adopt-c": [0, 1]}}, "topics"),
        ({"to_offsets": {TopicPartition("adopt-c", 0): 1}, "source": "x" * 1025}, "source"),
        ({"to_offsets": {TopicPartition("adopt-c", 0): 1}, "all_topics": True}, "topics"),
    ],
)
def test_bad_to_offsets_are_refused_naming_the_field_and_write_nothing(client, group_id, keywords, field) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        client.reset_offsets(group_id, **keywords)
    assert field in [v.field for v in caught.value.violations]
    assert client.fetch_offsets(group_id).generation == 0


def test_adopt_from_a_file_shows_the_log_range_first_and_records_its_source(client, groups, group_id, tmp_path) -> None:
    client.report_watermarks([Watermark("adopt-d", 0, 10, 100), Watermark("adopt-d", 1, 10, 100)])
    client.commit_offsets(group_id, {("adopt-d", 0): 50, ("adopt-d", 1): 50})
    generation = client.fetch_offsets(group_id).generation
    plan = tmp_path / "legacy.csv"
    plan.write_text(f"other,adopt-d,0,1\n{group_id},adopt-d,0,5\n{group_id},adopt-d,1,60\n")

    dry = groups("adopt", group_id, "--from-file", str(plan))
    assert dry.code == 0, dry.err
    rows = [line.split(None, 7) for line in dry.out.split("\n\n")[0].splitlines()[2:]]
    assert [r[2:7] for r in rows] == [["0", "50", "5", "10", "100"], ["1", "50", "60", "10", "100"]]
    assert "before the log start: 5 record(s) deleted unread" in rows[0][7]
    assert "Dry run: nothing changed" in dry.out
    assert client.fetch_offsets(group_id).generation == generation

    done = groups("adopt", group_id, "--from-file", str(plan), "--execute", "--expected-generation", str(generation))
    assert done.code == 0, done.err
    assert offsets_of(client, group_id) == {("adopt-d", 0): 5, ("adopt-d", 1): 60}
    history = groups("history", group_id)
    assert "ADOPT" in history.out and f"file {plan} (group {group_id})" in history.out


def test_adopt_records_the_absolute_path_of_a_relative_file_and_checkpoint(
    client, groups, group_id, tmp_path, monkeypatch
) -> None:
    """Issue 59: 'file positions.csv' in the history says nothing once the shell that typed it is gone."""
    monkeypatch.chdir(tmp_path)
    Path("positions.csv").write_text("adopt-h,0,5\n")
    write_checkpoint(tmp_path / "ckpt", {3: {"adopt-h": {"0": 7}}}, committed=[3])

    assert groups("adopt", group_id, "--from-file", "positions.csv", "--execute").code == 0
    assert groups("adopt", group_id, "--from-spark-checkpoint", "ckpt", "--execute").code == 0
    sources = [c.source for c in client.list_offset_history(group_id).items]
    assert sources == [f"spark checkpoint {tmp_path / 'ckpt'} batch 3", f"file {tmp_path / 'positions.csv'}"]


def test_adopt_takes_another_groups_lines_of_a_kafka_export_with_file_group(client, groups, group_id, tmp_path) -> None:
    """Issue 59: kafka-consumer-groups --all-groups --export names the Kafka group, not the one adopting."""
    plan = tmp_path / "all-groups.csv"
    plan.write_text("legacy-etl,adopt-i,0,11\nlegacy-etl,adopt-i,1,12\nother,adopt-i,0,99\n")

    refused = groups("adopt", group_id, "--from-file", str(plan))
    assert refused.code == 1
    assert f"has no offsets of group {group_id} (it has legacy-etl, other): add --file-group NAME" in refused.err
    one = tmp_path / "one-group.csv"
    one.write_text("legacy-etl,adopt-i,0,11\n")
    assert (
        "add --file-group legacy-etl to adopt those lines into"
        in groups("adopt", group_id, "--from-file", str(one)).err
    )

    done = groups("adopt", group_id, "--from-file", str(plan), "--file-group", "legacy-etl", "--execute")
    assert done.code == 0, done.err
    assert offsets_of(client, group_id) == {("adopt-i", 0): 11, ("adopt-i", 1): 12}
    assert {c.source for c in client.list_offset_history(group_id).items} == {f"file {plan} (group legacy-etl)"}

    # A file without a group column has nothing to pick, and --file-group belongs to --from-file.
    plain = tmp_path / "plain.csv"
    plain.write_text("adopt-i,0,5\n")
    assert "no group column" in groups("adopt", group_id, "--from-file", str(plain), "--file-group", "x").err
    no_file = groups("adopt", group_id, "--from-spark-checkpoint", str(tmp_path), "--file-group", "x")
    assert no_file.code == 1 and "give --from-file too" in no_file.err


def test_adopt_flags_an_offset_past_the_log_end_the_store_knows_for_a_new_group(
    client, groups, group_id, tmp_path
) -> None:
    client.report_watermarks([Watermark("adopt-g", 0, 0, 100)])
    plan = tmp_path / "legacy.csv"
    plan.write_text("adopt-g,0,150\n")
    dry = groups("adopt", group_id, "--from-file", str(plan))
    assert dry.code == 0, dry.err
    assert "past the log end by 50" in dry.out
    clamped = groups("adopt", group_id, "--from-file", str(plan), "--clamp", "--execute")
    assert clamped.code == 0, clamped.err
    assert offsets_of(client, group_id) == {("adopt-g", 0): 100}


def test_adopt_from_a_spark_checkpoint_takes_the_last_committed_batch(client, groups, group_id, tmp_path) -> None:
    checkpoint = write_checkpoint(
        tmp_path / "ckpt",
        {
            6: {"adopt-e": {"0": 10, "1": 12}},
            7: {"adopt-e": {"0": 20, "1": 22}},
            8: {"adopt-e": {"0": 30, "1": 32}},  # in flight: planned, never committed
        },
        committed=[6, 7],
    )
    assert read_checkpoint(str(checkpoint)).in_flight == 8

    done = groups("adopt", group_id, "--from-spark-checkpoint", str(checkpoint), "--execute")
    assert done.code == 0, done.err
    assert "batch 8 was planned but not committed" in done.err
    assert offsets_of(client, group_id) == {("adopt-e", 0): 20, ("adopt-e", 1): 22}
    assert {c.source for c in client.list_offset_history(group_id).items} == {f"spark checkpoint {checkpoint} batch 7"}


def test_a_checkpoint_without_a_committed_kafka_batch_is_refused_with_why(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="no committed batch"):
        read_checkpoint(str(write_checkpoint(tmp_path / "a", {0: {"t": {"0": 1}}}, committed=[])))
    with pytest.raises(CheckpointError, match="only Kafka sources"):
        read_checkpoint(str(write_checkpoint(tmp_path / "b", {0: {"rate": 5}}, committed=[0])))  # type: ignore[dict-item]
    with pytest.raises(CheckpointError, match="no offsets/ log"):
        read_checkpoint(str(tmp_path))


def test_export_as_spark_starting_offsets(client, groups, group_id) -> None:
    client.commit_offsets(group_id, {("adopt-f", 0): 4, ("adopt-f", 1): 8})
    client.reset_offsets(group_id, topics={"adopt-f": [2]}, to_offset=0)
    exported = groups("export", group_id, "--format", "spark")
    assert exported.code == 0, exported.err
    assert json.loads(exported.out) == {"adopt-f": {"0": 4, "1": 8, "2": 0}}
