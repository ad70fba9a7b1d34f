"""Testing helper: a streaming source of Kafka-shaped rows, for pipelines where no Kafka is at hand.

Not imported by :mod:`offsetstore.spark_integration`; it needs PySpark >= 4.2 (its
Python streaming data source API with read limits). Register it and read it as the
Kafka source would be read::

    spark.dataSource.register(KafkaShapedSource)
    df = (spark.readStream.format("kafka_shaped")
          .option("subscribe", "orders").option("partitions", 3)
          .option("records", 1000).option("maxOffsetsPerTrigger", 300).load())

Its rows have the Kafka source's columns and types (``key``, ``value``, ``topic``,
``partition``, ``offset``, ``timestamp``, ``timestampType``), its offsets the Kafka
source's JSON (``{"orders": {"0": 42}}``, so ``startingOffsets`` from
:func:`~offsetstore.spark_integration.starting_offsets` works unchanged), and its
records are a pure function of (topic, partition, offset): a replay reads exactly what
the first read did, as from Kafka.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

__all__ = ["FailFirstAttempt", "KafkaShapedSource", "KillExecutorOnce", "record_key", "record_value", "write_log_end"]

SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"

_EPOCH_US = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp() * 1_000_000)
_ROWS_PER_BATCH = 65_536

Offsets = dict[str, dict[str, int]]


def record_key(topic: str, partition: int, offset: int, keys: int = 0) -> bytes:
    """The key of a record; with ``keys`` > 0, a partition cycles through that many keys."""
    return f"{topic}-{partition}-{offset % keys if keys else offset}".encode()


def record_value(topic: str, partition: int, offset: int) -> bytes:
    """The value of a record: its coordinates, so a sink row tells where it came from."""
    return f"{topic}:{partition}:{offset}".encode()


def write_log_end(path: str | os.PathLike[str], ends: Offsets) -> None:
    """Moves the log ends of a source reading ``endOffsetsFile=path`` (atomically: a rename)."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(ends))
    tmp.replace(path)


class KafkaShapedSource(DataSource):
    """A streaming source with the Kafka source's schema, offsets and options.

    Options (case-insensitive, as Spark passes them):

    - ``subscribe``: comma-separated topics.
    - ``partitions``: partitions per topic (default 1).
    - ``records``: every partition's log end (default 0).
    - ``endOffsetsFile``: a JSON file ``{"topic": {"0": end}}`` that overrides the log
      end of the partitions it names; re-read at every trigger, so a test appends to the
      log by rewriting it (:func:`write_log_end`).
    - ``startingOffsets``: ``earliest`` (default), ``latest``, or Kafka's JSON, where -2
      is earliest and -1 latest.
    - ``maxOffsetsPerTrigger``: records per micro-batch over all partitions.
    - ``keys``: distinct keys per partition (default 0: every record its own key).

    Notes
    -----
    Every log starts at offset 0. ``trigger(availableNow=True)`` reads up to the log
    ends seen when the query starts.
    """

    @classmethod
    def name(cls) -> str:
        return "kafka_shaped"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Reader(dict(self.options))


