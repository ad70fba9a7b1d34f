"""The Flink integration's Java classes: Flink's jars from Maven Central once, the sink compiled from this package's source once.

Flink and its Kafka connector are pinned here as a pair that resolves (:data:`FLINK_VERSION`,
:data:`KAFKA_CONNECTOR_VERSION`). The jars come through :func:`maven_classpath` (their list cached
under :func:`~offsetstore.kafka_integration.maven.cache_dir`: ``~/.cache/offsetstore``, or where
``OFFSETSTORE_CACHE_DIR`` says); the compiled classes go to a folder there keyed by the sources'
hash, so a changed source compiles anew and an unchanged one never again. Nothing here is
committed as a jar.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from importlib import resources
from pathlib import Path

from offsetstore.kafka_integration.maven import MissingPiece, cache_dir, maven_classpath

__all__ = [
    "FLINK_VERSION",
    "JDBC_CONNECTOR_VERSION",
    "KAFKA_CONNECTOR_VERSION",
    "POSTGRESQL_JDBC_VERSION",
    "compile_java",
    "flink_classpath",
    "pyflink_jars",
    "sink_classpath",
    "sink_jar",
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
# What a PyFlink job adds to apache-flink's own jars (its flink-dist has Flink, SLF4J and Log4j): the Kafka
# connector (its Flink dependencies are `provided`) and PostgreSQL's driver.
_PYFLINK_EXTRA = (
    f"org.apache.flink:flink-connector-kafka:{KAFKA_CONNECTOR_VERSION}",
    f"org.postgresql:postgresql:{POSTGRESQL_JDBC_VERSION}",
)
#: The sink jar's manifest attributes that offsetstore.pyflink_integration checks against the running PyFlink.
MANIFEST_FLINK = "Offsetstore-Flink-Version"
MANIFEST_KAFKA_CONNECTOR = "Offsetstore-Kafka-Connector-Version"
_JDBC_CONNECTOR = (
    f"org.apache.flink:flink-connector-jdbc-core:{JDBC_CONNECTOR_VERSION}",
    f"org.apache.flink:flink-connector-jdbc-postgres:{JDBC_CONNECTOR_VERSION}",
)


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
    out = cache_dir() / f"{name}-{digest.hexdigest()[:16]}"
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


def sink_jar() -> Path:
    """The sink's classes as one jar (what ``pipeline.jars`` takes), its manifest naming the Flink it is built for."""
    classes = sink_classpath()
    jar = classes.with_name(f"offsetstore-flink-{FLINK_VERSION}-{classes.name.rsplit('-', 1)[1]}.jar")
    if jar.exists():
        return jar
    partial = jar.with_name(f"{jar.name}.{os.getpid()}.tmp")
    manifest = f"Manifest-Version: 1.0\r\n{MANIFEST_FLINK}: {FLINK_VERSION}\r\n"
    manifest += f"{MANIFEST_KAFKA_CONNECTOR}: {KAFKA_CONNECTOR_VERSION}\r\n\r\n"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", manifest)
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    partial.replace(jar)  # atomic: a concurrent or killed build never leaves half a jar
    return jar


def pyflink_jars() -> list[Path]:
    """The jars a PyFlink job adds to ``pipeline.jars``: the sink's, the Kafka connector's and PostgreSQL's driver.

    apache-flink (PyPI, :data:`FLINK_VERSION`) ships Flink itself and its logging; SLF4J's API is left out.
    """
    extra = maven_classpath(_PYFLINK_EXTRA, name=f"pyflink-{FLINK_VERSION}")
    return [sink_jar(), *(Path(j) for j in extra if not Path(j).name.startswith("slf4j-"))]
