"""Does a read cost what it returns on a big store, with stale statistics and fresh? (issue 55)

Two databases on one PostgreSQL, each migrated and served by its own ``offsetstore serve``: a
small store (31 groups of 16 partitions, watermarks, samples, a few history rows each), and
the same beside 100 groups of 10,000 partitions (1M offsets, ``--history`` rows a partition:
10 by default, 10M history rows), bulk-loaded with set-based SQL while autovacuum is held off
for its tables: the planner still has the small store's statistics, as right after an import
or a new large consumer. The probes (sequential calls, each its p50 over ``--calls``) run
against both servers alternately, call by call, so both see the same machine; then the big
store is ANALYZEd and they run again. Printed: each probe's p50 on the small store, and its
ratio on the big one, stale and analyzed; a 10,000-partition group's page of 100 beside a
16-partition group's whole description; failed calls; the load averages.

That first page gives the verdict a maintenance round kept for the group (storage/kept_verdicts.py).
The servers' own rounds are held off (``--maintenance-interval 1h``: a round evaluating the
other 99 big groups would load the machine mid-probe); before each phase the bench does what a
round does for ``big-001`` (evaluate it over every partition, keep the verdict) and prints how
long that took: the cost a round pays per 10,000-partition group, once, instead of every page. Timings are
printed, never asserted (the targets: each ratio <= 1.5, the page <= 2, no call failing).

Usage: ``python bench/scale.py [--calls 40] [--history 10] [--keep] [--baseline TREE]``.
``--baseline TREE`` serves the big store a second time with another source tree's code (its
``src`` first on the path, e.g. ``git archive main`` unpacked) and prints the 10,000-partition
pages on it too, beside its own 16-partition description: before and after in one run.
``OFFSETSTORE_BENCH_ADMIN_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
is where the databases ``bench_scale_small`` and ``bench_scale_big`` are made; they are
dropped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable

import psycopg
from _server import served

from offsetstore import storage
from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import OffsetCommit
from offsetstore.storage import kept_verdicts
from offsetstore.storage.engine import plain_engine
from offsetstore.storage.status import DEFAULT_RULES
from offsetstore.v1 import offset_store_pb2 as pb

ADMIN = os.environ.get("OFFSETSTORE_BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SMALL, BIG = "bench_scale_small", "bench_scale_big"
BASELINE = "baseline"  # the big store served by --baseline's code

_SMALL = """
INSERT INTO offsetstore.groups (group_id, generation)
    SELECT 'small-' || lpad(g::text, 3, '0'), 1 FROM generate_series(1, 30) g UNION ALL SELECT 'probe', 1;
INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", commit_time)
    SELECT 'small-' || lpad(g::text, 3, '0'), 'st', p, 1000, now() FROM generate_series(1, 30) g, generate_series(0, 15) p
    UNION ALL SELECT 'probe', 'pt', p, 1000, now() FROM generate_series(0, 15) p;
INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset, updated_at)
    SELECT t, p, 0, 1100, now() FROM unnest(array['st', 'pt']) t, generate_series(0, 15) p;
INSERT INTO offsetstore.watermark_samples (topic, partition, slot, sampled_at, log_end_offset)
    SELECT t, p, s, now() - s * interval '10 s', 1100 - s
    FROM unnest(array['st', 'pt']) t, generate_series(0, 15) p, generate_series(0, 29) s;
INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset, kind, generation, change_time)
    SELECT o.group_id, o.topic, o.partition, 990 - 10 * k, 1000 - 10 * k, 1, 1, now() - k * interval '5 s'
    FROM offsetstore.offsets o, generate_series(0, 9) k;
"""

# 100 groups x 10 shared topics x 1,000 partitions; history rows a partition: {history}.
_BIG = """
INSERT INTO offsetstore.groups (group_id, generation) SELECT 'big-' || lpad(g::text, 3, '0'), 1 FROM generate_series(1, 100) g;
INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", commit_time)
    SELECT 'big-' || lpad(g::text, 3, '0'), 'bt-' || t, p, 5000, now()
    FROM generate_series(1, 100) g, generate_series(0, 9) t, generate_series(0, 999) p;
INSERT INTO offsetstore.watermarks (topic, partition, log_start_offset, log_end_offset, updated_at)
    SELECT 'bt-' || t, p, 0, 6000, now() FROM generate_series(0, 9) t, generate_series(0, 999) p;
INSERT INTO offsetstore.watermark_samples (topic, partition, slot, sampled_at, log_end_offset)
    SELECT 'bt-' || t, p, s, now() - s * interval '10 s', 6000 - s
    FROM generate_series(0, 9) t, generate_series(0, 999) p, generate_series(0, 29) s;