class _Range(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int, keys: int) -> None:
        self.topic, self.partition, self.start, self.end, self.keys = topic, partition, start, end, keys


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        if not topics:
            raise ValueError("kafka_shaped: option subscribe names no topic")
        self.topics = topics
        self.partition_count = int(options.get("partitions", "1"))
        self.records = int(options.get("records", "0"))
        self.end_file = options.get("endoffsetsfile")
        self.starting = options.get("startingoffsets", "earliest")
        per_trigger = options.get("maxoffsetspertrigger")
        self.max_per_trigger = int(per_trigger) if per_trigger else None
        self.keys = int(options.get("keys", "0"))
        self.target: Offsets | None = None

    def _log_end(self) -> Offsets:
        ends = {t: {str(p): self.records for p in range(self.partition_count)} for t in self.topics}
        if self.end_file and os.path.exists(self.end_file):
            for topic, parts in json.loads(Path(self.end_file).read_text()).items():
                if topic in ends:
                    for p, end in parts.items():
                        if p in ends[topic]:
                            ends[topic][p] = int(end)
        return ends

    def initialOffset(self) -> Offsets:
        ends = self._log_end()
        if self.starting == "earliest":
            return {t: {p: 0 for p in parts} for t, parts in ends.items()}
        if self.starting == "latest":
            return ends
        given = json.loads(self.starting)
        start: Offsets = {}
        for topic, parts in ends.items():
            start[topic] = {}
            for p, end in parts.items():
                value = int(given.get(topic, {}).get(p, -2))
                start[topic][p] = 0 if value == -2 else end if value == -1 else min(value, end)
        return start

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        ends = self.target or self._log_end()
        available = {
            (t, p): max(0, end - start.get(t, {}).get(p, 0)) for t, parts in ends.items() for p, end in parts.items()
        }
        take = dict(available)
        if isinstance(limit, ReadMaxRows) and sum(available.values()) > limit.max_rows:
            take = _share(available, limit.max_rows)
        return {t: {p: start.get(t, {}).get(p, 0) + take[(t, p)] for p in parts} for t, parts in ends.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def reportLatestOffset(self) -> Offsets:
        return self._log_end()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._log_end()

    def partitions(self, start: Offsets, end: Offsets) -> list[_Range]:
        return [
            _Range(t, int(p), start.get(t, {}).get(p, 0), e, self.keys)
            for t, parts in end.items()
            for p, e in parts.items()
            if e > start.get(t, {}).get(p, 0)
        ]

    def read(self, partition: _Range) -> Iterator[pa.RecordBatch]:
        for begin in range(partition.start, partition.end, _ROWS_PER_BATCH):
            yield _records(partition, begin, min(begin + _ROWS_PER_BATCH, partition.end))

    def commit(self, end: Offsets) -> None:
        pass


def _share(available: dict[tuple[str, str], int], budget: int) -> dict[tuple[str, str], int]:
    """Splits ``budget`` records evenly over the partitions that have some, as far as each has."""
    take = dict.fromkeys(available, 0)
    active = [k for k, n in available.items() if n > 0]
    while budget > 0 and active:
        share = max(1, budget // len(active))
        for k in list(active):
            n = min(share, available[k] - take[k], budget)
            take[k] += n
            budget -= n
            if take[k] == available[k]:
                active.remove(k)
            if budget == 0:
                break
    return take


def _records(part: _Range, begin: int, end: int) -> pa.RecordBatch:
    offsets = pa.array(range(begin, end), pa.int64())
    n = end - begin
    text = pc.cast(offsets, pa.string())
    key_number = offsets
    if part.keys:  # offset % keys, in the integer arithmetic Arrow has
        key_number = pc.subtract(offsets, pc.multiply(pc.divide(offsets, part.keys), part.keys))
    keys = pc.binary_join_element_wise(f"{part.topic}-{part.partition}-", pc.cast(key_number, pa.string()), "")
    values = pc.binary_join_element_wise(f"{part.topic}:{part.partition}:", text, "")
    stamps = pc.cast(pc.add(pc.multiply(offsets, 1000), _EPOCH_US), pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(
        [
            pc.cast(keys, pa.binary()),
            pc.cast(values, pa.binary()),
            pa.repeat(pa.scalar(part.topic, pa.string()), n),
            pa.repeat(pa.scalar(part.partition, pa.int32()), n),
            offsets,
            stamps,
            pa.repeat(pa.scalar(0, pa.int32()), n),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


@dataclass(frozen=True)
class FailFirstAttempt:
    """A staging-task fault hook (:func:`~offsetstore.spark_integration._faults.installed`): every task's first attempt fails.

    It raises at ``stage`` (``"task_copied"`` or ``"task_staged"``) and leaves a file
    ``task-<n>`` in ``marker_dir``, so a test can tell the failure happened.
    """

    stage: str
    marker_dir: str

    def __call__(self, stage: str, task: int, attempt: int) -> None:
        if stage == self.stage and attempt == 0:
            Path(self.marker_dir, f"task-{task}").touch()
            raise RuntimeError(f"injected failure of task {task} at {stage}")


# How an executor JVM's command line names its main class, whatever the cluster manager.
_EXECUTOR_MAIN = b"org.apache.spark.executor."


def _executor_jvm(pid: int) -> int | None:
    """The executor JVM among the ancestors of ``pid`` (Linux /proc); None in local mode."""
    while pid > 1:
        try:
            if _EXECUTOR_MAIN in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
            # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, not ")".
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


@dataclass(frozen=True)
class KillExecutorOnce:
    """A staging-task fault hook (:mod:`~offsetstore.spark_integration._faults`) that SIGKILLs the task's executor JVM, once per ``marker_dir``.

    The first task to reach ``stage`` creates ``marker_dir/killed`` (so no other task
    or retry kills again), kills its executor JVM and then its own Python worker, as a
    lost machine would: no exception, no rollback from the client, the COPY's
    connection just drops. Needs executors in processes of their own
    (``local-cluster``, a real cluster); in local mode it raises instead.
    """

    stage: str
    marker_dir: str

    def __call__(self, stage: str, task: int, attempt: int) -> None:
        if stage != self.stage:
            return
        jvm = _executor_jvm(os.getpid())
        if jvm is None:
            raise RuntimeError("KillExecutorOnce: no executor JVM above this Python worker (local mode?)")
        try:
            fd = os.open(Path(self.marker_dir, "killed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"task {task} attempt {attempt} executor pid {jvm}\n".encode())
        os.close(fd)
        os.kill(jvm, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
