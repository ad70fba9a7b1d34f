"""What the local JVM pieces (:mod:`.local_kafka`, :mod:`.local_mirror_maker`) share: Java, quiet logging, free ports."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from offsetstore.kafka_integration.maven import MissingPiece

__all__ = ["LOGGING_ARTIFACTS", "free_ports", "java", "listens", "logging_options", "write_logging"]

LOGGING_ARTIFACTS = (
    # Kafka's own distribution logs through SLF4J 2 to Log4j 2; Maven alone would pick SLF4J 1.7 and no binding.
    "org.slf4j:slf4j-api:2.0.17",
    "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.4",
)

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        Pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
"""


def java(missing: type[MissingPiece] = MissingPiece) -> str:
    """The ``java`` on the path; raises ``missing`` (a :class:`MissingPiece`) naming the package where there is none."""
    found = shutil.which("java")
    if found is None:
        raise missing("Apache Kafka needs Java 17 or newer: apt-get install openjdk-17-jre-headless")
    return found


def write_logging(workdir: Path) -> None:
    """Log4j 2's configuration of the JVMs started in ``workdir``: warnings and errors only."""
    (workdir / "log4j2.yaml").write_text(_LOG4J2)


def logging_options(workdir: Path) -> list[str]:
    """The JVM options that point Log4j 2 at :func:`write_logging`'s file (YAML: Kafka's jars bring Jackson's reader)."""
    return [f"-Dlog4j2.configurationFile={workdir / 'log4j2.yaml'}"]


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
