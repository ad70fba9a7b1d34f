"""Assembles and runs the gRPC server: servicer, health, reflection, graceful shutdown."""

from __future__ import annotations

import ipaddress
import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection as grpc_reflection

from offsetstore.client.durations import format_duration
from offsetstore.client.errors import InvalidArgumentError, OffsetStoreError, ResourceExhaustedError
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc

from . import migrate
from ._logging import configure_logging
from .auth import AuthConfig, AuthConfigError, AuthInterceptor, current_principal, server_credentials
from .config import MAX_MESSAGE_BYTES, Settings
from .engine import create_engine
from .quota import GroupQuota
from .servicer import OffsetStoreServicer
from .store import Store

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["OffsetStoreService"].full_name

# Responses are pages: <= 1000 items, or --max-response-bytes (at most this) of a group's offsets.
MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024

#: ``--reflection``: served to everyone, not served, or served to authenticated callers only.
REFLECTION_MODES = ("on", "off", "authenticated")
#: Streams (reflection's) open at once; each holds an RPC worker while open.
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

_UNDECODABLE = object()


class RequestGuard(grpc.ServerInterceptor):
    """Answers INVALID_ARGUMENT, not gRPC's bare INTERNAL, to bytes that are not the RPC's request message.

    gRPC itself fails a call whose request does not decode with INTERNAL ("Exception
    deserializing request!"); a client's garbage is bad input, not a server fault.
    """

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        decode, inner = handler.request_deserializer, handler.unary_unary
        name = details.method.rpartition("/")[2]  # type: ignore[attr-defined]

        def deserialize(data: bytes) -> Any:
            try:
                return decode(data)
            except Exception:
                return _UNDECODABLE

        def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
            if request is _UNDECODABLE:
                error = InvalidArgumentError(f"the request does not decode as a {name} request message")
                context.abort_with_status(error.to_status())
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            behaviour, request_deserializer=deserialize, response_serializer=handler.response_serializer
        )


class StreamGuard(grpc.ServerInterceptor):
    """Bounds the streams that hold an RPC worker while open (server reflection's), in number and in time.

    gRPC's sync server runs a stream on one worker thread until it ends, and a client may
    keep a reflection stream open and idle, with no credentials: a few dozen would take every
    worker from the token holders. Beyond ``limit`` open streams a new one is
    RESOURCE_EXHAUSTED at once, and each is cancelled after ``seconds``. With
    ``authenticate`` (``--reflection authenticated``), a stream needs a caller it accepts.
    Health's Watch does not hold a worker (gRPC's callback streaming) and is left alone.
    """

    def __init__(
        self,
        limit: int,
        seconds: float,
        authenticate: Callable[[grpc.ServicerContext], object] | None = None,
    ) -> None:
        self.limit = limit
        self.seconds = seconds
        self.authenticate = authenticate
        self._slots = threading.BoundedSemaphore(limit) if limit > 0 else None

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or not (handler.request_streaming or handler.response_streaming):
            return handler
        if details.method.startswith(f"/{SERVICE_NAME}/"):  # type: ignore[attr-defined]
            return handler  # all unary; a "stream" here is auth's refusal, which reads nothing
        behaviour = handler.stream_stream or handler.unary_stream or handler.stream_unary
        if behaviour is None or getattr(behaviour, "experimental_non_blocking", False):
            return handler
        guarded = self._guard(behaviour, streaming_response=handler.response_streaming)
        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(guarded, **options)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(guarded, **options)
        return grpc.stream_unary_rpc_method_handler(guarded, **options)

    def _admit(self, context: grpc.ServicerContext) -> threading.Timer:
        try:
            if self.authenticate is not None:
                self.authenticate(context)
            if self._slots is None or not self._slots.acquire(blocking=False):
                raise ResourceExhaustedError(
                    f"the server serves at most {self.limit} streams at once; retry later",
                    retry_after=1.0,
                    metadata={"limit": "streams"},
                )
        except OffsetStoreError as error:
            context.abort_with_status(error.to_status())
        timer = threading.Timer(self.seconds, context.cancel)
        timer.daemon = True
        timer.start()
        return timer

    def _release(self, timer: threading.Timer) -> None:
        timer.cancel()
        assert self._slots is not None
        self._slots.release()

    def _guard(self, behaviour: Callable[..., Any], *, streaming_response: bool) -> Callable[..., Any]:
        if streaming_response:

            def stream(request: Any, context: grpc.ServicerContext) -> Any:
                timer = self._admit(context)
                try:
                    yield from behaviour(request, context)
                finally:
                    self._release(timer)

            return stream

        def unary(request: Any, context: grpc.ServicerContext) -> Any:
            timer = self._admit(context)
            try:
                return behaviour(request, context)
            finally:
                self._release(timer)

        return unary


