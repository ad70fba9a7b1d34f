"""``offsetstore serve``: a supervising process and N serving processes on one port.

The supervisor starts the embedded PostgreSQL (if no database is given) and applies the
migrations, then starts ``--processes`` serving processes (spawned: fresh interpreters,
never a fork of a process with gRPC threads) that all listen on the gRPC port with
SO_REUSEPORT; the kernel spreads connections over them. The supervisor itself never runs
gRPC. It runs what must run once: the maintenance rounds (retention), ``/metrics`` (which
sums every serving process's series, prometheus-client's multiprocess mode, plus the
per-group series it reads from the database), the Kafka watermark reader and mirror, and the
embedded database. A serving process that dies is logged and replaced; SIGTERM or SIGINT drains
them all (each finishes its in-flight calls within ``--grace-seconds``) and exits 0, also when
it is sent to the whole process group (a terminal's Ctrl-C) and reaches the serving processes
too; SIGHUP rereads the tokens file in each.

This module is the supervisor; :mod:`offsetstore.server.workers` starts and runs the serving
processes, :mod:`offsetstore.server.security` reads what the settings ask of security,
:mod:`offsetstore.server._kafka_tasks` makes the Kafka tasks the supervisor runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import signal
import socket
import tempfile
import threading
from types import FrameType
from typing import Any

import sqlalchemy
import sqlalchemy.exc
import sqlalchemy.pool

from offsetstore.core.durations import format_duration
from offsetstore.runtime import event_loop, migrate
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.runtime.store import Store
from offsetstore.server import _kafka_tasks as kafka_tasks
from offsetstore.server._logging import configure_logging
from offsetstore.server.auth import AccessControl, AuthConfig, AuthConfigError
from offsetstore.server.config import Settings, split_host_port
from offsetstore.server.grpc_connections import raise_descriptor_limit
from offsetstore.server.security import security, tenant_prefixes
from offsetstore.server.workers import StartError, Workers
from offsetstore.storage.database_url import display
from offsetstore.storage.engine import plain_engine, say_replication, shares_sessions
from offsetstore.storage.replication import Replication, ReplicationRefused, check, replication_of

__all__ = ["serve"]

log = logging.getLogger(__name__)


def serve(settings: Settings) -> int:
    """Runs until SIGTERM or SIGINT; returns the process exit code."""
    configure_logging(settings.log_level, settings.log_format)
    raise_descriptor_limit()  # before anything opens: the serving processes inherit it
    # Resolved once, here: a platform without uvloop is one line, and the serving processes get the answer.
    settings = dataclasses.replace(settings, event_loop=event_loop.resolve(settings.event_loop))
    try:
        _, auth = security(settings)  # read and checked now: a bad file stops the start, not a child
        reservation = _reserve(settings.listen, "--listen")
        # The HTTP port (--http-listen) is held for the serving processes like the gRPC one.
        http_reservation = _reserve(settings.http_listen, "--http-listen") if settings.http_listen else None
        if settings.metrics_listen:  # said now, before the database starts, not after a worker serves
            _probe(settings.metrics_listen, "--metrics-listen")
        if http_reservation is not None:
            host, port = http_reservation.getsockname()[:2]
            settings = dataclasses.replace(
                settings, http_listen=f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            )
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
            from offsetstore.runtime.embedded import EmbeddedPostgres

            embedded = EmbeddedPostgres(settings.data_dir)
            database_url = embedded.start()
        try:
            _check_database(settings, database_url, stopping)
        except migrate.LockWaitStopped as stopped:
            log.info("%s: not serving", stopped)
            return 0
        return _supervise(settings, database_url, reservation, auth, directory, stopping, reload, embedded)
    except StartError as error:
        log.error("cannot start: %s", error)
        return 2
    finally:
        reservation.close()
        if http_reservation is not None:
            http_reservation.close()
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _supervise(
    settings: Settings,
    database_url: str,
    reservation: socket.socket,
    auth: AccessControl | None,
    directory: str,
    stopping: threading.Event,
    reload: threading.Event,
    embedded: Any,
) -> int:
    """The supervisor's one event loop, its one store on it, until ``stopping``."""
    host, port = reservation.getsockname()[:2]
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    supervisor = _Supervisor(settings, database_url, listen, auth, directory, stopping, reload, embedded)
    return event_loop.run(supervisor.run(), settings.event_loop)


