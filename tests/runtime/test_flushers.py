"""When the flusher tasks take a batch: at once on an idle server; while one is in the database, more than it holds, or when it returns."""

from __future__ import annotations

import asyncio
from collections import deque

from offsetstore.runtime._flushers import Fifo, Flushers
from tests.fixtures.group_commit import turns


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


async def behind(batch: tuple[str, ...], sizes: list[int] | None = None) -> tuple[Held, Flushers[str]]:
    """Two flusher tasks, one of them holding ``batch`` in the 'database' (one batch: queued in one turn)."""
    held = Held()
    flushers: Flushers[str] = Flushers(
        "test", 2, Fifo(take_all), held.flush, sizes.append if sizes is not None else None
    )
    for name in batch:
        flushers.put(name)
    await turns()
    assert held.batches == [list(batch)]
    return held, flushers


def test_an_idle_server_takes_the_first_call_at_once() -> None:
    async def scenario() -> list[list[str]]:
        held = Held()
        flushers: Flushers[str] = Flushers("test", 2, Fifo(take_all), held.flush)
        flushers.put("alone")
        await turns()
        await flushers.stop()
        return held.batches

    assert asyncio.run(scenario()) == [["alone"]]


def test_while_one_batch_is_in_the_database_the_next_gathers_more_than_it_holds() -> None:
    async def scenario() -> list[list[str]]:
        sizes: list[int] = []
        held, flushers = await behind(("hold", "h2", "h3"), sizes)
        # Three calls in the database: the free task waits for a fourth.
        for name in ("a", "b", "c"):
            flushers.put(name)
            await turns()
            assert held.batches == [["hold", "h2", "h3"]], f"taken at {name}"
        flushers.put("d")
        await turns()
        assert held.batches == [["hold", "h2", "h3"], ["a", "b", "c", "d"]]
        # Fewer than the held batch, and it comes back: the task it frees takes them.
        flushers.put("e")
        await turns()
        assert len(held.batches) == 2
        held.release()
        await turns()
        assert held.batches[2:] == [["e"]]
        assert sizes == [3, 4, 1]
        await flushers.stop()
        return held.batches

    asyncio.run(scenario())


def test_batches_grow_from_one_call_where_taking_at_the_threshold_would_keep_them_small() -> None:
    # Half the recent mean (the rule before) took a second call at once behind a first one in the
    # database; at 64 clients that kept a third of the batches at one call in some runs. Behind a
    # batch of one, two calls gather.
    async def scenario() -> list[list[str]]:
        held, flushers = await behind(("hold",))
        flushers.put("a")
        await turns()
        assert held.batches == [["hold"]]
        flushers.put("b")
        await turns()
        held.release()
        await flushers.stop()
        return held.batches

    assert asyncio.run(scenario()) == [["hold"], ["a", "b"]]


def test_stop_flushes_what_is_queued_even_short_of_what_it_waits_for() -> None:
    async def scenario() -> list[list[str]]:
        held, flushers = await behind(("hold",))
        flushers.put("late")
        await turns()
        stopping = asyncio.create_task(flushers.stop())
        await turns()
        held.release()
        await stopping
        return held.batches

    assert asyncio.run(scenario()) == [["hold"], ["late"]]
