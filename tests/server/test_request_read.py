"""A call that never sends its request is ended by the gate (server/gate.py, ``READ_SECONDS``), not held.

The gate authenticates and admits a call from its metadata, then reads the request within
its read bound: a caller that opens a call and never sends the message gets DEADLINE_EXCEEDED
with the reason, long before its own deadline. Against a real grpc.aio server on the test
store, with the bound shortened to half a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from offsetstore.client import OffsetStoreClient
from offsetstore.runtime.store import Store
from offsetstore.server.gate import Gate
from tests.fixtures.fix_server import ServerHandle

BOUND = 0.5


@pytest.fixture
def short_read_server(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerHandle]:
    assert Gate.__init__.__kwdefaults__ is not None
    monkeypatch.setitem(Gate.__init__.__kwdefaults__, "read_seconds", BOUND)
    with ServerHandle(store) as handle:
        yield handle


def _never_sends(stop: threading.Event) -> Iterator[bytes]:
    stop.wait(30)  # holds the stream open, message-less, until the test is done
    return
    yield b""  # a generator that yields nothing


def test_a_request_that_never_arrives_ends_deadline_exceeded_within_the_bound(
    short_read_server: ServerHandle,
) -> None:
    stop = threading.Event()
    with grpc.insecure_channel(short_read_server.address) as channel:
        commit = channel.stream_unary("/offsetstore.v1.OffsetStoreService/CommitOffsets")
        started = time.monotonic()
        try:
            with pytest.raises(grpc.RpcError) as raised:
                commit(_never_sends(stop), timeout=20)
        finally:
            stop.set()
        took = time.monotonic() - started
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert raised.value.details() == f"the CommitOffsets request did not arrive within {BOUND:g} s of the call's start"
    assert took < 15, took  # the server's bound ended it, not the client's 20 s deadline
    # The server serves the same peer on: a commit of its own goes through.
    with OffsetStoreClient(short_read_server.address) as client:
        group = f"read-bound-{time.monotonic_ns()}"
        client.commit_offsets(group, {("t", 0): 5})
        assert client.fetch_offsets(group).offsets[("t", 0)].offset == 5
