"""What watching a Spark query costs it: the same Kafka query observed (``offsetstore.spark_integration.observe``) and not, same run.

One topic on a local Apache Kafka broker, read from its start by ``format("kafka")`` with
``availableNow`` and ``maxOffsetsPerTrigger`` (many small batches, so that a per-batch cost
shows), into a sink that costs little of its own (``noop``, or ``parquet``), with a checkpoint.
The variants are interleaved per repeat, so a noisy neighbour slows both alike:

- ``unobserved``: the query alone;
- ``observed``: the same query with the observer registered, recording into ``offsetstore serve``
  (a process of its own, over gRPC) after each batch.

A record per partition arrives every 50 ms during each run (``Trickle``), so the log ends move
and the observer makes both its calls every batch. Printed: each variant's median milliseconds
per batch (the query's wall time over its batch count, and Spark's own ``triggerExecution``),
their difference and ratio (observed / unobserved), and the observer's own turn per batch on
Spark's listener bus (ObserveOffsets and ReportWatermarks), in wall time and in CPU time of
the driver's Python, which runs apart from the query's thread. Not a pass/fail test.

    OFFSETSTORE_BENCH_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        python bench/spark_observer.py [--batches 20] [--partitions 4] [--repeats 4] [--sink noop]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from statistics import median

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
sys.path.insert(0, str(Path(__file__).parent))

from _server import served  # noqa: E402

from offsetstore.kafka_integration.local_kafka import KafkaCluster  # noqa: E402
from offsetstore.spark_integration import kafka_connector, observe  # noqa: E402

VARIANTS = ("unobserved", "observed")


def produce(cluster: KafkaCluster, topic: str, partitions: int, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(cluster.producer_config(**{"linger.ms": 50}))
    for n in range(records):
        producer.produce(topic, key=str(n).encode(), value=b"x" * 100, partition=n % partitions)
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


class Trickle:
    """A record per partition every 50 ms while a query runs: the log ends move, as on a live topic.

    With them, each batch sees new ``latestOffset`` s and the observer reports watermarks every
    batch (a full topic's log ends would move once); ``availableNow`` still stops where the log
    ended at start, so each run has the same batches.
    """

    def __init__(self, cluster: KafkaCluster, topic: str, partitions: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(cluster.producer_config())
        self.topic, self.partitions = topic, partitions
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.wait(0.05):
            for p in range(self.partitions):
                self.producer.produce(self.topic, value=b"x" * 100, partition=p)
            self.producer.poll(0)

    def __enter__(self) -> Trickle:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
        self.producer.flush(30)


def run_once(spark, address: str | None, bootstrap: str, topic: str, per_trigger: int, sink: str, work: Path):
    """One query over the whole topic: (wall ms per batch, median triggerExecution ms, observer turns or [])."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    observer, turns = None, []
    if address is not None:
        observer = observe(spark, f"bench-{name}", address, query_name=name)
        record = observer.on_progress

        def timed(progress) -> None:  # the bench's own seam: the observer's turn, wall and CPU
            wall, cpu = time.perf_counter(), time.thread_time()
            record(progress)
            turns.append((time.perf_counter() - wall, time.thread_time() - cpu, type(progress) is dict))

        observer.on_progress = timed  # type: ignore[method-assign]
    checkpoint = work / f"checkpoint-{name}"
    writer = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .writeStream.queryName(name)
        .format(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    if sink == "parquet":
        writer = writer.option("path", str(work / f"out-{name}"))
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    batches = len([n for n in os.listdir(checkpoint / "commits") if n.isdigit()])
    trigger = median(p["durationMs"]["triggerExecution"] for p in query.recentProgress)
    if observer is not None:
        deadline = time.monotonic() + 60
        while len(turns) < batches and time.monotonic() < deadline:
            time.sleep(0.05)  # the bus may still be on the last batches' events
        observer.stop()
        assert observer.failures == 0, f"{observer.failures} batches not recorded"
        assert observer.batches == batches, f"{observer.batches} of {batches} batches recorded"
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.rmtree(work / f"out-{name}", ignore_errors=True)
    return elapsed / batches * 1000, trigger, turns


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=20, help="batches per query")
    p.add_argument("--per-trigger", type=int, default=400, help="maxOffsetsPerTrigger (records per batch)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--sink", choices=("noop", "parquet"), default="noop")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args()
    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="offsetstore-bench-observer-"))
    with served() as server, KafkaCluster(1, heap="1g") as kafka:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, args.partitions)
        produce(kafka, topic, args.partitions, args.batches * args.per_trigger)
        spark = (
            SparkSession.builder.master(args.master)
            .appName("offsetstore-bench-observer")
            .config("spark.jars.packages", kafka_connector())
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.local.dir", str(work / "local"))
            .config("spark.sql.warehouse.dir", str(work / "warehouse"))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            print(f"warming up (master {args.master}, {args.batches} batches of {args.per_trigger} records) ...")
            targets = {"unobserved": None, "observed": server.address}
            for variant in VARIANTS:
                run_once(spark, targets[variant], kafka.bootstrap, topic, args.per_trigger, args.sink, work)
            wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
            trigger: dict[str, list[float]] = {v: [] for v in VARIANTS}
            turns: list[tuple[float, float, bool]] = []
            for _ in range(args.repeats):
                for variant in VARIANTS:
                    with Trickle(kafka, topic, args.partitions):
                        ms, trigger_ms, observed_turns = run_once(
                            spark, targets[variant], kafka.bootstrap, topic, args.per_trigger, args.sink, work
                        )
                    wall[variant].append(ms)
                    trigger[variant].append(trigger_ms)
                    turns += observed_turns
            print(f"{'variant':<12}{'wall ms/batch':>15}{'triggerExecution ms':>21}   runs (wall)")
            for variant in VARIANTS:
                runs = ", ".join(f"{ms:.1f}" for ms in wall[variant])
                print(f"{variant:<12}{median(wall[variant]):>15.1f}{median(trigger[variant]):>21.1f}   {runs}")
            for what, values in (("wall", wall), ("triggerExecution", trigger)):
                observed, unobserved = median(values["observed"]), median(values["unobserved"])
                # Each repeat's pair ran back to back: its difference is the least disturbed by the neighbours.
                paired = [o - u for o, u in zip(values["observed"], values["unobserved"], strict=True)]
                print(
                    f"overhead per batch ({what}): {observed - unobserved:+.1f} ms, "
                    f"ratio observed / unobserved {observed / unobserved:.3f}; "
                    f"paired differences {', '.join(f'{d:+.1f}' for d in paired)} (median {median(paired):+.1f} ms)"
                )
            path = "one JSON string" if all(t[2] for t in turns) else "PySpark's event objects"
            print(
                f"the observer's turn on the listener bus ({len(turns)} batches, events read as {path}): "
                f"median {median(t[0] for t in turns) * 1000:.1f} ms wall, "
                f"{median(t[1] for t in turns) * 1000:.2f} ms CPU of the driver's Python"
            )
        finally:
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
