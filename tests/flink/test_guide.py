"""docs/flink.md as a user reads it: what it names is what the tests fetch, run and print.

No Flink runs here: the guide's job is ``examples/flink/CopyTopicJob.java``, which
tests/flink/test_exactly_once.py runs; these check the guide shows that job's settings and flags,
the coordinates the comparisons fetch, the Log4j file the tests use, and an install line that works.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from offsetstore.flink_integration import JDBC_CONNECTOR_VERSION, build
from tests.fixtures.doc_snippets import snippets
from tests.fixtures.fix_flink import EXAMPLE, LOG4J2

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "flink.md"


def guide_text() -> str:
    return " ".join(GUIDE.read_text().split())


def test_the_jdbc_connector_is_named_by_the_coordinates_the_comparisons_fetch() -> None:
    # Maven Central has flink-connector-jdbc-core and -postgres 4.0.0-2.0, and no flink-connector-jdbc of that version.
    assert set(build._JDBC_CONNECTOR) == {
        f"org.apache.flink:flink-connector-jdbc-core:{JDBC_CONNECTOR_VERSION}",
        f"org.apache.flink:flink-connector-jdbc-postgres:{JDBC_CONNECTOR_VERSION}",
    }
    text = GUIDE.read_text()
    for coordinate in build._JDBC_CONNECTOR:
        assert f"`{coordinate}`" in text, coordinate
    assert re.search(r"flink-connector-jdbc(?![-\w])[`\s:]+\d", text) is None, "a version of the bare artifact"


def test_the_jobs_checkpoint_settings_are_the_examples() -> None:
    """Retained, externalized checkpoints and the recovery path: what lets step 3 restore an older one."""
    (job,) = [s for s in snippets(GUIDE, "java") if "KafkaSource" in s]
    keys = re.findall(r'conf\.put\("([^"]+)"', job)
    assert {
        "execution.checkpointing.dir",
        "execution.checkpointing.externalized-checkpoint-retention",
        "execution.checkpointing.num-retained",
        "execution.state-recovery.path",
    } <= set(keys)
    example = EXAMPLE.read_text()
    for key in keys:
        assert f'"{key}"' in example, key
    assert '"RETAIN_ON_CANCELLATION"' in job and '"RETAIN_ON_CANCELLATION"' in example


def test_each_copytopicjob_command_uses_flags_the_example_reads() -> None:
    commands = [
        shlex.split(line.split("#")[0].replace("<", "").replace(">", ""))
        for block in snippets(GUIDE, "sh")
        for line in block.replace("\\\n", " ").splitlines()
        if "CopyTopicJob" in line and "..." not in line
    ]
    assert any("--restore" in c for c in commands), "the restore command, written out"
    example = EXAMPLE.read_text()
    for command in commands:
        for flag in (a for a in command if a.startswith("--")):
            assert f'"{flag}"' in example, f"CopyTopicJob does not read {flag}"
    assert '"--run", "1"' in example and "`run`: the number the job was started with" in guide_text()


def test_the_fence_line_the_guide_quotes_is_the_one_copytopicjob_prints() -> None:
    text = guide_text()
    assert "`failed: offsetstore.flink.FencedException: offsetstore: group orders-flink fenced generation 7:" in text
    example = EXAMPLE.read_text()
    assert '"failed: " + root.getClass().getName() + ": "' in example
    assert 'findThrowableWithMessage(e, "offsetstore:")' in example


def test_the_log4j_file_the_guide_gives_is_the_one_the_tests_run_with() -> None:
    assert LOG4J2 == ROOT / "examples" / "flink" / "log4j2.properties" and LOG4J2.is_file()
    assert "-Dlog4j2.configurationFile=examples/flink/log4j2.properties" in guide_text()


@pytest.mark.slow
def test_the_pyflink_install_line_works_from_the_checkout(tmp_path: Path) -> None:
    """The guide's ``pip install --no-deps`` into a fresh venv, run from the checkout as the guide's commands are.

    About 20 s: pip builds the wheel (setuptools from the index, as a user's pip does). apache-flink is
    not installed (minutes); the module is there, which is what the line is for.
    """
    (line,) = [
        line.split("#")[0].strip()
        for block in snippets(GUIDE, "sh")
        for line in block.splitlines()
        if "pip install --no-deps" in line
    ]
    # A checkout of its own (the committed files): pip builds in the tree, which must not be the one tests run from.
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True, timeout=120)
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive.stdout, check=True, timeout=120)
    venv = tmp_path / "pyflink"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    line = line.replace("/var/tmp/pyflink", str(venv))
    done = subprocess.run(line, shell=True, cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.util as u; print(u.find_spec('offsetstore.pyflink_integration').origin)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip().startswith(str(venv)), found.stdout
