"""The serving processes of ``offsetstore serve``: spawned, watched, replaced, drained; and the body of each.

Signals belong to the supervisor. A terminal's Ctrl-C sends SIGINT to its whole foreground
process group, the serving processes included, and ``kill -TERM -PGID`` (or a service manager
that signals every process of the unit) sends them SIGTERM: a serving process ignores SIGINT
and drains on SIGTERM as it would when the supervisor asks, and the supervisor does not take a
serving process that stopped while it was itself told to stop for one that died.

No signal's default action ever ends a serving process: it is spawned with SIGINT, SIGTERM and
SIGHUP blocked, and every thread it makes inherits that mask, so one thread takes them with
``sigwait``. A SIGTERM while it starts waits for it to listen; a second one (the supervisor's,
after the group's) while it exits, when asyncio would have put the default action back, stays
pending and dies with it: exit 0, not -15. Whatever kills the supervisor (SIGKILL too), each
serving process sees it within a second (its parent changes) and drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from offsetstore.runtime import event_loop
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server._logging import configure_logging
from offsetstore.server.config import Settings
from offsetstore.server.grpc_connections import raise_descriptor_limit
from offsetstore.server.security import reloader, security
from offsetstore.server.tracing import write_carry
from offsetstore.storage.engine import last_replication_said, replication_said

if TYPE_CHECKING:  # aiohttp and the listener load in a serving process only
    from offsetstore.server.http import HttpConfig

__all__ = ["RESTART_PAUSE_SECONDS", "START_SECONDS", "StartError", "Workers", "serve", "serving_process"]

log = logging.getLogger(__name__)

#: How long the supervisor waits for a serving process to listen.
START_SECONDS = 60.0
#: A serving process that dies is started again after this pause (no restart storm). A signal
#: to the whole process group reaches the supervisor in the same instant as its serving processes,
#: which exit only once drained: a stop asked within the pause means nobody died.
RESTART_PAUSE_SECONDS = 1.0
#: What a serving process blocks in every thread from birth (a spawned process inherits its
#: spawner's mask): its signal thread takes SIGTERM and SIGHUP with sigwait; SIGINT is ignored.
_HELD_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


class StartError(Exception):
    """The server cannot start; the message says why and what to do (one line, exit code 2)."""


class Workers:
    """The serving processes: started, watched, replaced when they die, drained on stop.

    ``stopping`` is the supervisor's: once set, no serving process is started, and one that
    exits is not replaced.
    """

    def __init__(
        self, settings: Settings, database_url: str, listen: str, directory: str, stopping: threading.Event
    ) -> None:
        self.settings = settings
        self.database_url = database_url
        self.listen = listen
        self.directory = directory
        self.stopping = stopping
        self._context = multiprocessing.get_context("spawn")
        self._processes: dict[int, BaseProcess] = {}

    def start(self) -> None:
        """Starts every serving process and waits until each listens (a stop asked meanwhile starts no more)."""
        for index in range(self.settings.processes):
            if self.stopping.is_set():
                return
            self._processes[index] = self._spawn(index)

    def _spawn(self, index: int) -> BaseProcess:
        ready = self._context.Event()
        process = self._context.Process(
            target=serving_process,
            # What the log said of the database's replication: the process repeats it only if it sees otherwise.
            args=(
                self.settings,
                self.database_url,
                self.listen,
                self.directory,
                index,
                os.getpid(),
                ready,
                last_replication_said(),
            ),
            name=f"offsetstore-serve-{index}",
        )
        # Blocked in this thread only (the supervisor's handlers run in its main thread), for the fork.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        stop_at = time.monotonic() + START_SECONDS
        while not ready.wait(0.1):
            if not process.is_alive():
                raise StartError(f"serving process {index} exited with code {process.exitcode} (see its log above)")
            if time.monotonic() > stop_at:
                process.kill()
                raise StartError(f"serving process {index} did not listen within {START_SECONDS:g} s")
        return process

    def replace_dead(self) -> None:
        for index, process in list(self._processes.items()):
            if process.is_alive():
                continue
            if self.stopping.wait(RESTART_PAUSE_SECONDS):
                return  # it stopped as the supervisor is stopping (a signal to the group): stop() reaps it
            log.error(
                "serving process died; starting another",
                extra={"index": index, "pid": process.pid, "exitcode": process.exitcode},
            )
            mark_dead(process.pid)
            try:
                self._processes[index] = self._spawn(index)
            except StartError as error:
                log.error("serving process not replaced: %s; trying again", error)

    def signal(self, signum: int) -> None:
        for process in self._processes.values():
            if process.pid is not None and process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signum)

    def stop(self, grace: float) -> bool:
        """SIGTERM to each, which drains its calls within ``grace``; True when every one exited 0."""
        self.signal(signal.SIGTERM)
        clean = True
        stop_at = time.monotonic() + grace + 15  # the drain, then closing its connections
        for process in self._processes.values():
            process.join(max(0.0, stop_at - time.monotonic()))
            if process.is_alive():
                log.error("serving process did not stop in time; killed", extra={"pid": process.pid})
                process.kill()
                process.join()
            if process.exitcode != 0:
                log.error(
                    "serving process exited with code %s while stopping", process.exitcode, extra={"pid": process.pid}
                )
            clean = clean and process.exitcode == 0
            mark_dead(process.pid)
        return clean


def mark_dead(pid: int | None) -> None:
    from prometheus_client import multiprocess

    if pid is not None:
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # unannotated upstream


def serving_process(
    settings: Settings,
    database_url: str,
    listen: str,
    directory: str,
    index: int,
    parent: int,
    ready: Any,
    replication: str | None = None,
) -> None:
    """The body of one serving process: :func:`serve` on a loop of its own until SIGTERM (or its supervisor's death)."""
    # Born so (Workers._spawn); said again before any thread exists, which all inherit it.
    signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    # SIGINT is a terminal's, sent to the whole group: the supervisor's to act on. Ignoring it
    # drops one already pending.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(settings.log_level, settings.log_format)
    raise_descriptor_limit()  # inherited from the supervisor already, unless started otherwise
    replication_said(replication)
    code = event_loop.run(serve(settings, database_url, listen, directory, index, parent, ready), settings.event_loop)
    if code:
        raise SystemExit(code)


async def serve(
    settings: Settings, database_url: str, listen: str, directory: str, index: int, parent: int, ready: Any
) -> int:
    """One serving process's loop: its one store and its gRPC server on it, ``async with`` both; the exit code."""
    from offsetstore.server import metrics, tracing
    from offsetstore.server.app import OffsetStoreServer

    metrics.use_multiprocess(directory)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    credentials, auth = security(settings)
    # Without a tokens file a SIGHUP (a terminal's hang-up too) has nothing to reload.
    reload = reloader(auth, settings.tokens_file) if auth is not None and settings.tokens_file is not None else None
    threading.Thread(
        target=_take_signals, args=(loop, stopping, reload), name="offsetstore-signals", daemon=True
    ).start()
    registry, observer = metrics.worker_metrics()
    # Tracing (OTEL_*) is set up before the store opens: its connections are traced from the first.
    tracing.setup(trust_callers=settings.trace_trust_callers)
    config = settings.store_config(database_url, observer=observer, carry=write_carry())
    async with AsyncStore(config) as store:
        await store.warm()  # outside any call: the first-connect queries are in no call's trace
        server = OffsetStoreServer(
            store,
            listen,
            limits=settings.limits(),
            http=http_config(settings),
            interceptors=metrics.interceptors(registry),
            auth=auth,
            credentials=credentials,
            reuse_port=True,
        )
        try:
            await server.start()
        except (RuntimeError, OSError) as error:
            log.error("serving process cannot listen on %s: %s", listen, error)
            return 2
        try:
            quiet_garbage_collector()
            ready.set()
            log.info("serving process ready", extra={"index": index, "event_loop": event_loop.running()})
            while not stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), 1.0)
                if os.getppid() != parent:  # the supervisor is gone (killed): nobody would restart or stop us
                    log.error("supervisor gone; stopping")
                    break
        finally:
            await server.stop(settings.grace_seconds)
    return 0


