"""Fair admission by cost (issue 21): a principal's calls wait behind its own share and budget, never behind another's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextvars import Context

import pytest

from offsetstore.client import ResourceExhaustedError
from offsetstore.core.calls import FACTS
from offsetstore.runtime import event_loop
from offsetstore.runtime.event_loop import EVENT_LOOPS
from offsetstore.server.admission import KEEP_PRINCIPALS, Admission, cost_of
from offsetstore.server.call import Call
from offsetstore.v1 import offset_store_pb2 as pb


def _call(method: str, request: object) -> Call:
    return Call(FACTS[method], request)


def test_a_call_costs_what_it_touches() -> None:
    wide = pb.CommitOffsetsRequest(offsets=[pb.OffsetCommit(topic="t", partition=p) for p in range(10_000)])
    assert cost_of(_call("CommitOffsets", wide)) == 10_000
    assert cost_of(_call("CommitOffsets", pb.CommitOffsetsRequest())) == 1
    named = pb.FetchOffsetsRequest(topics=[pb.TopicSelection(topic="t", partitions=[0, 1, 2])])
    assert cost_of(_call("FetchOffsets", named)) == 3
    assert cost_of(_call("FetchOffsets", pb.FetchOffsetsRequest())) == 1000  # a whole group, before it is read
    assert cost_of(_call("FetchOffsets", pb.FetchOffsetsRequest(page_size=50))) == 50
    report = pb.ReportWatermarksRequest(watermarks=[pb.Watermark(topic="t", partition=p) for p in range(7)])
    assert cost_of(_call("ReportWatermarks", report)) == 7
    assert cost_of(_call("JoinGroup", pb.JoinGroupRequest())) == 1


def test_one_principal_waits_behind_its_own_share_and_not_another() -> None:
    async def scenario() -> list[str]:
        admission = Admission(max_calls=10, share=10)
        order: list[str] = []
        for name in ("a", "a", "b"):
            admission.enter(name, limited=True)
        await admission.run("a", 8)
        second = asyncio.create_task(admission.run("a", 5))  # 8 + 5 > 10: waits for a's first
        await asyncio.sleep(0)
        assert not second.done()
        await admission.run("b", 9)  # b's share is its own: at once
        order.append("b ran")
        admission.done("a", 8)
        await second
        order.append("a's second ran")
        return order

    assert asyncio.run(scenario()) == ["b ran", "a's second ran"]


def test_a_call_wider_than_the_share_runs_alone() -> None:
    async def scenario() -> None:
        admission = Admission(max_calls=10, share=10)
        admission.enter("a", limited=False)
        await asyncio.wait_for(admission.run("a", 10_000), 5)  # nothing else running: not blocked
        admission.done("a", 10_000)

    asyncio.run(scenario())


def test_a_cancelled_waiter_gives_its_place_back() -> None:
    async def scenario() -> None:
        admission = Admission(max_calls=10, share=10)
        for _ in range(3):
            admission.enter("a", limited=True)
        await admission.run("a", 10)
        gone = asyncio.create_task(admission.run("a", 10))
        after = asyncio.create_task(admission.run("a", 10))
        await asyncio.sleep(0)
        gone.cancel()
        admission.done("a", 10)
        await asyncio.wait_for(after, 5)  # admitted, though the call queued before it left

    asyncio.run(scenario())


def test_calls_beyond_the_principal_limit_are_refused_before_their_request() -> None:
    admission = Admission(max_calls=2, max_anonymous_calls=3, share=10)
    admission.enter("a", limited=True)
    admission.enter("a", limited=True)
    with pytest.raises(ResourceExhaustedError) as refused:
        admission.enter("a", limited=True)
    assert refused.value.metadata["limit"] == "principal_calls" and refused.value.retry_after == 0.25
    admission.enter("b", limited=True)  # another principal is not refused
    for _ in range(3):
        admission.enter("ipv4:10.0.0.1", limited=False)  # an anonymous peer has its own, larger bound
    with pytest.raises(ResourceExhaustedError):
        admission.enter("ipv4:10.0.0.1", limited=False)
    admission.leave("a", limited=True)
    admission.enter("a", limited=True)  # a place came free


def _budget(rate: float = 10_000, burst: float | None = 10_000) -> Admission:
    return Admission(max_calls=100, share=100_000, cost_per_second=rate, burst_cost=burst)


async def _spend(admission: Admission, principal: str, costs: list[int]) -> list[bool]:
    """Runs calls of ``costs`` one after another; which of them were admitted at once (within a few loop turns)."""
    at_once = []
    for cost in costs:
        admission.enter(principal, limited=True)
        call = asyncio.create_task(admission.run(principal, cost))
        for _ in range(5):
            await asyncio.sleep(0)
        at_once.append(call.done())
        await asyncio.wait_for(call, 5)  # the budget refills: every call is admitted in the end
        admission.done(principal, cost)
        admission.leave(principal, limited=True)
    return at_once


def test_a_principal_spends_its_budget_whatever_its_calls_width_while_another_is_active() -> None:
    # Before: a call of 999 partitions never waited, one of 1,000 was followed by a rest three
    # times its length (a cliff one partition wide); now both spend one budget of cost per second.
    async def scenario() -> tuple[list[bool], list[bool]]:
        narrow, wide = _budget(), _budget()
        for admission in (narrow, wide):
            admission.enter("b", limited=True)
            await admission.run("b", 1)  # another principal is active
        # The burst holds ten calls of 999 or of 1,000; the eleventh waits for the budget to refill.
        return await _spend(narrow, "a", [999] * 11), await _spend(wide, "a", [1000] * 11)

    narrow, wide = asyncio.run(scenario())
    assert narrow == wide == [True] * 10 + [False]


def test_a_principal_alone_never_waits_for_its_budget() -> None:
    async def scenario() -> list[bool]:
        return await _spend(_budget(), "a", [999] * 30 + [10_000] * 3)

    assert asyncio.run(scenario()) == [True] * 33


def test_a_call_wider_than_the_burst_waits_for_a_full_bucket_only() -> None:
    async def scenario() -> list[bool]:
        admission = _budget(rate=1000, burst=500)
        admission.enter("b", limited=True)
        await admission.run("b", 1)
        # The first takes the full bucket and owes the rest; the next waits until it is paid and full again.
        return await _spend(admission, "a", [2000, 1])

    assert asyncio.run(scenario()) == [True, False]


def test_a_principal_that_worked_alone_starts_from_an_empty_bucket_not_a_debt() -> None:
    async def scenario() -> float:
        admission = _budget(rate=10_000, burst=10_000)
        await _spend(admission, "a", [10_000] * 50)  # alone: 500,000 spent, none owed beyond the bucket
        admission.enter("b", limited=True)
        await admission.run("b", 1)
        started = asyncio.get_running_loop().time()
        await _spend(admission, "a", [10_000])
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(scenario()) < 5  # a full bucket's refill (1 s), not 50 s of debt


def test_a_cancelled_waiter_for_the_budget_leaves_no_free_pass() -> None:
    async def scenario() -> list[bool]:
        admission = _budget()
        admission.enter("b", limited=True)
        await admission.run("b", 1)
        await _spend(admission, "a", [10_000])  # the bucket is empty
        admission.enter("a", limited=True)
        gone = asyncio.create_task(admission.run("a", 5000))
        await asyncio.sleep(0)
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        admission.leave("a", limited=True)
        return await _spend(admission, "a", [5000])

    assert asyncio.run(scenario()) == [False]  # it still waits for the budget


class _EarlyTimers(asyncio.SelectorEventLoop):
    """A loop whose timers fire 5 ms before time.monotonic() says they are due, as uvloop's may.

    libuv counts timers in whole milliseconds from a clock read at the loop turn's start: a
    timer set late in a busy turn fires that much early by ``time.monotonic()``.
    """

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: object, context: Context | None = None
    ) -> asyncio.TimerHandle:
        return super().call_later(max(0.0, delay - 0.005), callback, *args, context=context)


async def _empty_then_next_call(admission: Admission) -> None:
    """b is active; a empties its bucket (10 ms of budget), so its next call waits for the budget's timer."""
    for principal in ("a", "a", "b"):
        admission.enter(principal, limited=True)
    await admission.run("b", 1)
    await admission.run("a", 100)
    admission.done("a", 100)
    await asyncio.wait_for(admission.run("a", 100), 2)
    admission.done("a", 100)
    for principal in ("a", "a", "b"):
        admission.leave(principal, limited=True)


