"""The Java sink on a Flink of another version than it is built for: the job fails with one line naming both, nothing joined.

The sink's classes (compiled against Flink 2.2.0) run on Flink 2.1.1's jars from Maven Central,
as a user's cluster of another version would load them; the same program on 2.2.0 builds the sink.
(PyFlink's side, apache-flink against the jars' manifest: tests/flink/test_pyflink.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.flink_integration import POSTGRESQL_JDBC_VERSION, compile_java, flink_classpath, sink_classpath
from offsetstore.kafka_integration.maven import maven_classpath
from tests.fixtures.fix_flink import FlinkJobs

pytestmark = [pytest.mark.flink, pytest.mark.timeout(600)]

OTHER_FLINK = "2.1.1"
BUILD_SINK = """\
import offsetstore.flink.OffsetStoreSink;

public class BuildSink {
    public static void main(String[] a) {
        OffsetStoreSink.forRows(a[1], "topic", "\\"partition\\"", "\\"offset\\"", "value")
                .jdbcUrl(a[0]).property("user", a[3]).groupId(a[2]).build();
        System.out.println("built");
    }
}
"""


def joined(engine: sa.Engine, group_id: str) -> bool:
    with engine.connect() as conn:
        sql = "SELECT count(*) FROM offsetstore.groups WHERE group_id = %(g)s"
        return conn.exec_driver_sql(sql, {"g": group_id}).scalar_one() > 0


def test_the_sink_on_another_flink_fails_with_one_line_naming_both_versions_and_joins_nothing(
    flink_jobs: FlinkJobs, engine: sa.Engine, group_id: str, tmp_path: Path
) -> None:
    source = tmp_path / "BuildSink.java"
    source.write_text(BUILD_SINK)
    sink = str(sink_classpath())
    main = str(compile_java([source], [*flink_classpath(jdbc_connector=False), sink], name="flink-build-sink"))
    other = maven_classpath(
        [f"org.apache.flink:flink-runtime:{OTHER_FLINK}", f"org.postgresql:postgresql:{POSTGRESQL_JDBC_VERSION}"],
        name=f"flink-{OTHER_FLINK}-runtime",
    )
    assert any(Path(j).name == f"flink-core-{OTHER_FLINK}.jar" for j in other)

    def build(classpath: list[str], group: str) -> subprocess.CompletedProcess[str]:
        command = [shutil.which("java") or "java", "-cp", os.pathsep.join([main, sink, *classpath]), "BuildSink",
                   flink_jobs.jdbc_url, "public.t", group, flink_jobs.user]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    done = build(other, group_id)
    assert done.returncode != 0
    (failure,) = [line for line in done.stderr.splitlines() if line.startswith("Exception")]  # SLF4J's notes aside
    assert failure == (
        'Exception in thread "main" java.lang.IllegalStateException: offsetstore: the Flink integration is built for '
        f"Flink 2.2.x with flink-connector-kafka 5.0.0-2.2; this runtime is Flink {OTHER_FLINK}: run the job on "
        "Flink 2.2.x (PyFlink: pip install apache-flink==2.2.0)"
    )
    assert not joined(engine, group_id)

    # The control: on the Flink it is built for, the same program joins the group.
    done = build(flink_classpath(jdbc_connector=False), group_id)
    assert done.returncode == 0 and done.stdout.strip() == "built", done.stderr[-2000:]
    assert joined(engine, group_id)
