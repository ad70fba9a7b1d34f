"""A PyFlink job: a Kafka topic into a PostgreSQL table, exactly once, through offsetstore's sink (docs/flink.md).

Run it with apache-flink's Python, offsetstore's PyFlink module installed beside it
(``pip install --no-deps .`` from a checkout, or the wheel) and the jars offsetstore's environment prints::

    python copy_topic.py --jars "$(python -m offsetstore.flink_integration --pyflink)" \\
        --bootstrap localhost:9092 --topic orders --group orders-copy \\
        --jdbc-url jdbc:postgresql://localhost:5432/app --user app --table public.orders_copy

On a cluster, ``flink run -m <jobmanager> -py copy_topic.py --jars ...`` submits it instead
(tests/flink/test_standalone.py). The job starts at the group's stored offsets (no checkpoint or
savepoint needed) and writes each checkpoint's rows and their offsets in one PostgreSQL transaction.
"""

from __future__ import annotations

import argparse

from pyflink.common import Configuration, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment

from offsetstore.pyflink_integration import kafka_rows_source, offsetstore_sink, store_offsets, use_jars


def main() -> None:
    """Parses the flags, builds the job and runs it (until the topic's end with ``--bounded``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jars", required=True, help="python -m offsetstore.flink_integration --pyflink")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--jdbc-url", required=True)
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--table", required=True, help="columns topic, partition, offset, key, value")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--bounded", action="store_true", help="end at the topic's end as of the start")
    parser.add_argument("--restarts", type=int, default=0, help="restarts from the latest checkpoint on a failure")
    args = parser.parse_args()

    config = Configuration()
    if args.restarts:  # Flink restores the latest checkpoint; the sink skips what the store already holds
        config.set_string("restart-strategy.type", "fixed-delay")
        config.set_string("restart-strategy.fixed-delay.attempts", str(args.restarts))
        config.set_string("restart-strategy.fixed-delay.delay", "1 s")
    else:  # a failure ends the job: the next start begins at the store's offsets
        config.set_string("restart-strategy.type", "none")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    use_jars(env, args.jars)  # fails with one line if the jars are built for another Flink
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(args.checkpoint_ms)

    login = {"user": args.user, "password": args.password}
    source = kafka_rows_source(
        args.bootstrap,
        args.topic,
        store_offsets(args.jdbc_url, args.group, **login, kafka_bootstrap_servers=args.bootstrap),
        group_id=args.group,
        bounded=args.bounded,
    )
    rows = env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").uid("kafka-source")
    sink = offsetstore_sink(
        args.jdbc_url,
        args.group,
        args.table,
        ["topic", '"partition"', '"offset"', "key", "value"],
        **login,
        member_id="copy-topic",
        kafka_bootstrap_servers=args.bootstrap,  # binds the group to this cluster; fingerprints for a switch
    )
    rows.sink_to(sink).uid("offsetstore-sink")
    env.execute(f"copy {args.topic} to {args.table}")
    print("done", flush=True)


if __name__ == "__main__":
    main()