def test_a_budget_wait_ends_when_its_timer_fires_even_before_the_clock_says_so() -> None:
    # The rest after a wide call this budget replaced once looked at time.monotonic() when its
    # timer fired, found it not over, and left the next call waiting for ever under uvloop.
    with asyncio.Runner(loop_factory=_EarlyTimers) as runner:
        runner.run(_empty_then_next_call(_budget(rate=10_000, burst=100)))


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_budget_waits_end_on_either_event_loop(loop: str) -> None:
    async def scenario() -> None:
        admission = _budget(rate=10_000, burst=100)
        for _ in range(10):
            await _empty_then_next_call(admission)

    event_loop.run(scenario(), loop)


def test_principals_gone_with_a_budget_to_refill_are_forgotten_once_it_is() -> None:
    # One anonymous peer address is one principal: a map of every address that ever called and
    # left owing would grow without bound.
    async def scenario() -> int:
        admission = Admission(max_calls=10, cost_per_second=1e9, burst_cost=10_000)  # refilled in 10 us
        admission.enter("b", limited=True)
        await admission.run("b", 1)
        for n in range(3 * KEEP_PRINCIPALS):
            peer = f"ipv4:10.0.{n // 256}.{n % 256}"
            admission.enter(peer, limited=False)
            await admission.run(peer, 10_000)
            admission.done(peer, 10_000)
            admission.leave(peer, limited=False)
        return len(admission._principals)

    assert asyncio.run(scenario()) <= KEEP_PRINCIPALS + 1
