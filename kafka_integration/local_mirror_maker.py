"""A local MirrorMaker 2: Apache Kafka's own ``connect-mirror`` in dedicated mode, replicating one local cluster to another.

Not imported by :mod:`offsetstore.kafka_integration`; the tests run it between two
:class:`~.local_kafka.KafkaCluster` to see what a switch between clusters meets in practice
(issue 58). The process is ``org.apache.kafka.connect.mirror.MirrorMaker`` with an
``mm2.properties`` written from :meth:`LocalMirrorMaker.properties`, as an operator runs it
(``connect-mirror-maker.sh``): one flow, source to target, topics renamed by the default
replication policy (``orders`` on A is ``A.orders`` on B), consumer groups' offsets translated
into checkpoints and into the target's coordinator every second. Its jars come with Kafka's,
from Maven Central once (:func:`~.local_kafka.mirror_maker_classpath`).
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from offsetstore.kafka_integration._local_jvm import java, logging_options, write_logging
from offsetstore.kafka_integration.local_kafka import KafkaCluster, KafkaUnavailable, mirror_maker_classpath

__all__ = ["MIRROR_MAKER_MAIN", "LocalMirrorMaker"]

#: MirrorMaker 2's dedicated-mode entry point (what ``connect-mirror-maker.sh`` runs).
MIRROR_MAKER_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"


class LocalMirrorMaker:
    """MirrorMaker 2 replicating ``source`` to ``target`` (aliases ``A`` and ``B``), started and stopped as a context manager.

    ``topics`` and ``groups`` are MirrorMaker's regular expressions of what to replicate;
    ``config`` adds or overrides lines of ``mm2.properties`` (e.g. ``offset.lag.max``). The
    process's output goes to ``mirror-maker.log`` in its directory (removed on exit unless
    ``keep`` is set). It serves no REST port: dedicated mode leaves the internal one off.
    """

    def __init__(
        self,
        source: KafkaCluster,
        target: KafkaCluster,
        *,
        source_alias: str = "A",
        target_alias: str = "B",
        topics: str = ".*",
        groups: str = ".*",
        config: Mapping[str, str | int] | None = None,
        heap: str = "256m",
        start_timeout: float = 180.0,
        keep: bool = False,
    ) -> None:
        self.source, self.target = source, target
        self.source_alias, self.target_alias = source_alias, target_alias
        self._topics, self._groups = topics, groups
        self._config = dict(config or {})
        self._heap = heap
        self._start_timeout = start_timeout
        self._keep = keep
        self.workdir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def remote_topic(self, topic: str) -> str:
        """The name ``topic`` of the source has on the target (MirrorMaker's default replication policy)."""
        return f"{self.source_alias}.{topic}"

    @property
    def checkpoints_topic(self) -> str:
        """The target's topic of MirrorMaker's checkpoints (the groups' translated offsets)."""
        return f"{self.source_alias}.checkpoints.internal"

    @property
    def offset_syncs_topic(self) -> str:
        """The source's topic of MirrorMaker's offset syncs (upstream offset -> downstream offset, sparse)."""
        return f"mm2-offset-syncs.{self.target_alias}.internal"

    def properties(self) -> dict[str, str | int]:
        """``mm2.properties``: the flow source -> target only, every interval a second, the source read committed."""
        a, b = self.source_alias, self.target_alias
        replicas = min(3, self.source.brokers, self.target.brokers)
        return {
            "clusters": f"{a}, {b}",
            f"{a}.bootstrap.servers": self.source.bootstrap,
            f"{b}.bootstrap.servers": self.target.bootstrap,
            f"{a}->{b}.enabled": "true",
            f"{b}->{a}.enabled": "false",
            f"{a}->{b}.topics": self._topics,
            f"{a}->{b}.groups": self._groups,
            # Without it MirrorMaker's source consumer copies records of aborted transactions too.
            f"{a}.consumer.isolation.level": "read_committed",
            "tasks.max": 1,
            "refresh.topics.interval.seconds": 1,
            "refresh.groups.interval.seconds": 1,
            "emit.checkpoints.interval.seconds": 1,
            "emit.heartbeats.interval.seconds": 1,
            "sync.group.offsets.enabled": "true",
            "sync.group.offsets.interval.seconds": 1,
            # The connectors' offsets are committed, and the latest offset sync emitted, this often (KAFKA-15906).
            "offset.flush.interval.ms": 1000,
            "sync.topic.acls.enabled": "false",
            "replication.factor": replicas,
            "checkpoints.topic.replication.factor": replicas,
            "heartbeats.topic.replication.factor": replicas,
            "offset-syncs.topic.replication.factor": replicas,
            "offset.storage.replication.factor": replicas,
            "status.storage.replication.factor": replicas,
            "config.storage.replication.factor": replicas,
            **self._config,
        }

    # --- life cycle ---

    def start(self) -> LocalMirrorMaker:
        """Starts the process and waits until its heartbeat connector writes to the target (its herder runs)."""
        classpath = mirror_maker_classpath(self.source.version)
        atexit.register(self.stop)
        self.workdir = Path(tempfile.mkdtemp(prefix="offsetstore-mm2-"))
        write_logging(self.workdir)
        path = self.workdir / "mm2.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        try:
            with (self.workdir / "mirror-maker.log").open("ab") as out:
                self._process = subprocess.Popen(
                    # --clusters: this process drives the flows into the target only, as one node of a
                    # dedicated MirrorMaker cluster placed beside its target does.
                    [java(KafkaUnavailable), f"-Xmx{self._heap}", "-Xms64m", "-XX:+UseSerialGC",
                     "-XX:TieredStopAtLevel=1", *logging_options(self.workdir), "-cp", classpath,
                     MIRROR_MAKER_MAIN, str(path), "--clusters", self.target_alias],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            self._wait_heartbeats()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_heartbeats(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.target.client_config(**{"group.id": "offsetstore-mm2-probe", "log_level": 0}))
        deadline = time.monotonic() + self._start_timeout
        try:
            while True:
                self.check_running()
                topics = consumer.list_topics(timeout=5).topics
                if "heartbeats" in topics:
                    _, end = consumer.get_watermark_offsets(TopicPartition("heartbeats", 0), timeout=5)
                    if end > 0:
                        return
                if time.monotonic() > deadline:
                    raise KafkaUnavailable(
                        f"MirrorMaker 2 wrote no heartbeat within {self._start_timeout}s: {self.log_tail()}"
                    )
                time.sleep(0.5)
        finally:
            consumer.close()

    def check_running(self) -> None:
        """Raises :class:`KafkaUnavailable` with the log's tail when the process has ended."""
        if self._process is None or self._process.poll() is not None:
            code = None if self._process is None else self._process.returncode
            raise KafkaUnavailable(f"MirrorMaker 2 is not running (exit {code}): {self.log_tail()}")

    @property
    def pid(self) -> int:
        assert self._process is not None, "MirrorMaker not started"
        return self._process.pid

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Holds the process still (SIGSTOP) for the block, then lets it go on (SIGCONT).

        What the source gets meanwhile (a new topic, its log start moved) MirrorMaker meets as
        if it had been there before MirrorMaker first looked. Keep the block short: the
        process's group membership on the target lapses after its session timeout (10 s).
        """
        self.check_running()
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stops the process (SIGTERM, then SIGKILL after 30 s); its progress stays in the target's internal topics."""
        atexit.unregister(self.stop)
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self.workdir is not None and not self._keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> LocalMirrorMaker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 3000) -> str:
        if self.workdir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.workdir / "mirror-maker.log").read_text(errors="replace")[-chars:]
        return ""
