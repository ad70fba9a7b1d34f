"""``groups reset --expected-generation``: an operator's reset applies only to the state its dry run showed."""

from __future__ import annotations

import uuid

from offsetstore.client import OffsetStoreClient, Watermark


def offsets_of(client: OffsetStoreClient, group_id: str) -> dict[tuple[str, int], int]:
    return {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()}


def test_a_dry_run_names_its_generation_and_an_execute_at_it_applies(client, groups, group_id) -> None:
    client.commit_offsets(group_id, {("orders", 0): 40, ("orders", 1): 41})
    generation = client.join_group(group_id, "consumer")

    dry = groups("reset", group_id, "--all-topics", "--to-offset", "3")
    assert dry.code == 0, dry.err
    assert f"--expected-generation {generation} " in dry.out

    applied = groups(
        "reset", group_id, "--all-topics", "--to-offset", "3", "--execute", "--expected-generation", str(generation)
    )
    assert applied.code == 0, applied.err
    assert offsets_of(client, group_id) == {("orders", 0): 3, ("orders", 1): 3}
    assert client.fetch_offsets(group_id).generation == generation + 1


def test_an_execute_after_the_group_moved_changes_nothing_and_says_where_it_is(client, groups, group_id) -> None:
    client.commit_offsets(group_id, {("orders", 0): 40})
    previewed = client.fetch_offsets(group_id).generation
    moved = client.join_group(group_id, "consumer")  # a consumer joins after the dry run
    client.commit_offsets(group_id, {("orders", 0): 50}, generation=moved)

    for mode in ("--execute", "--dry-run"):
        run = groups(
            "reset", group_id, "--all-topics", "--to-offset", "3", mode, "--expected-generation", str(previewed)
        )
        assert run.code == 1, run.out
        assert f"the current generation is {moved}." in run.err and "Nothing was reset" in run.err
        assert run.err.count("current generation") == 1, run.err  # issue 59: said once
    assert offsets_of(client, group_id) == {("orders", 0): 50}
    assert client.fetch_offsets(group_id).generation == moved


def test_per_partition_offsets_check_the_generation_too(client, groups, group_id) -> None:
    topic = f"clamped-{uuid.uuid4().hex[:8]}"  # watermarks are every group's: a topic of its own
    # --clamp with a known log end sets a different offset per partition.
    client.commit_offsets(group_id, {(topic, 0): 40, (topic, 1): 41})
    client.report_watermarks([Watermark(topic, 0, 0, 100), Watermark(topic, 1, 0, 20)])
    previewed = client.fetch_offsets(group_id).generation
    moved = client.join_group(group_id, "consumer")

    run = groups(
        "reset",
        group_id,
        "--all-topics",
        "--to-offset",
        "30",
        "--clamp",
        "--execute",
        "--expected-generation",
        str(previewed),
    )
    assert run.code == 1 and f"the current generation is {moved}." in run.err
    assert offsets_of(client, group_id) == {(topic, 0): 40, (topic, 1): 41}

    run = groups(
        "reset",
        group_id,
        "--all-topics",
        "--to-offset",
        "30",
        "--clamp",
        "--execute",
        "--expected-generation",
        str(moved),
    )
    assert run.code == 0, run.err
    assert offsets_of(client, group_id) == {(topic, 0): 30, (topic, 1): 20}


def test_one_generation_is_for_one_group(groups, group_id) -> None:
    run = groups(
        "reset",
        "--group",
        group_id,
        "--group",
        group_id + "-2",
        "--all-topics",
        "--to-offset",
        "1",
        "--expected-generation",
        "1",
    )
    assert run.code == 1 and "one group" in run.err
