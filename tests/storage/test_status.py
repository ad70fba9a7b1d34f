"""The status verdict's rules (storage/status.py) on hand-made facts: no database, no clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from offsetstore.core.types import GroupStatus
from offsetstore.storage.status import PartitionFacts, StatusRules, Verdict, judge, worst

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


# A consumer keeping up: committed 2 s ago at 95, the log end 100 seen 1 s ago, lag steady.
HEALTHY = PartitionFacts(
    offset=95,
    commit_time=ago(2),
    moved_time=ago(2),
    log_start=0,
    log_end=100,
    watermark_time=ago(1),
    lag_seconds=1.5,
    offset_then=40,
    log_end_then=45,
    now=NOW,
)


@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        ({}, GroupStatus.OK, "lag 5 (2s behind), keeping up"),
        ({"offset": 100}, GroupStatus.OK, "caught up at 100"),
        # Caught up and silent: a quiet topic, never an alarm however long.
        ({"offset": 100, "commit_time": ago(86400), "moved_time": ago(86400)}, GroupStatus.IDLE, "no commit for 24.0h"),
        # The walk: committed 75 after the log end 64 was seen: no anomaly claimed.
        ({"offset": 75, "log_end": 64, "watermark_time": ago(3)}, GroupStatus.OK, "seen 1s before the commit (unconf"),
        # ... and with no log end seen for longer than the window, no verdict at all.
        ({"offset": 75, "log_end": 64, "watermark_time": ago(90)}, GroupStatus.UNCONFIRMED, "no log end seen for 90s"),
        ({"offset": 75, "log_end": 64, "watermark_time": ago(1)}, GroupStatus.PAST_END, "past the log end 64"),
        ({"log_start": 97}, GroupStatus.LOST, "2 records deleted unread"),
        # The log start only grows: one seen before the commit already proves the loss.
        ({"log_start": 97, "watermark_time": ago(30)}, GroupStatus.LOST, "below the log start 97"),
        ({"commit_time": ago(90), "moved_time": ago(90)}, GroupStatus.STOPPED, "no commit for 90s"),
        # No log end seen since the last commit: the lag it shows may be gone.
        (
            {"commit_time": ago(90), "moved_time": ago(90), "watermark_time": ago(120)},
            GroupStatus.UNCONFIRMED,
            "no log end seen since",
        ),
        ({"moved_time": ago(300)}, GroupStatus.STALLED, "has not moved for 5m"),
        ({"lag_seconds": 45.0, "offset_then": 60, "log_end_then": 62}, GroupStatus.LAGGING, "lag grew from 2 to 5"),
        # Lag growing, but the oldest unread record is young: jitter between two commits.
        ({"lag_seconds": 3.0, "offset_then": 60, "log_end_then": 62}, GroupStatus.OK, "keeping up"),
        ({"log_end": None, "watermark_time": None}, GroupStatus.UNCONFIRMED, "no log end known"),
    ],
)
def test_a_rule_decides_each_verdict(change: dict[str, object], status: GroupStatus, reason: str) -> None:
    verdict = judge(replace(HEALTHY, **change))  # type: ignore[arg-type]  # the fields' own types
    assert verdict.status == status, verdict.reason
    assert reason in verdict.reason


def test_the_window_is_the_one_threshold() -> None:
    stopped = replace(HEALTHY, commit_time=ago(20), moved_time=ago(20))
    assert judge(stopped).status == GroupStatus.OK
    assert judge(stopped, StatusRules(window=10)).status == GroupStatus.STOPPED


def test_a_group_is_its_worst_partition() -> None:
    verdicts = [Verdict(GroupStatus.IDLE, "a"), Verdict(GroupStatus.STOPPED, "b"), Verdict(GroupStatus.LAGGING, "c")]
    assert worst(verdicts).status == GroupStatus.STOPPED
    assert (
        worst([Verdict(GroupStatus.UNCONFIRMED, "u"), Verdict(GroupStatus.OK, "o")]).status == GroupStatus.UNCONFIRMED
    )
    assert worst([Verdict(GroupStatus.PAST_END, "p"), Verdict(GroupStatus.LOST, "l")]).status == GroupStatus.LOST
    assert worst([]).status == GroupStatus.IDLE


# --- issue 49: verdicts that survive an operator ------------------------------------------


@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        # The walk: STOPPED (no commit for 76 s), then an operator's reset: still STOPPED.
        (
            {"offset": 50, "commit_time": ago(1), "reset_time": ago(1), "consumer_time": ago(76)},
            GroupStatus.STOPPED,
            "no consumer commit for 76s (reset 1s ago, no consumer commit since)",
        ),
        # A group adopted a moment ago that no consumer has committed to yet: waiting, not alive.
        ({"commit_time": ago(5), "reset_time": ago(5)}, GroupStatus.OK, "waiting for the consumer"),
        # ... and still nobody after the window: STOPPED, saying why.
        ({"commit_time": ago(90), "reset_time": ago(90)}, GroupStatus.STOPPED, "reset 90s ago, no consumer commit"),
        # A live consumer fenced by the reset has a window to come back.
        (
            {"commit_time": ago(1), "reset_time": ago(1), "consumer_time": ago(3)},
            GroupStatus.OK,
            "waiting for the consumer",
        ),
        ({"offset": 100, "commit_time": ago(90), "reset_time": ago(90)}, GroupStatus.IDLE, "caught up at 100; reset"),
    ],
)
def test_a_reset_is_no_consumer_commit(change: dict[str, object], status: GroupStatus, reason: str) -> None:
    verdict = judge(replace(HEALTHY, **change))  # type: ignore[arg-type]  # the fields' own types
    assert verdict.status == status, verdict.reason
    assert reason in verdict.reason


def test_unconfirmed_ends_when_the_consumer_does() -> None:
    """Where nothing brings a newer log end, UNCONFIRMED lasts while commits do: then a verdict from the last one seen."""
    behind = replace(HEALTHY, commit_time=ago(90), moved_time=ago(90), watermark_time=ago(120))
    assert judge(behind).status == GroupStatus.UNCONFIRMED
    stopped = judge(replace(behind, commit_time=ago(121), moved_time=ago(121), watermark_time=ago(600)))
    assert stopped.status == GroupStatus.STOPPED
    assert "at least 5 records wait" in stopped.reason

    ahead = replace(HEALTHY, offset=75, log_end=64, watermark_time=ago(90))
    assert judge(ahead).status == GroupStatus.UNCONFIRMED
    idle = judge(replace(ahead, commit_time=ago(61), moved_time=ago(61), watermark_time=ago(3600)))
    assert idle.status == GroupStatus.IDLE
    assert "caught up as far as known, lag unknown (no log end seen for 60m)" in idle.reason


def test_stopped_says_what_was_observed_not_a_movement() -> None:
    """Issue 59: the log end reported once (200), after the last commit, never moved: the reason says so."""
    once = replace(HEALTHY, offset=150, commit_time=ago(90), moved_time=ago(90), log_end=200, watermark_time=ago(30))
    verdict = judge(replace(once, log_end_then=None, offset_then=None))
    assert verdict.status == GroupStatus.STOPPED
    assert "moved" not in verdict.reason
    assert verdict.reason == (
        "no commit for 90s while 50 records wait (2s behind); the log end 200 was seen 30s ago, after the last commit"
    )
