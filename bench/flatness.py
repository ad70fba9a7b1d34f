"""Are the rates flat from an empty store to a big one? (issue 33: ≤ 15% apart, autovacuum quiet)

Two databases on one PostgreSQL, each migrated and served by its own ``offsetstore serve``:
one left empty, one filled straight with set-based SQL (:func:`rpc_throughput.fill`: 1M
offsets, 16 per group, and 10M offset-history rows over the last day or so, landing in the
history's day partitions). The loads (``commit1``, ``fetch16``, with ``echo`` for scale)
run against the two servers alternately, round after round, so both see the same machine;
each line says the load average. The fill ends with VACUUM ANALYZE, as a store in steady
state would have been vacuumed; autovacuum and autoanalyze runs are counted from
``pg_stat_user_tables`` over the measuring, per database, and any autovacuum worker seen in
``pg_stat_activity`` while a load runs is named. Timings are printed, never asserted.

Usage: ``python bench/flatness.py [--seconds 5] [--rounds 2] [--concurrency 64]
[--offsets 1000000] [--history 10000000] [--keep]``. ``OFFSETSTORE_BENCH_ADMIN_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``) is where the databases
``bench_flat_empty`` and ``bench_flat_big`` are made; they are dropped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections.abc import Iterator

from _server import Served, served
from rpc_throughput import fill, measure

ADMIN = os.environ.get("OFFSETSTORE_BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASES = ("bench_flat_empty", "bench_flat_big")
KINDS = ("echo", "commit1", "fetch16")


def _url(database: str) -> str:
    base, _, _ = ADMIN.rpartition("/")
    return f"{base}/{database}"


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(sql)


def vacuum_counts(database: str) -> dict[str, tuple[int, int]]:
    """Each offsetstore table's (autovacuum runs, autoanalyze runs) so far."""
    import psycopg

    with psycopg.connect(_url(database), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables "
            "WHERE schemaname = 'offsetstore'"
        ).fetchall()
    return {name: (vacuums, analyzes) for name, vacuums, analyzes in rows}


@contextlib.contextmanager
def autovacuum_watch(database: str) -> Iterator[set[str]]:
    """The autovacuum workers seen on ``database`` while the block runs (polled every 0.2 s)."""
    import psycopg

    seen: set[str] = set()
    done = threading.Event()

    def poll() -> None:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            while not done.wait(0.2):
                for (query,) in conn.execute(
                    "SELECT query FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND datname = %s",
                    (database,),
                ):
                    seen.add(query)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()


def _changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> str:
    runs = []
    for table, (vacuums, analyzes) in sorted(after.items()):
        v0, a0 = before.get(table, (0, 0))
        if vacuums > v0:
            runs.append(f"autovacuum {table} ×{vacuums - v0}")
        if analyzes > a0:
            runs.append(f"autoanalyze {table} ×{analyzes - a0}")
    return ", ".join(runs) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--offsets", type=int, default=1_000_000)
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--keep", action="store_true", help="leave the two databases in place")
    args = parser.parse_args()

    for database in DATABASES:
        _admin(f"DROP DATABASE IF EXISTS {database}")
        _admin(f"CREATE DATABASE {database}")
    try:
        with contextlib.ExitStack() as stack:
            servers: dict[str, Served] = {}
            for database in DATABASES:
                os.environ["OFFSETSTORE_BENCH_DATABASE_URL"] = "postgresql+psycopg://" + _url(database).split("://")[1]
                servers[database] = stack.enter_context(served(extra_args=["--processes", "1"]))
            started = time.perf_counter()
            fill(servers["bench_flat_big"].database_url, args.offsets, args.history)
            print(
                f"filled bench_flat_big: {args.offsets:,} offsets, {args.history:,} history rows"
                f" in {time.perf_counter() - started:.0f} s (then VACUUM ANALYZE)",
                flush=True,
            )
            counts = {database: vacuum_counts(database) for database in DATABASES}
            rates: dict[tuple[str, str], list[float]] = {}
            cpus: dict[tuple[str, str], list[float]] = {}
            for n in range(1, args.rounds + 1):
                for database in DATABASES:
                    server = servers[database]
                    for kind in KINDS:
                        load = " ".join(open("/proc/loadavg").read().split()[:3])
                        with autovacuum_watch(database) as workers:
                            r = measure(
                                kind,
                                server.address,
                                args.concurrency,
                                args.seconds,
                                args.client_processes,
                                server.process.pid,
                            )
                        rates.setdefault((database, kind), []).append(r["per_s"])
                        cpus.setdefault((database, kind), []).append(r["cpu_us"])
                        print(
                            f"round {n} {database:16} {kind:8} {r['per_s']:7,.0f}/s  p99 {r['p99_ms']:6.1f} ms"
                            f"  server CPU {r['cpu_us']:6,.0f} µs/call  load {load}"
                            + (f"  autovacuum workers: {sorted(workers)}" if workers else ""),
                            flush=True,
                        )
            print(
                f"\nbig ÷ empty, {args.rounds} alternating rounds of {args.seconds:g} s at {args.concurrency} clients:"
            )
            for kind in KINDS:
                empty, big = rates[("bench_flat_empty", kind)], rates[("bench_flat_big", kind)]
                cpu_empty, cpu_big = cpus[("bench_flat_empty", kind)], cpus[("bench_flat_big", kind)]
                print(
                    f"- {kind}: rate {sum(big) / sum(empty):.2f} (per round: "
                    + ", ".join(f"{b / e:.2f}" for b, e in zip(big, empty, strict=True))
                    + f"); server CPU per call {sum(cpu_big) / sum(cpu_empty):.2f}"
                )
            for database in DATABASES:
                print(f"autovacuum during the loads, {database}: {_changed(counts[database], vacuum_counts(database))}")
    finally:
        if not args.keep:
            for database in DATABASES:
                _admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


if __name__ == "__main__":
    main()