@dataclasses.dataclass
class _Supervisor:
    settings: Settings
    database_url: str
    listen: str
    auth: AccessControl | None
    directory: str
    stopping: threading.Event
    reload: threading.Event
    embedded: Any

    async def run(self) -> int:
        from offsetstore.runtime.maintenance import Maintenance
        from offsetstore.server import metrics

        settings = self.settings
        metrics.use_multiprocess(self.directory)
        # Its store serves the maintenance task, the scrapes', the watermark reader's and the mirror's threads;
        # no RPCs. The colder pool holds the maintenance's lock and its work, and the scrapes'
        # two queries (the sums are read by a thread of their own) beside the reader's.
        # The mirror holds one more, its advisory lock's, for as long as it runs.
        cold = 6 + (1 if settings.mirror_kafka_bootstrap else 0)
        series = metrics.StoreSeries()  # the store's hooks, given as it is made
        config = settings.store_config(self.database_url, pool_size=2, cold_pool_size=cold, observer=series.observer)
        async with AsyncStore(config) as aio:
            store = Store(aio, asyncio.get_running_loop())  # the portal the threads call through
            registry = metrics.build_registry(
                store,
                series=series,
                group_limit=settings.group_metrics_limit,
                series_limit=settings.metrics_series_limit,
                cache_seconds=metrics.SCRAPE_CACHE_SECONDS,
                sums_seconds=metrics.SUMS_SECONDS,
                tenant_prefixes=tenant_prefixes(self.auth),
                multiprocess_dir=self.directory,
            )
            workers = Workers(settings, self.database_url, self.listen, self.directory, self.stopping)
            metrics_server = None
            maintenance: asyncio.Task[None] | None = None
            reader = mirror = observer = None
            try:
                if settings.metrics_listen:
                    # Before the serving processes: a port taken since the probe stops the start before
                    # anything reports SERVING.
                    tls = settings.tls if settings.metrics_tls is None else settings.metrics_tls
                    try:
                        metrics_server = metrics.serve_http(
                            registry,
                            settings.metrics_listen,
                            certfile=settings.tls_cert_file if tls else None,
                            keyfile=settings.tls_key_file if tls else None,
                            client_cafile=settings.tls_client_ca_file if tls else None,
                            cache_seconds=metrics.SCRAPE_CACHE_SECONDS,
                        )
                    except OSError as error:
                        raise _taken(settings.metrics_listen, "--metrics-listen", error) from None
                await asyncio.to_thread(workers.start)
                rounds = Maintenance(
                    aio,
                    history_retention=settings.history_retention,
                    offsets_retention=settings.offsets_retention,
                    interval=settings.maintenance_interval,
                    metrics=metrics.retention_metrics(registry),
                )
                maintenance = asyncio.create_task(rounds.run(), name="offsetstore-maintenance")
                reader = kafka_tasks.watermarks_reader(settings, store, registry)
                observer = kafka_tasks.kafka_group_observer(settings, store, registry)
                mirror = kafka_tasks.kafka_mirror(settings, store)
                log.info(
                    "serving",
                    extra={
                        "listen": self.listen,
                        "processes": settings.processes,
                        "event_loop": event_loop.running(),
                        "metrics": metrics_server.url if metrics_server is not None else "off",
                        "http": settings.http_listen or "off",
                        "embedded": self.embedded is not None,
                        "tls": "mutual" if settings.tls_client_ca_file else "on" if settings.tls else "off",
                        "tokens": settings.tokens_file is not None,
                        "history_retention": format_duration(settings.history_retention),
                        "offsets_retention": format_duration(settings.offsets_retention),
                    },
                )
                # The signal handlers set threading events (they run between the loop's steps).
                while not self.stopping.is_set():
                    await asyncio.sleep(0.2)
                    if self.reload.is_set():
                        self.reload.clear()
                        _reload(settings, workers)
                    await asyncio.to_thread(workers.replace_dead)
            finally:
                if observer is not None:
                    await asyncio.to_thread(observer.stop)
                if reader is not None:
                    await asyncio.to_thread(reader.stop)
                if mirror is not None:  # its last round, before the serving processes and the store stop
                    await asyncio.to_thread(mirror.stop)
                if maintenance is not None:
                    maintenance.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await maintenance
                clean = await asyncio.to_thread(workers.stop, settings.grace_seconds)
                if metrics_server is not None:
                    await asyncio.to_thread(metrics_server.shutdown)
        log.info("stopped")
        return 0 if clean else 1


