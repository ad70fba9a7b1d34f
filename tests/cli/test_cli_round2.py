"""``offsetstore groups`` after issue 23: anomalies past the log end, created groups, --all-groups, members and state."""

from __future__ import annotations

import argparse

import pytest

from offsetstore.cli import groups as cli
from offsetstore.client import Watermark
from offsetstore.server import metrics


def offsets_of(client, group_id: str) -> dict[tuple[str, int], int]:
    return {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}


# --- item 2: an offset past the known log end ---


def test_describe_shows_an_offset_past_the_log_end_as_an_anomaly_not_lag_0(client, groups, group_id, topic) -> None:
    client.commit_offsets(group_id, {(topic, 0): 1000500, (topic, 1): 400})
    client.report_watermarks([Watermark(topic, 0, 0, 1000), Watermark(topic, 1, 0, 1000)])

    table = groups("describe", group_id)
    assert table.code == 0, table.err
    rows = {row.split()[2]: row.split() for row in table.out.splitlines()[1:3]}
    assert rows["0"][3:6] == ["1000500", "1000", "-"]
    assert rows["1"][3:6] == ["400", "1000", "600"]
    assert f"Warning: {group_id} {topic}:0: offset 1000500 is past the log end 1000" in table.err
    assert f"{topic}:1" not in table.err

    partitions = groups("describe", group_id, "--output", "json").json()["partitions"]
    assert [(p["lag"], p["offset_past_log_end"]) for p in partitions] == [(-1, True), (600, False)]
    state = groups("describe", group_id, "--state", "--output", "json").json()
    assert state["state"] == "PastLogEnd"


def test_the_metrics_flag_an_offset_past_the_log_end(store, client, group_id, topic) -> None:
    client.commit_offsets(group_id, {(topic, 0): 50, (topic, 1): 5})
    client.report_watermarks([Watermark(topic, 0, 0, 10), Watermark(topic, 1, 0, 10)])
    registry = metrics.build_registry(store, group_limit=100000)
    labels = {"group": group_id, "topic": topic}
    assert registry.get_sample_value("offsetstore_group_offset_past_log_end", {**labels, "partition": "0"}) == 1
    assert registry.get_sample_value("offsetstore_group_offset_past_log_end", {**labels, "partition": "1"}) is None
    assert registry.get_sample_value("offsetstore_group_lag", {**labels, "partition": "0"}) is None
    assert registry.get_sample_value("offsetstore_group_lag", {**labels, "partition": "1"}) == 5


def test_reset_to_an_offset_past_the_log_end_warns_and_sets_it_unless_clamped(client, groups, group_id, topic) -> None:
    client.commit_offsets(group_id, {(topic, 0): 5, (topic, 1): 5})
    client.report_watermarks([Watermark(topic, 0, 20, 100), Watermark(topic, 1, 0, 100)])

    run = groups("reset", group_id, "--topic", topic, "--to-offset", "500", "--execute")
    assert run.code == 0, run.err
    assert f"{topic}:0: offset 500 is past the log end 100: set as asked; add --clamp" in run.err
    assert offsets_of(client, group_id) == {(topic, 0): 500, (topic, 1): 500}

    run = groups("reset", group_id, "--topic", topic, "--to-offset", "10", "--clamp", "--execute")
    assert run.code == 0, run.err
    assert f"{topic}:0: offset 10 is before the log start 20: set to 20 (--clamp)" in run.err
    assert f"{topic}:1" not in run.err
    assert offsets_of(client, group_id) == {(topic, 0): 20, (topic, 1): 10}


def test_a_shift_below_the_log_start_warns_and_clamps_to_it_when_asked(client, groups, group_id, topic) -> None:
    # The server decides what lies outside the log (the store's watermarks): the CLI says what it answers.
    client.commit_offsets(group_id, {(topic, 0): 30})
    client.report_watermarks([Watermark(topic, 0, 20, 100)])

    dry = groups("reset", group_id, "--topic", topic, "--shift-by", "-25")
    assert f"{topic}:0: offset 5 is before the log start 20: set as asked; add --clamp" in dry.err
    document = groups("reset", group_id, "--topic", topic, "--shift-by", "-25", "--output", "json").json()
    assert document["out_of_range"] == [{"topic": topic, "partition": 0, "offset": 5, "bound": 20, "clamped": False}]

    run = groups("reset", group_id, "--topic", topic, "--shift-by", "-25", "--clamp", "--execute")
    assert run.code == 0, run.err
    assert f"{topic}:0: offset 5 is before the log start 20: set to 20 (--clamp)" in run.err
    assert offsets_of(client, group_id) == {(topic, 0): 20}


def test_import_warns_about_offsets_outside_the_log_and_clamps_only_when_asked(
    client, groups, group_id, topic, tmp_path
) -> None:
    client.commit_offsets(group_id, {(topic, 0): 5})
    client.report_watermarks([Watermark(topic, 0, 0, 100)])
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,900\n")

    run = groups("import", group_id, str(plan), "--execute")
    assert run.code == 0, run.err
    assert "offset 900 is past the log end 100: set as asked" in run.err
    assert offsets_of(client, group_id) == {(topic, 0): 900}
    run = groups("import", group_id, str(plan), "--clamp", "--execute")
    assert run.code == 0, run.err
    assert offsets_of(client, group_id) == {(topic, 0): 100}


# --- item 8 ---


