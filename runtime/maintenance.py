"""The maintenance task: a round every interval makes and drops history partitions, expires idle groups and keeps large groups' verdicts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Protocol, TypeVar

from sqlalchemy import Connection, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from offsetstore.core.errors import OffsetStoreError
from offsetstore.runtime._calls import lock_wait_ran_out
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.storage import kept_verdicts
from offsetstore.storage.advisory_locks import describe_holder
from offsetstore.storage.lag import expire_samples
from offsetstore.storage.retention.expiry import ACTOR
from offsetstore.storage.retention.partitions import (
    drop_history_before,
    drop_stale_watermarks,
    make_history_partitions,
    oldest_history_time,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Groups expired in one round at most; the rest wait for the next round.
EXPIRE_PER_ROUND = 1000
#: How long a DDL statement of a round waits for its lock before giving up until the next round.
LOCK_TIMEOUT_MS = 200
#: Key of the advisory lock that lets one server of a database run a round at a time.
MAINTENANCE_LOCK_ID = 0x6F66_6673_6574_0002
#: Rounds in a row found the lock taken before it is a WARNING: another server's round is short,
#: so a lock held this long is a stuck server or a session squatting the key (issue 34 finding 7).
SKIPPED_ROUNDS_WARNING = 3
#: While the rounds stay skipped, the WARNING is repeated every this many rounds (hourly at 60 s).
SKIPPED_ROUNDS_REPEAT = 60


@dataclass
class RoundResult:
    """What one maintenance round did."""

    made: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    watermarks: int = 0
    #: Groups whose verdict was evaluated and kept (:mod:`~offsetstore.storage.kept_verdicts`).
    verdicts: list[str] = field(default_factory=list)
    #: Steps that found their lock taken and were left for the next round.
    deferred: list[str] = field(default_factory=list)


class _Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


class _Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class MaintenanceMetrics(Protocol):
    """What the rounds report to: the server's retention metrics."""

    #: The change time of the oldest kept history entry, set by each round.
    oldest_history: datetime | None

    @property
    def maintenance_seconds(self) -> _Histogram:
        """Observes each round's duration."""
        ...

    @property
    def maintenance_skipped(self) -> _Counter:
        """Counts rounds skipped because the maintenance lock was taken."""
        ...


