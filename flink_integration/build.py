"""The Flink integration's Java classes: Flink's jars from Maven Central once, the sink compiled from this package's source once.

Flink and its Kafka connector are pinned here as a pair that resolves (:data:`FLINK_VERSION`,
:data:`KAFKA_CONNECTOR_VERSION`). The jars come through :func:`maven_classpath` (cached under
``~/.cache/offsetstore``); the compiled classes go to a folder keyed by the sources' hash, so a
changed source compiles anew and an unchanged one never again. Nothing here is committed as a jar.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from offsetstore.kafka_integration.maven import MissingPiece, maven_classpath

__all__ = [
    "FLINK_VERSION",
    "JDBC_CONNECTOR_VERSION",
    "KAFKA_CONNECTOR_VERSION",
    "POSTGRESQL_JDBC_VERSION",
    "compile_java",
    "flink_classpath",
    "sink_classpath",
]

#: The Flink the sink and the initializer are compiled against (PyPI's apache-flink of the same version).
FLINK_VERSION = "2.2.0"
#: flink-connector-kafka built for :data:`FLINK_VERSION`.
KAFKA_CONNECTOR_VERSION = "5.0.0-2.2"
#: flink-connector-jdbc: only the comparisons use it (at least once, XA); its newest release is built for Flink 2.0.
JDBC_CONNECTOR_VERSION = "4.0.0-2.0"
POSTGRESQL_JDBC_VERSION = "42.7.8"

_RUNTIME = (
    f"org.apache.flink:flink-streaming-java:{FLINK_VERSION}",
    f"org.apache.flink:flink-clients:{FLINK_VERSION}",
    f"org.apache.flink:flink-connector-base:{FLINK_VERSION}",
    f"org.apache.flink:flink-connector-kafka:{KAFKA_CONNECTOR_VERSION}",
    f"org.postgresql:postgresql:{POSTGRESQL_JDBC_VERSION}",
    # Flink logs through SLF4J 2; Log4j 2 prints it (the job's log4j2 file says what).
    "org.slf4j:slf4j-api:2.0.17",
    "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.4",
)
_JDBC_CONNECTOR = (
    f"org.apache.flink:flink-connector-jdbc-core:{JDBC_CONNECTOR_VERSION}",
    f"org.apache.flink:flink-connector-jdbc-postgres:{JDBC_CONNECTOR_VERSION}",
)


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "offsetstore"


def flink_classpath(*, jdbc_connector: bool = True) -> list[str]:
    """The jars of a local Flink (a MiniCluster in one JVM), the Kafka connector and PostgreSQL's driver.

    With ``jdbc_connector``, Flink's own JDBC connector too (what the comparisons run).
    Raises :class:`MissingPiece` with one line when Java, Maven or Maven Central is missing.
    """
    artifacts = [*_RUNTIME, *(_JDBC_CONNECTOR if jdbc_connector else ())]
    return maven_classpath(artifacts, name=f"flink-{FLINK_VERSION}")


def compile_java(sources: list[Path], classpath: list[str], *, name: str) -> Path:
    """A folder of the classes of ``sources`` compiled against ``classpath``, compiled once per sources' hash."""
    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    out = _cache_root() / f"{name}-{digest.hexdigest()[:16]}"
    if (out / ".done").exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise MissingPiece(f"{name} needs javac (a JDK 17 or newer): apt-get install openjdk-17-jdk-headless")
    work = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    done = subprocess.run(
        [
            javac,
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-cp",
            os.pathsep.join(classpath),
            "-d",
            str(work),
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError(f"javac failed on {name}:\n{done.stdout}{done.stderr}")
    (work / ".done").touch()
    try:
        work.rename(out)
    except OSError:  # another process compiled it first
        shutil.rmtree(work, ignore_errors=True)
    return out


def sink_classpath() -> Path:
    """The folder of the compiled sink and offsets initializer (package ``offsetstore.flink``)."""
    root = resources.files("offsetstore.flink_integration").joinpath("java", "offsetstore", "flink")
    with resources.as_file(root) as folder:
        sources = sorted(Path(folder).glob("*.java"))
        return compile_java(sources, flink_classpath(jdbc_connector=False), name="flink-sink")
