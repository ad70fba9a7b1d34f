"""Assembles and runs the gRPC server: servicer, health, reflection, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection as grpc_reflection

from offsetstore.client.durations import format_duration
from offsetstore.client.errors import OffsetStoreError, ResourceExhaustedError
from offsetstore.v1 import offset_store_pb2 as pb

from . import migrate
from ._logging import configure_logging
from .admission import Admission
from .async_store import AsyncStore
from .auth import AuthConfig, AuthConfigError, AuthInterceptor, server_credentials
from .config import MAX_MESSAGE_BYTES, Settings
from .engine import create_engine
from .gate import Gate, fail
from .quota import GroupQuota
from .servicer import OffsetStoreServicer
from .store import Store

log = logging.getLogger(__name__)

R = TypeVar("R")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["OffsetStoreService"].full_name
_HEALTH_WATCH = "/grpc.health.v1.Health/Watch"

# Responses are pages: <= 1000 items, or --max-response-bytes (at most this) of a group's offsets.
MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024
#: Calls open at once, waiting ones included; each costs a coroutine and its buffers.
MAX_CONCURRENT_CALLS = 10_000

#: ``--reflection``: served to everyone, not served, or served to authenticated callers only.
REFLECTION_MODES = ("on", "off", "authenticated")
#: Reflection streams open at once.
MAX_STREAMS = 4
#: Response bytes one principal may read per second on average (bursts of 4 s of it).
PRINCIPAL_BYTES_PER_SECOND = 4 * 2**20
#: A stream is cancelled after this long: grpcurl's and buf's take milliseconds.
STREAM_SECONDS = 60.0

# Connections, whoever holds them, do not live forever: an idle one is closed after 5
# minutes, every one after 30 (with 30 s for its calls to finish; clients reconnect by
# themselves), and a peer that stops answering keepalive pings is dropped.
CONNECTION_OPTIONS = (
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.max_connection_idle_ms", 300_000),
    ("grpc.max_connection_age_ms", 1_800_000),
    ("grpc.max_connection_age_grace_ms", 30_000),
)


class StreamGuard(grpc.aio.ServerInterceptor):
    """Bounds server reflection's streams in number and in time, and may require a known caller.

    A stream costs a coroutine, but a client may keep any number open and idle: beyond
    ``limit`` open streams a new one is RESOURCE_EXHAUSTED at once, and each is ended
    (CANCELLED) after ``seconds``. With ``authenticate`` (``--reflection authenticated``), a
    stream needs a caller it accepts. Health's Watch, which streams by design, is left alone.
    """

    def __init__(
        self,
        limit: int,
        seconds: float,
        authenticate: Callable[[grpc.aio.ServicerContext], object] | None = None,
    ) -> None:
        self.limit = limit
        self.seconds = seconds
        self.authenticate = authenticate
        self._open = 0

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        method: str = details.method  # type: ignore[attr-defined]
        if handler is None or handler.stream_stream is None or method == _HEALTH_WATCH:
            return handler  # the offset store's methods and health's are not streams that idle
        return grpc.stream_stream_rpc_method_handler(
            self._guard(handler.stream_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _guard(self, behaviour: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def stream(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                if self.authenticate is not None:
                    self.authenticate(context)
                if self._open >= self.limit:
                    raise ResourceExhaustedError(
                        f"the server serves at most {self.limit} streams at once; retry later",
                        retry_after=1.0,
                        metadata={"limit": "streams"},
                    )
            except OffsetStoreError as error:
                status = error.to_status()
                fail(context, status.code, status.details, status.trailing_metadata)
                return
            self._open += 1
            try:
                async with asyncio.timeout(self.seconds):
                    async for response in behaviour(requests, context):
                        yield response
            except TimeoutError:
                fail(context, grpc.StatusCode.CANCELLED, f"a stream ends after {self.seconds:g} s")
            finally:
                self._open -= 1

        return stream


class HealthWatcher:
    """Keeps grpc.health.v1 at SERVING exactly while the database answers; a task on the server's loop."""

    def __init__(self, store: AsyncStore, servicer: health_aio.HealthServicer, interval: float = 1.0) -> None:
        self.store = store
        self.servicer = servicer
        self.interval = interval
        self._serving: bool | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.check()
        self._task = asyncio.create_task(self._loop(), name="offsetstore-health")

    async def check(self) -> bool:
        try:
            serving = await self.store.ping()
        except Exception:
            # Whatever went wrong, the database did not answer; the watcher must live on to see it return.
            log.exception("health check failed")
            serving = False
        if serving != self._serving:
            status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            for name in ("", SERVICE_NAME):
                await self.servicer.set(name, status)
            log.info("health changed", extra={"outcome": "SERVING" if serving else "NOT_SERVING"})
            self._serving = serving
        return serving

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.servicer.enter_graceful_shutdown()


