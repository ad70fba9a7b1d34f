"""A local Apache Kafka: KRaft brokers from Maven Central's jars, for the tests, the bench and ``make kafka``.

Not imported by :mod:`offsetstore.kafka_integration`. The jars of one pinned version
(:data:`KAFKA_VERSION`, :mod:`._kafka_jars`) are resolved once with Maven (:mod:`.maven`), so nothing reaches
the network after the first fetch. A :class:`KafkaCluster` runs one combined broker + controller per node
(KRaft, a static quorum), on free loopback ports, each JVM with a bounded heap; Kafka's
own command-line tools run from the same jars (:meth:`KafkaCluster.tool`).

Run ``python -m offsetstore.kafka_integration.local_kafka`` (``make kafka``) for a broker
in the foreground.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from offsetstore.kafka_integration._kafka_jars import (
    KAFKA_VERSION,
    TOOLS,
    KafkaUnavailable,
    kafka_classpath,
    mirror_maker_classpath,
)
from offsetstore.kafka_integration._local_jvm import (
    free_ports,
    java,
    listens,
    logging_options,
    write_logging,
)
from offsetstore.kafka_integration.topics import create_topic, producer_config

__all__ = [
    "KAFKA_VERSION",
    "TOOLS",
    "KafkaCluster",
    "KafkaUnavailable",
    "create_topic",
    "kafka_classpath",
    "mirror_maker_classpath",
    "producer_config",
]


def _answers(consumer: object) -> bool:
    from confluent_kafka import TopicPartition

    try:
        consumer.committed([TopicPartition("offsetstore-probe", 0)], timeout=5)  # type: ignore[attr-defined]
    except Exception:
        return False
    return True


def _cluster_id() -> str:
    # Kafka's own format: a random UUID in URL-safe base64 without padding (22 characters). As Kafka's
    # Uuid.randomUuid, never one starting with "-": kafka-storage would read it as an option (1 start in 64 failed).
    while (found := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return found


class KafkaCluster:
    """``brokers`` KRaft nodes (each broker and controller), started and stopped as a context manager.

    ``bootstrap`` is the ``bootstrap.servers`` value. ``config`` adds or overrides server
    properties on every node (e.g. ``log.retention.check.interval.ms``); ``listeners``
    replaces the client listener's security protocol (``SASL_PLAINTEXT``, ``SSL``) where
    ``config`` brings what it needs and ``client`` is what a client then sets (the
    readiness check uses it, :meth:`client_config` hands it out); ``format_args`` go to ``kafka-storage format``
    (e.g. ``--add-scram``). Each node's output goes to ``node-N.log`` in the cluster's
    directory (removed on exit unless ``keep`` is set).
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        config: Mapping[str, str | int] | None = None,
        client_protocol: str = "PLAINTEXT",
        client: Mapping[str, object] | None = None,
        format_args: Sequence[str] = (),
        heap: str = "512m",
        ports: Sequence[int] | None = None,  # the client ports; free ones by default
        start_timeout: float = 120.0,
        version: str = KAFKA_VERSION,
        keep: bool = False,
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster has at least one broker")
        self.brokers = brokers
        self.version = version
        self._config = dict(config or {})
        self._client_protocol = client_protocol
        self._client = dict(client or {})
        self._format_args = list(format_args)
        self._heap = heap
        self._start_timeout = start_timeout
        self._keep = keep
        free = free_ports(3 * brokers)
        self.ports = list(ports) if ports else free[:brokers]
        if len(self.ports) != brokers:
            raise ValueError("ports: one client port per broker")
        self.controller_ports = free[brokers : 2 * brokers]
        self.internal_ports = free[2 * brokers :]
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.workdir: Path | None = None
        self._classpath = ""
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    # --- life cycle ---

    def start(self) -> KafkaCluster:
        self._classpath = kafka_classpath(self.version)
        # The JVMs run in sessions of their own (a terminal's Ctrl-C is for the caller to
        # handle): an interpreter that exits without stop() must not leave them running.
        atexit.register(self.stop)
        java_bin = java(KafkaUnavailable)
        self.workdir = Path(tempfile.mkdtemp(prefix="offsetstore-kafka-"))
        write_logging(self.workdir)
        cluster_id = _cluster_id()
        try:
            for node in range(1, self.brokers + 1):
                properties = self._properties(node)
                formatted = subprocess.run(
                    [java_bin, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *self._logging(),
                     "-cp", self._classpath, TOOLS["kafka-storage"], "format", "--ignore-formatted",
                     "-t", cluster_id, "-c", str(properties), *self._format_args],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                )  # fmt: skip
                if formatted.returncode != 0:
                    raise KafkaUnavailable(f"kafka-storage format failed: {formatted.stdout.strip()[-1000:]}")
            for node in range(1, self.brokers + 1):
                self.start_node(node)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, node: int) -> None:
        """Starts node ``node`` (1-based) again after :meth:`kill` or :meth:`stop_node`; its data is kept."""
        assert self.workdir is not None, "cluster not started"
        proc = self._processes.get(node)
        if proc is not None and proc.poll() is None:
            return
        with (self.workdir / f"node-{node}.log").open("ab") as out:
            self._processes[node] = subprocess.Popen(
                [java(KafkaUnavailable), f"-Xmx{self._heap}", "-Xms64m", "-XX:+UseSerialGC", *self._logging(),
                 "-cp", self._classpath, "kafka.Kafka", str(self.workdir / f"node-{node}.properties")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def wait_ready(self) -> None:
        """Waits until every running node listens, all are registered and a group coordinator answers."""
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self._start_timeout

        def check(ready: bool, what: str) -> bool:
            for node, proc in self._processes.items():
                if proc.poll() is not None:
                    raise KafkaUnavailable(f"Kafka node {node} exited with {proc.returncode}: {self.log_tail(node)}")
            if not ready and time.monotonic() > deadline:
                raise KafkaUnavailable(f"Kafka {what} within {self._start_timeout}s: {self.log_tail(1)}")
            return ready

        # The ports first, so that the client below does not log a refused connection every 50 ms.
        running = [self.ports[n - 1] for n in self.running()]
        while not check(all(listens(p) for p in running), f"did not listen on {self.bootstrap}"):
            time.sleep(0.1)
        quiet = {"socket.timeout.ms": 2000, "log_level": 0}
        admin = AdminClient(self.client_config(**quiet))
        while not check(len(self._brokers(admin)) >= len(self.running()), "did not register every broker"):
            time.sleep(0.2)
        # A group coordinator answering (which creates __consumer_offsets): a first commit
        # straight after start would otherwise meet NOT_COORDINATOR. Asked with a consumer's
        # OffsetFetch, not the admin client's DescribeGroups, whose timeouts can abort
        # librdkafka (confluentinc/librdkafka#4605).
        probe = Consumer(self.client_config(**quiet, **{"group.id": "offsetstore-probe"}))
        try:
            while not check(_answers(probe), "did not answer for a group coordinator"):
                time.sleep(0.2)
        finally:
            probe.close()

    @staticmethod
    def _brokers(admin: object) -> dict[int, object]:
        try:
            return dict(admin.list_topics(timeout=2).brokers)  # type: ignore[attr-defined]
        except Exception:
            return {}

    def running(self) -> list[int]:
        return [n for n, p in self._processes.items() if p.poll() is None]

    def pid(self, node: int) -> int:
        """The process id of node ``node``'s JVM (the bench reads its CPU time)."""
        return self._processes[node].pid

    def kill(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Sends ``sig`` to node ``node`` and waits for it to end (a crash by default)."""
        proc = self._processes[node]
        if proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(timeout=60)

    def stop_node(self, node: int) -> None:
        """Stops node ``node`` cleanly (SIGTERM, then SIGKILL after 30 s)."""
        proc = self._processes[node]
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        atexit.unregister(self.stop)
        for node in list(self._processes):
            with contextlib.suppress(Exception):
                self.kill(node)
        self._processes.clear()
        if self.workdir is not None and not self._keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- use ---

    def client_config(self, **extra: object) -> dict[str, object]:
        """A confluent-kafka config reaching this cluster (``extra`` added)."""
        return {"bootstrap.servers": self.bootstrap, **self._client, **extra}

    def producer_config(self, **extra: object) -> dict[str, object]:
        """:func:`producer_config` for this cluster (its client settings included)."""
        return producer_config(self.bootstrap, **self._client, **extra)

    def create_topic(self, topic: str, partitions: int, *, replication: int = 1, **config: str) -> None:
        """:func:`create_topic` on this cluster; ``config`` are topic configs (``retention_ms`` is ``retention.ms``)."""
        settings = {k.replace("_", "."): v for k, v in config.items()}
        create_topic(self.bootstrap, topic, partitions, replication=replication, config=settings, client=self._client)

    def tool(
        self, name: str, *args: str, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs one of Kafka's command-line tools (:data:`TOOLS`, by script name) from the same jars."""
        main = TOOLS.get(name, name)
        done = subprocess.run(
            [java(KafkaUnavailable), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *self._logging(),
             "-cp", self._classpath or kafka_classpath(self.version), main, *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, [name, *args], done.stdout, done.stderr)
        return done

    def log_tail(self, node: int, chars: int = 2000) -> str:
        if self.workdir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.workdir / f"node-{node}.log").read_text(errors="replace")[-chars:]
        return ""

    # --- configuration ---

    def _logging(self) -> list[str]:
        assert self.workdir is not None
        return logging_options(self.workdir)

    def _properties(self, node: int) -> Path:
        assert self.workdir is not None
        port, controller, internal = (
            self.ports[node - 1],
            self.controller_ports[node - 1],
            self.internal_ports[node - 1],
        )
        replicas = min(3, self.brokers)
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in enumerate(self.controller_ports, start=1))
        properties: dict[str, str | int] = {
            "process.roles": "broker,controller",
            "node.id": node,
            "controller.quorum.voters": voters,
            # Brokers talk among themselves on a plain listener of their own, so that a test's
            # SASL or TLS settings concern its clients only.
            "listeners": f"CLIENT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller},BROKER://127.0.0.1:{internal}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{port},BROKER://127.0.0.1:{internal}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "BROKER",
            "listener.security.protocol.map": (f"CONTROLLER:PLAINTEXT,BROKER:PLAINTEXT,CLIENT:{self._client_protocol}"),
            "log.dirs": str(self.workdir / f"node-{node}-data"),
            "num.partitions": 1,
            "default.replication.factor": replicas,
            "min.insync.replicas": max(1, replicas - 1),
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": max(1, replicas - 1),
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": max(1, replicas - 1),
            # Tests join groups many times: no 3 s wait for more members on each first join;
            # fewer internal partitions than the 50 of production make a start seconds faster.
            "group.initial.rebalance.delay.ms": 0,
            "offsets.topic.num.partitions": 5,
            "transaction.state.log.num.partitions": 5,
            **self._config,
        }
        path = self.workdir / f"node-{node}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m offsetstore.kafka_integration.local_kafka",
        description=f"Runs a local Apache Kafka {KAFKA_VERSION} (KRaft) in the foreground until Ctrl-C.",
    )
    parser.add_argument("--brokers", type=int, default=1, help="nodes, each broker and controller (default 1)")
    parser.add_argument("--port", type=int, default=9092, help="the first broker's client port (default 9092)")
    parser.add_argument(
        "--fetch", action="store_true", help="only fetch the jars, MirrorMaker 2's too (once, with Maven), and exit"
    )
    args = parser.parse_args(argv)
    if args.fetch:
        try:
            kafka_classpath()
            mirror_maker_classpath()
        except KafkaUnavailable as e:
            print(f"local_kafka: {e}", file=sys.stderr)
            return 2
        print(f"Apache Kafka {KAFKA_VERSION}'s jars and MirrorMaker 2's are here (Maven's local repository)")
        return 0
    try:
        cluster = KafkaCluster(args.brokers, ports=[args.port + i for i in range(args.brokers)]).start()
    except KafkaUnavailable as e:
        print(f"local_kafka: {e}", file=sys.stderr)
        return 2
    print(f"Apache Kafka {KAFKA_VERSION} serving: bootstrap.servers={cluster.bootstrap} (Ctrl-C stops it)", flush=True)
    stopped = False

    def stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopped and cluster.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for node in cluster.running():
            cluster.stop_node(node)
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
