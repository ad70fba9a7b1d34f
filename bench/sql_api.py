"""The SQL API's cost: rows/s of a transaction of N inserts, plain and with begin_write + commit_offsets, same run.

Each round runs every variant once per batch size, in alternating order, so that a noisy
neighbour slows them alike. A transaction inserts N rows of a Kafka-shaped batch (4
partitions, consecutive offsets) into a table of its own with one INSERT ... SELECT
FROM unnest, then COMMITs:

- ``plain``: the INSERT alone (at-least-once: no offsets);
- ``sql api``: begin_write, the INSERT, commit_offsets with every row's offset + 1 (the
  simplest caller: the function keeps each partition's largest);
- ``sql api, max``: the same with one offset per partition, computed by the caller.

Printed: median rows/s of each and its ratio to ``plain`` of the same size (1.0 = free).
Reported, never asserted.

    python bench/sql_api.py [--sizes 100,1000,10000] [--rounds 5]

``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg

from offsetstore.runtime import migrate
from offsetstore.storage.engine import libpq_conninfo

PARTITIONS = 4


@contextlib.contextmanager
def database() -> Iterator[str]:
    if url := os.environ.get("OFFSETSTORE_BENCH_DATABASE_URL"):
        migrate.upgrade(url)
        yield url
        return
    from offsetstore.runtime.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="offsetstore-bench-sql-") as tmp, EmbeddedPostgres(f"{tmp}/pg") as pg:
        migrate.upgrade(pg.url)
        yield pg.url


def batch(start: int, n: int) -> tuple[list[str], list[int], list[int], list[str]]:
    """n records from offset ``start`` on, spread round-robin over the partitions."""
    partitions = [i % PARTITIONS for i in range(n)]
    offsets = [start + i // PARTITIONS for i in range(n)]
    return ["orders"] * n, partitions, offsets, [f"value-{o}" for o in offsets]


INSERT = (
    'INSERT INTO {table} (topic, "partition", "offset", value) '
    "SELECT * FROM unnest(%s::text[], %s::integer[], %s::bigint[], %s::text[])"
)


def variant(conn: psycopg.Connection, table: str, group: str, offsets_of: str | None) -> Callable[[int, int], None]:
    insert = INSERT.format(table=table)

    def run(start: int, n: int) -> None:
        topics, partitions, offsets, values = batch(start, n)
        with conn.transaction():
            if offsets_of is not None:
                conn.execute("SELECT * FROM offsetstore.begin_write(%s, 0)", [group]).fetchall()
            conn.execute(insert, [topics, partitions, offsets, values])
            if offsets_of == "every":
                conn.execute(
                    "SELECT * FROM offsetstore.commit_offsets(%s, 0, %s, %s, %s)",
                    [group, topics, partitions, [o + 1 for o in offsets]],
                ).fetchall()
            elif offsets_of == "max":
                top: dict[int, int] = {}
                for p, o in zip(partitions, offsets, strict=True):
                    top[p] = max(top.get(p, -1), o + 1)
                conn.execute(
                    "SELECT * FROM offsetstore.commit_offsets(%s, 0, %s, %s, %s)",
                    [group, ["orders"] * len(top), list(top), list(top.values())],
                ).fetchall()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,10000", help="rows per transaction")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows-per-round", type=int, default=50_000, help="rows each variant writes per round")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = {"plain": None, "sql api": "every", "sql api, max": "max"}
    with database() as url, psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        tag = uuid.uuid4().hex[:8]
        runs: dict[tuple[str, int], Callable[[int, int], None]] = {}
        for i, (name, offsets_of) in enumerate(names.items()):
            table = f"bench_sql_{tag}_{i}"
            conn.execute(f'CREATE TABLE {table} (topic text, "partition" integer, "offset" bigint, value text)')
            runs.update({(name, n): variant(conn, table, f"bench-{tag}-{i}-{n}", offsets_of) for n in sizes})
        found: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
        next_offset = dict.fromkeys(runs, 0)
        try:
            for r in range(args.rounds):
                for n in sizes:
                    order = list(names) if r % 2 == 0 else list(names)[::-1]
                    for name in order:
                        key = (name, n)
                        transactions = max(1, args.rows_per_round // n)
                        started = time.perf_counter()
                        for _ in range(transactions):
                            runs[key](next_offset[key], n)
                            next_offset[key] += n // PARTITIONS + 1
                        found[key].append(transactions * n / (time.perf_counter() - started))
        finally:
            for i in range(len(names)):
                conn.execute(f"DROP TABLE IF EXISTS bench_sql_{tag}_{i}")
        print(
            f"{args.rounds} rounds, {args.rows_per_round} rows per variant and size each round, {PARTITIONS} partitions"
        )
        for n in sizes:
            base = statistics.median(found[("plain", n)])
            for name in names:
                rate = statistics.median(found[(name, n)])
                print(f"N={n:6}  {name:14} {rate:10.0f} rows/s  ratio to plain {rate / base:.2f}")


if __name__ == "__main__":
    main()
