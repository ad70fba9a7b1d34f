"""Two servers over one database stay correct: generations, fencing and compare-and-set are PostgreSQL's.

One server runs in this process, the other is a real ``offsetstore serve`` process over the
same database; writers go through both at once, to the same groups.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from offsetstore.client import (
    OffsetCommit,
    OffsetMismatchError,
    OffsetStoreClient,
    StaleGenerationError,
    TopicPartition,
)
from tests.fixtures.concurrency import run_in_threads
from tests.fixtures.fix_server import Served, ServerHandle, all_history, start_serve

pytestmark = pytest.mark.slow

TOPIC = "orders"


@pytest.fixture(scope="module")
def replica(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("replica") / "unused-pgdata"
    served = start_serve(data_dir, "--database-url", database_url, "--no-migrate", "--metrics-listen", "")
    yield served
    assert served.terminate() == 0


@pytest.fixture
def clients(server: ServerHandle, replica: Served) -> Iterator[tuple[OffsetStoreClient, OffsetStoreClient]]:
    with OffsetStoreClient(server.address, timeout=30) as a, OffsetStoreClient(replica.address, timeout=30) as b:
        yield a, b


def test_joins_through_both_servers_never_hand_out_a_generation_twice(clients, group_id: str) -> None:
    both = itertools.cycle(clients)
    pairs = [next(both) for _ in range(16)]
    generations = run_in_threads(16, lambda i: [pairs[i].join_group(group_id) for _ in range(10)])
    handed_out = [g for mine in generations for g in mine]
    assert sorted(handed_out) == list(range(1, 161))
    for mine in generations:  # each writer saw its own generations rise
        assert mine == sorted(mine)


def test_compare_and_set_through_both_servers_loses_no_update(clients, group_id: str) -> None:
    a, _ = clients
    a.commit_offsets(group_id, {(TOPIC, 0): 0})
    won = [0] * 12

    def increment(i: int) -> None:
        client = clients[i % 2]
        for _ in range(15):
            current = client.fetch_offsets(group_id, {TOPIC: [0]}).offsets[TopicPartition(TOPIC, 0)].offset
            try:
                client.commit_offsets(group_id, [OffsetCommit(TOPIC, 0, current + 1, expected_offset=current)])
                won[i] += 1
            except OffsetMismatchError:
                pass

    run_in_threads(12, increment)
    assert sum(won) > 0
    final = a.fetch_offsets(group_id).offsets[TopicPartition(TOPIC, 0)].offset
    assert final == sum(won)
    # Every winner moved the offset by exactly one from the value it read.
    changes = sorted((c.previous_offset, c.new_offset) for c in all_history(a, group_id))
    assert changes == [(-1, 0)] + [(n, n + 1) for n in range(sum(won))]


def test_a_join_through_one_server_fences_writers_of_the_other(clients, group_id: str) -> None:
    a, b = clients
    old = a.join_group(group_id)
    a.commit_offsets(group_id, {(TOPIC, 0): 10}, generation=old)
    stop = threading.Event()
    rejected: list[int] = []

    def zombie() -> None:  # keeps committing with the old generation through the first server
        n = 11
        while not stop.is_set():
            try:
                a.commit_offsets(group_id, {(TOPIC, 0): n}, generation=old)
                n += 1
            except StaleGenerationError as error:
                rejected.append(int(error.metadata["current_generation"]))
                return

    thread = threading.Thread(target=zombie)
    thread.start()
    new = b.join_group(group_id)
    thread.join(30)
    stop.set()
    assert rejected == [new]
    b.commit_offsets(group_id, {(TOPIC, 0): 1000}, generation=new)
    history = all_history(b, group_id)
    # Nothing of the old generation landed after the new one's first commit.
    newest = history[0]
    assert (newest.new_offset, newest.generation) == (1000, new)
    assert all(c.generation == old for c in history[1:])


def test_the_replica_serves_what_the_other_wrote(clients, group_id: str) -> None:
    a, b = clients
    a.commit_offsets(group_id, {(TOPIC, p): 100 + p for p in range(16)})
    fetched = b.fetch_offsets(group_id)
    assert {tp.partition: c.offset for tp, c in fetched.offsets.items()} == {p: 100 + p for p in range(16)}
    assert b.describe_group(group_id).generation == fetched.generation == 0
