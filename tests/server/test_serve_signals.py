"""A terminal's Ctrl-C and a SIGTERM to the process group of ``offsetstore serve``: one drain, exit 0, nothing restarted.

A terminal sends SIGINT to every process of its foreground process group: the supervisor, its
serving processes, multiprocessing's resource tracker. ``make run`` adds make itself, which
forwards nothing. Each test starts the real ``offsetstore serve`` in a session of its own (as a
shell starts a job) and signals that whole group with ``os.killpg``, as the terminal does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from offsetstore.client import OffsetStoreClient
from tests.fixtures.fix_server import free_port
from tests.fixtures.processes import stat_of
from tests.fixtures.waits import wait_for, wait_until_serving

pytestmark = pytest.mark.slow

#: Each time is a start and a stop of the real server: ten, as the issue asks, on the session's
#: database and with one serving process each (a start costs seconds of CPU per process).
TIMES = 10


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Under /tmp: as root the embedded server opens up the permissions of its parents.
    path = Path(tempfile.mkdtemp(prefix="offsetstore-signals-"))
    yield path / "pgdata"
    shutil.rmtree(path, ignore_errors=True)


def serve_in_a_group_of_its_own(
    log: Path, *flags: str, database_url: str | None = None, processes: int = 2, all_ready: bool = True
) -> subprocess.Popen[bytes]:
    """``offsetstore serve`` (on free ports) as the leader of a new process group, SERVING.

    With ``all_ready`` it returns once every serving process is ready, else once the first is.
    """
    address = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    command = [sys.executable, "-m", "offsetstore.cli.main", "serve", "--listen", address]
    command += ["--processes", str(processes)]
    command += ["--metrics-listen", f"127.0.0.1:{free_port()}", *flags]
    if database_url is not None:
        command += ["--database-url", database_url, "--no-migrate"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        with OffsetStoreClient(address, timeout=5) as probe:
            wait_until_serving(probe, process, log.read_text, seconds=120)
        if all_ready:  # the supervisor says "serving" once the last one is ready
            wait_for(lambda: '"serving"' in log.read_text(), "the supervisor's serving line", 120)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return process


def signal_the_group(process: subprocess.Popen[bytes], log: Path, signum: signal.Signals) -> str:
    """Sends ``signum`` to the server's whole process group, as a terminal does; its log once it exited 0."""
    assert os.getpgid(process.pid) == process.pid
    os.killpg(process.pid, signum)
    try:
        code = process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise AssertionError(f"still running 60 s after {signum.name} to its group:\n{log.read_text()}") from None
    output = log.read_text(errors="replace")
    assert code == 0, f"exit code {code} after {signum.name} to the group:\n{output}"
    # Nothing of the group outlives the supervisor: no serving process, no resource tracker.
    wait_for(lambda: not _group_alive(process.pid), "every process of the group to exit", 30)
    return output


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # A zombie answers too: alive means a process of the group that is not one.
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(fields[3]) == pgid and fields[0] != "Z":
                    return True
    return False


def assert_one_clean_stop(output: str, processes: int | None = 2) -> None:
    """No error, nothing started again, one "shutting down"; ``processes`` "serving process ready" lines (if said)."""
    errors = [line for line in output.splitlines() if " ERROR " in line or "Traceback" in line]
    assert errors == [], output
    # Each serving process started once: none was taken for dead and started again.
    if processes is not None:
        assert len(re.findall(r'"serving process ready"', output)) == processes, output
    assert "starting another" not in output, output
    # The supervisor was told once and drained once.
    assert len(re.findall(r'"shutting down"', output)) == 1, output
    assert '"stopped"' in output, output


def test_ctrl_c_to_the_group_drains_once_and_exits_0_every_time(database_url: str, tmp_path: Path) -> None:
    for time in range(TIMES):
        log = tmp_path / f"serve-{time}.log"
        process = serve_in_a_group_of_its_own(log, database_url=database_url, processes=1)
        assert_one_clean_stop(signal_the_group(process, log, signal.SIGINT), processes=1)


def test_sigterm_to_the_group_drains_once_and_exits_0(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    process = serve_in_a_group_of_its_own(log, database_url=database_url)
    assert_one_clean_stop(signal_the_group(process, log, signal.SIGTERM))


def test_ctrl_c_to_the_group_stops_the_embedded_postgresql_too(data_dir: Path) -> None:
    # `make run`: no database given, the supervisor starts the embedded one (a child of its own).
    log = data_dir.parent / "serve.log"
    process = serve_in_a_group_of_its_own(log, "--data-dir", str(data_dir))
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    started = stat_of(postmaster)
    assert started is not None
    assert_one_clean_stop(signal_the_group(process, log, signal.SIGINT))
    # Stopped in order (its pid file removed), not left running nor killed by the terminal's signal.
    wait_for(lambda: stat_of(postmaster) != started, "the embedded PostgreSQL to stop", 60)
    assert not (data_dir / "postmaster.pid").exists(), log.read_text()


def test_ctrl_c_while_the_serving_processes_start_stops_them_all_and_exits_0(database_url: str, tmp_path: Path) -> None:
    # The first serving process answers SERVING while the second starts (they start one after
    # the other): a Ctrl-C now must not be the second's death, nor a failed start.
    log = tmp_path / "serve.log"
    process = serve_in_a_group_of_its_own(log, database_url=database_url, all_ready=False)
    output = signal_the_group(process, log, signal.SIGINT)
    assert_one_clean_stop(output, processes=None)
    assert len(re.findall(r'"serving process ready"', output)) <= 2, output


def test_serving_processes_stop_when_the_supervisor_is_killed(database_url: str, tmp_path: Path) -> None:
    # They ignore a terminal's SIGINT now: a SIGKILLed supervisor (OOM killer, kill -9) must still not leave them serving.
    log = tmp_path / "serve.log"
    process = serve_in_a_group_of_its_own(log, database_url=database_url)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    try:
        wait_for(lambda: not _group_alive(process.pid), "the serving processes to exit after their supervisor", 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert log.read_text(errors="replace").count("supervisor gone; stopping") == 2, log.read_text()


def test_ctrl_c_to_make_run_stops_the_server_cleanly(database_url: str, tmp_path: Path) -> None:
    # The Quickstart's `make run`: make is the group's leader and forwards nothing; the terminal's
    # SIGINT reaches make and the server alike. make waits for its recipe, then ends by the signal
    # itself (a shell says 130): what must not happen is a recipe that failed ("Error 1").
    root = Path(__file__).resolve().parents[2]
    venv = Path(sys.executable).parent.parent  # the tests' own: its stamps say the server is installed
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    env |= {
        "OFFSETSTORE_DATABASE_URL": database_url,
        "OFFSETSTORE_MIGRATE": "0",
        "OFFSETSTORE_LISTEN": f"127.0.0.1:{free_port()}",
        "OFFSETSTORE_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
    }
    command = ["make", "-C", str(root), "-o", str(venv / ".installed-run"), f"VENV={venv}", "run"]
    log = tmp_path / "make.log"
    with log.open("wb") as out:
        make = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for(lambda: '"serving"' in log.read_text() or make.poll() is not None, "make run to serve", 120)
        assert make.poll() is None, log.read_text()
        os.killpg(make.pid, signal.SIGINT)
        status = make.wait(60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    assert status == -signal.SIGINT, f"make ended with {status}:\n{output}"
    assert "Error" not in output and "make: ***" not in output, output
    assert_one_clean_stop(output, processes=None)
    wait_for(lambda: not _group_alive(make.pid), "every process of make run's group to exit", 30)
