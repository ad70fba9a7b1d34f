"""Large groups' verdicts, evaluated over all their partitions by the maintenance round and kept for DescribeGroup's first page.

A group's verdict is its worst partition's over all its partitions (:mod:`.status`). Judging
10,000 partitions costs what describing them does (about a second), which a first page of
100 must not pay at every call (issue 55). So a group of more than :data:`LARGE_GROUP`
partitions has its verdict evaluated a chunk at a time (:func:`evaluate_steps`, each chunk a
statement of its own) by the maintenance round, and kept in ``group_verdicts`` with the time
of its evaluation, the status window and the group's reset count (:func:`keep`). The first
page reads that row beside its own (one probe of its primary key, :mod:`.describe`) and says
the verdict's age in its reason. A smaller group's verdict, a kept one older than
:data:`MAX_AGE`, one of another window or one from before a reset or a delete: evaluated at
the call, as before.

A round evaluates the groups without a kept verdict first, then the oldest, at most
:data:`ROUND_PARTITIONS` partitions a round (:func:`due`), and drops the rows of groups
deleted or no longer large (:func:`drop_unused`). The commits write nothing here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, Select, and_, bindparam, delete, func, literal_column, not_, or_, select
from sqlalchemy.dialects.postgresql import insert

from offsetstore.core.types import GroupStatus
from offsetstore.storage.lag_columns import FACTS_CHUNK, VerdictTally, group_facts_query
from offsetstore.storage.schema import group_verdicts, groups, offsets
from offsetstore.storage.status import StatusRules, Verdict
from offsetstore.storage.steps import PAUSE, SLICE, CompiledQuery, HotSteps, compile_query

__all__ = [
    "LARGE_GROUP",
    "MAX_AGE",
    "ROUND_PARTITIONS",
    "Evaluated",
    "drop_unused",
    "due",
    "evaluate_steps",
    "keep",
    "kept_reason",
    "serves",
    "verdict_of",
]

#: A group with more partitions than this has its verdict kept: at most one chunk of
#: :func:`evaluate_steps` is judged at a call.
LARGE_GROUP = FACTS_CHUNK

#: Seconds: a kept verdict older than this is not used (the maintenance is not running, or far
#: behind); the call evaluates the group itself.
MAX_AGE = 600.0

#: Partitions a maintenance round evaluates at most (the groups due first): with 100 groups of
#: 10,000 partitions each is evaluated every tenth round.
ROUND_PARTITIONS = 100_000


@dataclass(frozen=True)
class Evaluated:
    """A group's verdict over all its partitions, and what it was judged under."""

    group_id: str
    window: float
    verdict: Verdict
    partitions: int
    #: The first chunk's statement time (None for a group without partitions).
    evaluated_at: datetime | None


@functools.lru_cache(maxsize=16)
def _facts(window: float) -> CompiledQuery:
    return compile_query(group_facts_query(window))


def evaluate_steps(group_id: str, rules: StatusRules) -> HotSteps[Evaluated]:
    """The group's verdict over all its partitions, read :data:`~.lag_columns.FACTS_CHUNK` at a time in key order.

    Each chunk is a statement of its own (its own snapshot: a verdict is a summary, not a
    transaction's view), judged :data:`~.steps.SLICE` rows between pauses, so that a huge
    group's verdict neither nears the statement timeout nor holds the event loop (issue 47:
    20,000 partitions in one statement held it 1.2 s; 100,000 timed out).
    """
    facts = _facts(rules.window)
    tally = VerdictTally()
    after_topic, after_partition = "", -1
    count = 0
    started: datetime | None = None
    while True:
        statement = facts.statement(
            group=group_id, after_topic=after_topic, after_partition=after_partition, rows=FACTS_CHUNK
        )
        rows = facts.rows((yield statement))
        if rows and started is None:
            started = rows[0].now
        for n, r in enumerate(rows, 1):
            tally.add_row(r, rules)
            if n % SLICE == 0:
                yield PAUSE
        count += len(rows)
        if len(rows) < FACTS_CHUNK:
            return Evaluated(group_id, rules.window, tally.verdict(), count, started)
        after_topic, after_partition = rows[-1].topic, rows[-1].partition


