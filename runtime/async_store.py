"""The store: one transaction per operation, database faults made typed, group commit; on asyncio.

:class:`AsyncStore` is the one runtime store. The server awaits it; callers in threads (the
maintenance, the metrics' scrapes, tests, tools) reach it through its sync face,
:class:`~offsetstore.runtime.store.Store`, which runs these very coroutines on the store's
event loop. Where the operations run (the pools, the health probe, the retry rule, the
timing) is its base, :class:`~offsetstore.runtime.database.Database`; here are the
operations and the batchers that serve the hot ones.

Group commit (:class:`AsyncWriteBatcher`) and coalesced reads (:mod:`._read_batch`) are a
few asyncio tasks each: a task takes whatever is queued when it is free, so the next batch
gathers while one is in the database (no timer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from offsetstore import storage
from offsetstore.core.types import (
    CommittedOffset,
    ExpiredGroup,
    FetchResult,
    GroupDescription,
    GroupSummary,
    OffsetChange,
    OffsetCommit,
    Page,
    RecordFingerprint,
    ResetRequest,
    ResetResult,
    TopicPartition,
    Watermark,
)
from offsetstore.runtime._read_batch import FETCH, ReadBatcher, describe_kinds
from offsetstore.runtime._write_batcher import AsyncWriteBatcher
from offsetstore.runtime.config import Carry, StoreConfig, StoreObserver
from offsetstore.runtime.database import Database
from offsetstore.storage.retention import expiry

__all__ = ["AsyncStore", "AsyncWriteBatcher", "Carry", "StoreConfig", "StoreObserver"]

R = TypeVar("R")


class AsyncStore(Database):
    """Runs each storage operation in its own transaction on ``config``'s database, classifying failures.

    Made from plain data (:class:`~offsetstore.runtime.config.StoreConfig`) and opened in the
    event loop that will use it, as psycopg_pool's pools are: ``async with AsyncStore(config)
    as store:``, or :meth:`open` and :meth:`close`. The connections are its
    :class:`~offsetstore.runtime.database.Database`'s. ``write_flushers`` tasks write the
    batches of commits and joins (:class:`AsyncWriteBatcher`), each holding one hot connection
    while it writes; ``read_flushers`` tasks coalesce concurrent fetches and descriptions
    (:mod:`._read_batch`).
    """

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        #: The most one FetchOffsets or DescribeGroup answer may hold; larger ones come in pages.
        self.max_response_bytes = config.max_response_bytes
        self._key: bytes | None = None  # the page-token key, read at first use
        self.status_rules = config.status_rules
        self.write_flushers = config.write_flushers
        self.writes = AsyncWriteBatcher(
            self,
            flushers=config.write_flushers,
            carry=config.carry,
            observe=lambda calls: self._batched("write", calls),
        )
        kinds = (FETCH, *describe_kinds(config.status_rules.window))  # the first statements concurrent reads share
        statement_ms = self.settings.statement_timeout_ms
        self.reads = ReadBatcher(
            self._read_rows,
            self.timeout_ms,
            statement_ms,
            kinds=kinds,
            flushers=config.read_flushers,
            observe=lambda calls: self._batched("read", calls),
        )

    async def __aenter__(self) -> AsyncStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _batched(self, kind: str, calls: int) -> None:
        hook = self.observer.batch
        if hook is not None:
            hook(kind, calls)

    async def close(self) -> None:
        """Writes what is queued, then closes every connection."""
        await self.writes.stop()
        await self.reads.stop()
        await super().close()

    async def _read(self, name: str, make: Callable[[], storage.HotSteps[R]]) -> R:
        """The read ``make()`` of the hot path; its first statement rides a batch where it may (:mod:`._read_batch`)."""
        return await self._timed(name, self.reads.run(make, lambda once: self._hot(name, once, read_only=True)))

    async def token_key(self) -> bytes:
        """The store's page-token key (read once)."""
        if self._key is None:
            self._key = await self.read(storage.token_key)
        return self._key

    # --- the operations -----------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        commits: Sequence[OffsetCommit],
        *,
        generation: int = 0,
        actor: str = "",
        fingerprints: Sequence[tuple[TopicPartition, RecordFingerprint]] = (),
    ) -> list[CommittedOffset]:
        """Commits ``commits`` (and ``fingerprints``, in the same transaction) through group commit."""
        if not commits:  # nothing to write: only the generation is checked
            return await self.read(
                storage.commit_offsets, group_id, commits, generation=generation, actor=actor, fingerprints=fingerprints
            )
        request = storage.CommitRequest(group_id, commits, generation, actor, fingerprints)
        outcome = await self._timed("commit_offsets", self._write(request))
        assert isinstance(outcome, list)
        return outcome

    async def join_group(
        self, group_id: str, member_id: str = "", member_host: str = "", *, kafka_cluster_id: str = ""
    ) -> int:
        """A new generation; with ``kafka_cluster_id``, the group bound to that cluster (or ClusterMismatchError).

        A binding join runs in a transaction of its own, not in a batch: a refused one must roll its
        generation back, which a batch shared with other callers cannot do for one request. Joins
        are once per consumer run; the commits stay batched.
        """
        if kafka_cluster_id:
            return await self.run(
                storage.join_group, group_id, member_id, member_host, kafka_cluster_id=kafka_cluster_id
            )
        outcome = await self._timed("join_group", self._write(storage.JoinRequest(group_id, member_id, member_host)))
        assert isinstance(outcome, int)
        return outcome

    async def _write(self, request: storage.WriteRequest) -> storage.WriteOutcome:
        storage.check_write(request)
        return await self.writes.submit(request)

    async def fetch_offsets(
        self, group_id: str, topics: storage.SelectionArg = None, *, page_size: int = 0, page_token: str = ""
    ) -> FetchResult:
        page = storage.PageRequest(page_size, page_token, self.max_response_bytes, await self.token_key())
        return await self._read("fetch_offsets", partial(storage.fetch_offsets_steps, group_id, topics, page))

    async def describe_group(
        self, group_id: str, *, page_size: int = 0, page_token: str = "", lag_history: bool = False
    ) -> GroupDescription:
        page = storage.PageRequest(page_size, page_token, self.max_response_bytes, await self.token_key())
        make = partial(storage.describe_group_steps, group_id, page, self.status_rules, lag_history)
        return await self._read("describe_group", make)

    async def reset_offsets(self, request: ResetRequest, *, actor: str = "") -> ResetResult:
        return await self.run(storage.reset_offsets, request, actor=actor)

    async def delete_offsets(
        self, group_id: str, topics: storage.SelectionArg = None, *, all_topics: bool = False, actor: str = ""
    ) -> list[TopicPartition]:
        return await self.run(storage.delete_offsets, group_id, topics, all_topics=all_topics, actor=actor)

    async def list_groups(self, prefix: str = "", *, page_size: int = 0, page_token: str = "") -> Page[GroupSummary]:
        return await self.run(storage.list_groups, prefix, page_size=page_size, page_token=page_token)

    async def list_offset_history(
        self,
        group_id: str,
        topics: storage.SelectionArg = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[OffsetChange]:
        return await self.run(
            storage.list_offset_history,
            group_id,
            topics,
            since=since,
            until=until,
            page_size=page_size,
            page_token=page_token,
        )

    async def observe_offsets(
        self,
        group_id: str,
        positions: Sequence[OffsetCommit],
        *,
        source: str,
        actor: str = "",
        lost: Sequence[TopicPartition] = (),
    ) -> int:
        return await self.run(storage.observe_offsets, group_id, positions, source=source, actor=actor, lost=lost)

    async def report_watermarks(self, watermarks: Sequence[Watermark]) -> None:
        await self.run_hot("report_watermarks", lambda: storage.report_watermarks_steps(watermarks))

    async def expire_groups(
        self, idle_for: timedelta, *, prefix: str = "", limit: int = 0, execute: bool = False, actor: str = ""
    ) -> list[ExpiredGroup]:
        """Groups idle for ``idle_for``; with ``execute``, expires them, each in a transaction of its own.

        Returns the groups that expired (or would): one that became active meanwhile is left out.
        """
        candidates = await self.run(expiry.idle_groups, idle_for, prefix=prefix, limit=limit)
        if not execute:
            return candidates
        expired = []
        for candidate in candidates:
            found = await self.run(expiry.expire_group, candidate.group_id, idle_for, actor=actor)
            if found is not None:
                expired.append(found)
        hook = self.observer.expired
        if expired and hook is not None:
            hook(len(expired))
        return expired
