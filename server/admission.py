"""Fair admission: each principal's calls are admitted by what they cost, so one tenant waits behind itself.

Three bounds, each per principal (an authenticated one, or, with authentication off, one per
peer address):

- **cost in flight**: a call costs what it makes the server and the database do (the
  partitions of a commit, the watermarks of a report, the rows a read may return; see
  :func:`cost_of`). A principal's calls run while their costs together stay within
  ``share``; the next one waits, as a coroutine, in the principal's own FIFO queue. Another
  principal's calls never queue behind it. A single call costlier than ``share`` runs alone.
- **calls at once**: beyond ``max_calls`` running or waiting (``max_anonymous_calls`` for an
  anonymous peer), a call is refused at once, RESOURCE_EXHAUSTED with a retry hint, before
  its request is read: this bounds the requests a principal makes the server hold.
- **rest after a wide call**: while another principal is active, a principal's call of
  ``WIDE_COST`` or more is followed by a pause ``REST_FACTOR`` (3) times as long as it took,
  so that a tenant's wide calls hold what they hold (the database's CPU and WAL, the event
  loop) at most a quarter of the time while others wait on them; alone, it never waits.
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

#: A call of at least this cost is wide: see :meth:`Admission.done`.
WIDE_COST = 1000
#: A wide call is followed by a rest this many times as long as it took, while others are
#: active: the wide tenant's calls hold the database and the loop at most a quarter of the
#: time (measured: another tenant's commit p99 under four processes of the widest commits
#: fell from ~11 ms at 1x to ~8.5 ms at 3x, against ~2.5 ms quiet).
REST_FACTOR = 3.0
#: A principal counts as active for this long after a call of its own was admitted.
ACTIVE_SECONDS = 1.0

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


@dataclass
class _Principal:
    calls: int = 0  # running or waiting
    cost: int = 0  # of the calls running
    waiting: deque[tuple[int, asyncio.Future[None]]] = field(default_factory=deque)
    rest_until: float = 0.0  # after a wide call, while others are active (time.monotonic())
    bucket: tuple[float, float] | None = None  # (bytes left, when)


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
        bytes_per_second: float = 0,
        burst_bytes: float | None = None,
    ) -> None:
        if max_calls < 1:
            raise ValueError("the per-principal call limit must be >= 1")
        if share < 1:
            raise ValueError("the per-principal cost share must be >= 1")
        self.max_calls = max_calls
        self.max_anonymous_calls = max_anonymous_calls
        self.share = share
        self.rate = bytes_per_second
        self.burst = burst_bytes if burst_bytes is not None else 4 * bytes_per_second
        self._principals: dict[str, _Principal] = {}
        self._seen: dict[str, float] = {}  # principal -> when its last call was admitted to run

    def enter(self, principal: str, *, limited: bool) -> None:
        """Counts a call of ``principal`` in, or raises ResourceExhaustedError; from metadata, before the request.

        ``limited``: an authenticated principal, to which ``max_calls`` and the byte budget
        apply; an anonymous peer may have ``max_anonymous_calls`` (its requests' memory is
        what that bounds). Every call that entered must :meth:`leave`.
        """
        state = self._principals.get(principal)
        if state is None:
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
                left, when = state.bucket
                now = time.monotonic()
                left = min(self.burst, left + (now - when) * self.rate)
                state.bucket = None if left >= self.burst else (left, now)  # full again: forget it
                if left < 0:
                    self._forget_if_idle(principal, state)
                    raise ResourceExhaustedError(
                        f"{principal} has read more than {self.rate / 2**20:.0f} MiB/s of responses; retry later",
                        retry_after=-left / self.rate,
                        metadata={"limit": "principal_bytes", "bytes_per_second": str(int(self.rate))},
                    )
        state.calls += 1

    async def run(self, principal: str, cost: int) -> float:
        """Waits until the principal's calls running leave room for ``cost`` (and its rest is over).

        Returns when it was admitted (``time.monotonic()``), for :meth:`done`, which gives the cost back.
        """
        now = time.monotonic()
        self._seen[principal] = now
        state = self._principals[principal]
        if not state.waiting and now >= state.rest_until and (state.cost == 0 or state.cost + cost <= self.share):
            state.cost += cost
            return now
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiting.append((cost, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.done(principal, cost, time.monotonic())  # admitted as it was cancelled: give it back
            else:
                with contextlib.suppress(ValueError):  # _wake may have dropped it already
                    state.waiting.remove((cost, turn))
                self._wake(state)
            raise
        return time.monotonic()

    def done(self, principal: str, cost: int, admitted: float) -> None:
        """Gives back the cost of a call :meth:`run` admitted at ``admitted``.

        A wide call (``WIDE_COST`` or more) while another principal is active is followed by a
        rest as long as the call took: two busy tenants get at most half the time each of
        whatever the wide calls hold (the database's CPU, its WAL), the small one's calls none.
        """
        state = self._principals[principal]
        state.cost -= cost
        now = time.monotonic()
        if cost >= WIDE_COST and self._others_active(principal, now):
            rest = REST_FACTOR * (now - admitted)
            state.rest_until = until = now + rest
            asyncio.get_running_loop().call_later(rest, self._end_rest, state, until)
            return
        self._wake(state)

    def _end_rest(self, state: _Principal, until: float) -> None:
        # The timer says when the rest is over, not the clock: uvloop's timers count libuv's
        # milliseconds from the loop turn's start and may fire before time.monotonic() reaches
        # ``until``; a waiter that then waited for the clock would wait for ever (nothing else
        # wakes it). A later wide call's rest, set since, has its own timer.
        if state.rest_until == until:
            state.rest_until = 0.0
            self._wake(state)

    def _others_active(self, principal: str, now: float) -> bool:
        if len(self._seen) > 4096:  # forget the long gone, so the map stays small
            self._seen = {p: t for p, t in self._seen.items() if now - t < ACTIVE_SECONDS}
        return any(p != principal and now - t < ACTIVE_SECONDS for p, t in self._seen.items())

    def leave(self, principal: str, response_bytes: int = 0, *, limited: bool) -> None:
        """Counts a call out; ``response_bytes`` are charged to the principal's byte budget."""
        state = self._principals[principal]
        state.calls -= 1
        if limited and self.rate > 0 and response_bytes > 0:
            now = time.monotonic()
            left, when = state.bucket or (self.burst, now)
            state.bucket = (min(self.burst, left + (now - when) * self.rate) - response_bytes, now)
        self._forget_if_idle(principal, state)

    def _wake(self, state: _Principal) -> None:
        if time.monotonic() < state.rest_until:
            return  # the timer set at the rest's start wakes it (_end_rest)
        while state.waiting:
            cost, turn = state.waiting[0]
            if turn.done():  # cancelled, its task not yet told: it takes nothing
                state.waiting.popleft()
                continue
            if state.cost != 0 and state.cost + cost > self.share:
                return
            state.waiting.popleft()
            state.cost += cost
            turn.set_result(None)

    def _forget_if_idle(self, principal: str, state: _Principal) -> None:
        # The map holds principals with calls or an unpaid byte budget only, so it stays small.
        if state.calls == 0 and state.bucket is None:
            del self._principals[principal]