class Maintenance:
    """Maintenance rounds every ``interval`` seconds, a task on the store's loop (:meth:`run`); :meth:`run_once` runs one now.

    ``store`` is the process's :class:`~offsetstore.runtime.async_store.AsyncStore`, its one
    path to the database: expiry goes through it (one transaction per group, counted by its
    hook), DDL through its transactions, and the advisory lock that lets one server of a
    database run a round at a time is held on one of its connections for the round.
    """

    def __init__(
        self,
        store: AsyncStore,
        *,
        history_retention: float,
        offsets_retention: float,
        interval: float = 60.0,
        metrics: MaintenanceMetrics | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.history_retention = history_retention
        self.offsets_retention = offsets_retention
        self.interval = interval
        self.metrics = metrics
        self.clock = clock
        #: Rounds skipped in a row (the lock taken each time).
        self.skipped = 0

    async def run(self) -> None:
        """A round every interval, until cancelled."""
        while True:
            try:
                await self.run_once()
            except Exception:
                # The database may be away; the next round tries again.
                log.exception("maintenance round failed")
            await asyncio.sleep(self.interval)

    async def _ddl(self, step: str, result: RoundResult, operation: Callable[[Connection], list[T]]) -> list[T]:
        try:
            return await self.store.run(_with_short_lock_wait, operation)
        except OffsetStoreError as error:
            if not lock_wait_ran_out(error):
                raise
            result.deferred.append(step)
            log.info("maintenance step deferred: its lock is busy", extra={"step": step})
            return []

    async def run_once(self) -> RoundResult | None:
        """One round; None when another server of the database is running one."""
        await self._observe_oldest()
        async with self.store.connection() as lock_conn:
            got = await lock_conn.scalar(select(func.pg_try_advisory_lock(MAINTENANCE_LOCK_ID)))
            await lock_conn.commit()
            if not got:
                await self._skipped(lock_conn)
                return None
            if self.skipped >= SKIPPED_ROUNDS_WARNING:
                log.warning("maintenance runs again after %d skipped rounds", self.skipped)
            self.skipped = 0
            try:
                started = time.perf_counter()
                result = await self._round()
                seconds = time.perf_counter() - started
                if self.metrics is not None:
                    self.metrics.maintenance_seconds.observe(seconds)
            finally:
                await lock_conn.execute(select(func.pg_advisory_unlock(MAINTENANCE_LOCK_ID)))
                await lock_conn.commit()
        await self._observe_oldest()
        log.info(
            "maintenance round",
            extra={
                "partitions_made": len(result.made),
                "partitions_dropped": len(result.dropped),
                "groups_expired": len(result.expired),
                "watermarks_dropped": result.watermarks,
                "verdicts_kept": len(result.verdicts),
                "deferred": result.deferred,
                "ms": round(seconds * 1000, 1),
            },
        )
        return result

    async def _skipped(self, conn: AsyncConnection) -> None:
        self.skipped += 1
        if self.metrics is not None:
            self.metrics.maintenance_skipped.inc()
        if self.skipped < SKIPPED_ROUNDS_WARNING or (self.skipped - SKIPPED_ROUNDS_WARNING) % SKIPPED_ROUNDS_REPEAT:
            log.debug("maintenance round skipped: another server runs it")
            return
        # Retention stopping in silence lets history and watermarks grow without bound.
        holder = await conn.run_sync(describe_holder, MAINTENANCE_LOCK_ID)
        await conn.commit()
        log.warning(
            "maintenance (history retention, expiry) skipped %d rounds in a row: its lock (advisory lock %d) is held by %s",
            self.skipped,
            MAINTENANCE_LOCK_ID,
            holder,
        )

    async def _round(self) -> RoundResult:
        result = RoundResult()
        now = self.clock()
        result.made = await self._ddl("make partitions", result, lambda c: make_history_partitions(c, now.date()))
        for name in result.made:
            log.info("history partition made", extra={"partition": name})
        if self.history_retention > 0:
            cutoff = now - timedelta(seconds=self.history_retention)
            # One partition a transaction: each DROP holds the table's lock only for itself.
            while True:
                dropped = await self._ddl("drop partitions", result, lambda c: drop_history_before(c, cutoff))
                if not dropped:
                    break
                for part in dropped:
                    log.info(
                        "history partition dropped",
                        extra={"partition": part.name, "before": part.upper.isoformat()},
                    )
                    result.dropped.append(part.name)
            retention = timedelta(seconds=self.history_retention)
            result.watermarks = await self.store.run(drop_stale_watermarks, retention)
            if result.watermarks:
                log.info("stale watermarks dropped", extra={"watermarks": result.watermarks})
            # After the watermarks: their samples go with them (and any older than the retention).
            samples = await self.store.run(expire_samples, retention)
            if samples:
                log.info("watermark samples dropped", extra={"samples": samples})
        if self.offsets_retention > 0:
            idle_for = timedelta(seconds=self.offsets_retention)
            expired = await self.store.expire_groups(idle_for, limit=EXPIRE_PER_ROUND, execute=True, actor=ACTOR)
            result.expired = [g.group_id for g in expired]
        result.verdicts = await self._keep_verdicts()
        return result

    async def _keep_verdicts(self) -> list[str]:
        """Evaluates the large groups' verdicts due (at most :data:`~.kept_verdicts.ROUND_PARTITIONS` partitions) and keeps them.

        Each evaluation is read-only statements on the hot pool, a chunk each, pausing between
        slices (the loop serves the scrapes meanwhile); each kept verdict its own short transaction.
        """
        rules = self.store.status_rules
        dropped = await self.store.run(kept_verdicts.drop_unused, rules.window)
        if dropped:
            log.info("kept verdicts dropped", extra={"verdicts": dropped})
        kept: list[str] = []
        budget = kept_verdicts.ROUND_PARTITIONS
        for group_id, reset_count in await self.store.run(kept_verdicts.due, rules.window):
            if budget <= 0:
                break
            try:
                evaluated = await self.store.run_hot(
                    "keep_verdict", partial(kept_verdicts.evaluate_steps, group_id, rules), read_only=True
                )
            except OffsetStoreError as error:
                # One group that cannot be evaluated (its chunk past the statement timeout) must
                # not hold back the others, which come after it in every round.
                log.warning("group verdict not kept", extra={"group_id": group_id, "error": type(error).__name__})
                budget -= kept_verdicts.LARGE_GROUP
                continue
            budget -= evaluated.partitions
            if evaluated.partitions > kept_verdicts.LARGE_GROUP:
                await self.store.run(kept_verdicts.keep, evaluated, reset_count)
                kept.append(group_id)
        return kept

    async def _observe_oldest(self) -> None:
        if self.metrics is None:
            return
        try:
            oldest = await self.store.run(oldest_history_time)
        except Exception:
            log.warning("cannot read the oldest history time", exc_info=True)
            return
        self.metrics.oldest_history = oldest


def _with_short_lock_wait(conn: Connection, operation: Callable[[Connection], list[T]]) -> list[T]:
    """``operation(conn)``, its locks waited for no longer than :data:`LOCK_TIMEOUT_MS` (a busy table waits for the next round)."""
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
    return operation(conn)
