"""The per-group series, read from the database at scrape time, capped and shared fairly between tenants."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from offsetstore import storage
from offsetstore.core.types import GroupStatus
from offsetstore.runtime.store import Store
from offsetstore.storage.group_metrics import GroupScrape, group_metrics, group_sums
from offsetstore.storage.status import Verdict, judge

__all__ = ["SERIES_LIMIT", "GroupCollector"]

log = logging.getLogger(__name__)

#: Per-group series a scrape holds at most, by default: rendered in well under a second.
SERIES_LIMIT = 20_000


class GroupCollector(Collector):
    """Per-group series and ``offsetstore_database_up``, read in two statements at scrape time.

    Bounded twice: at most ``group_limit`` groups are shown (taken round-robin over tenants),
    and the per-group series stay within ``series_limit`` (0: no limit). Every shown group has
    its partition count, lag sum, max lag, last commit age, partitions past the log end, lag in seconds
    and status verdict (while its partitions are detailed: a verdict is over them all; beyond, the
    verdict the maintenance kept for a large group, :mod:`~offsetstore.storage.kept_verdicts`);
    its partitions have series of their own only while the group fits its tenant's fair share
    of the budget (:func:`share_series`).

    The sums of a group beyond its share cost a join over all its partitions (0.5 s for 900,000
    on a loaded machine). With ``sums_seconds`` > 0 a scrape does not wait for them: it shows
    the latest ones, and a thread reads them again when they are older than that (the lag sum
    and max lag of such a group are up to ``sums_seconds`` old, plus the query's time). At 0
    every scrape reads them itself.

    One scrape queries at a time, and a scrape within ``cache_seconds`` of the last query
    reuses its rows: however many scrapers (or attackers) connect at once, the database
    sees at most one metrics query per ``cache_seconds``.
    """

    def __init__(
        self,
        store: Store,
        group_limit: int,
        *,
        cache_seconds: float = 0.0,
        tenant_prefixes: Sequence[str] = (),
        series_limit: int = SERIES_LIMIT,
        sums_seconds: float = 0.0,
    ) -> None:
        if group_limit < 0:
            raise ValueError("group_limit must be >= 0")
        if series_limit < 0:
            raise ValueError("series_limit must be >= 0 (0: no limit)")
        self.store = store
        self.group_limit = group_limit
        self.series_limit = series_limit
        self.tenant_prefixes = tuple(tenant_prefixes)
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, GroupScrape | BaseException] | None = None
        self.sums_seconds = sums_seconds
        self._sums: dict[str, Any] = {}  # group -> its row of sums, refreshed in the background
        self._sums_at = -float("inf")
        self._refreshing: threading.Thread | None = None

    def _background_sums(self, scrape: GroupScrape) -> dict[str, Any]:
        """The latest sums of the groups beyond their share; starts a refresh when they are old, never waits for it."""
        wanted = [r.group_id for r in scrape.shown if r.group_id not in scrape.detailed]
        with self._lock:
            stale = time.monotonic() - self._sums_at >= self.sums_seconds or not set(wanted) <= self._sums.keys()
            if wanted and stale and (self._refreshing is None or not self._refreshing.is_alive()):
                self._refreshing = threading.Thread(
                    target=self._refresh_sums, args=(wanted,), name="offsetstore-group-sums", daemon=True
                )
                self._refreshing.start()
            return self._sums

    def _refresh_sums(self, group_ids: list[str]) -> None:
        try:
            rows = self.store.run(group_sums, group_ids, self.store.status_rules)
        except Exception as error:
            log.warning("group sums query failed", extra={"error": type(error).__name__})
            return
        with self._lock:
            self._sums = {r.group_id: r for r in rows}
            self._sums_at = time.monotonic()

    def _rows(self) -> GroupScrape:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                try:
                    result: GroupScrape | BaseException = self.store.run(
                        group_metrics,
                        self.group_limit,
                        self.tenant_prefixes,
                        self.series_limit,
                        self.sums_seconds <= 0,
                        self.store.status_rules,
                    )
                except Exception as error:
                    result = error
                self._cached = (time.monotonic(), result)
            found = self._cached[1]
        if isinstance(found, BaseException):
            raise found
        return found

    def _families(self) -> dict[str, GaugeMetricFamily]:
        group = ("group",)
        return {
            "up": GaugeMetricFamily(
                "offsetstore_database_up", "1 when the database answered this scrape's query, else 0."
            ),
            "groups": GaugeMetricFamily("offsetstore_groups", "Groups in the store."),
            "omitted": GaugeMetricFamily(
                "offsetstore_groups_omitted",
                "Groups with offsets but without per-group series, beyond the group metrics limit "
                "(taken round-robin over tenants).",
            ),
            "summarized": GaugeMetricFamily(
                "offsetstore_groups_summarized",
                "Groups shown by their sums only: their partitions did not fit their tenant's share "
                "of the metrics series limit.",
            ),
            "offset": GaugeMetricFamily(
                "offsetstore_group_offset",
                "Committed offset (the next to consume; -2/-1 are the earliest/latest sentinels).",
                labels=("group", "topic", "partition"),
            ),
            "lag": GaugeMetricFamily(
                "offsetstore_group_lag",
                "Log end offset minus committed offset, where a log end has been reported.",
                labels=("group", "topic", "partition"),
            ),
            "past_end": GaugeMetricFamily(
                "offsetstore_group_offset_past_log_end",
                "1 where the committed offset is past the reported log end: an anomaly (lag is not 0, "
                "nothing is consumed until the log reaches it); alert on it.",
                labels=("group", "topic", "partition"),
            ),
            "partitions": GaugeMetricFamily(
                "offsetstore_group_partitions", "Partitions the group has an offset for.", labels=group
            ),
            "lag_sum": GaugeMetricFamily(
                "offsetstore_group_lag_sum",
                "Sum of the group's partition lags, over partitions with a known log end.",
                labels=group,
            ),
            "max_lag": GaugeMetricFamily(
                "offsetstore_group_max_lag",
                "Largest partition lag of the group, over partitions with a known log end.",
                labels=group,
            ),
            "past_ends": GaugeMetricFamily(
                "offsetstore_group_partitions_past_log_end",
                "Partitions of the group whose committed offset is past the reported log end (see "
                "offsetstore_group_offset_past_log_end).",
                labels=group,
            ),
            "lag_seconds": GaugeMetricFamily(
                "offsetstore_group_lag_seconds",
                "Largest partition lag of the group in seconds: how long ago the log end passed the "
                "committed offset, interpolated between reported log ends (0: caught up). Absent "
                "while no partition's is known.",
                labels=group,
            ),
            "status": GaugeMetricFamily(
                "offsetstore_group_status",
                "1 for the group's status verdict (its worst partition's: OK, IDLE, LAGGING, STALLED, STOPPED, "
                "LOST, PAST_END or UNCONFIRMED; docs/operations.md), one series per group. For a group shown by "
                "its sums only, the verdict the maintenance kept for it (absent until one is kept).",
                labels=("group", "status"),
            ),
            "age": GaugeMetricFamily(
                "offsetstore_group_last_commit_age_seconds",
                "Seconds since the group's most recent offset change.",
                labels=group,
            ),
            "observed": GaugeMetricFamily(
                "offsetstore_group_observed",
                "1 for an observed group (its pipeline keeps its positions; offsetstore records them, "
                "ObserveOffsets), with where they are read in source; absent for a group committed here. "
                "Join it on group to tell observed groups' series apart.",
                labels=("group", "source"),
            ),
            "observed_lost": GaugeMetricFamily(
                "offsetstore_group_observed_lost_partitions",
                "Partitions of an observed group whose position its source no longer has (a Kafka group's offsets "
                "expired or deleted; their last observed positions are kept): alert on it above 0.",
                labels=group,
            ),
        }

    def describe(self) -> Iterable[Metric]:
        # Names only, so registering the collector never queries the database.
        return list(self._families().values())

    def collect(self) -> Iterable[Metric]:
        f = self._families()
        try:
            scrape = self._rows()
        except Exception as error:  # a scrape reports the failure, it never fails itself
            answered = _timed_out(error)
            log.warning(
                "group metrics query timed out; consider a lower group metrics limit"
                if answered
                else "group metrics query failed",
                extra={"error": type(getattr(error.__cause__, "orig", error)).__name__},
            )
            f["up"].add_metric([], 1 if answered else 0)
            return [f["up"]]
        f["up"].add_metric([], 1)
        f["groups"].add_metric([], scrape.groups)
        f["omitted"].add_metric([], max(0, scrape.with_offsets - len(scrape.shown)))
        f["summarized"].add_metric([], len(scrape.shown) - len(scrape.detailed))
        # lag sum, max lag (None: no log end known), partitions past the log end, max lag seconds
        sums: dict[str, list[Any]] = {r.group_id: [None, None, 0, None] for r in scrape.shown}
        rows: Iterable[Any] = scrape.partitions
        if self.sums_seconds > 0:
            latest = self._background_sums(scrape)
            rows = [*rows, *(latest[g] for g in sums if g not in scrape.detailed and g in latest)]
        verdicts: dict[str, list[tuple[str, int, Verdict]]] = {}
        kept: dict[str, GroupStatus] = {}
        for r in rows:
            found = sums[r.group_id]
            if r.topic is None:  # the sums of a group that did not fit its share
                found[:] = [r.lag_sum, r.lag if r.lag >= 0 else None, r.past_ends, r.lag_seconds]
                if r.kept_status is not None:  # its verdict, as the maintenance kept it (storage/kept_verdicts.py)
                    kept[r.group_id] = GroupStatus(r.kept_status)
                continue
            facts = storage.facts_of(r, r.lag_seconds if r.lag_seconds >= 0 else -1.0)
            verdicts.setdefault(r.group_id, []).append((r.topic, r.partition, judge(facts, self.store.status_rules)))
            if r.lag_seconds >= 0:
                found[3] = max(found[3] or 0.0, r.lag_seconds)
            labels = [r.group_id, r.topic, str(r.partition)]
            f["offset"].add_metric(labels, r.offset)
            if r.lag >= 0:
                f["lag"].add_metric(labels, r.lag)
                found[0] = (found[0] or 0) + r.lag
                found[1] = max(found[1] or 0, r.lag)
            if r.past_end:
                f["past_end"].add_metric(labels, 1)
                found[2] += 1
        for r in scrape.shown:
            lag_sum, max_lag, past_ends, lag_seconds = sums[r.group_id]
            f["partitions"].add_metric([r.group_id], r.partitions)
            if lag_sum is not None:
                f["lag_sum"].add_metric([r.group_id], int(lag_sum))
                f["max_lag"].add_metric([r.group_id], max_lag)
            f["past_ends"].add_metric([r.group_id], past_ends)
            if lag_seconds is not None:
                f["lag_seconds"].add_metric([r.group_id], lag_seconds)
            if r.group_id in verdicts:
                f["status"].add_metric([r.group_id, storage.group_verdict(verdicts[r.group_id]).status.name], 1)
            elif r.group_id in kept:
                f["status"].add_metric([r.group_id, kept[r.group_id].name], 1)
            f["age"].add_metric([r.group_id], max(0.0, float(r.age)))
            if r.observed_source is not None:
                f["observed"].add_metric([r.group_id, r.observed_source], 1)
                f["observed_lost"].add_metric([r.group_id], r.observed_lost)
        return list(f.values())


def _timed_out(error: BaseException | None) -> bool:
    """True when the database answered, but cancelled the query at its statement timeout."""
    while error is not None:  # a DBAPIError itself, or one wrapped in a StoreUnavailableError
        if isinstance(getattr(error, "orig", None), psycopg.errors.QueryCanceled):
            return True
        error = error.__cause__
    return False
