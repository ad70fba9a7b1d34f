"""The status verdict of a partition and of a group: pure rules over what the store knows, no I/O.

The store hands :func:`judge` one :class:`PartitionFacts` per partition (its committed offset
and times, the watermark and when it was observed, the log end a window ago from the sample
ring, the offset a window ago from the history); :func:`judge` returns a :class:`Verdict`,
and :func:`worst` gives a group its worst partition's. Tests build facts by hand.

The rules, in order (the first that holds decides), with ``W`` the window
(:attr:`StatusRules.window`, default 60 s):

==============  =========================================================================
UNCONFIRMED     no log end known
LOST            a log start is known and the offset is below it (the log start only grows,
                so an older observation already proves it)
PAST_END        the offset is past a log end observed at or after the commit
OK              the offset is past a log end observed before the commit, within ``W``: a
                consumer committing more often than log ends are observed (the reason
                says it is unconfirmed)
UNCONFIRMED     the same, with no log end seen for ``W``, while commits arrive
IDLE            the same, and no commit for ``W``: caught up as far as anything shows (the
                reason says the lag is unknown and since when no log end came)
(after reset)   an operator's reset, adoption or import set the offset and no consumer has
                committed since: that is no consumer's progress. Caught up: IDLE or OK as
                below; lag: STOPPED when the last consumer commit (else the reset) is older
                than ``W``, else OK "waiting for the consumer". The reason names the reset.
IDLE            caught up (offset = log end) and no commit for ``W``: a quiet topic
OK              caught up, commits recent
STOPPED         lag, no commit for ``W``, and a log end observed after the last commit; or
                lag, no commit for ``2W`` and none observed since (the records the lag
                counts were there before the commit: they wait however old the log end is)
UNCONFIRMED     lag, no commit for ``W`` (but not ``2W``) and no log end observed since
STALLED         lag, commits within ``W``, but the offset has not moved for ``W``
LAGGING         lag grew over the last ``W`` (from the offset and log end a window ago)
                and the oldest unconsumed record is older than ``W / 2``
OK              lag, and keeping up
==============  =========================================================================

So UNCONFIRMED never outlasts the consumer: once nothing commits, a verdict follows from
what was last seen (IDLE past the last log end, STOPPED behind it).

Why these: a caught-up consumer is never an alarm however long it is silent (Burrow's
false STOP on quiet topics); an anomaly is never judged against a log end older than the
commit (the log end only grows, so an older one proves nothing about a newer offset); lag
alone is not LAGGING (a consumer behind by a constant amount is keeping up), lag growing
is, once the oldest unread record is older than half the window (so a fast consumer's
jitter between two commits does not flap).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from offsetstore.core.types import GroupStatus

__all__ = ["DEFAULT_RULES", "SEVERITY", "PartitionFacts", "StatusRules", "Verdict", "judge", "worst"]


@dataclass(frozen=True)
class StatusRules:
    """The thresholds of the verdict: one window, the others derived from it."""

    #: Seconds: no commit for this long is STOPPED (with lag) or IDLE (caught up); an offset
    #: that has not moved for this long under commits is STALLED; lag growth is measured over
    #: it. 60 s spans twelve of a Kafka consumer's 5 s auto-commits.
    window: float = 60.0

    @property
    def lagging_after(self) -> float:
        """Seconds the oldest unconsumed record must be old before growing lag is LAGGING."""
        return self.window / 2


#: The defaults: no tuning needed where consumers commit at least once a minute.
DEFAULT_RULES = StatusRules()


@dataclass(frozen=True)
class PartitionFacts:
    """What the store knows about one partition of a group, as of ``now``."""

    #: The committed offset, a sentinel resolved to its watermark; None when unresolved.
    offset: int | None
    commit_time: datetime
    #: When the offset last changed (the history's latest change); None: not known, taken as
    #: the commit time.
    moved_time: datetime | None
    log_start: int | None
    log_end: int | None
    #: When the watermark (log start and end) was observed.
    watermark_time: datetime | None
    #: Seconds since the log end passed the offset; negative when unknown.
    lag_seconds: float
    #: The offset and the log end one window before ``now``; None when not known.
    offset_then: int | None
    log_end_then: int | None
    now: datetime
    #: When an operator's reset (an adoption, an import) set the offset, if no consumer has
    #: committed since; None when the latest change is a consumer's commit.
    reset_time: datetime | None = None
    #: With ``reset_time``: the latest consumer commit before it (None: none in the history kept).
    consumer_time: datetime | None = None


@dataclass(frozen=True)
class Verdict:
    status: GroupStatus
    reason: str


#: Worst first: a group's verdict is its partition verdict that comes first here.
SEVERITY: tuple[GroupStatus, ...] = (
    GroupStatus.LOST,
    GroupStatus.PAST_END,
    GroupStatus.STOPPED,
    GroupStatus.STALLED,
    GroupStatus.LAGGING,
    GroupStatus.UNCONFIRMED,
    GroupStatus.OK,
    GroupStatus.IDLE,
    GroupStatus.UNSPECIFIED,
)
_RANK = {status: rank for rank, status in enumerate(SEVERITY)}


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def judge(f: PartitionFacts, rules: StatusRules = DEFAULT_RULES) -> Verdict:
    """The verdict on one partition (the module's table, first rule that holds)."""
    w = rules.window
    if f.log_end is None or f.watermark_time is None:
        return Verdict(GroupStatus.UNCONFIRMED, "no log end known: report watermarks or let the server read them")
    if f.offset is None:
        return Verdict(GroupStatus.UNCONFIRMED, "the offset is a placeholder whose log boundary is not known")
    o, end = f.offset, f.log_end
    seen_after_commit = f.watermark_time >= f.commit_time
    watermark_age = _age(max(0.0, _seconds(f.now, f.watermark_time)))
    if f.log_start is not None and o < f.log_start:
        return Verdict(
            GroupStatus.LOST,
            f"offset {o} is below the log start {f.log_start}: {f.log_start - o} records deleted unread",
        )
    if o > end:
        if not seen_after_commit:
            before = _age(_seconds(f.commit_time, f.watermark_time))
            ahead = f"offset {o} is past the log end {end} seen {before} before the commit"
            if _seconds(f.now, f.watermark_time) <= w:
                # The usual case: a consumer commits more often than log ends are observed.
                return Verdict(GroupStatus.OK, f"caught up: {ahead} (unconfirmed until a newer log end)")
            quiet = _seconds(f.now, f.consumer_time or f.commit_time)
            if quiet > w:
                return Verdict(
                    GroupStatus.IDLE,
                    f"no commit for {_age(quiet)}; {ahead}: caught up as far as known, lag unknown "
                    f"(no log end seen for {watermark_age})",
                )
            return Verdict(
                GroupStatus.UNCONFIRMED, f"{ahead}, and no log end seen for {watermark_age}: waiting for a newer one"
            )
        return Verdict(GroupStatus.PAST_END, f"offset {o} is past the log end {end} seen after the commit")
    lag = end - o
    behind = f" ({_age(f.lag_seconds)} behind)" if f.lag_seconds >= 0 else ""
    if f.reset_time is not None:
        return _after_reset(f, f.reset_time, lag, behind, w)
    quiet = _seconds(f.now, f.commit_time)
    if o == end:
        if quiet > w:
            return Verdict(GroupStatus.IDLE, f"caught up at {end}, no commit for {_age(quiet)}")
        return Verdict(GroupStatus.OK, f"caught up at {end}")
    if quiet > w:
        if not seen_after_commit and quiet <= 2 * w:
            return Verdict(
                GroupStatus.UNCONFIRMED,
                f"lag {lag}, no commit for {_age(quiet)} and no log end seen since (log end {watermark_age} old)",
            )
        if not seen_after_commit:
            return Verdict(
                GroupStatus.STOPPED,
                f"no commit for {_age(quiet)} while at least {lag} records wait (the log end {end} was seen "
                f"{watermark_age} ago, before the last commit)",
            )
        return Verdict(
            # What was observed, not a movement: one report of the log end after the commit suffices.
            GroupStatus.STOPPED,
            f"no commit for {_age(quiet)} while {lag} records wait{behind}; the log end {end} was seen "
            f"{watermark_age} ago, after the last commit",
        )
    still = _seconds(f.now, f.moved_time or f.commit_time)
    if still > w:
        return Verdict(
            GroupStatus.STALLED, f"commits arrive but offset {o} has not moved for {_age(still)}: lag {lag}{behind}"
        )
    if f.offset_then is not None and f.log_end_then is not None:
        lag_then = f.log_end_then - f.offset_then
        if lag > lag_then and f.lag_seconds > rules.lagging_after:
            return Verdict(GroupStatus.LAGGING, f"lag grew from {max(0, lag_then)} to {lag} over {_age(w)}{behind}")
    return Verdict(GroupStatus.OK, f"lag {lag}{behind}, keeping up")


def _after_reset(f: PartitionFacts, reset_time: datetime, lag: int, behind: str, w: float) -> Verdict:
    """An offset an operator set, with no consumer commit since: judged by the consumer's last commit, not the reset.

    A reset is no sign of life, and its jump is no lag growth: a STOPPED group stays STOPPED,
    and a group nobody consumes yet waits for its consumer.
    """
    since = _seconds(f.now, reset_time)
    waiting = f"reset {_age(since)} ago, no consumer commit since"
    quiet = _seconds(f.now, f.consumer_time) if f.consumer_time is not None else since
    if lag == 0:
        if quiet > w:
            return Verdict(GroupStatus.IDLE, f"caught up at {f.log_end}; {waiting}")
        return Verdict(GroupStatus.OK, f"caught up at {f.log_end}; {waiting}")
    if f.consumer_time is not None and quiet > w:
        return Verdict(GroupStatus.STOPPED, f"no consumer commit for {_age(quiet)} ({waiting}): lag {lag}{behind}")
    if since > w:
        return Verdict(GroupStatus.STOPPED, f"{waiting}: lag {lag}{behind}")
    return Verdict(GroupStatus.OK, f"{waiting}: waiting for the consumer, lag {lag}{behind}")


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """A group's verdict: its worst partition's (:data:`SEVERITY`); IDLE for a group without offsets."""
    found = min(verdicts, key=lambda v: _RANK[v.status], default=None)
    return found or Verdict(GroupStatus.IDLE, "no offsets")
