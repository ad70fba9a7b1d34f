"""make test's worker groups take effect: the tests of one xdist group run on one worker.

tests/fixtures/scheduling.py keeps Spark's, Kafka's and the packaging tests on one worker each
(a shared Ivy cache, brokers, wheels built in the source tree). pytest-xdist marks a group by
rewriting node ids; pytest 9.2 stopped reading them and every group was spread over both workers
without a word (two Spark sessions resolving into one empty Ivy cache at once). This runs the
installed pytest and xdist as make test does, on a file of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = """
import os

import pytest


@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("i", range(8))
def test_grouped(i):
    out = os.environ["WORKER_GROUPS_OUT"]
    with open(os.path.join(out, f"grouped-{i}"), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.parametrize("i", range(8))
def test_free(i):
    pass
"""


def test_one_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_groups.py").write_text(TESTS)
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "test_groups.py",
        ],
        cwd=tmp_path,
        env={**os.environ, "WORKER_GROUPS_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    workers = {path.read_text() for path in out.iterdir()}
    assert len(list(out.iterdir())) == 8
    assert len(workers) == 1, f"one xdist group ran on {sorted(workers)}: pytest and pytest-xdist disagree on node ids"
