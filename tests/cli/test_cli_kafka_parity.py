"""``offsetstore groups`` as kafka-consumer-groups users type it: several --group at once, ``reset --export``, 4-column files."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest


@pytest.fixture
def two(client, topic: str) -> list[str]:
    """Two groups with offsets 10 and 20 on partitions 0 and 1 of `topic`."""
    names = [f"parity-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for name in names:
        client.commit_offsets(name, {(topic, 0): 10, (topic, 1): 20})
    return names


def offsets_of(client, group_id: str) -> dict[tuple[str, int], int]:
    return {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}


def test_describe_takes_several_groups(groups, two: list[str], topic: str) -> None:
    a, b = two
    run = groups("describe", "--group", a, "--group", b)
    assert run.code == 0, run.err
    assert sorted(row.split()[0] for row in run.out.splitlines()[1:] if row.strip()) == sorted([a, a, b, b])
    documents = groups("describe", "--group", b, "--group", a, "--output", "json").json()
    assert [d["group_id"] for d in documents] == [b, a]
    # One --group is still a list in JSON: the shape follows the option, not the count.
    assert [d["group_id"] for d in groups("describe", "--group", a, "--output", "json").json()] == [a]
    for view in ("--members", "--state"):
        rows = groups("describe", "--group", a, "--group", b, view, "--output", "json").json()
        assert [r["group_id"] for r in rows] == [a, b]


def test_describe_of_several_names_each_group_that_does_not_exist(groups, two: list[str]) -> None:
    a, _ = two
    missing = f"parity-missing-{uuid.uuid4().hex[:8]}"
    run = groups("describe", "--group", a, "--group", missing)
    assert run.code == 1
    assert a in run.out and missing not in run.out
    assert f"Error: group {missing} does not exist." in run.err


def test_reset_and_delete_take_several_groups(client, groups, two: list[str], topic: str) -> None:
    a, b = two
    run = groups("reset", "--group", a, "--group", b, "--topic", f"{topic}:0", "--to-offset", "5", "--execute")
    assert run.code == 0, run.err
    assert offsets_of(client, a) == offsets_of(client, b) == {(topic, 0): 5, (topic, 1): 20}
    run = groups("delete", "--group", a, "--group", b, "--all-topics", "--execute", "--output", "json")
    assert run.code == 0, run.err
    assert [d["group_id"] for d in run.json()] == [a, b]
    assert offsets_of(client, a) == offsets_of(client, b) == {}


def test_a_mistyped_group_among_several_stops_the_reset_before_any_change(client, groups, two, topic) -> None:
    a, b = two
    missing = f"parity-missing-{uuid.uuid4().hex[:8]}"
    run = groups(
        "reset", "--group", a, "--group", missing, "--group", b, "--all-topics", "--to-offset", "1", "--execute"
    )
    assert (run.code, run.out) == (1, ""), run.err
    assert f"group {missing} does not exist" in run.err
    assert offsets_of(client, a) == offsets_of(client, b) == {(topic, 0): 10, (topic, 1): 20}


def test_reset_export_writes_the_plan_as_kafkas_csv_that_import_reads_back(
    client, groups, two: list[str], topic: str, tmp_path: Path
) -> None:
    a, b = two
    run = groups("reset", a, "--all-topics", "--shift-by", "-3", "--export")
    assert run.code == 0, run.err
    assert run.out == f"{topic},0,7\n{topic},1,17\n"  # the plan alone: the notes go to stderr
    assert "Dry run: nothing changed." in run.err
    assert offsets_of(client, a) == {(topic, 0): 10, (topic, 1): 20}
    plan = tmp_path / "plan.csv"
    plan.write_text(run.out)
    assert groups("import", b, str(plan), "--execute").code == 0
    assert offsets_of(client, b) == {(topic, 0): 7, (topic, 1): 17}

    # Several groups: kafka-consumer-groups' four columns, group first; applied with --execute.
    run = groups(
        "reset", "--group", a, "--group", b, "--topic", f"{topic}:1", "--to-offset", "2", "--export", "--execute"
    )
    assert run.code == 0, run.err
    assert run.out == f"{a},{topic},1,2\n{b},{topic},1,2\n"
    assert offsets_of(client, a)[(topic, 1)] == offsets_of(client, b)[(topic, 1)] == 2


def test_reset_export_is_csv_only(groups, two: list[str]) -> None:
    run = groups("reset", two[0], "--all-topics", "--to-offset", "1", "--export", "--output", "json")
    assert (run.code, run.out) == (1, "")
    assert "--export writes CSV" in run.err


def test_import_reads_the_four_column_file_of_several_groups(client, groups, two, topic, tmp_path: Path) -> None:
    a, b = two
    exported = groups("reset", "--group", a, "--group", b, "--all-topics", "--to-offset", "3", "--export")
    assert exported.code == 0, exported.err
    plan = tmp_path / "plan.csv"
    plan.write_text("group,topic,partition,offset\n" + exported.out)  # a header is tolerated
    run = groups("import", str(plan), "--execute", "--output", "json")
    assert run.code == 0, run.err
    assert [d["group_id"] for d in run.json()] == [a, b]
    assert offsets_of(client, a) == offsets_of(client, b) == {(topic, 0): 3, (topic, 1): 3}
    # GROUP FILE takes that group's lines only, and says the others were left alone.
    plan.write_text(f"{a},{topic},0,4\n{b},{topic},0,5\n")
    run = groups("import", a, str(plan), "--execute")
    assert run.code == 0, run.err
    assert "1 other group(s)" in run.err
    assert (offsets_of(client, a)[(topic, 0)], offsets_of(client, b)[(topic, 0)]) == (4, 3)


def test_import_of_a_one_group_file_without_a_group_asks_for_it(groups, two, topic, tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,4\n")
    run = groups("import", str(plan), "--execute")
    assert (run.code, run.out) == (1, "")
    assert "name the group, import GROUP FILE" in run.err
    plan.write_text(f"{two[0]},{topic},0,4\n{two[0]},{topic},1\n")
    run = groups("import", str(plan))
    assert run.code == 1
    assert "line 2: expected group,topic,partition,offset" in run.err and "Nothing was imported." in run.err
