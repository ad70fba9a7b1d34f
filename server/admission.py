"""Fair admission: each principal's calls are admitted by what they cost, so one tenant waits behind itself.

Four bounds, each per principal (an authenticated one, or, with authentication off, one per
peer address):

- **cost in flight**: a call costs what it makes the server and the database do (the
  partitions of a commit, the watermarks of a report, the rows a read may return; see
  :func:`cost_of`). A principal's calls run while their costs together stay within
  ``share``; the next one waits, as a coroutine, in the principal's own FIFO queue. Another
  principal's calls never queue behind it. A single call costlier than ``share`` runs alone.
- **cost per second**: while another principal is active, a principal spends a budget of
  ``cost_per_second`` (a token bucket holding ``burst_cost``, refilled continuously); a call
  waits in the same queue until the bucket holds its cost (at most a full bucket), then
  takes it. A cost is a cost whatever the call's width: eight calls of 999 partitions
  spend what eight of 1,000 do (the rest after a call of 1,000 or more that this replaces
  was a cliff one partition below it). Alone, a principal never waits and owes nothing
  beyond an empty bucket: the budget shares a busy server, it is not a quota.
- **calls at once**: beyond ``max_calls`` running or waiting (``max_anonymous_calls`` for an
  anonymous peer), a call is refused at once, RESOURCE_EXHAUSTED with a retry hint, before
  its request is read: this bounds the requests a principal makes the server hold.
- **response bytes** (authenticated principals): a token bucket of ``bytes_per_second``
  (bursts of ``burst_bytes``); a response may overdraw it, then the principal's next calls
  are refused with the time to wait until it is refilled.

Everything runs on the server's event loop: no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

from offsetstore.core.calls import Cost
from offsetstore.core.errors import ResourceExhaustedError
from offsetstore.server.call import Call
from offsetstore.storage import validate as check

__all__ = ["DEFAULT_READ_COST", "Admission", "cost_of"]

#: A principal counts as active for this long after a call of its own was admitted.
ACTIVE_SECONDS = 1.0
#: Past this many principals known, those idle with full buckets are forgotten (:meth:`Admission._forget_idle`).
KEEP_PRINCIPALS = 4096

#: What a read that names no partitions is taken to return, before it has: a typical group.
#: Reads of huge groups are held back by the byte budget, which counts what they did return.
DEFAULT_READ_COST = 1000


def cost_of(call: Call) -> int:
    """What ``call`` costs, in partitions (rows) touched; at least 1.

    The rule is its method's ``cost`` fact (:mod:`offsetstore.core.calls`), and no less than
    the partitions the request carries in any costly field, counted on the wire (an adoption's
    ``to_offsets``: :attr:`Call.carried`).
    """
    return max(_by_rule(call), min(call.carried, check.MAX_PARTITIONS))


def _by_rule(call: Call) -> int:
    rule = call.facts.cost
    if rule is Cost.ENTRIES:
        return max(1, call.costed)
    if rule is Cost.SELECTION:
        topics = call.selection
        named = sum(len(t.partitions) for t in topics)
        whole = not topics or any(not t.partitions for t in topics)
        page = call.costed
        if whole:
            named += min(page, check.MAX_PARTITIONS) if page > 0 else DEFAULT_READ_COST
        return max(1, min(named, check.MAX_PARTITIONS))
    if rule is Cost.PAGE:
        size = call.costed
        return max(1, min(size, check.MAX_PARTITIONS)) if size > 0 else DEFAULT_READ_COST
    return 1


def _refill(bucket: tuple[float, float] | None, now: float, rate: float, burst: float) -> float:
    """What a token bucket (``(left, when)``; None: full) holds at ``now``."""
    if bucket is None:
        return burst
    left, when = bucket
    return min(burst, left + (now - when) * rate)


@dataclass
class _Principal:
    calls: int = 0  # running or waiting
    cost: int = 0  # of the calls running
    waiting: deque[tuple[int, asyncio.Future[None]]] = field(default_factory=deque)
    budget: tuple[float, float] | None = None  # cost per second: (cost left, when); None: full
    timer: asyncio.TimerHandle | None = None  # wakes the first waiter when the budget holds its cost
    due: bool = False  # that timer fired: the first waiter's budget wait is over
    bucket: tuple[float, float] | None = None  # response bytes: (bytes left, when); None: full


class Admission:
    """See the module docstring. One per server; used from its event loop only."""

    #: What a caller refused for its concurrency is told to wait before retrying.
    RETRY_AFTER = 0.25

    def __init__(
        self,
        *,
        max_calls: int,
        max_anonymous_calls: int = 256,
        share: int = check.MAX_PARTITIONS,
        cost_per_second: float = 0,
        burst_cost: float | None = None,
        bytes_per_second: float = 0,
        burst_bytes: float | None = None,
    ) -> None:
        """``cost_per_second`` 0: no budget; ``burst_cost`` unset: a second's worth, at least the widest call."""
        if max_calls < 1:
            raise ValueError("the per-principal call limit must be >= 1")
        if share < 1:
            raise ValueError("the per-principal cost share must be >= 1")
        if cost_per_second < 0 or (burst_cost is not None and burst_cost <= 0):
            raise ValueError("the per-principal cost budget must be >= 0 a second, its burst above 0")
        self.max_calls = max_calls
        self.max_anonymous_calls = max_anonymous_calls
        self.share = share
        self.cost_rate = cost_per_second
        self.cost_burst = burst_cost if burst_cost is not None else max(cost_per_second, check.MAX_PARTITIONS)
        self.rate = bytes_per_second
        self.burst = burst_bytes if burst_bytes is not None else 4 * bytes_per_second
        self._principals: dict[str, _Principal] = {}
        self._sweep_at = KEEP_PRINCIPALS
        # The two principals whose calls came last, latest first (name, when): whether another
        # than a given one is active, in constant time however many principals there are.
        self._latest: tuple[str, float] = ("", -ACTIVE_SECONDS)
        self._before: tuple[str, float] = ("", -ACTIVE_SECONDS)

    def enter(self, principal: str, *, limited: bool) -> None:
        """Counts a call of ``principal`` in, or raises ResourceExhaustedError; from metadata, before the request.

        ``limited``: an authenticated principal, to which ``max_calls`` and the byte budget
        apply; an anonymous peer may have ``max_anonymous_calls`` (its requests' memory is
        what that bounds). Every call that entered must :meth:`leave`.
        """
        state = self._principals.get(principal)
        if state is None:
            if len(self._principals) >= self._sweep_at:
                self._forget_idle()
            state = self._principals[principal] = _Principal()
        bound = self.max_calls if limited else self.max_anonymous_calls
        if state.calls >= bound:
            self._forget_if_idle(principal, state)
            raise ResourceExhaustedError(
                f"{principal} already has {bound} calls running; retry in a moment",
                retry_after=self.RETRY_AFTER,
                metadata={"limit": "principal_calls", "max_calls": str(bound)},
            )
        if limited:
            if self.rate > 0 and state.bucket is not None:
                now = time.monotonic()
                left = _refill(state.bucket, now, self.rate, self.burst)
                state.bucket = None if left >= self.burst else (left, now)  # full again: forget it
                if left < 0:
                    self._forget_if_idle(principal, state)
                    raise ResourceExhaustedError(
                        f"{principal} has read more than {self.rate / 2**20:.0f} MiB/s of responses; retry later",
                        retry_after=-left / self.rate,
                        metadata={"limit": "principal_bytes", "bytes_per_second": str(int(self.rate))},
                    )
        state.calls += 1

    async def run(self, principal: str, cost: int) -> None:
        """Waits until the principal's calls running leave room for ``cost``, and its budget holds it; then takes it.

        :meth:`done` gives the cost in flight back (the budget's is spent).
        """
        now = time.monotonic()
        if self._latest[0] != principal:
            self._before = self._latest
        self._latest = (principal, now)
        state = self._principals[principal]
        if (
            not state.waiting
            and state.timer is None
            and self._fits(state, cost)
            and not self._wait(principal, state, cost, now)
        ):
            self._take(principal, state, cost, now)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiting.append((cost, turn))
        if len(state.waiting) == 1:
            self._wake(principal, state)  # first in line, held by the budget alone: its timer
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.done(principal, cost)  # admitted as it was cancelled: give it back
            else:
                with contextlib.suppress(ValueError):  # _wake may have dropped it already
                    state.waiting.remove((cost, turn))
                if not state.waiting and state.timer is not None:  # nobody left to wait for the budget
                    state.timer.cancel()
                    state.timer, state.due = None, False
                self._wake(principal, state)
            raise

    def done(self, principal: str, cost: int) -> None:
        """Gives back the cost in flight of a call :meth:`run` admitted."""
        state = self._principals[principal]
        state.cost -= cost
        self._wake(principal, state)

    def _fits(self, state: _Principal, cost: int) -> bool:
        return state.cost == 0 or state.cost + cost <= self.share

    def _wait(self, principal: str, state: _Principal, cost: int, now: float) -> float:
        """Seconds until the principal's budget holds ``cost`` (a full bucket at most); 0: now, or no budget applies."""
        if self.cost_rate <= 0 or state.due or not self._others_active(principal, now):
            return 0.0
        short = min(cost, self.cost_burst) - _refill(state.budget, now, self.cost_rate, self.cost_burst)
        return max(0.0, short / self.cost_rate)

    def _take(self, principal: str, state: _Principal, cost: int, now: float) -> None:
        state.cost += cost
        state.due = False
        if self.cost_rate > 0:
            left = _refill(state.budget, now, self.cost_rate, self.cost_burst) - cost
            if not self._others_active(principal, now):
                left = max(left, 0.0)  # alone, it owes nothing beyond an empty bucket
            state.budget = (left, now)

    def _refilled(self, principal: str, state: _Principal) -> None:
        # The timer says when the budget holds the call, not the clock: uvloop's timers count
        # libuv's milliseconds from the loop turn's start and may fire before time.monotonic()
        # says the bucket holds enough; a waiter that then waited for the clock would wait for
        # ever (nothing else wakes it).
        state.timer = None
        state.due = True
        self._wake(principal, state)

    def _others_active(self, principal: str, now: float) -> bool:
        other, when = self._latest if self._latest[0] != principal else self._before
        return other != principal and now - when < ACTIVE_SECONDS

    def leave(self, principal: str, response_bytes: int = 0, *, limited: bool) -> None:
        """Counts a call out; ``response_bytes`` are charged to the principal's byte budget."""
        state = self._principals[principal]
        state.calls -= 1
        if limited and self.rate > 0 and response_bytes > 0:
            now = time.monotonic()
            state.bucket = (_refill(state.bucket, now, self.rate, self.burst) - response_bytes, now)
        self._forget_if_idle(principal, state)

    def _wake(self, principal: str, state: _Principal) -> None:
        while state.waiting and state.timer is None:  # a timer: it wakes the first waiter (_refilled)
            cost, turn = state.waiting[0]
            if turn.done():  # cancelled, its task not yet told: it takes nothing
                state.waiting.popleft()
                continue
            if not self._fits(state, cost):
                return
            now = time.monotonic()
            wait = self._wait(principal, state, cost, now)
            if wait > 0:
                state.timer = asyncio.get_running_loop().call_later(wait, self._refilled, principal, state)
                return
            state.waiting.popleft()
            self._take(principal, state, cost, now)
            turn.set_result(None)

    def _idle(self, state: _Principal, now: float) -> bool:
        # Nothing running or waiting, and nothing owed: forgetting it changes nothing.
        return (
            state.calls == 0
            and state.bucket is None
            and _refill(state.budget, now, self.cost_rate, self.cost_burst) >= self.cost_burst
        )

    def _forget_if_idle(self, principal: str, state: _Principal) -> None:
        # The map holds principals with calls or unpaid budgets only, so it stays small.
        if self._idle(state, time.monotonic()):
            del self._principals[principal]

    def _forget_idle(self) -> None:
        # Principals that left with a budget to refill stay until they come back; many of
        # them (one per anonymous peer address) are swept here once it is refilled.
        now = time.monotonic()
        for principal, state in list(self._principals.items()):
            if state.calls == 0 and state.bucket is not None:
                left = _refill(state.bucket, now, self.rate, self.burst)
                state.bucket = None if left >= self.burst else (left, now)
            if self._idle(state, now):
                del self._principals[principal]
        self._sweep_at = max(KEEP_PRINCIPALS, 2 * len(self._principals))  # a sweep per doubling at most
