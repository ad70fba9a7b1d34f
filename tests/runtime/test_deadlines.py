"""The caller's deadline bounds the database work; a caller that left gets nothing committed.

A database "too slow to answer" is made by holding the group's row lock from another
session, which every write of the group waits for; the store's own statement timeout is
set far above the deadlines used here, so only the deadline can end the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from offsetstore.cli import groups as cli
from offsetstore.client import (
    AsyncOffsetStoreClient,
    DeadlineExceededError,
    OffsetCommit,
    OffsetStoreClient,
    StoreUnavailableError,
    TopicPartition,
)
from offsetstore.runtime._group_commit import BATCH_LOCK_TIMEOUT_MS
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store, deadline
from offsetstore.server.limits import Limits
from offsetstore.storage.engine import SessionSettings
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.concurrency import wait_until
from tests.fixtures.fix_db import group_locked
from tests.fixtures.fix_server import ServerHandle

TOPIC = "orders"
# The store's statement timeout in these tests: any wait that ends well before it was
# ended by the caller's deadline.
SLOW_MS = 120_000


@pytest.fixture
def slow_store(database_url: str) -> Iterator[Store]:
    store = Store.open(StoreConfig(database_url, SessionSettings(statement_timeout_ms=SLOW_MS), hot_pool_size=2))
    yield store
    store.dispose()


def offset_of(store: Store, group_id: str) -> int:
    return store.fetch_offsets(group_id, {TOPIC: [0]}).offsets[TopicPartition(TOPIC, 0)].offset


def test_the_deadline_ends_a_statement_long_before_the_stores_timeout(
    slow_store: Store, database_url: str, group_id: str
) -> None:
    slow_store.commit_offsets(group_id, [_commit(1)])
    with group_locked(database_url, group_id) as lock:
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError), deadline(1.0):
            slow_store.commit_offsets(group_id, [_commit(2)])
        # Ended by the deadline, not by the two-minute statement timeout (a generous bound).
        assert time.monotonic() - started < SLOW_MS / 1000 / 4
        # And the database let go of it: nothing is left waiting on the lock.
        assert lock.waiting() == 0
    assert offset_of(slow_store, group_id) == 1


def test_a_deadline_already_past_never_reaches_the_database(slow_store: Store, group_id: str) -> None:
    for seconds in (0, -5):
        with pytest.raises(StoreUnavailableError), deadline(seconds):
            slow_store.commit_offsets(group_id, [_commit(1)])
    assert slow_store.fetch_offsets(group_id).offsets == {}


def test_no_deadline_leaves_the_stores_own_timeout(database_url: str, group_id: str) -> None:
    store = Store.open(StoreConfig(database_url, SessionSettings(statement_timeout_ms=300), hot_pool_size=1))
    try:
        store.commit_offsets(group_id, [_commit(1)])
        with group_locked(database_url, group_id), pytest.raises(StoreUnavailableError), deadline(None):
            store.commit_offsets(group_id, [_commit(2)])
        assert offset_of(store, group_id) == 1
    finally:
        store.dispose()


def test_a_transaction_whose_caller_left_is_rolled_back_not_committed(
    slow_store: Store, database_url: str, group_id: str
) -> None:
    slow_store.commit_offsets(group_id, [_commit(1)])
    caller_there = threading.Event()
    caller_there.set()
    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            with deadline(60, caller_there.is_set):
                slow_store.commit_offsets(group_id, [_commit(2)])
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    with group_locked(database_url, group_id) as lock:
        worker = threading.Thread(target=commit)
        worker.start()
        wait_until(lambda: lock.waiting() == 1)
        caller_there.clear()  # the caller gives up while the commit waits
        lock.release()
    worker.join(60)  # the lock is released: the commit's statements finish, its COMMIT must not happen
    assert len(outcome) == 1 and isinstance(outcome[0], StoreUnavailableError)
    assert offset_of(slow_store, group_id) == 1
    history = slow_store.list_offset_history(group_id).items
    assert [c.new_offset for c in history] == [1]


def test_waiting_for_a_connection_is_bounded_too(database_url: str, group_id: str) -> None:
    """A pool used up by slow calls answers the next call UNAVAILABLE instead of queueing it forever."""
    store = Store.open(
        StoreConfig(database_url, SessionSettings(statement_timeout_ms=SLOW_MS, connect_timeout_s=1), hot_pool_size=1)
    )
    try:
        store.commit_offsets(group_id, [_commit(1)])
        with group_locked(database_url, group_id) as lock:
            holder = threading.Thread(
                target=_swallow(lambda: _with_deadline(10, store.commit_offsets, group_id, [_commit(2)]))
            )
            holder.start()
            # Past the group-commit batch's own short lock wait: the commit waits alone, holding the connection.
            wait_until(lambda: lock.waiting(longer_than_ms=10 * BATCH_LOCK_TIMEOUT_MS) == 1)
            with pytest.raises(StoreUnavailableError) as busy:
                store.fetch_offsets(group_id)
            assert "busy" in busy.value.message
        holder.join(60)
    finally:
        store.dispose()


# --- through the server: the gRPC deadline is the caller's ------------------------------


class CallEnded(grpc.aio.ServerInterceptor):
    """Sets ``ended`` when a call of the offset store ends on the server, also by the client's cancellation."""

    def __init__(self) -> None:
        self.ended = threading.Event()

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.stream_unary is None:
            return handler  # the offset store's methods are served as client streams (the gate reads them)
        inner = handler.stream_unary

        async def behaviour(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            context.add_done_callback(lambda _: self.ended.set())
            return await inner(requests, context)

        return grpc.stream_unary_rpc_method_handler(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


@pytest.fixture
def slow_server(slow_store: Store) -> Iterator[tuple[ServerHandle, CallEnded]]:
    ended = CallEnded()
    with ServerHandle(slow_store, interceptors=(ended,), limits=Limits(max_workers=4)) as server:
        yield server, ended


def test_the_callers_grpc_deadline_bounds_the_servers_database_work(
    slow_server: tuple[ServerHandle, CallEnded], slow_store: Store, database_url: str, group_id: str
) -> None:
    server, _ = slow_server
    with OffsetStoreClient(server.address, timeout=30) as client:
        client.commit_offsets(group_id, {(TOPIC, 0): 1})
        with group_locked(database_url, group_id) as lock:
            with pytest.raises((StoreUnavailableError, DeadlineExceededError)) as raised:
                client.commit_offsets(group_id, {(TOPIC, 0): 2}, timeout=2)
            # Whichever side gave up first, the error says the outcome is unknown (issue 22).
            assert UNKNOWN in str(raised.value)
            # The server's statement gave up with the caller: no work piles up behind the lock
            # (without the deadline it would wait for the store's two-minute timeout).
            wait_until(lambda: lock.waiting() == 0, seconds=SLOW_MS / 1000 / 4)
        assert client.fetch_offsets(group_id).offsets[(TOPIC, 0)].offset == 1
        assert client.health() == "SERVING"


def test_a_call_cancelled_by_its_client_commits_nothing(
    slow_server: tuple[ServerHandle, CallEnded], slow_store: Store, database_url: str, group_id: str
) -> None:
    server, ended = slow_server
    slow_store.commit_offsets(group_id, [_commit(1)])
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.OffsetStoreServiceStub(channel)
        request = pb.CommitOffsetsRequest(
            group_id=group_id, offsets=[pb.OffsetCommit(topic=TOPIC, partition=0, offset=2)]
        )
        with group_locked(database_url, group_id) as lock:
            ended.ended.clear()
            call = stub.CommitOffsets.future(request, timeout=60)
            wait_until(lambda: lock.waiting() == 1)
            call.cancel()
            assert ended.ended.wait(30)  # the server knows the caller left before the lock is released
            lock.release()
            # The commit's statements now finish; the transaction must be rolled back.
            wait_until(lambda: lock.waiting() == 0)
        with pytest.raises(grpc.FutureCancelledError):
            call.result()
    # Every hot connection back in the pool: the cancelled commit's transaction has ended.
    wait_until(lambda: (stats := slow_store.aio.hot.get_stats())["pool_available"] == stats["pool_size"])
    assert offset_of(slow_store, group_id) == 1
    assert [c.new_offset for c in slow_store.list_offset_history(group_id).items] == [1]


def _commit(offset: int) -> OffsetCommit:
    return OffsetCommit(TOPIC, 0, offset)


def _with_deadline(seconds: float, call: Callable[..., Any], *args: Any) -> Any:
    with deadline(seconds):
        return call(*args)


def _swallow(call: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        with contextlib.suppress(StoreUnavailableError):
            call()

    return run


# --- an unknown outcome says so (issue 22, item 8) ----------------------------------------------

UNKNOWN = "the commit may or may not have been applied; fetch the offsets to find out"


@pytest.fixture
def mute_server() -> Iterator[str]:
    """A server that accepts connections and never answers: every call's deadline passes."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def test_a_write_whose_deadline_passed_says_it_may_have_been_applied(mute_server: str) -> None:
    with OffsetStoreClient(mute_server, timeout=0.5) as client:
        with pytest.raises(DeadlineExceededError) as raised:
            client.commit_offsets("g", {(TOPIC, 0): 1})
        assert str(raised.value) == f"Deadline Exceeded: {UNKNOWN}"
        with pytest.raises(DeadlineExceededError, match="the reset may or may not have been applied; describe"):
            client.reset_offsets("g", topics={TOPIC: [0]}, to_offset=0)
        with pytest.raises(DeadlineExceededError, match="the delete may or may not have been applied; fetch"):
            client.delete_offsets("g", all_topics=True)
        with pytest.raises(DeadlineExceededError, match="the join may or may not have bumped"):
            client.join_group("g")
        # A read or a dry run changed nothing: no such warning.
        with pytest.raises(DeadlineExceededError) as raised:
            client.fetch_offsets("g")
        assert str(raised.value) == "Deadline Exceeded"
        with pytest.raises(DeadlineExceededError) as raised:
            client.reset_offsets("g", topics={TOPIC: [0]}, to_offset=0, dry_run=True)
        assert str(raised.value) == "Deadline Exceeded"


def test_the_async_client_says_so_too(mute_server: str) -> None:
    async def commit() -> None:
        async with AsyncOffsetStoreClient(mute_server, timeout=0.5) as client:
            await client.commit_offsets("g", {(TOPIC, 0): 1})

    with pytest.raises(DeadlineExceededError) as raised:
        asyncio.run(commit())
    assert str(raised.value) == f"Deadline Exceeded: {UNKNOWN}"


def test_the_cli_prints_that_a_change_may_have_been_applied(
    slow_server: tuple[ServerHandle, CallEnded],
    database_url: str,
    group_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, _ = slow_server
    common = ["--server", server.address, "--timeout", "1"]
    with OffsetStoreClient(server.address, timeout=30) as client:
        client.commit_offsets(group_id, {(TOPIC, 0): 5})
    with group_locked(database_url, group_id) as lock:
        # The reset's reads answer; the reset itself waits for the lock past its deadline.
        assert cli.main(["reset", group_id, "--topic", f"{TOPIC}:0", "--to-offset", "0", "--execute", *common]) != 0
        err = capsys.readouterr().err
        assert f"offsetstore server at {server.address}" in err
        assert "the reset may or may not have been applied; describe the group to find out" in err
        assert cli.main(["delete", group_id, "--all-topics", "--execute", *common]) != 0
        assert "the delete may or may not have been applied; fetch the offsets to find out" in capsys.readouterr().err
        lock.release()


def test_the_cli_says_nothing_of_a_change_when_only_a_read_went_unanswered(
    mute_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--server", mute_server, "--timeout", "0.5"]
    assert cli.main(["describe", "g", *common]) != 0
    err = capsys.readouterr().err
    assert f"no answer from the offsetstore server at {mute_server} in time (see --timeout)" in err
    assert "may or may not" not in err
    # A reset reads first: its read went unanswered, so it never sent the reset.
    assert cli.main(["reset", "g", "--topic", f"{TOPIC}:0", "--to-offset", "0", "--execute", *common]) != 0
    assert "may or may not" not in capsys.readouterr().err


def test_a_commit_the_database_did_not_answer_in_time_says_so(
    slow_server: tuple[ServerHandle, CallEnded], database_url: str, group_id: str
) -> None:
    server, _ = slow_server
    with OffsetStoreClient(server.address, timeout=30) as client:
        client.commit_offsets(group_id, {(TOPIC, 0): 1})
        with group_locked(database_url, group_id) as lock:
            # The server's own deadline, a little before the client's: STORE_UNAVAILABLE from it.
            with pytest.raises(StoreUnavailableError) as raised:
                client.commit_offsets(group_id, {(TOPIC, 0): 2}, timeout=1)
            lock.release()
        assert str(raised.value).endswith(UNKNOWN)