def _check_database(settings: Settings, database_url: str, stopping: threading.Event) -> None:
    """Reaches the database, migrates it and says what a commit survives there; a refusal is a StartError of one line.

    The wait for the migration lock ends at ``--migration-lock-timeout`` (a StartError naming
    the lock's holder) or at SIGTERM (LockWaitStopped).
    """
    try:
        if settings.migrate:
            migrate.upgrade(
                database_url,
                lock_timeout=settings.migration_lock_timeout,
                stop=stopping,
                sql_api_roles=settings.sql_api_roles or None,
            )
        else:
            migrate.current(database_url)
        replication = _replication(database_url)
        pooled = settings.database_prepare == "on" and shares_sessions(database_url)
    except (migrate.LockWaitTimedOut, migrate.DatabaseAhead, migrate.SqlApiLockOut) as error:
        raise StartError(str(error)) from None
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as error:
        reason = str(getattr(error, "orig", error)).strip().splitlines()[0]
        raise StartError(
            f"cannot reach the database at {display(database_url)}: "
            f"{reason}. Check --database-url (OFFSETSTORE_DATABASE_URL): the server, the database name, the role"
        ) from None
    say_replication(replication, database=display(database_url))
    try:
        check(replication, require_synchronous=settings.require_synchronous_replication)
    except ReplicationRefused as refused:
        raise StartError(str(refused)) from None
    if pooled:
        raise StartError(
            "a transaction pooler (PgBouncer's pool_mode = transaction?) hands this server's database sessions "
            "to other clients, so its prepared statements would run on sessions that do not have them; "
            "serve with --database-prepare off (OFFSETSTORE_DATABASE_PREPARE=off)"
        )


def _replication(database_url: str) -> Replication:
    engine = plain_engine(database_url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            return replication_of(conn)
    finally:
        engine.dispose()


def _reload(settings: Settings, workers: Workers) -> None:
    if settings.tokens_file is None:
        log.info("SIGHUP: nothing to reload (no --tokens-file)")
        return
    try:
        AuthConfig.load(settings.tokens_file)  # said once here; each serving process reloads it
    except AuthConfigError as error:
        log.error("tokens file not reloaded, the previous one stays in force: %s", error)
        return
    workers.signal(signal.SIGHUP)


def _reserve(listen: str, flag: str) -> socket.socket:
    """A socket that holds ``listen``'s port for the serving processes (SO_REUSEPORT, bound, not listening).

    First a plain bind: SO_REUSEPORT alone would let this server share a port with another
    offsetstore already serving there, which must be a clear error instead.
    """
    family, address = _probe(listen, flag)
    held = socket.socket(family, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    held.bind(address)
    return held


def _probe(listen: str, flag: str) -> tuple[socket.AddressFamily, Any]:
    """``listen``'s family and address (the port the kernel chose for port 0); a StartError naming ``flag`` when taken."""
    try:
        host, port = split_host_port(listen)
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (ValueError, OSError) as error:
        raise StartError(f"cannot listen on {listen!r} ({flag}): {error}") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR: the connections of a server stopped a moment ago (TIME_WAIT) are no
        # reason to refuse; a socket listening there still is.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise _taken(listen, flag, error) from None
        return family, probe.getsockname()


def _taken(listen: str, flag: str, error: OSError) -> StartError:
    return StartError(
        f"cannot listen on {listen} ({flag}): {error.strerror or error}; is another offsetstore serving there? "
        f"Stop it, or choose another address with {flag}"
    )