class OffsetStoreServer:
    """A gRPC server (grpc.aio) over ``store``'s database, on an event loop thread of its own.

    ``listen`` may use port 0 (see ``port``); the port is bound when it is made, calls are
    served from :meth:`start`. Calls reach the database through an :class:`AsyncStore` made
    from ``store`` (its database, timeouts and metric hooks). ``interceptors`` (metrics, say;
    ``grpc.aio`` interceptors) see every call, also those refused; ``auth``, an
    :class:`~offsetstore.server.auth.AuthInterceptor`, authenticates and authorises them;
    ``credentials`` serve TLS. ``max_workers`` no longer counts threads: it sets the default
    stream and per-principal call limits, as it did. ``reuse_port`` lets several processes
    listen on one port (``serve --processes``).
    """

    def __init__(
        self,
        store: Store,
        listen: str = "127.0.0.1:0",
        *,
        max_workers: int = 32,
        interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (),
        auth: AuthInterceptor | None = None,
        credentials: grpc.ServerCredentials | None = None,
        health_interval: float = 1.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        reflection_mode: str = "on",
        max_streams: int | None = None,
        stream_seconds: float = STREAM_SECONDS,
        max_calls_per_principal: int | None = None,
        principal_bytes_per_second: float = PRINCIPAL_BYTES_PER_SECOND,
        max_groups_per_principal: int = 0,
        reuse_port: bool = False,
    ) -> None:
        self.store = store
        if reflection_mode not in REFLECTION_MODES:
            raise ValueError(f"reflection must be one of {', '.join(REFLECTION_MODES)}, not {reflection_mode!r}")
        if reflection_mode == "authenticated" and auth is None:
            raise ValueError("reflection 'authenticated' needs authentication: a tokens file or client certificates")
        if max_streams is None:  # as many as half the limit of calls, as when they held threads
            max_streams = min(MAX_STREAMS, max_workers // 2)
        if not 0 <= max_streams < max_workers:
            raise ValueError("max_streams must be >= 0 and below max_workers")
        if max_calls_per_principal is None:  # a quarter of the workers: four tenants cannot fill them
            max_calls_per_principal = max(1, max_workers // 4)
        self._options = dict(
            auth=auth,
            interceptors=interceptors,
            streams=StreamGuard(
                max_streams, stream_seconds, auth.authenticate if reflection_mode == "authenticated" else None
            ),
            admission=Admission(
                max_calls=max_calls_per_principal,
                # What the sync server queued at most, server-wide; now per anonymous peer.
                max_anonymous_calls=max_workers * 8,
                bytes_per_second=principal_bytes_per_second,
            ),
            max_groups=max_groups_per_principal,
            reflection_mode=reflection_mode,
            health_interval=health_interval,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
                ("grpc.so_reuseport", 1 if reuse_port else 0),
                *CONNECTION_OPTIONS,
            ],
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="offsetstore-grpc", daemon=True)
        self._thread.start()
        self._started = False
        try:
            self.port = self._call(self._bind(listen, credentials))
        except BaseException:
            if hasattr(self, "async_store"):
                self._call(self.async_store.close())
            self._close_loop()
            raise
        if self.port == 0:
            self._call(self.async_store.close())
            self._close_loop()
            raise OSError(f"cannot listen on {listen}")
        self.host = listen.rpartition(":")[0].strip("[]")

    def _call(self, coroutine: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _bind(self, listen: str, credentials: grpc.ServerCredentials | None) -> int:
        o = self._options
        self.async_store = AsyncStore(
            self.store,
            hot_pool_size=self.store.pool_size,
            pool_size=max(2, self.store.pool_size // 4),
            write_flushers=self.store.write_flushers,
        )
        await self.async_store.open()
        auth = o["auth"]
        quota = None
        if isinstance(auth, AuthInterceptor) and auth.config is not None:
            quota = GroupQuota(self.async_store, auth, o["max_groups"])
        gate = Gate(OffsetStoreServicer(self.async_store), admission=o["admission"], auth=auth, quota=quota)
        self.server = grpc.aio.server(
            interceptors=(*o["interceptors"], o["streams"]),
            options=o["options"],
            # A waiting call is a coroutine: no bound of threads; this one only bounds memory.
            maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
        )
        self.server.add_generic_rpc_handlers((gate.handler(),))
        self.health_servicer = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health_servicer, self.server)
        if o["reflection_mode"] != "off":
            grpc_reflection.enable_server_reflection(
                (SERVICE_NAME, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME), self.server
            )
        self.health = HealthWatcher(self.async_store, self.health_servicer, o["health_interval"])
        if credentials is None:
            return self.server.add_insecure_port(listen)
        return self.server.add_secure_port(listen, credentials)

    @property
    def address(self) -> str:
        """A target clients can dial."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def start(self) -> OffsetStoreServer:
        async def start() -> None:
            await self.health.start()
            await self.server.start()

        self._call(start())
        self._started = True
        return self

    def stop(self, grace: float | None = 0) -> None:
        """Refuses new calls, lets in-flight ones finish within ``grace`` seconds, then stops."""

        async def stop() -> None:
            await self.health.stop()
            await self.server.stop(grace)
            await self.async_store.close()

        if self._loop.is_closed():
            return
        self._call(stop())
        self._close_loop()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> OffsetStoreServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(settings: Settings) -> int:
    """Runs until SIGTERM or SIGINT; returns the process exit code."""
    configure_logging(settings.log_level, settings.log_format)
    try:
        credentials, auth = _security(settings)
    except AuthConfigError as error:
        log.error("cannot start: %s", error)
        return 2
    embedded = None
    database_url = settings.database_url
    if database_url is None:
        from .embedded import EmbeddedPostgres

        embedded = EmbeddedPostgres(settings.data_dir)
        database_url = embedded.start()
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if auth is not None and settings.tokens_file is not None:
        signal.signal(signal.SIGHUP, _reloader(auth, settings.tokens_file))
    try:
        if settings.migrate:
            migrate.upgrade(database_url)
        store = Store(
            create_engine(
                database_url, pool_size=settings.pool_size, statement_timeout_ms=settings.statement_timeout_ms
            ),
            statement_timeout_ms=settings.statement_timeout_ms,
            write_flushers=settings.write_flushers,
            max_response_bytes=settings.max_response_bytes,
        )
        from . import metrics

        # Scrapes get a connection of their own and reuse a query's rows for a few seconds: no
        # number of /metrics connections can take the connections the RPCs need (issue 14).
        scrape_store = Store(
            create_engine(
                database_url,
                pool_size=1,
                statement_timeout_ms=settings.statement_timeout_ms,
                application_name="offsetstore-metrics",
            ),
            statement_timeout_ms=settings.statement_timeout_ms,
        )
        registry = metrics.build_registry(
            store,
            group_limit=settings.group_metrics_limit,
            scrape_store=scrape_store,
            cache_seconds=metrics.SCRAPE_CACHE_SECONDS,
            tenant_prefixes=_tenant_prefixes(auth),
        )
        server = OffsetStoreServer(
            store,
            settings.listen,
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
        ).start()
        from .retention import Maintenance

        maintenance = Maintenance(
            store,
            history_retention=settings.history_retention,
            offsets_retention=settings.offsets_retention,
            interval=settings.maintenance_interval,
            registry=registry,
        ).start()
        metrics_server = None
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
                "listen": server.address,
                "metrics": metrics_server.url if metrics_server is not None else "off",
                "embedded": embedded is not None,
                "tls": "mutual" if settings.tls_client_ca_file else "on" if settings.tls else "off",
                "tokens": settings.tokens_file is not None,
                "history_retention": format_duration(settings.history_retention),
                "offsets_retention": format_duration(settings.offsets_retention),
            },
        )
        stopping.wait()
        maintenance.stop()
        server.stop(settings.grace_seconds)
        if metrics_server is not None:
            metrics_server.shutdown()
        store.dispose()
        scrape_store.dispose()
    finally:
        if embedded is not None:
            embedded.stop()
    log.info("stopped")
    return 0


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
