"""Fair admission by cost (issue 21): a principal's calls wait behind its own share, never behind another's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import Context

import pytest

from offsetstore.client import ResourceExhaustedError
from offsetstore.core.calls import FACTS
from offsetstore.runtime import event_loop
from offsetstore.runtime.event_loop import EVENT_LOOPS
from offsetstore.server.admission import WIDE_COST, Admission, cost_of
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
        first = await admission.run("a", 8)
        second = asyncio.create_task(admission.run("a", 5))  # 8 + 5 > 10: waits for a's first
        await asyncio.sleep(0)
        assert not second.done()
        await admission.run("b", 9)  # b's share is its own: at once
        order.append("b ran")
        admission.done("a", 8, first)
        await second
        order.append("a's second ran")
        return order

    assert asyncio.run(scenario()) == ["b ran", "a's second ran"]


def test_a_call_wider_than_the_share_runs_alone() -> None:
    async def scenario() -> None:
        admission = Admission(max_calls=10, share=10)
        admission.enter("a", limited=False)
        admitted = await asyncio.wait_for(admission.run("a", 10_000), 5)  # nothing else running: not blocked
        admission.done("a", 10_000, admitted)

    asyncio.run(scenario())


def test_a_cancelled_waiter_gives_its_place_back() -> None:
    async def scenario() -> None:
        admission = Admission(max_calls=10, share=10)
        for _ in range(3):
            admission.enter("a", limited=True)
        first = await admission.run("a", 10)
        gone = asyncio.create_task(admission.run("a", 10))
        after = asyncio.create_task(admission.run("a", 10))
        await asyncio.sleep(0)
        gone.cancel()
        admission.done("a", 10, first)
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


def test_a_wide_call_rests_only_while_another_principal_is_active() -> None:
    async def scenario() -> tuple[bool, bool]:
        admission = Admission(max_calls=10, share=WIDE_COST * 10)
        for _ in range(4):
            admission.enter("a", limited=True)
        admission.enter("b", limited=True)
        # Alone: a wide call's successor runs at once.
        admitted = await admission.run("a", WIDE_COST)
        admission.done("a", WIDE_COST, admitted - 60)  # as if it took a minute
        alone = asyncio.create_task(admission.run("a", 1))
        await asyncio.sleep(0)
        rested_alone = not alone.done()
        admission.done("a", 1, await alone)
        # With b active: the successor waits as long as the wide call took.
        await admission.run("b", 1)
        admitted = await admission.run("a", WIDE_COST)
        admission.done("a", WIDE_COST, admitted - 60)
        shared = asyncio.create_task(admission.run("a", 1))
        await asyncio.sleep(0.05)
        rested_shared = not shared.done()
        shared.cancel()
        return rested_alone, rested_shared

    assert asyncio.run(scenario()) == (False, True)


class _EarlyTimers(asyncio.SelectorEventLoop):
    """A loop whose timers fire 5 ms before time.monotonic() says they are due, as uvloop's may.

    libuv counts timers in whole milliseconds from a clock read at the loop turn's start: a
    timer set late in a busy turn fires that much early by ``time.monotonic()``.
    """

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: object, context: Context | None = None
    ) -> asyncio.TimerHandle:
        return super().call_later(max(0.0, delay - 0.005), callback, *args, context=context)


async def _rest_then_next_call(admission: Admission) -> None:
    """b is active; a's wide call ends (took 10 ms, so a rests 30 ms); a's next call must be admitted."""
    for principal in ("a", "a", "b"):
        admission.enter(principal, limited=True)
    await admission.run("b", 1)
    admitted = await admission.run("a", WIDE_COST)
    admission.done("a", WIDE_COST, admitted - 0.01)
    following = await asyncio.wait_for(admission.run("a", 1), 2)
    admission.done("a", 1, following)
    for principal in ("a", "a", "b"):
        admission.leave(principal, limited=True)


def test_a_rest_ends_when_its_timer_fires_even_before_the_clock_says_so() -> None:
    # Before: the timer's wake-up looked at time.monotonic(), found the rest not over, and
    # left a's next call waiting for ever (under uvloop, tests/server/test_scan_cost.py's
    # readers past their 60 s deadline, the server idle).
    with asyncio.Runner(loop_factory=_EarlyTimers) as runner:
        runner.run(_rest_then_next_call(Admission(max_calls=10, share=WIDE_COST * 10)))


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_rests_end_on_either_event_loop(loop: str) -> None:
    async def scenario() -> None:
        admission = Admission(max_calls=10, share=WIDE_COST * 10)
        for _ in range(10):
            await _rest_then_next_call(admission)

    event_loop.run(scenario(), loop)
