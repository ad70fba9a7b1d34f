"""offsetstore_database_batch_calls: the calls each group commit and each coalesced read carried."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.fixtures.fix_metrics import Metered


def test_batches_count_the_calls_they_carry(metered: Metered, group_id: str, topic: str) -> None:
    c = metered.client

    def batches(kind: str) -> tuple[float, float, float]:
        """(batches, calls in them, batches of one call)."""
        return (
            metered.value("offsetstore_database_batch_calls_count", batch=kind) or 0,
            metered.value("offsetstore_database_batch_calls_sum", batch=kind) or 0,
            metered.value("offsetstore_database_batch_calls_bucket", batch=kind, le="1.0") or 0,
        )

    before = batches("write")
    for offset in range(3):  # one after the other: each a batch of its own
        c.commit_offsets(group_id, {(topic, 0): offset})
    assert tuple(a - b for a, b in zip(batches("write"), before, strict=True)) == (3, 3, 3)

    before = batches("read")
    c.fetch_offsets(group_id)
    assert tuple(a - b for a, b in zip(batches("read"), before, strict=True)) == (1, 1, 1)

    # Concurrent commits: each counted once, in whichever batch took it (how many batches: timing's).
    before = batches("write")
    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(c.commit_offsets, group_id, {(topic, n): n}) for n in range(1, 9)]:
            future.result(timeout=30)
    count, calls, alone = (a - b for a, b in zip(batches("write"), before, strict=True))
    assert calls == 8
    assert 1 <= count <= 8 and alone <= count