def kept_reason(reason: str, age: float, partitions: int) -> str:
    """A kept verdict's reason as a first page gives it: with its age and how many partitions it judged."""
    return f"{reason} (judged {max(0.0, age):.0f}s ago over {partitions:,} partitions)"


def _large(group_id: Any) -> Any:
    # Counts at most LARGE_GROUP + 1 of the group's keys (the primary key's range): bounded per group.
    some = (
        select(literal_column("1"))
        .where(offsets.c.group_id == group_id)
        .correlate_except(offsets)  # the caller's group: a derived table is not correlated by itself
        .limit(bindparam("large", type_=Integer) + 1)
        .subquery("some")
    )
    return select(func.count()).select_from(some).scalar_subquery() > bindparam("large", type_=Integer)


_KEPT_ON = and_(group_verdicts.c.group_id == groups.c.group_id, group_verdicts.c.status_window == bindparam("window"))


def due(conn: Connection, window: float) -> list[tuple[str, int]]:
    """The large live groups, (group id, reset count), without a kept verdict under ``window`` first, then the oldest kept."""
    query = (
        select(groups.c.group_id, groups.c.reset_count)
        .select_from(groups.outerjoin(group_verdicts, _KEPT_ON))
        .where(groups.c.deleted_at.is_(None), _large(groups.c.group_id))
        .order_by(group_verdicts.c.evaluated_at.asc().nulls_first(), groups.c.group_id)
    )
    return [(r.group_id, r.reset_count) for r in conn.execute(query, {"window": window, "large": LARGE_GROUP})]


def keep(conn: Connection, evaluated: Evaluated, reset_count: int) -> None:
    """Keeps ``evaluated`` as the group's verdict (replacing the one kept), under the group's ``reset_count`` then."""
    row = {
        "group_id": evaluated.group_id,
        "status_window": evaluated.window,
        "status": int(evaluated.verdict.status),
        "reason": evaluated.verdict.reason,
        "partitions": evaluated.partitions,
        "evaluated_at": evaluated.evaluated_at,
        "reset_count": reset_count,
    }
    statement = insert(group_verdicts).values(row)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[group_verdicts.c.group_id],
            set_={name: statement.excluded[name] for name in row if name != "group_id"},
        )
    )


def serves(conn: Connection, group_id: str, window: float, max_age: float) -> bool:
    """Whether a verdict kept under ``window`` no older than ``max_age`` seconds serves the group's first page.

    The conditions :mod:`.describe` reads it under (the group live, no reset since), with a
    stricter age: one probe of each primary key.
    """
    query: Select[Any] = (
        select(literal_column("1"))
        .select_from(groups.join(group_verdicts, groups.c.group_id == group_verdicts.c.group_id))
        .where(
            groups.c.group_id == group_id,
            groups.c.deleted_at.is_(None),
            group_verdicts.c.status_window == window,
            group_verdicts.c.reset_count == groups.c.reset_count,
            group_verdicts.c.evaluated_at >= func.statement_timestamp() - func.make_interval(0, 0, 0, 0, 0, 0, max_age),
        )
    )
    return conn.execute(query).first() is not None


def drop_unused(conn: Connection, window: float) -> int:
    """Drops the kept verdicts of groups deleted or no longer large, and of another window; how many."""
    live = (
        select(literal_column("1"))
        .where(
            groups.c.group_id == group_verdicts.c.group_id,
            groups.c.deleted_at.is_(None),
            _large(group_verdicts.c.group_id),
        )
        .exists()
    )
    unused = or_(not_(live), group_verdicts.c.status_window != bindparam("window"))
    return conn.execute(delete(group_verdicts).where(unused), {"window": window, "large": LARGE_GROUP}).rowcount


def verdict_of(status: int, reason: str, age: float, partitions: int) -> Verdict:
    """A kept row's verdict, as a first page gives it (:func:`kept_reason`)."""
    return Verdict(GroupStatus(status), kept_reason(reason, age, partitions))
