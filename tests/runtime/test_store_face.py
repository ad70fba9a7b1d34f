"""The store's sync face: every storage operation runs through it on the one runtime store, in the caller's context."""

from __future__ import annotations

import pytest

from offsetstore import storage
from offsetstore.core.errors import StoreUnavailableError
from offsetstore.core.types import OffsetCommit, TopicPartition, Watermark
from offsetstore.runtime.store import Store, deadline


def test_operations_that_drive_steps_run_on_the_async_store_too(store: Store, group_id: str, topic: str) -> None:
    # The storage core's sync step driver (the sinks' path) under the async store's run_sync.
    store.commit_offsets(group_id, [OffsetCommit(topic, 0, 7)])
    store.run(storage.report_watermarks, [Watermark(topic, 0, 2, 40)])
    page = storage.PageRequest(0, "", store.max_response_bytes, store.token_key())
    fetched = store.read(storage.fetch_offsets, group_id, None, page)
    assert fetched.offsets[TopicPartition(topic, 0)].offset == 7
    assert store.describe_group(group_id).partitions[0].log_end_offset == 40
    # No offsets: only the generation is checked, through the same write path.
    assert store.commit_offsets(group_id, [], generation=0) == []


def test_the_callers_deadline_reaches_the_loop(store: Store, group_id: str, topic: str) -> None:
    with deadline(0):  # past before the call is made: nothing may reach the database
        with pytest.raises(StoreUnavailableError):
            store.commit_offsets(group_id, [OffsetCommit(topic, 0, 1)])
    assert store.fetch_offsets(group_id).offsets == {}


def test_a_sync_call_from_the_stores_own_loop_is_refused_not_a_deadlock(store: Store, group_id: str) -> None:
    async def on_the_loop() -> BaseException | None:
        try:
            store.fetch_offsets(group_id)
        except RuntimeError as error:
            return error
        return None

    refused = store.wait(on_the_loop())
    assert isinstance(refused, RuntimeError) and "await store.aio" in str(refused)
