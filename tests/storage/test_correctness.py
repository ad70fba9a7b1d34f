"""The promises behind fencing and resets, each once broken: generations never repeat, resets never delete,
reads see one snapshot, history times are commit times, every bad field is named, log starts are never invented."""

from __future__ import annotations

import threading

import grpc
import pytest
import sqlalchemy as sa
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from offsetstore import storage
from offsetstore.core.errors import GroupNotFoundError, InvalidArgumentError, StaleGenerationError
from offsetstore.core.types import EARLIEST, NO_OFFSET, Boundary, ChangeKind, OffsetCommit, Watermark
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc


def run(engine: sa.Engine, operation, *args, **kwargs):
    with engine.begin() as conn:
        return operation(conn, *args, **kwargs)


# --- 1. a generation never repeats ---


def test_a_deleted_group_without_offsets_never_hands_out_a_generation_again(engine, group_id, topic):
    writer_a = run(engine, storage.join_group, group_id, "a")
    assert run(engine, storage.delete_offsets, group_id, all_topics=True) == []
    writer_b = run(engine, storage.join_group, group_id, "b")

    assert writer_b > writer_a
    with pytest.raises(StaleGenerationError):
        run(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 1)], generation=writer_a)
    run(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 1)], generation=writer_b)


def test_generations_increase_across_every_kind_of_delete(engine, group_id, topic):
    seen = [run(engine, storage.join_group, group_id)]
    run(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5), OffsetCommit(topic, 1, 5)])
    run(engine, storage.delete_offsets, group_id, {topic: (0,)})
    seen.append(run(engine, storage.join_group, group_id))
    run(engine, storage.delete_offsets, group_id, all_topics=True)
    run(engine, storage.delete_offsets, group_id, all_topics=True)  # deleting a deleted group changes nothing
    seen.append(run(engine, storage.join_group, group_id))
    run(engine, storage.delete_offsets, group_id, all_topics=True)
    run(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 9)])  # an unfenced commit revives it
    seen.append(run(engine, storage.join_group, group_id))
    assert seen == sorted(set(seen))
    assert run(engine, storage.describe_group, group_id).partitions[0].offset == 9


def test_a_deleted_group_is_gone_for_readers_but_keeps_its_reset_count(engine, group_id, topic):
    run(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5)])
    run(engine, storage.reset_offsets, group_id, {topic: ()}, to_offset=1)
    run(engine, storage.delete_offsets, group_id, all_topics=True)

    with pytest.raises(GroupNotFoundError) as raised:
        run(engine, storage.describe_group, group_id)
    assert raised.value.metadata["reset_count"] == "2"  # the reset and the delete
    assert run(engine, storage.reset_count, group_id) == 2
    fetched = run(engine, storage.fetch_offsets, group_id)
    assert (fetched.offsets, fetched.generation) == ({}, 0)
    assert [g.group_id for g in run(engine, storage.list_groups, group_id).items] == []


def test_join_records_the_member_and_its_host(client, group_id):
    client.join_group(group_id, member_id="consumer-1")
    described = client.describe_group(group_id)
    assert described.member_id == "consumer-1"
    assert described.member_host.startswith("ipv4:127.0.0.1:")


# --- 5. a reset never deletes ---


def test_a_time_reset_before_the_first_commit_stores_earliest(client, engine, group_id, topic):
    client.join_group(group_id)
    before = run(engine, lambda conn: conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one())
    client.commit_offsets(group_id, {(topic, 0): 7, (topic, 1): 8})

    dry = client.reset_offsets(group_id, topics=[topic], to_commit_time=before, dry_run=True)
    assert [(c.partition, c.previous_offset, c.new_offset) for c in dry.changes] == [(0, 7, EARLIEST), (1, 8, EARLIEST)]
    client.reset_offsets(group_id, topics=[topic], to_commit_time=before)
    fetched = client.fetch_offsets(group_id)
    assert {tp.partition: o.offset for tp, o in fetched.offsets.items()} == {0: EARLIEST, 1: EARLIEST}


# --- 3. nobody's log start is invented ---


def test_an_unobserved_log_start_keeps_the_known_one_and_invents_none(engine, group_id, topic):
    run(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 5000), OffsetCommit(topic, 1, 5000)])
    run(engine, storage.report_watermarks, [Watermark(topic, 0, 10, 6000)])  # a Kafka client saw both
    for _ in range(2):  # a first report, then one over a stored row
        run(engine, storage.report_watermarks, [Watermark(topic, 0, -1, 7000), Watermark(topic, 1, -1, 7000)])

    marks = run(engine, storage.read_watermarks, [(topic, 0), (topic, 1)])
    assert marks == {(topic, 0): (10, 7000), (topic, 1): (None, 7000)}
    run(engine, storage.reset_offsets, group_id, {topic: ()}, to_boundary=Boundary.EARLIEST)
    fetched = run(engine, storage.fetch_offsets, group_id)
    assert {tp.partition: o.offset for tp, o in fetched.offsets.items()} == {0: 10, 1: EARLIEST}
    lags = {p.partition: p.lag for p in run(engine, storage.describe_group, group_id).partitions}
    assert lags == {0: 6990, 1: NO_OFFSET}  # from an unknown start, the lag is unknown


