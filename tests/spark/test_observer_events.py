"""The Spark observer's reading of progress events and its error handling, on PySpark's own event objects (no JVM).

The events are ``StreamingQueryProgress.fromJson`` of progress JSON as Spark 4.2's Kafka source
reports it (captured from a run of tests/spark/test_observer.py); the real listener bus is
tests/spark/test_observer.py's.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import TopicPartition
from offsetstore.spark_integration.observer import SparkObserver, batch_positions

pytestmark = pytest.mark.spark

QUERY_ID = "79039d05-a40e-404e-9676-c64c318afce2"


def kafka(topic: str, start: dict | None, end: dict, latest: dict) -> dict:
    return {
        "description": f"KafkaV2[Subscribe[{topic}]]",
        "startOffset": None if start is None else {topic: start},
        "endOffset": {topic: end},
        "latestOffset": {topic: latest},
        "numInputRows": 3,
        "inputRowsPerSecond": 2.7,
        "processedRowsPerSecond": 2.8,
        "metrics": {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0", "minOffsetsBehindLatest": "0"},
    }


def other(description: str, end: object) -> dict:
    return {
        "description": description,
        "startOffset": None,
        "endOffset": end,
        "latestOffset": None,
        "numInputRows": 10,
        "inputRowsPerSecond": 1.0,
        "processedRowsPerSecond": 1.0,
    }


def progress(batch: int, *sources: dict, name: str | None = "orders"):
    """A ``StreamingQueryProgress`` as PySpark builds it from Spark's progress JSON."""
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    return StreamingQueryProgress.fromJson(
        {
            "id": QUERY_ID,
            "runId": "3c19968d-b518-4d45-854e-612387fbee06",
            "name": name,
            "timestamp": "2026-12-07T18:16:43.871Z",
            "batchId": batch,
            "batchDuration": 1054,
            "numInputRows": 3,
            "durationMs": {"addBatch": 689, "triggerExecution": 1053},
            "stateOperators": [],
            "sources": list(sources),
            "sink": {"description": "FileSink[file:/tmp/o]", "numOutputRows": -1},
        }
    )


def test_a_kafka_sources_end_offsets_are_the_positions_and_its_latest_offsets_the_log_ends():
    batch = batch_positions(
        progress(3, kafka("orders", {"0": 99, "1": 99}, {"0": 100, "1": 120}, {"0": 100, "1": 130}))
    )
    assert batch.batch_id == 3
    assert batch.offsets == {TopicPartition("orders", 0): 100, TopicPartition("orders", 1): 120}
    assert batch.log_ends == {TopicPartition("orders", 0): 100, TopicPartition("orders", 1): 130}


def test_every_kafka_source_counts_and_other_sources_are_left_out():
    batch = batch_positions(
        progress(
            0,
            kafka("orders", None, {"0": 5}, {"0": 9}),
            other("RateStreamV2[rowsPerSecond=1, rampUpTimeSeconds=0, numPartitions=default", "12"),
            other("FileStreamSource[file:/data/in]", {"logOffset": 4}),
            kafka("payments", None, {"0": 7, "1": 8}, {"0": 7, "1": 8}),
        )
    )
    assert batch.offsets == {
        TopicPartition("orders", 0): 5,
        TopicPartition("payments", 0): 7,
        TopicPartition("payments", 1): 8,
    }


def test_a_partition_read_by_two_sources_gets_the_lower_end_offset():
    batch = batch_positions(
        progress(0, kafka("orders", None, {"0": 50}, {"0": 60}), kafka("orders", None, {"0": 40}, {"0": 70}))
    )
    assert batch.offsets == {TopicPartition("orders", 0): 40}
    assert batch.log_ends == {TopicPartition("orders", 0): 70}


def test_a_source_shaped_like_kafka_but_not_kafka_is_left_out():
    # Python data sources may report Kafka-shaped offsets (offsetstore's own test source does).
    assert (
        batch_positions(progress(0, other("PythonMicroBatchStream[kafka_shaped]", {"orders": {"0": 5}}))).offsets == {}
    )


