"""ResetOffsets' expected_generation: a confirm applies only to the state its preview showed."""

from __future__ import annotations

import asyncio
import threading

import grpc
import psycopg
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from offsetstore.client import AsyncOffsetStoreClient, InvalidArgumentError, OffsetStoreClient, StaleGenerationError
from offsetstore.storage.database_url import conninfo
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.concurrency import wait_until


def state(client: OffsetStoreClient, group_id: str) -> tuple[object, ...]:
    """Everything a reset could change: offsets, generation, reset count, history."""
    fetched = client.fetch_offsets(group_id)
    described = client.describe_group(group_id)
    return fetched.offsets, fetched.generation, described.reset_count, client.list_offset_history(group_id).items


def test_a_reset_at_the_previewed_generation_applies(client, group_id, topic):
    client.commit_offsets(group_id, {(topic, 0): 50, (topic, 1): 60})
    preview = client.reset_offsets(group_id, topics=[topic], to_offset=5, dry_run=True)

    result = client.reset_offsets(group_id, topics=[topic], to_offset=5, expected_generation=preview.generation)

    assert result.generation == preview.generation + 1
    assert {tp: o.offset for tp, o in client.fetch_offsets(group_id).offsets.items()} == {(topic, 0): 5, (topic, 1): 5}


def test_a_dry_run_at_the_current_generation_previews(client, group_id, topic):
    generation = client.join_group(group_id, "consumer")
    client.commit_offsets(group_id, {(topic, 0): 50}, generation=generation)
    preview = client.reset_offsets(
        group_id, all_topics=True, shift_by=-10, dry_run=True, expected_generation=generation
    )
    assert (preview.generation, [c.new_offset for c in preview.changes]) == (generation, [40])


@pytest.mark.parametrize("dry_run", [False, True], ids=["confirm", "dry_run"])
def test_a_reset_after_the_group_moved_is_refused_and_changes_nothing(client, group_id, topic, dry_run):
    client.commit_offsets(group_id, {(topic, 0): 50})
    preview = client.reset_offsets(group_id, topics=[topic], to_offset=5, dry_run=True)
    moved = client.join_group(group_id, "another-writer")  # the group moves on after the preview
    client.commit_offsets(group_id, {(topic, 0): 70}, generation=moved)
    before = state(client, group_id)

    with pytest.raises(StaleGenerationError) as caught:
        client.reset_offsets(
            group_id, topics=[topic], to_offset=5, dry_run=dry_run, expected_generation=preview.generation
        )

    assert caught.value.current_generation == moved
    assert caught.value.metadata["generation"] == str(preview.generation)
    assert state(client, group_id) == before
    client.commit_offsets(group_id, {(topic, 0): 71}, generation=moved)  # the writer was not fenced


def test_the_refusal_on_the_wire_names_the_reason_and_the_current_generation(server, group_id, topic):
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OffsetStoreServiceStub(channel)
        joined = stub.JoinGroup(pb.JoinGroupRequest(group_id=group_id, member_id="m")).generation
        request = pb.ResetOffsetsRequest(
            group_id=group_id,
            topics=[pb.TopicSelection(topic=topic, partitions=[0])],
            to_offset=1,
            expected_generation=joined - 1,
        )
        with pytest.raises(grpc.RpcError) as caught:
            stub.ResetOffsets(request)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        status = rpc_status.from_call(caught.value)
        assert status is not None
        info = error_details_pb2.ErrorInfo()
        assert status.details[0].Unpack(info)
        assert (info.domain, info.reason, info.metadata["current_generation"]) == (
            "offsetstore.v1",
            "STALE_GENERATION",
            str(joined),
        )
        # Unset keeps the old behaviour: no check at all.
        request.ClearField("expected_generation")
        assert stub.ResetOffsets(request).generation == joined + 1


def test_an_unknown_group_is_at_generation_zero(client, group_id, topic):
    with pytest.raises(StaleGenerationError) as caught:
        client.reset_offsets(group_id, topics={topic: [0]}, to_offset=3, expected_generation=1)
    assert caught.value.current_generation == 0
    assert client.fetch_offsets(group_id).offsets == {}
    result = client.reset_offsets(group_id, topics={topic: [0]}, to_offset=3, expected_generation=0)
    assert result.generation == 1


def test_a_negative_expected_generation_is_invalid(client, group_id, topic):
    with pytest.raises(InvalidArgumentError) as caught:
        client.reset_offsets(group_id, topics={topic: [0]}, to_offset=3, expected_generation=-1)
    assert "expected_generation" in str(caught.value)
    assert client.fetch_offsets(group_id).offsets == {}


def test_the_async_client_passes_it_too(server, group_id, topic):
    async def run() -> tuple[int | None, int]:
        async with AsyncOffsetStoreClient(server.address, timeout=20) as client:
            await client.commit_offsets(group_id, {(topic, 0): 5})
            with pytest.raises(StaleGenerationError) as caught:
                await client.reset_offsets(group_id, all_topics=True, to_offset=1, expected_generation=3)
            applied = await client.reset_offsets(group_id, all_topics=True, to_offset=1, expected_generation=0)
            return caught.value.current_generation, applied.generation

    assert asyncio.run(run()) == (0, 1)


def test_a_group_created_by_a_join_while_the_reset_waited_is_refused(client, group_id, topic, database_url):
    """An unknown group has no row to lock: the check holds when a join creates it under the reset."""
    outcome: list[object] = []
    with psycopg.connect(conninfo(database_url)) as joiner:
        # A join left open: the group's row is inserted, not yet committed.
        joiner.execute("SELECT offsetstore.join_group(%s, 'late')", (group_id,))
        (pid,) = joiner.execute("SELECT pg_backend_pid()").fetchone()

        def reset() -> None:
            try:
                outcome.append(client.reset_offsets(group_id, topics={topic: [0]}, to_offset=3, expected_generation=0))
            except StaleGenerationError as error:
                outcome.append(error)

        thread = threading.Thread(target=reset)
        thread.start()
        with psycopg.connect(conninfo(database_url), autocommit=True) as watcher:
            # The reset's insert of the group waits for the open join (its row).
            wait_until(
                lambda: (
                    watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
                    ).fetchone()[0]
                    > 0
                )
            )
        joiner.commit()
        thread.join(30)
    (result,) = outcome
    assert isinstance(result, StaleGenerationError), result
    assert result.current_generation == 1
    assert client.fetch_offsets(group_id).offsets == {}
    assert client.fetch_offsets(group_id).generation == 1