class CallLimiter(grpc.ServerInterceptor):
    """Per principal: at most ``limit`` calls at once, and responses of ``bytes_per_second`` on average.

    One tenant's sixteen reads of a huge group would otherwise hold sixteen workers, and
    the CPU of every page, while the other tenants wait. Beyond either limit a call is
    RESOURCE_EXHAUSTED at once, with a retry hint. The byte budget is a token bucket of
    ``burst_bytes`` (a response may overdraw it; the next calls wait until it is refilled),
    so ordinary reads never meet it and a loop of huge ones gets its share of the CPU only.
    In the chain after auth, which names the principal
    (:data:`~offsetstore.server.auth.current_principal`); with authentication off there are
    no tenants to be fair between and it does nothing.
    """

    #: What a caller refused for its concurrency is told to wait before retrying.
    RETRY_AFTER = 0.25

    def __init__(self, limit: int, bytes_per_second: float = 0, burst_bytes: float | None = None) -> None:
        if limit < 1:
            raise ValueError("the per-principal call limit must be >= 1")
        self.limit = limit
        self.rate = bytes_per_second
        self.burst = burst_bytes if burst_bytes is not None else 4 * bytes_per_second
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._buckets: dict[str, tuple[float, float]] = {}  # principal -> (bytes left, when)

    def _refused(self, principal: str) -> ResourceExhaustedError | None:
        """Admits a call of ``principal`` (counting it as running) or says why not; under the lock."""
        running = self._running.get(principal, 0)
        if running >= self.limit:
            return ResourceExhaustedError(
                f"{principal} already has {self.limit} calls running; retry in a moment",
                retry_after=self.RETRY_AFTER,
                metadata={"limit": "principal_calls", "max_calls": str(self.limit)},
            )
        if self.rate > 0 and principal in self._buckets:
            left, when = self._buckets[principal]
            now = time.monotonic()
            left = min(self.burst, left + (now - when) * self.rate)
            if left >= self.burst:
                del self._buckets[principal]  # full again: forget it, so the map stays small
            else:
                self._buckets[principal] = (left, now)
            if left < 0:
                return ResourceExhaustedError(
                    f"{principal} has read more than {self.rate / 2**20:.0f} MiB/s of responses; retry later",
                    retry_after=-left / self.rate,
                    metadata={"limit": "principal_bytes", "bytes_per_second": str(int(self.rate))},
                )
        self._running[principal] = running + 1
        return None

    def _charge(self, principal: str, size: int) -> None:
        now = time.monotonic()
        left, when = self._buckets.get(principal, (self.burst, now))
        self._buckets[principal] = (min(self.burst, left + (now - when) * self.rate) - size, now)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
            principal = current_principal.get()
            if principal is None:
                return inner(request, context)
            with self._lock:
                error = self._refused(principal)
            if error is not None:
                log.info("rpc refused", extra={"outcome": "RESOURCE_EXHAUSTED", "principal": principal})
                context.abort_with_status(error.to_status())
            size = 0
            try:
                response = inner(request, context)
                if self.rate > 0:
                    size = response.ByteSize()
                return response
            finally:
                with self._lock:
                    left = self._running[principal] - 1
                    if left:
                        self._running[principal] = left
                    else:
                        del self._running[principal]
                    if size > 0:
                        self._charge(principal, size)

        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class HealthWatcher:
    """Keeps grpc.health.v1 at SERVING exactly while the database answers."""

    def __init__(self, store: Store, servicer: health.HealthServicer, interval: float = 1.0) -> None:
        self.store = store
        self.servicer = servicer
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="offsetstore-health", daemon=True)
        self._serving: bool | None = None

    def start(self) -> None:
        self.check()
        self._thread.start()

    def check(self) -> bool:
        try:
            serving = self.store.ping()
        except Exception:
            # Whatever went wrong, the database did not answer; the watcher must live on to see it return.
            log.exception("health check failed")
            serving = False
        if serving != self._serving:
            status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            for name in ("", SERVICE_NAME):
                self.servicer.set(name, status)
            log.info("health changed", extra={"outcome": "SERVING" if serving else "NOT_SERVING"})
            self._serving = serving
        return serving

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.check()

    def stop(self) -> None:
        self._stop.set()
        self.servicer.enter_graceful_shutdown()
        if self._thread.is_alive():
            self._thread.join()


