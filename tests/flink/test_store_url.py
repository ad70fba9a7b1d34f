"""The Flink integration never prints the password of a store URL it refuses (issue 56, L5).

Compiles ``StoreJdbc`` (it needs only the JDK) with a probe that builds one from a URL and
prints the error, as ``build()`` of the sink and ``StoreOffsetsInitializer.of`` do.
"""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from offsetstore.flink_integration.build import compile_java

pytestmark = pytest.mark.flink

PROBE = """
public class Probe {
    public static void main(String[] args) throws Exception {
        for (String url : args) {
            try {
                new offsetstore.flink.StoreJdbc(url, null, "g").connect();
                System.out.println("connected");
            } catch (IllegalArgumentException | java.sql.SQLException e) {
                System.out.println(e.getMessage());
            }
        }
    }
}
"""


def test_a_refused_url_is_shown_without_its_user_info_or_query(tmp_path: Path) -> None:
    java = shutil.which("java")
    assert java is not None, "the flink tests need a JDK"
    probe = tmp_path / "Probe.java"
    probe.write_text(PROBE)
    with resources.as_file(resources.files("offsetstore.flink_integration") / "java") as root:
        classes = compile_java([Path(root) / "offsetstore" / "flink" / "StoreJdbc.java", probe], [], name="url-probe")
    urls = [
        "postgresql://alice:s3cr3t@db.example:5432/offsets",  # libpq's form, not JDBC's
        "jdbc:mysql://db.example/offsets?user=alice&password=s3cr3t",
        "alice:s3@cr3t@db.example/offsets",
        # JDBC's form without PostgreSQL's driver on the class path: DriverManager names the URL.
        "jdbc:postgresql://alice:s3cr3t@db.example/offsets?password=s3cr3t",
    ]
    shown = subprocess.run([java, "-cp", str(classes), "Probe", *urls], capture_output=True, text=True, check=True)
    lines = shown.stdout.splitlines()
    assert len(lines) == len(urls), shown
    assert "s3cr3t" not in shown.stdout and "alice" not in shown.stdout, shown.stdout
    assert lines[0] == (
        "offsetstore: the store's URL must be a jdbc:postgresql: URL, not postgresql://...@db.example:5432/offsets"
        " (give the user and password as properties, not in the URL)"
    )
    assert "jdbc:mysql://db.example/offsets?..." in lines[1]
    assert "jdbc:postgresql://...@db.example/offsets?..." in lines[3]