INSERT INTO offsetstore.offset_history (group_id, topic, partition, previous_offset, new_offset, kind, generation, change_time)
    SELECT 'big-' || lpad(g::text, 3, '0'), 'bt-' || t, p, 4990 - 10 * k, 5000 - 10 * k, 1, 1, now() - k * interval '5 s'
    FROM generate_series(1, 100) g, generate_series(1, {history}) k, generate_series(0, 9) t, generate_series(0, 999) p;
"""


def _url(database: str) -> str:
    base, _, _ = ADMIN.rpartition("/")
    return f"{base}/{database}"


def _sql(database: str, sql: str) -> None:
    with psycopg.connect(_url(database), autocommit=True) as conn:
        conn.execute(sql.encode())  # a script of several statements, no parameters


def keep_verdict(database: str, group_id: str) -> float:
    """What a maintenance round does for ``group_id``: evaluate its verdict over every partition and keep it; seconds."""
    engine = plain_engine("postgresql+psycopg://" + _url(database).split("://")[1])
    try:
        started = time.perf_counter()
        with engine.begin() as conn:
            evaluated = storage.drive_steps(conn, kept_verdicts.evaluate_steps(group_id, DEFAULT_RULES))
            reset_count = conn.exec_driver_sql(
                "SELECT reset_count FROM offsetstore.groups WHERE group_id = %(g)s", {"g": group_id}
            ).scalar_one()
            kept_verdicts.keep(conn, evaluated, reset_count)
        return time.perf_counter() - started
    finally:
        engine.dispose()


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def probes(client: OffsetStoreClient) -> dict[str, Callable[[], object]]:
    """The reads and the commit the issue names, each one call."""
    stub = client._stub  # a page of 100 is one call: the client's describe_group merges every page
    n = iter(range(10**9))
    return {
        "CommitOffsets, 1 partition": lambda: client.commit_offsets("probe", [OffsetCommit("pt", 3, 2000 + next(n))]),
        "FetchOffsets, 16 partitions": lambda: client.fetch_offsets("probe"),
        "DescribeGroup, 16 partitions": lambda: client.describe_group("probe"),
        "ListGroups, page of 30 small groups": lambda: client.list_groups("small-", page_size=50),
        "ListTopics of the 16-partition group": lambda: client.list_topics("probe", page_size=50),
        "ListOffsetHistory, page of 50": lambda: client.list_offset_history("probe", page_size=50),
        "DescribeGroup, page of 100 of 10,000": lambda: stub.DescribeGroup(
            pb.DescribeGroupRequest(group_id="big-001", page_size=100), timeout=30
        ),
        "DescribeGroup, later page of 100 of 10,000": lambda: stub.DescribeGroup(
            pb.DescribeGroupRequest(group_id="big-001", page_size=100, page_token=_later_token(stub)), timeout=30
        ),
    }


_TOKENS: dict[int, str] = {}


def _later_token(stub: object) -> str:
    # The token of the first page, asked once per server (its own call is not timed twice).
    key = id(stub)
    if key not in _TOKENS:
        first = stub.DescribeGroup(pb.DescribeGroupRequest(group_id="big-001", page_size=100), timeout=60)  # type: ignore[attr-defined]
        _TOKENS[key] = first.next_page_token
    return _TOKENS[key]


def measure(clients: dict[str, OffsetStoreClient], calls: int) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Each probe's p50 (ms) per database, calls alternating between them; failed calls per probe."""
    p50: dict[str, dict[str, float]] = {}
    failed: dict[str, int] = {}
    ready = {database: probes(client) for database, client in clients.items()}
    for name in ready[SMALL]:
        times: dict[str, list[float]] = {database: [] for database in clients}
        for database in clients:
            if database == SMALL and "10,000" in name:
                continue
            with contextlib.suppress(Exception):  # warm: the first call compiles what later ones reuse
                ready[database][name]()
        # The first page of a 10,000-partition group read its verdict over every partition before it was kept: fewer calls.
        for _ in range(max(5, calls // 4) if "10,000" in name else calls):
            for database in clients:
                if database == SMALL and "10,000" in name:
                    continue
                started = time.perf_counter()
                try:
                    ready[database][name]()
                except Exception as e:  # a failed call is counted and named, never hidden
                    failed[name] = failed.get(name, 0) + 1
                    print(f"  {name} on {database}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                    continue
                times[database].append((time.perf_counter() - started) * 1000)
        p50[name] = {database: statistics.median(t) for database, t in times.items() if t}
    return p50, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40, help="timed calls per probe and store")
    parser.add_argument("--history", type=int, default=10, help="history rows per partition of the big groups")
    parser.add_argument("--keep", action="store_true", help="leave the two databases in place")
    parser.add_argument("--baseline", help="a source tree whose code serves the big store too (before/after)")
    args = parser.parse_args()

    for database in (SMALL, BIG):
        _sql("postgres", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        _sql("postgres", f"CREATE DATABASE {database}")
    try:
        with contextlib.ExitStack() as stack:
            clients: dict[str, OffsetStoreClient] = {}
            for database in (SMALL, BIG):
                os.environ["OFFSETSTORE_BENCH_DATABASE_URL"] = "postgresql+psycopg://" + _url(database).split("://")[1]
                server = stack.enter_context(served(extra_args=["--processes", "1", "--maintenance-interval", "1h"]))
                clients[database] = stack.enter_context(OffsetStoreClient(server.address, timeout=30))
                _sql(database, _SMALL)
                _sql(database, "ANALYZE")
            if args.baseline:
                env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(args.baseline), "src")}
                server = stack.enter_context(
                    served(extra_args=["--processes", "1", "--maintenance-interval", "1h"], env=env)
                )
                clients[BASELINE] = stack.enter_context(OffsetStoreClient(server.address, timeout=30))
            with psycopg.connect(_url(BIG), autocommit=True) as conn:
                tables = conn.execute(
                    "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = 'offsetstore' AND c.relkind = 'r'"
                ).fetchall()
                for (table,) in tables:
                    conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")  # type: ignore[arg-type]
            started = time.perf_counter()
            _sql(BIG, _BIG.format(history=int(args.history)))
            with psycopg.connect(_url(BIG), autocommit=True) as conn:
                offsets = conn.execute("SELECT count(*) FROM offsetstore.offsets").fetchone()
                history = conn.execute("SELECT count(*) FROM offsetstore.offset_history").fetchone()
            assert offsets is not None and history is not None
            print(
                f"big store: {offsets[0]:,} offsets, {history[0]:,} history rows, loaded in"
                f" {time.perf_counter() - started:.0f} s with the small store's statistics; load {_load()}",
                flush=True,
            )
            results = {}
            for phase in ("stale", "analyzed"):
                if phase == "analyzed":
                    _sql(BIG, "ANALYZE")
                took = keep_verdict(BIG, "big-001")
                print(f"{phase}: big-001's verdict evaluated and kept in {took:.2f} s, load {_load()}", flush=True)
                before = _load()
                results[phase] = measure(clients, args.calls)
                print(f"{phase}: measured, load {before} -> {_load()}", flush=True)
            _print(results)
            if args.baseline:
                _print_baseline(results)
    finally:
        if not args.keep:
            for database in (SMALL, BIG):
                _sql("postgres", f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _print(results: dict[str, tuple[dict[str, dict[str, float]], dict[str, int]]]) -> None:
    stale, stale_failed = results["stale"]
    fresh, fresh_failed = results["analyzed"]
    print()
    print("| probe | small, p50 | big stale | big analyzed |")
    print("|---|---|---|---|")
    whole = {phase: r[0]["DescribeGroup, 16 partitions"] for phase, r in results.items()}
    for name in stale:
        if "10,000" in name:
            # Beside the 16-partition group's whole description on the same store and phase.
            base = {phase: whole[phase].get(BIG) for phase in results}
            small = f"(16-partition description: {whole['stale'][SMALL]:.1f} ms)"
        else:
            base = {phase: results[phase][0][name].get(SMALL) for phase in results}
            small = f"{stale[name].get(SMALL, float('nan')):.1f} ms"
        cells = []
        for phase, (p50, failed) in results.items():
            value, by = p50[name].get(BIG), base[phase]
            # A call that failed every time has no p50: its row says so, and so does a ratio to it.
            cell = (
                "failed"
                if value is None
                else f"{value:.1f} ms"
                if by is None
                else f"x{value / by:.2f} ({value:.1f} ms)"
            )
            if failed.get(name):
                cell += f", {failed[name]} failed"
            cells.append(cell)
        print(f"| {name} | {small} | {cells[0]} | {cells[1]} |")
    print(f"\nfailed calls: stale {sum(stale_failed.values())}, analyzed {sum(fresh_failed.values())}; load {_load()}")


def _print_baseline(results: dict[str, tuple[dict[str, dict[str, float]], dict[str, int]]]) -> None:
    print("\n| the big store's pages of 100, each ÷ its server's 16-partition description | stale | analyzed |")
    print("|---|---|---|")
    for name in results["stale"][0]:
        if "10,000" not in name:
            continue
        for database, label in ((BASELINE, "baseline code"), (BIG, "this code")):
            cells = []
            for p50, _failed in results.values():
                value, by = p50[name].get(database), p50["DescribeGroup, 16 partitions"].get(database)
                cells.append("failed" if value is None or by is None else f"x{value / by:.2f} ({value:.1f} ms)")
            print(f"| {name}, {label} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