class OffsetStoreServer:
    """A running gRPC server over a Store; ``listen`` may use port 0 (see ``port``).

    ``interceptors`` (metrics, say) see every call, also those refused as garbage or by
    ``auth``, an :class:`~offsetstore.server.auth.AuthInterceptor`; ``credentials`` serve TLS.
    """

    def __init__(
        self,
        store: Store,
        listen: str = "127.0.0.1:0",
        *,
        max_workers: int = 32,
        interceptors: tuple[grpc.ServerInterceptor, ...] = (),
        auth: grpc.ServerInterceptor | None = None,
        credentials: grpc.ServerCredentials | None = None,
        health_interval: float = 1.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        reflection_mode: str = "on",
        max_streams: int | None = None,
        stream_seconds: float = STREAM_SECONDS,
        max_calls_per_principal: int | None = None,
        principal_bytes_per_second: float = PRINCIPAL_BYTES_PER_SECOND,
        max_groups_per_principal: int = 0,
    ) -> None:
        self.store = store
        if reflection_mode not in REFLECTION_MODES:
            raise ValueError(f"reflection must be one of {', '.join(REFLECTION_MODES)}, not {reflection_mode!r}")
        authenticate = getattr(auth, "authenticate", None)
        if reflection_mode == "authenticated" and authenticate is None:
            raise ValueError("reflection 'authenticated' needs authentication: a tokens file or client certificates")
        if max_streams is None:  # at most half the workers, so that unary calls always get the other half
            max_streams = min(MAX_STREAMS, max_workers // 2)
        if not 0 <= max_streams < max_workers:
            raise ValueError("max_streams must be >= 0 and leave RPC workers for unary calls (< max_workers)")
        streams = StreamGuard(max_streams, stream_seconds, authenticate if reflection_mode == "authenticated" else None)
        if max_calls_per_principal is None:  # a quarter of the workers: four tenants cannot fill them
            max_calls_per_principal = max(1, max_workers // 4)
        # The first interceptor is the outermost: garbage is refused before auth reads the request.
        chain = (
            *interceptors,
            streams,
            RequestGuard(),
            *((auth, CallLimiter(max_calls_per_principal, principal_bytes_per_second)) if auth is not None else ()),
            *(_group_quota(store, auth, max_groups_per_principal) if auth is not None else ()),
        )
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="offsetstore-rpc"),
            interceptors=chain,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
                *CONNECTION_OPTIONS,
            ],
            # Beyond this many queued calls, new ones get RESOURCE_EXHAUSTED instead of waiting forever.
            maximum_concurrent_rpcs=max_workers * 8,
        )
        pb_grpc.add_OffsetStoreServiceServicer_to_server(OffsetStoreServicer(store), self.server)
        self.health_servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health_servicer, self.server)
        if reflection_mode != "off":
            grpc_reflection.enable_server_reflection(
                (SERVICE_NAME, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME), self.server
            )
        self.health = HealthWatcher(store, self.health_servicer, health_interval)
        if credentials is None:
            self.port = self.server.add_insecure_port(listen)
        else:
            self.port = self.server.add_secure_port(listen, credentials)
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}")
        self.host = listen.rpartition(":")[0].strip("[]")

    @property
    def address(self) -> str:
        """A target clients can dial."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def start(self) -> OffsetStoreServer:
        self.health.start()
        self.server.start()
        return self

    def stop(self, grace: float | None = 0) -> None:
        """Refuses new calls, lets in-flight ones finish within ``grace`` seconds, then stops."""
        self.health.stop()
        self.server.stop(grace).wait()

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


def _group_quota(store: Store, auth: grpc.ServerInterceptor, max_groups: int) -> tuple[grpc.ServerInterceptor, ...]:
    """The per-principal group quota, innermost: it counts groups only for calls auth and the limiter let in."""
    # Only a tokens file names quotas (max_groups) and grants narrower than every group.
    return (GroupQuota(store, auth, max_groups),) if isinstance(auth, AuthInterceptor) else ()


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
