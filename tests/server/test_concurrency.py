"""Many clients at once through the server: nothing lost, generations unique, one CAS winner, resets fence."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from offsetstore.client import (
    ChangeKind,
    OffsetCommit,
    OffsetMismatchError,
    OffsetStoreClient,
    StaleGenerationError,
    Watermark,
)
from tests.fixtures.concurrency import run_in_threads
from tests.fixtures.fix_server import all_history
from tests.fixtures.waits import wait_for


def test_hundreds_of_concurrent_commits_all_land(server, client, group_id, topic):
    threads, commits_each, side_groups = 16, 25, 4
    start = threading.Barrier(threads + side_groups)

    def shared_group_writer(i: int) -> None:
        # Half of the threads use a client of their own, half share the session's channel.
        own = OffsetStoreClient(server.address, timeout=20) if i % 2 else None
        try:
            start.wait()
            for offset in range(1, commits_each + 1):
                (own or client).commit_offsets(group_id, [OffsetCommit(topic, i, offset, f"w{i}:{offset}")])
        finally:
            if own is not None:
                own.close()

    def side_group_writer(i: int) -> None:
        start.wait()
        for offset in range(1, commits_each + 1):
            client.commit_offsets(f"{group_id}-side-{i}", {(topic, 0): offset, (topic, 1): offset * 2})

    def work(i: int) -> None:
        if i < threads:
            shared_group_writer(i)
        else:
            side_group_writer(i - threads)

    run_in_threads(threads + side_groups, work)

    fetched = client.fetch_offsets(group_id).offsets
    assert {(tp.partition, o.offset, o.metadata) for tp, o in fetched.items()} == {
        (i, commits_each, f"w{i}:{commits_each}") for i in range(threads)
    }
    changes = all_history(client, group_id)
    assert len(changes) == threads * commits_each
    for i in range(threads):
        mine = [(c.previous_offset, c.new_offset) for c in changes if c.partition == i]
        assert mine == [(offset - 1 if offset > 1 else -1, offset) for offset in range(commits_each, 0, -1)]

    for i in range(side_groups):
        side = f"{group_id}-side-{i}"
        assert {tp.partition: o.offset for tp, o in client.fetch_offsets(side).offsets.items()} == {
            0: commits_each,
            1: 2 * commits_each,
        }
        assert len(all_history(client, side)) == 2 * commits_each


def test_concurrent_joins_get_distinct_generations(client, group_id):
    threads, joins_each = 10, 5
    start = threading.Barrier(threads)

    def join(i: int) -> list[int]:
        start.wait()
        return [client.join_group(group_id, f"member-{i}") for _ in range(joins_each)]

    generations = [g for mine in run_in_threads(threads, join) for g in mine]

    assert sorted(generations) == list(range(1, threads * joins_each + 1))
    assert client.describe_group(group_id).generation == threads * joins_each


def _cas_race(
    client: OffsetStoreClient, group_id: str, topic: str, expected: int, threads: int
) -> tuple[list[int], list[int]]:
    """``threads`` commits of offset 1000+i expecting ``expected``; returns (winners, stored offsets seen by losers)."""
    start = threading.Barrier(threads)

    def attempt(i: int) -> tuple[bool, int | None]:
        start.wait()
        try:
            client.commit_offsets(group_id, [OffsetCommit(topic, 0, 1000 + i, expected_offset=expected)])
        except OffsetMismatchError as error:
            return False, error.stored_offset
        return True, None

    outcomes = run_in_threads(threads, attempt)
    winners = [i for i, (won, _) in enumerate(outcomes) if won]
    seen = [stored for won, stored in outcomes if not won]
    return winners, seen


def test_a_compare_and_set_race_on_a_new_partition_has_exactly_one_winner(client, group_id, topic):
    winners, seen = _cas_race(client, group_id, topic, expected=-1, threads=20)

    assert len(winners) == 1
    assert seen == [1000 + winners[0]] * 19
    assert client.fetch_offsets(group_id).offsets[(topic, 0)].offset == 1000 + winners[0]
    assert len(all_history(client, group_id)) == 1


def test_a_compare_and_set_race_on_a_stored_offset_has_exactly_one_winner(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 7})

    winners, seen = _cas_race(client, group_id, topic, expected=7, threads=20)

    assert len(winners) == 1
    assert seen == [1000 + winners[0]] * 19
    assert client.fetch_offsets(group_id).offsets[(topic, 0)].offset == 1000 + winners[0]
    assert [c.new_offset for c in all_history(client, group_id)] == [1000 + winners[0], 7]


def test_after_a_reset_no_commit_of_the_old_generation_lands(client, group_id, topic):
    writers = 4
    generation = client.join_group(group_id, "consumers")
    warmed_up = threading.Barrier(writers + 1)
    reset_done = threading.Event()

    def write(i: int) -> dict[str, int]:
        """Commits increasing offsets with the old generation until fenced; counts what happened."""
        counts = {"ok_after_reset": 0, "fenced": 0, "current_generation": 0}
        offset = 1
        while True:
            if offset == 4:
                warmed_up.wait()
            was_reset = reset_done.is_set()
            try:
                client.commit_offsets(group_id, {(topic, i): offset}, generation=generation)
            except StaleGenerationError as error:
                counts["fenced"] += 1
                counts["current_generation"] = error.current_generation
                return counts
            if was_reset:
                counts["ok_after_reset"] += 1
            offset += 1

    with ThreadPoolExecutor(max_workers=writers) as pool:
        futures = [pool.submit(write, i) for i in range(writers)]
        warmed_up.wait()  # every writer has committed 3 offsets and is still writing
        result = client.reset_offsets(group_id, topics={topic: range(writers)}, to_offset=0)
        reset_done.set()
        outcomes = [f.result(timeout=30) for f in futures]

    assert result.generation == generation + 1
    assert outcomes == [{"ok_after_reset": 0, "fenced": 1, "current_generation": generation + 1}] * writers
    assert {tp.partition: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {
        i: 0 for i in range(writers)
    }
    changes = all_history(client, group_id)  # newest first
    newest_reset = next(n for n, c in enumerate(changes) if c.kind == ChangeKind.RESET)
    assert [c for c in changes[:newest_reset] if c.kind == ChangeKind.COMMIT] == []
    assert {c.generation for c in changes if c.kind == ChangeKind.COMMIT} == {generation}
    assert sum(c.kind == ChangeKind.RESET for c in changes) == writers


def test_joins_during_commits_fence_exactly_the_older_writers(client, group_id, topic):
    """Writers race a series of joins: a commit lands only under the generation current at that moment."""
    writers, joins = 6, 10
    stop = threading.Event()

    under: dict[int, int] = {}  # generation -> commits that landed under it

    def write(i: int) -> list[int]:
        landed = []
        offset = 1
        generation = client.fetch_offsets(group_id).generation
        while not stop.is_set():
            try:
                client.commit_offsets(group_id, {(topic, i): offset}, generation=generation)
                landed.append(generation)
                under[generation] = under.get(generation, 0) + 1
                offset += 1
            except StaleGenerationError as error:
                assert error.current_generation > generation
                generation = error.current_generation
        return landed

    with ThreadPoolExecutor(max_workers=writers) as pool:
        client.join_group(group_id)
        futures = [pool.submit(write, i) for i in range(writers)]
        for generation in range(1, joins):
            # Some commits land under each generation before the next join fences them.
            wait_for(lambda g=generation: under.get(g, 0) > 0, f"a commit under generation {generation}", 30)
            client.join_group(group_id)
        stop.set()
        landed = [g for f in futures for g in f.result(timeout=30)]

    changes = all_history(client, group_id)
    assert len(changes) == len(landed)
    # Each entry records the generation it was made under; newest first they never go up.
    recorded = [c.generation for c in changes]
    assert recorded == sorted(recorded, reverse=True)
    assert sorted(recorded) == sorted(landed)
    assert client.describe_group(group_id).generation == joins


def test_concurrent_watermark_reports_in_different_orders_do_not_deadlock(client, group_id, topic):
    threads, partitions = 8, 200
    client.commit_offsets(group_id, {(topic, p): 0 for p in range(partitions)})
    start = threading.Barrier(threads)

    def report(i: int) -> None:
        order = list(range(partitions))
        if i % 2:
            order.reverse()
        start.wait()
        for _ in range(5):
            client.report_watermarks([Watermark(topic, p, 0, 1000 + i) for p in order])

    run_in_threads(threads, report)

    # Each report is one transaction, so the last one to commit holds every partition.
    ends = {p.log_end_offset for p in client.describe_group(group_id).partitions}
    assert len(ends) == 1 and ends <= {1000 + i for i in range(threads)}
