"""``offsetstore_database_synchronous_*``: what an acknowledged commit survives, read from the database at scrape time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from offsetstore.runtime.store import Store
from offsetstore.storage.replication import Replication, replication_of


class ReplicationCollector(Collector):
    """The primary's synchronous replication, read at most once per ``cache_seconds`` however often it is scraped.

    After a failover the store's connections reach the new primary, and so does this
    read: the series follow the primary that commits are acknowledged by.
    """

    def __init__(self, store: Store, *, cache_seconds: float = 0.0) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, Replication | None] | None = None

    def describe(self) -> Iterable[Metric]:
        return self._families(None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] >= self.cache_seconds:
                try:
                    found: Replication | None = self.store.run(replication_of)
                except Exception:
                    found = None  # offsetstore_database_up says the database did not answer
                self._cached = (time.monotonic(), found)
            replication = self._cached[1]
        return self._families(replication)

    @staticmethod
    def _families(replication: Replication | None) -> list[Metric]:
        configured = GaugeMetricFamily(
            "offsetstore_database_synchronous_replication",
            "1 when the primary's commits wait for a synchronous standby (synchronous_standby_names set), else 0.",
        )
        standbys = GaugeMetricFamily(
            "offsetstore_database_synchronous_standbys",
            "Standbys connected to the primary in sync or quorum state; -1 where the role may not read "
            "pg_stat_replication.",
        )
        if replication is not None:
            configured.add_metric([], 1.0 if replication.synchronous else 0.0)
            standbys.add_metric([], float(replication.synchronous_standbys))
        return [configured, standbys]
