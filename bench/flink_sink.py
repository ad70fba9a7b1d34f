"""Flink into PostgreSQL: records/s of the offsetstore sink (exactly once) over Flink's at-least-once JDBC sink, same run.

Both run examples/flink/CopyTopicJob (Kafka source, parallelism 2, a checkpoint every 500 ms,
a MiniCluster in one JVM) over the same topic on a local Apache Kafka broker, into a table of
their own, in alternating order. A run's rate is its records over the time from its first row
in the table to the job's end (the JVM's and Kafka source's start-up left out): the sink's
write path, not Flink's start. Flink's JDBC sink flushes every 5,000 rows or 200 ms; the
offsetstore sink at each checkpoint.

Printed: the median records/s of each and their ratio. Reported, never asserted.

    OFFSETSTORE_BENCH_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        python bench/flink_sink.py [--records 200000] [--rounds 2]

It needs a PostgreSQL on a host (JDBC cannot use the embedded one's Unix socket); the
bench works in a database of its own next to the given one, dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from confluent_kafka import Producer

from offsetstore.flink_integration import compile_java, flink_classpath, sink_classpath
from offsetstore.kafka_integration.local_kafka import KafkaCluster
from offsetstore.runtime import migrate

PARTITIONS = 4
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flink" / "CopyTopicJob.java"
LOG4J2 = "rootLogger.level = ERROR\n"


def produce(broker: KafkaCluster, topic: str, records: int) -> None:
    producer = Producer(broker.producer_config(**{"linger.ms": 20}))
    for i in range(records):
        producer.produce(topic, value=f"value-{i}".encode(), partition=i % PARTITIONS)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def run_once(command: list[str], engine: sa.Engine, table: str, records: int) -> float:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f'CREATE TABLE {table} (topic text, "partition" integer, "offset" bigint, value text, run bigint)'
        )
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = None
    with engine.connect() as conn:
        while proc.poll() is None:
            if first is None and conn.exec_driver_sql(f"SELECT EXISTS (SELECT FROM {table})").scalar_one():
                first = time.monotonic()
            conn.rollback()
            time.sleep(0.05)  # a poll's period, not a synchronisation: the rate's resolution
    ended = time.monotonic()
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"the job failed: {out[-2000:]}")
    with engine.connect() as conn:
        written = conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one()
    assert written == records, (written, records)
    return records / (ended - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    base = os.environ.get("OFFSETSTORE_BENCH_DATABASE_URL")
    if not base or not sa.make_url(base).host:
        raise SystemExit("set OFFSETSTORE_BENCH_DATABASE_URL to a PostgreSQL on a host (JDBC needs TCP)")
    base_url = sa.make_url(migrate.normalize_url(base))
    name = f"bench_flink_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    url = base_url.set(database=name)
    jars = flink_classpath()
    sink = sink_classpath()
    example = compile_java([EXAMPLE], [*jars, str(sink)], name="flink-example")
    broker = KafkaCluster(1).start()
    try:
        migrate.upgrade(url.render_as_string(hide_password=False))
        engine = sa.create_engine(url)
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        broker.create_topic(topic, PARTITIONS)
        produce(broker, topic, args.records)
        with tempfile.TemporaryDirectory(prefix="offsetstore-bench-flink-") as tmp:
            log = Path(tmp, "log4j2.properties")
            log.write_text(LOG4J2)
            rates: dict[str, list[float]] = {"offsetstore": [], "jdbc": []}
            for round_ in range(args.rounds):
                order = ["offsetstore", "jdbc"] if round_ % 2 == 0 else ["jdbc", "offsetstore"]
                for kind in order:
                    table = f"public.copy_{kind}_{round_}"
                    command = [shutil.which("java") or "java", "-Xmx768m", f"-Dlog4j2.configurationFile={log}",
                               "-cp", os.pathsep.join([str(example), str(sink), *jars]), "CopyTopicJob",
                               "--bootstrap", broker.bootstrap, "--topic", topic, "--group", f"bench-{kind}-{round_}",
                               "--table", table, "--sink", kind, "--bounded", "yes", "--checkpoint-dir",
                               str(Path(tmp, f"{kind}-{round_}")), "--user", url.username or "postgres",
                               "--password", url.password or "",
                               "--jdbc-url", f"jdbc:postgresql://{url.host}:{url.port or 5432}/{name}"]  # fmt: skip
                    rate = run_once(command, engine, table, args.records)
                    rates[kind].append(rate)
                    print(f"round {round_ + 1} {kind:12} {rate:10,.0f} records/s", flush=True)
        engine.dispose()
        ours, theirs = statistics.median(rates["offsetstore"]), statistics.median(rates["jdbc"])
        print(f"\n{args.records:,} records, {PARTITIONS} partitions, parallelism 2, median of {args.rounds}:")
        print(f"  offsetstore sink (exactly once)   {ours:10,.0f} records/s")
        print(f"  Flink JDBC sink (at least once)   {theirs:10,.0f} records/s")
        print(f"  ratio                             {ours / theirs:10.2f}")
    finally:
        broker.stop()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


if __name__ == "__main__":
    main()