def _take_signals(loop: asyncio.AbstractEventLoop, stopping: asyncio.Event, reload: Any) -> None:
    """The serving process's signal thread: SIGTERM stops its loop's server, SIGHUP reloads the tokens; until it exits.

    A daemon: once the loop is closed it stays in ``sigwait``, and what comes then is never acted on.
    """
    while True:
        signum = signal.sigwait({signal.SIGTERM, signal.SIGHUP})
        try:
            if signum == signal.SIGTERM:
                loop.call_soon_threadsafe(stopping.set)
            elif reload is not None:
                loop.call_soon_threadsafe(reload, signum, None)
        except RuntimeError:  # the loop is closed: the process is exiting
            return


def http_config(settings: Settings) -> HttpConfig | None:
    """The serving process's HTTP listener, on the gRPC server's certificate and client CA; None unless ``--http-listen``."""
    if not settings.http_listen:
        return None
    from offsetstore.server.http import HttpConfig, http_ssl_context

    tls = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        tls = http_ssl_context(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
    hosts = tuple(name for name in settings.http_allowed_hosts.split(",") if name.strip())
    return HttpConfig(settings.http_listen, ssl_context=tls, allowed_hosts=hosts)


def quiet_garbage_collector() -> None:
    """Keeps the cyclic garbage collector from stalling every call for tens of milliseconds.

    A wide request allocates tens of thousands of objects; with the default thresholds
    they set off full collections that walk every object the process holds (the modules,
    the pools, the server), while every other call waits on the event loop. What exists
    once the server listens is frozen out of collection for good, and the young
    generation is collected less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
