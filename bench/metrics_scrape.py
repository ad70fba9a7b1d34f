"""How long one ``/metrics`` scrape takes, and how big it is, over a store of many partitions.

    python bench/metrics_scrape.py --database-url postgresql://postgres@127.0.0.1/offsetstore_bench \
        --fill --partitions 1000000

The store holds one huge group (``huge-0``, most partitions: the shape of issue 22's attack)
and groups of 16 partitions for the rest, spread over 8 tenants; a watermark for every
partition of the huge group's topic. It renders the registry ``offsetstore serve`` builds
(cache off) a few times and prints the median time and the size of the text.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from prometheus_client import generate_latest

from offsetstore.runtime import migrate
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from offsetstore.storage.engine import SessionSettings


def fill(url: str, partitions: int) -> None:
    """``partitions`` offsets: 90% in one group, the rest 16 a group over 8 tenants, as set-based SQL."""
    huge = partitions * 9 // 10
    small = (partitions - huge) // 16
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("INSERT INTO offsetstore.groups (group_id) VALUES ('huge-0') ON CONFLICT DO NOTHING")
        conn.execute(
            'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset") '
            "SELECT 'huge-0', 'wide', p, 10 FROM generate_series(0, %s) p ON CONFLICT DO NOTHING",
            (huge - 1,),
        )
        conn.execute(
            "INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset) "
            "SELECT 'wide', p, 0, 25 FROM generate_series(0, %s) p ON CONFLICT DO NOTHING",
            (huge - 1,),
        )
        conn.execute(
            "INSERT INTO offsetstore.groups (group_id) "
            "SELECT 't' || (g %% 8) || '-g' || g FROM generate_series(1, %s) g ON CONFLICT DO NOTHING",
            (small,),
        )
        conn.execute(
            'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset") '
            "SELECT 't' || (g %% 8) || '-g' || g, 'bench', p, 1000 "
            "FROM generate_series(1, %s) g, generate_series(0, 15) p ON CONFLICT DO NOTHING",
            (small,),
        )
        for table in ("offsets", "groups", "watermarks"):
            conn.execute(f"VACUUM ANALYZE offsetstore.{table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--fill", action="store_true", help="migrate and fill the database first")
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument(
        "--sums-seconds", type=float, default=30.0, help="as offsetstore serve (0: every scrape reads the sums)"
    )
    args = parser.parse_args()
    url = migrate.normalize_url(args.database_url)
    if args.fill:
        migrate.upgrade(url)
        started = time.perf_counter()
        fill(url, args.partitions)
        print(f"filled {args.partitions} partitions in {time.perf_counter() - started:.1f}s")
    series = metrics.StoreSeries()  # as offsetstore serve: the store's own series are on the page too
    config = StoreConfig(url, SessionSettings(statement_timeout_ms=60_000), hot_pool_size=2, observer=series.observer)
    store = Store.open(config)
    try:
        registry = metrics.build_registry(store, series=series, sums_seconds=args.sums_seconds)
        seconds, size = [], 0
        for _ in range(args.scrapes):
            started = time.perf_counter()
            size = len(generate_latest(registry))
            seconds.append(time.perf_counter() - started)
        series = sum(len(f.samples) for f in registry.collect())
        print(
            f"scrape: median {statistics.median(seconds):.3f}s (min {min(seconds):.3f}s, max {max(seconds):.3f}s), "
            f"{size / 1e6:.2f} MB, {series} series"
        )
    finally:
        store.dispose()


if __name__ == "__main__":
    main()
