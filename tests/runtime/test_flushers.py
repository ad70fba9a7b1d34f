"""When the flusher tasks take a batch: at once on an idle server, half a batch gathered while another is in the database."""

from __future__ import annotations

import asyncio
from collections import deque

from offsetstore.runtime._flushers import Flushers


def take_all(queue: deque[str]) -> list[str]:
    taken = list(queue)
    queue.clear()
    return taken


class Held:
    """Flushes that record each batch; a batch holding ``"hold"`` stays in the 'database' until :meth:`release`."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self._released = asyncio.Event()

    async def flush(self, batch: list[str]) -> None:
        self.batches.append(batch)
        if "hold" in batch:
            await self._released.wait()

    def release(self) -> None:
        self._released.set()


async def turns(n: int = 5) -> None:
    """A few turns of the loop: whatever a task would do at once, it has done."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_an_idle_server_takes_the_first_call_at_once() -> None:
    async def scenario() -> list[list[str]]:
        held = Held()
        flushers: Flushers[str] = Flushers("test", 2, take_all, held.flush)
        flushers._mean = 16.0  # recent batches were large: an idle server still does not wait for half of one
        flushers.put("alone")
        await turns()
        await flushers.stop()
        return held.batches

    assert asyncio.run(scenario()) == [["alone"]]


def test_while_one_batch_is_in_the_database_the_next_gathers_half_a_batch() -> None:
    async def scenario() -> list[list[str]]:
        held = Held()
        sizes: list[int] = []
        flushers: Flushers[str] = Flushers("test", 2, take_all, held.flush, sizes.append)
        flushers.put("hold")
        await turns()
        assert held.batches == [["hold"]]
        flushers._mean = 8.0  # recent batches held 8 calls: the free task waits for 4
        for name in ("a", "b", "c"):
            flushers.put(name)
            await turns()
            assert held.batches == [["hold"]], f"taken at {name}"
        flushers.put("d")
        await turns()
        assert held.batches == [["hold"], ["a", "b", "c", "d"]]
        # Fewer than half a batch, and the held batch comes back: the task it frees takes them.
        flushers.put("e")
        await turns()
        assert len(held.batches) == 2
        held.release()
        await turns()
        assert held.batches[2:] == [["e"]]
        assert sizes == [1, 4, 1]
        await flushers.stop()
        return held.batches

    asyncio.run(scenario())


def test_stop_flushes_what_is_queued_even_short_of_half_a_batch() -> None:
    async def scenario() -> list[list[str]]:
        held = Held()
        flushers: Flushers[str] = Flushers("test", 2, take_all, held.flush)
        flushers.put("hold")
        await turns()
        flushers._mean = 100.0
        flushers.put("late")
        await turns()
        stopping = asyncio.create_task(flushers.stop())
        await turns()
        held.release()
        await stopping
        return held.batches

    assert asyncio.run(scenario()) == [["hold"], ["late"]]
