"""``offsetstore serve``: a supervising process and N serving processes on one port.

The supervisor starts the embedded PostgreSQL (if no database is given) and applies the
migrations, then starts ``--processes`` serving processes (spawned: fresh interpreters,
never a fork of a process with gRPC threads) that all listen on the gRPC port with
SO_REUSEPORT; the kernel spreads connections over them. The supervisor itself never runs
gRPC. It runs what must run once: the maintenance rounds (retention), ``/metrics`` (which
sums every serving process's series, prometheus-client's multiprocess mode, plus the
per-group series it reads from the database) and the embedded database. A serving process
that dies is logged and replaced; SIGTERM drains them all (each finishes its in-flight
calls within ``--grace-seconds``) and exits 0; SIGHUP rereads the tokens file in each.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
import sqlalchemy
import sqlalchemy.exc

from offsetstore.core.durations import format_duration
from offsetstore.server._logging import configure_logging
from offsetstore.server.auth import AuthConfig, AuthConfigError, AuthInterceptor, server_credentials
from offsetstore.server.config import Settings, split_host_port
from offsetstore.storage import migrate
from offsetstore.storage.engine import create_engine
from offsetstore.storage.store import Store

__all__ = ["serve"]

log = logging.getLogger(__name__)

#: How long the supervisor waits for a serving process to listen.
START_SECONDS = 60.0
#: A serving process that dies is started again after this pause (no restart storm).
RESTART_PAUSE_SECONDS = 1.0


class StartError(Exception):
    """The server cannot start; the message says why and what to do (one line, exit code 2)."""


def serve(settings: Settings) -> int:
    """Runs until SIGTERM or SIGINT; returns the process exit code."""
    configure_logging(settings.log_level, settings.log_format)
    try:
        _, auth = _security(settings)  # read and checked now: a bad file stops the start, not a child
        reservation = _reserve(settings.listen)
    except (AuthConfigError, StartError) as error:
        log.error("cannot start: %s", error)
        return 2
    stopping = threading.Event()
    reload = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stopping.set()

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        reload.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    embedded = None
    directory = tempfile.mkdtemp(prefix="offsetstore-metrics-")
    try:
        database_url = settings.database_url
        if database_url is None:
            from offsetstore.storage.embedded import EmbeddedPostgres

            embedded = EmbeddedPostgres(settings.data_dir)
            database_url = embedded.start()
        _check_database(database_url, settings.migrate)
        return _supervise(settings, database_url, reservation, auth, directory, stopping, reload, embedded)
    except StartError as error:
        log.error("cannot start: %s", error)
        return 2
    finally:
        reservation.close()
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _supervise(
    settings: Settings,
    database_url: str,
    reservation: socket.socket,
    auth: AuthInterceptor | None,
    directory: str,
    stopping: threading.Event,
    reload: threading.Event,
    embedded: Any,
) -> int:
    from offsetstore.server import metrics
    from offsetstore.storage.retention import Maintenance

    metrics.use_multiprocess(directory)
    host, port = reservation.getsockname()[:2]
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    store = _store(settings, database_url, pool_size=2)
    # Scrapes get a connection of their own and reuse a query's rows for a few seconds: no
    # number of /metrics connections can take the connections the RPCs need (issue 14).
    # Two: the sums of groups beyond their share of series are read by a thread of their own.
    scrape_store = _store(settings, database_url, pool_size=2, application_name="offsetstore-metrics")
    registry = metrics.build_registry(
        store,
        group_limit=settings.group_metrics_limit,
        series_limit=settings.metrics_series_limit,
        scrape_store=scrape_store,
        cache_seconds=metrics.SCRAPE_CACHE_SECONDS,
        sums_seconds=metrics.SUMS_SECONDS,
        tenant_prefixes=_tenant_prefixes(auth),
        multiprocess_dir=directory,
    )
    workers = _Workers(settings, database_url, listen, directory)
    metrics_server = None
    maintenance = None
    try:
        workers.start()
        maintenance = Maintenance(
            store,
            history_retention=settings.history_retention,
            offsets_retention=settings.offsets_retention,
            interval=settings.maintenance_interval,
            metrics=metrics.retention_metrics(registry),
        ).start()
        if settings.metrics_listen:
            tls = settings.tls if settings.metrics_tls is None else settings.metrics_tls
            metrics_server = metrics.serve_http(
                registry,
                settings.metrics_listen,
                certfile=settings.tls_cert_file if tls else None,
                keyfile=settings.tls_key_file if tls else None,
                client_cafile=settings.tls_client_ca_file if tls else None,
                cache_seconds=metrics.SCRAPE_CACHE_SECONDS,
            )
        log.info(
            "serving",
            extra={
                "listen": listen,
                "processes": settings.processes,
                "metrics": metrics_server.url if metrics_server is not None else "off",
                "embedded": embedded is not None,
                "tls": "mutual" if settings.tls_client_ca_file else "on" if settings.tls else "off",
                "tokens": settings.tokens_file is not None,
                "history_retention": format_duration(settings.history_retention),
                "offsets_retention": format_duration(settings.offsets_retention),
            },
        )
        while not stopping.wait(0.2):
            if reload.is_set():
                reload.clear()
                _reload(settings, workers)
            workers.replace_dead()
    finally:
        if maintenance is not None:
            maintenance.stop()
        clean = workers.stop(settings.grace_seconds)
        if metrics_server is not None:
            metrics_server.shutdown()
        store.dispose()
        scrape_store.dispose()
    log.info("stopped")
    return 0 if clean else 1


def _check_database(database_url: str, apply_migrations: bool) -> None:
    """Reaches the database (and migrates it); an unreachable one is a StartError of one line."""
    try:
        if apply_migrations:
            migrate.upgrade(database_url)
        else:
            migrate.current(database_url)
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as error:
        reason = str(getattr(error, "orig", error)).strip().splitlines()[0]
        raise StartError(
            f"cannot reach the database at {sqlalchemy.make_url(database_url).render_as_string(hide_password=True)}: "
            f"{reason}. Check --database-url (OFFSETSTORE_DATABASE_URL): the server, the database name, the role"
        ) from None


def _reload(settings: Settings, workers: _Workers) -> None:
    if settings.tokens_file is None:
        log.info("SIGHUP: nothing to reload (no --tokens-file)")
        return
    try:
        AuthConfig.load(settings.tokens_file)  # said once here; each serving process reloads it
    except AuthConfigError as error:
        log.error("tokens file not reloaded, the previous one stays in force: %s", error)
        return
    workers.signal(signal.SIGHUP)


def _store(settings: Settings, database_url: str, *, pool_size: int, application_name: str = "offsetstore") -> Store:
    return Store(
        create_engine(
            database_url,
            pool_size=pool_size,
            statement_timeout_ms=settings.statement_timeout_ms,
            application_name=application_name,
        ),
        statement_timeout_ms=settings.statement_timeout_ms,
        write_flushers=min(settings.write_flushers, pool_size),
        max_response_bytes=settings.max_response_bytes,
    )


def _reserve(listen: str) -> socket.socket:
    """A socket that holds ``listen``'s port for the serving processes (SO_REUSEPORT, bound, not listening).

    First a plain bind: SO_REUSEPORT alone would let this server share a port with another
    offsetstore already serving there, which must be a clear error instead.
    """
    try:
        host, port = split_host_port(listen)
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (ValueError, OSError) as error:
        raise StartError(f"cannot listen on {listen!r}: {error}") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR: the connections of a server stopped a moment ago (TIME_WAIT) are no
        # reason to refuse; a socket listening there still is.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise StartError(
                f"cannot listen on {listen}: {error.strerror or error}; is another offsetstore serving there? "
                "Stop it, or choose another address with --listen"
            ) from None
        address = probe.getsockname()  # port 0: the port the kernel chose
    held = socket.socket(family, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    held.bind(address)
    return held


class _Workers:
    """The serving processes: started, watched, replaced when they die, drained on stop."""

    def __init__(self, settings: Settings, database_url: str, listen: str, directory: str) -> None:
        self.settings = settings
        self.database_url = database_url
        self.listen = listen
        self.directory = directory
        self._context = multiprocessing.get_context("spawn")
        self._processes: dict[int, BaseProcess] = {}

    def start(self) -> None:
        """Starts every serving process and waits until each listens."""
        for index in range(self.settings.processes):
            self._processes[index] = self._spawn(index)

    def _spawn(self, index: int) -> BaseProcess:
        ready = self._context.Event()
        process = self._context.Process(
            target=_serving_process,
            args=(self.settings, self.database_url, self.listen, self.directory, index, os.getpid(), ready),
            name=f"offsetstore-serve-{index}",
        )
        process.start()
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
            log.error(
                "serving process died; starting another",
                extra={"index": index, "pid": process.pid, "exitcode": process.exitcode},
            )
            _mark_dead(process.pid)
            time.sleep(RESTART_PAUSE_SECONDS)
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
            clean = clean and process.exitcode == 0
            _mark_dead(process.pid)
        return clean


def _mark_dead(pid: int | None) -> None:
    from prometheus_client import multiprocess

    if pid is not None:
        multiprocess.mark_process_dead(pid)


def _serving_process(
    settings: Settings, database_url: str, listen: str, directory: str, index: int, parent: int, ready: Any
) -> None:
    """The body of one serving process: the gRPC server until SIGTERM (or its supervisor's death)."""
    configure_logging(settings.log_level, settings.log_format)
    from offsetstore.server import metrics
    from offsetstore.server.app import OffsetStoreServer

    metrics.use_multiprocess(directory)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
    credentials, auth = _security(settings)
    if auth is not None and settings.tokens_file is not None:
        signal.signal(signal.SIGHUP, _reloader(auth, settings.tokens_file))
    store = _store(settings, database_url, pool_size=settings.pool_size)
    registry = metrics.worker_registry(store)
    mirror = _kafka_mirror(settings, registry)
    try:
        server = OffsetStoreServer(
            store,
            listen,
            max_workers=settings.max_workers,
            interceptors=metrics.interceptors(registry),
            auth=auth,
            credentials=credentials,
            max_message_bytes=settings.max_message_bytes,
            reflection_mode=settings.reflection,
            max_streams=settings.max_streams,
            max_calls_per_principal=settings.max_calls_per_principal,
            principal_bytes_per_second=settings.principal_bytes_per_second,
            max_groups_per_principal=settings.max_groups_per_principal,
            max_partitions_per_principal=settings.max_partitions_per_principal,
            reuse_port=True,
            kafka_mirror=mirror,
        ).start()
    except (RuntimeError, OSError) as error:
        log.error("serving process cannot listen on %s: %s", listen, error)
        store.dispose()
        raise SystemExit(2) from None
    _quiet_garbage_collector()
    ready.set()
    log.info("serving process ready", extra={"index": index})
    while not stopping.wait(1.0):
        if os.getppid() != parent:  # the supervisor is gone (killed): nobody would restart or stop us
            log.error("supervisor gone; stopping")
            break
    server.stop(settings.grace_seconds)
    if mirror is not None:
        mirror.stop()
    store.dispose()


def _kafka_mirror(settings: Settings, registry: Any) -> Any:
    """The serving process's Kafka mirror, started; None unless ``--mirror-kafka-bootstrap``."""
    if not settings.mirror_kafka_bootstrap:
        return None
    from offsetstore.server.kafka_mirror import KafkaMirror, parse_prefixes

    return KafkaMirror(
        settings.mirror_kafka_bootstrap,
        parse_prefixes(settings.mirror_kafka_groups),
        settings.mirror_interval,
        registry=registry,
    ).start()


def _quiet_garbage_collector() -> None:
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


def _security(settings: Settings) -> tuple[grpc.ServerCredentials | None, AuthInterceptor | None]:
    """The TLS credentials and the authentication the settings ask for, files read and checked now."""
    credentials = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        credentials = server_credentials(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
    mtls = settings.tls_client_ca_file is not None
    config = AuthConfig.load(settings.tokens_file) if settings.tokens_file is not None else None
    if config is not None and credentials is None:
        log.warning("bearer tokens over plaintext: anyone on the network can read them; use TLS outside local testing")
    if config is None and not mtls:
        if not _loopback(settings.listen):
            log.warning(
                "AUTHENTICATION IS OFF on %s: every caller that can reach it may read, commit, reset and delete "
                "every group; set --tokens-file and/or --tls-client-ca (see docs/security.md)",
                settings.listen,
            )
        return credentials, None
    return credentials, AuthInterceptor(config, mtls=mtls)


def _reloader(auth: AuthInterceptor, path: Path) -> Callable[[int, FrameType | None], None]:
    """A SIGHUP handler that rereads the tokens file: rotation without a restart.

    A file that does not load keeps the principals in force (and says why in the log).
    """

    def reload(signum: int, frame: FrameType | None) -> None:
        try:
            config = AuthConfig.load(path)
        except AuthConfigError as error:
            log.error("tokens file not reloaded, the previous one stays in force: %s", error)
            return
        auth.config = config  # one attribute: each call sees the old or the new file, never a mix
        log.info("tokens file reloaded", extra={"principals": len(config.principals)})

    return reload


def _tenant_prefixes(auth: AuthInterceptor | None) -> tuple[str, ...]:
    """The group prefixes the tokens file grants: the tenants group metrics are shared fairly between."""
    config = auth.config if auth is not None else None
    if config is None:
        return ()
    return tuple(sorted({g.prefix for p in config.principals.values() for g in p.grants if not g.topic}))


def _loopback(listen: str) -> bool:
    """Whether ``listen`` (HOST:PORT) binds to loopback only; a name other than localhost counts as not."""
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