def test_a_reset_of_a_new_group_creates_it_and_says_so(client, groups, group_id, topic) -> None:
    run = groups("reset", group_id, "--topic", f"{topic}:0,1", "--to-offset", "5", "--execute")
    assert run.code == 0, run.err
    generation = client.fetch_offsets(group_id).generation
    assert generation > 0
    assert f"Created group {group_id} at generation {generation}" in run.out
    assert offsets_of(client, group_id) == {(topic, 0): 5, (topic, 1): 5}
    assert groups("describe", group_id).code == 0


@pytest.mark.parametrize("selection", [["--topic", "TOPIC"], ["--all-topics"]])
def test_a_reset_of_a_mistyped_group_says_it_does_not_exist(client, groups, group_id, topic, selection) -> None:
    selection = [topic if word == "TOPIC" else word for word in selection]
    for mode in ("--dry-run", "--execute"):
        run = groups("reset", group_id, *selection, "--to-offset", "5", mode)
        assert (run.code, run.out) == (1, ""), run.err
        assert f"group {group_id} does not exist" in run.err
        assert "name its partitions (--topic TOPIC:0,1,2)" in run.err
    assert client.fetch_offsets(group_id).generation == 0
    assert groups("describe", group_id).code == 1


def test_a_dry_run_that_would_create_a_group_says_so(client, groups, group_id, topic) -> None:
    run = groups("reset", group_id, "--topic", f"{topic}:0", "--to-offset", "5")
    assert run.code == 0, run.err
    assert f"Group {group_id} does not exist: --execute creates it with these offsets." in run.out
    document = groups("reset", group_id, "--topic", f"{topic}:0", "--to-offset", "5", "--output", "json").json()
    assert (document["dry_run"], document["group_existed"]) == (True, False)
    assert client.fetch_offsets(group_id).generation == 0
    client.commit_offsets(group_id, {(topic, 0): 1})
    run = groups("reset", group_id, "--topic", f"{topic}:0", "--to-offset", "5")
    assert "does not exist" not in run.out and "Dry run: nothing changed." in run.out


def test_history_of_an_unknown_group_is_an_error(groups, group_id) -> None:
    run = groups("history", group_id)
    assert (run.code, run.out) == (1, "")
    assert f"group {group_id} does not exist" in run.err


def test_history_of_a_deleted_group_is_still_shown(client, groups, group_id, topic) -> None:
    client.commit_offsets(group_id, {(topic, 0): 5})
    client.delete_offsets(group_id, all_topics=True)
    run = groups("history", group_id)
    assert run.code == 0, run.err
    assert "DELETE" in run.out


@pytest.mark.parametrize(
    ("given", "dialled"),
    [
        ("localhost", "localhost:50051"),
        ("localhost:6000", "localhost:6000"),
        ("[::1]", "[::1]:50051"),
        ("[::1]:7", "[::1]:7"),
        ("::1", "[::1]:50051"),
        ("dns:///example.org:9", "dns:///example.org:9"),
    ],
)
def test_a_server_without_a_port_means_port_50051(given: str, dialled: str) -> None:
    assert cli._with_default_port(given) == dialled


def test_by_duration_needs_a_unit() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="give a unit, e.g. 7s, 7m, 7h, 7d"):
        cli._parse_duration("7")
    assert cli._parse_duration("7d").days == 7


def test_import_takes_the_group_first_like_every_other_command(client, groups, group_id, topic, tmp_path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,7\n")
    assert groups("import", group_id, str(plan), "--execute").code == 0
    assert offsets_of(client, group_id) == {(topic, 0): 7}
    # The older form still works.
    plan.write_text(f"{topic},0,8\n")
    assert groups("import", str(plan), "--group", group_id, "--execute").code == 0
    assert offsets_of(client, group_id) == {(topic, 0): 8}


# --- item 9: --members, --state, --all-groups ---


def test_describe_members_and_state(client, groups, group_id, topic) -> None:
    client.join_group(group_id, "consumer-7")
    client.commit_offsets(group_id, {(topic, 0): 3, (topic, 1): 4})
    members = groups("describe", group_id, "--members", "--output", "json").json()
    assert (members["member_id"], members["partition_count"], members["generation"]) == ("consumer-7", 2, 1)
    assert members["last_active_time"] is not None
    state = groups("describe", group_id, "--state", "--output", "json").json()
    assert (state["state"], state["generation"], state["partition_count"]) == ("Stable", 1, 2)
    table = groups("describe", group_id, "--members")
    assert table.code == 0 and "consumer-7" in table.out


def test_reset_and_delete_all_groups(client, groups, group_id, topic) -> None:
    # --all-groups means every group of the server: dry runs only, checked on this test's two groups.
    other = f"{group_id}-b"
    client.commit_offsets(group_id, {(topic, 0): 10})
    client.commit_offsets(other, {(topic, 0): 20})
    run = groups("reset", "--all-groups", "--topic", topic, "--shift-by", "-1", "--output", "json")
    assert run.code == 0, run.err
    planned = {d["group_id"]: [c["new_offset"] for c in d["changes"]] for d in run.json()}
    assert (planned[group_id], planned[other]) == ([9], [19])
    run = groups("delete", "--all-groups", "--topic", topic, "--output", "json")
    assert run.code == 0, run.err
    listed = {d["group_id"]: d["dry_run"] for d in run.json()}
    assert listed[group_id] is True and listed[other] is True
    assert offsets_of(client, group_id) == {(topic, 0): 10}