@pytest.fixture
def dead() -> Iterator[OffsetStoreClient]:
    """A client of an address nothing listens on: every store call fails (UNAVAILABLE)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with OffsetStoreClient(address, timeout=2) as client:
        yield client


def test_failed_store_calls_never_raise_are_counted_and_said_once(dead, caplog):
    registry = CollectorRegistry()
    observer = SparkObserver(dead, "orders-etl", registry=registry)
    with caplog.at_level(logging.INFO, logger="offsetstore.spark_integration.observer"):
        for n in range(3):
            observer.on_progress(progress(n, kafka("orders", None, {"0": n + 1}, {"0": 9})))
    assert (observer.batches, observer.failures) == (0, 3)
    assert registry.get_sample_value("offsetstore_spark_observer_failures_total", {"group": "orders-etl"}) == 3
    said = [r for r in caplog.records if r.name == "offsetstore.spark_integration.observer"]
    assert [r.levelno for r in said] == [logging.WARNING]
    assert "batch 0 of group orders-etl" in said[0].getMessage()


def test_an_event_it_cannot_read_is_a_failure_not_an_exception(dead):
    observer = SparkObserver(dead, "orders-etl", registry=CollectorRegistry())
    observer.on_progress({"name": "orders", "sources": [{"description": "KafkaV2[x]"}]})  # no batchId, no offsets
    assert observer.failures == 1


def test_batches_without_kafka_offsets_and_other_queries_make_no_store_call(dead):
    # Any call on the dead client would fail and be counted.
    observer = SparkObserver(dead, "orders-etl", query_name="orders", registry=CollectorRegistry())
    observer.on_progress(progress(0, other("RateStreamV2[rowsPerSecond=1]", "12")))
    observer.on_progress(progress(1, kafka("orders", None, {"0": 5}, {"0": 9}), name="another-query"))
    observer.on_progress(progress(2, kafka("orders", None, {"0": 5}, {"0": 9}), name=None))
    assert (observer.batches, observer.failures) == (0, 0)


def test_group_id_and_timeout_are_checked_where_they_are_written(dead):
    with pytest.raises(ValueError, match="group_id"):
        SparkObserver(dead, "")
    with pytest.raises(ValueError, match="timeout"):
        SparkObserver(dead, "g", timeout=0)


def test_spark_s_own_progress_json_reads_the_same():
    # What the listener gets from Spark's bus in one call (progress().json()): offsets as objects, nulls left out.
    raw = json.loads(
        '{"id":"79039d05-a40e-404e-9676-c64c318afce2","runId":"3c19968d-b518-4d45-854e-612387fbee06",'
        '"timestamp":"2026-12-07T18:16:43.871Z","batchId":3,"batchDuration":1054,"numInputRows":3,'
        '"durationMs":{"addBatch":689,"triggerExecution":1053},"stateOperators":[],"sources":[{"description":'
        '"KafkaV2[Subscribe[t-bc0389da]]","startOffset":{"t-bc0389da":{"0":99,"1":99,"2":99}},"endOffset":'
        '{"t-bc0389da":{"0":100,"1":100,"2":100}},"latestOffset":{"t-bc0389da":{"0":100,"1":100,"2":101}},'
        '"numInputRows":3,"metrics":{}}],"sink":{"description":"FileSink[file:/tmp/o]","numOutputRows":-1}}'
    )
    batch = batch_positions(raw)
    assert batch.batch_id == 3
    assert batch.offsets == {TopicPartition("t-bc0389da", p): 100 for p in range(3)}
    assert batch.log_ends[TopicPartition("t-bc0389da", 2)] == 101
    unnamed = SparkObserver(OffsetStoreClient("127.0.0.1:1"), "g", query_name="orders", registry=CollectorRegistry())
    unnamed.on_progress(raw)  # no "name": not the query asked for, no call
    assert (unnamed.batches, unnamed.failures) == (0, 0)