# --- 6. every bad field is named ---


def test_a_request_with_several_bad_fields_names_them_all(server, group_id):
    bad = pb.CommitOffsetsRequest(
        group_id="",
        generation=-1,
        offsets=[
            pb.OffsetCommit(topic="ok", partition=0, offset=1),
            pb.OffsetCommit(topic="bad topic", partition=-1, offset=1),
            pb.OffsetCommit(topic="ok", partition=1, offset=-5),
            pb.OffsetCommit(topic="ok", partition=0, offset=2),
        ],
    )
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            pb_grpc.OffsetStoreServiceStub(channel).CommitOffsets(bad, timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(raised.value)
    fields = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            request = error_details_pb2.BadRequest()
            detail.Unpack(request)
            fields += [v.field for v in request.field_violations]
    assert fields == [
        "group_id",
        "offsets[1].topic",
        "offsets[1].partition",
        "offsets[2].offset",
        "offsets[3].partition",
        "generation",
    ]


def test_violations_are_capped_at_100(client, group_id):
    with pytest.raises(InvalidArgumentError) as raised:
        client.commit_offsets(group_id, [OffsetCommit(f"bad topic {i}", -1, -1) for i in range(500)])
    assert len(raised.value.violations) == 100


# --- 7. one snapshot per read ---


def test_fetch_and_describe_never_mix_two_snapshots(engine, group_id, topic):
    # Every reset moves the generation to g and the offset to 1000 * g in one transaction:
    # a read that saw one without the other would break the pairing.
    run(engine, storage.commit_offsets, group_id, [OffsetCommit(topic, 0, 0)])
    stop = threading.Event()
    mixed: list[tuple[int, int]] = []

    def read() -> None:
        while not stop.is_set():
            fetched = run(engine, storage.fetch_offsets, group_id)
            pair = (fetched.generation, next(iter(fetched.offsets.values())).offset)
            described = run(engine, storage.describe_group, group_id)
            for generation, offset in (pair, (described.generation, described.partitions[0].offset)):
                if offset != 1000 * generation:
                    mixed.append((generation, offset))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        # A count of resets, not a time window: a loaded machine runs fewer per second.
        generation = 0
        while generation < 30:
            with engine.begin() as conn:
                conn.execute(sa.text("SELECT pg_sleep(0.002)"))
                generation = storage.group_generation(conn, group_id) + 1
                storage.reset_offsets(conn, group_id, {topic: ()}, to_offset=1000 * generation)
    finally:
        stop.set()
        for r in readers:
            r.join()
    assert mixed == []


# --- 8. history records when a change became visible ---


def test_history_times_are_taken_at_the_writing_statement_not_the_transaction_start(engine, group_id, topic):
    with engine.begin() as conn:
        started = conn.execute(sa.select(sa.func.now())).scalar_one()
        conn.execute(sa.text("SELECT pg_sleep(0.3)"))
        committed = storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 5)])
        conn.execute(sa.text("SELECT pg_sleep(0.3)"))
        reset = storage.reset_offsets(conn, group_id, {topic: ()}, to_offset=9)
    entries = run(engine, storage.list_offset_history, group_id).items
    by_kind = {c.kind: c.change_time for c in entries}
    assert (by_kind[ChangeKind.COMMIT] - started).total_seconds() >= 0.3
    assert by_kind[ChangeKind.COMMIT] == committed[0].commit_time
    assert (by_kind[ChangeKind.RESET] - by_kind[ChangeKind.COMMIT]).total_seconds() >= 0.3
    assert reset.changes[0].change_time == by_kind[ChangeKind.RESET]


# --- 10. a busy server stays healthy ---


def test_health_does_not_wait_for_the_request_pool(database_url):
    from offsetstore.runtime.config import StoreConfig
    from offsetstore.runtime.store import Store
    from offsetstore.storage.engine import SessionSettings

    store = Store.open(StoreConfig(database_url, SessionSettings(connect_timeout_s=1), hot_pool_size=1))

    async def busy() -> list[bool]:
        async with store.aio.hot.connection():  # every request connection is in use
            # Borrowing from the pool would time out after 1 s and report the database down.
            return [await store.aio.ping(), await store.aio.ping()]

    try:
        assert store.wait(busy()) == [True, True]
    finally:
        store.dispose()


def test_checkpoint_location_moves_on_after_a_delete(client, database_url, group_id, topic):
    from offsetstore.spark_integration import checkpoint_location

    client.join_group(group_id)
    client.commit_offsets(group_id, {(topic, 0): 5})
    first = checkpoint_location(client, group_id, "/ck")
    client.delete_offsets(group_id, all_topics=True)
    for source in (client, database_url):
        after = checkpoint_location(source, group_id, "/ck")
        assert after != first and after.endswith("/reset-1")
    client.join_group(group_id)  # the group comes back; its count does not restart
    assert checkpoint_location(client, group_id, "/ck").endswith("/reset-1")
