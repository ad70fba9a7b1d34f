"""The executors' write path on a cluster of processes (local-cluster) against local mode, same data, same run.

``local[2]`` runs two task threads in the driver's JVM; ``local-cluster[2,1,1024]`` two
executor JVMs of one core each, whose Python workers, staging COPYs and results cross
process boundaries as on a real cluster. Same cores, same PostgreSQL. Each (master,
repeat) runs in a child process of its own (one SparkContext per process), masters
interleaved so that a noisy neighbour slows both alike. In each child, after a warm-up,
one query per variant:

- ``plain executors``: every task COPYs its partition straight into the table (at-least-once);
- ``exactly-once executors``: :class:`ExactlyOnceSink` with ``write_path="executors"``.

Printed: the median rows/s of the whole query and of the time inside foreachBatch, per
master, and the ratio local-cluster / local[2]. Not a pass/fail test.

    python bench/spark_cluster.py [--database-url URL] [--batch-size 100000] [--batches 3] [--repeats 3]

Without a URL (or ``OFFSETSTORE_DATABASE_URL``) it starts an embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from statistics import median

import pyspark

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

MASTERS = ["local[2]", "local-cluster[2,1,1024]"]
VARIANTS = ["plain executors", "exactly-once executors"]


def child(args: argparse.Namespace) -> None:
    """One SparkSession on ``args.master``: a warm-up, then each variant once; prints one JSON line."""
    import sqlalchemy as sa
    from pyspark.sql import SparkSession

    sys.path.insert(0, str(Path(__file__).parent))
    import spark_sink
    from pyspark import cloudpickle

    # Its plain COPY runs in the workers, which cannot import a script of bench/: ship it by value.
    cloudpickle.register_pickle_by_value(spark_sink)
    run_once = spark_sink.run_once

    from offsetstore.spark_integration.testing import KafkaShapedSource

    work = Path(args.work)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("offsetstore-bench-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.local.dir", str(work / "local"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaShapedSource)
    engine = sa.create_engine(args.database_url)
    try:
        for variant in VARIANTS:
            run_once(spark, args.database_url, engine, variant, 2000, 2, work)
        out = {}
        for variant in VARIANTS:
            query_s, sink_s, rows = run_once(
                spark, args.database_url, engine, variant, args.batch_size, args.batches, work
            )
            out[variant] = {"rows": rows, "query_s": query_s, "sink_s": sink_s}
        print("RESULT " + json.dumps(out), flush=True)
    finally:
        engine.dispose()
        spark.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", default=os.environ.get("OFFSETSTORE_DATABASE_URL"))
    p.add_argument("--batch-size", type=int, default=100_000, help="records per micro-batch")
    p.add_argument("--batches", type=int, default=3, help="micro-batches per query")
    p.add_argument("--repeats", type=int, default=3, help="child runs per master; the median is printed")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--master", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return

    from offsetstore.runtime import migrate

    spark_work = Path(pyspark.__file__).parent / "work"
    before = set(spark_work.iterdir()) if spark_work.exists() else set()
    with ExitStack() as stack:
        work = Path(tempfile.mkdtemp(prefix="offsetstore-bench-cluster-"))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        url = args.database_url
        if not url:
            from offsetstore.runtime.embedded import EmbeddedPostgres

            url = stack.enter_context(EmbeddedPostgres(work / "pgdata")).url
        url = migrate.normalize_url(url)
        migrate.upgrade(url)

        results: dict[str, dict[str, list[tuple[float, float]]]] = {m: {v: [] for v in VARIANTS} for m in MASTERS}
        for repeat in range(args.repeats):
            for master in MASTERS:
                done = subprocess.run(
                    [sys.executable, __file__, "--child", "--master", master, "--work", str(work),
                     "--database-url", url, "--batch-size", str(args.batch_size), "--batches", str(args.batches)],
                    capture_output=True, text=True, check=False,
                )  # fmt: skip
                lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
                if done.returncode != 0 or not lines:
                    sys.exit(f"{master} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
                for variant, r in json.loads(lines[-1][len("RESULT ") :]).items():
                    results[master][variant].append((r["rows"] / r["query_s"], r["rows"] / r["sink_s"]))
                    print(
                        f"  repeat {repeat} {master:<24} {variant:<24} {r['rows'] / r['query_s']:>10,.0f} rows/s",
                        flush=True,
                    )

        rows = args.batch_size * args.batches
        print(f"\n{rows:,} records in {args.batches} batches, median of {args.repeats}")
        print(f"{'variant':<24}{'master':<26}{'rows/s query':>14}{'rows/s sink':>13}{'vs local[2]':>13}")
        for variant in VARIANTS:
            base = median(r[0] for r in results[MASTERS[0]][variant])
            for master in MASTERS:
                q = median(r[0] for r in results[master][variant])
                s = median(r[1] for r in results[master][variant])
                print(f"{variant:<24}{master:<26}{q:>14,.0f}{s:>13,.0f}{q / base:>13.2f}")
    if spark_work.exists():  # local-cluster's executor folders, left under SPARK_HOME/work
        for path in set(spark_work.iterdir()) - before:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
