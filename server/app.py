"""Assembles and runs the gRPC server: servicer, health, reflection, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection as grpc_reflection

from offsetstore.core.errors import OffsetStoreError, ResourceExhaustedError
from offsetstore.server.admission import Admission
from offsetstore.server.auth import AuthInterceptor
from offsetstore.server.config import MAX_MESSAGE_BYTES
from offsetstore.server.gate import CallObserver, Gate
from offsetstore.server.http import ConnectionLimits, HttpListener
from offsetstore.server.interceptor import Behaviour, HandlerInterceptor
from offsetstore.server.kafka_mirror import KafkaMirror
from offsetstore.server.partition_quota import PartitionQuota
from offsetstore.server.quota import GroupQuota
from offsetstore.server.servicer import OffsetStoreServicer
from offsetstore.server.status import CallEnded, fail
from offsetstore.server.tracing import server_interceptors as tracing_interceptors
from offsetstore.server.tracing import write_carry
from offsetstore.storage.async_store import AsyncStore
from offsetstore.storage.store import Store
from offsetstore.v1 import offset_store_pb2 as pb

log = logging.getLogger(__name__)


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


class StreamGuard(HandlerInterceptor):
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

    def wrap(self, method: str, kind: str, handler: grpc.RpcMethodHandler, behaviour: Behaviour) -> Behaviour | None:
        if kind != "bidi_stream" or method == _HEALTH_WATCH:
            return None  # the offset store's methods and health's are not streams that idle
        return self._guard(behaviour)

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
                fail(context, error)
                return
            self._open += 1
            try:
                async with asyncio.timeout(self.seconds):
                    async for response in behaviour(requests, context):
                        yield response
            except TimeoutError:
                fail(context, CallEnded(grpc.StatusCode.CANCELLED, f"a stream ends after {self.seconds:g} s"))
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
    """A gRPC server (grpc.aio) over ``store``, served on the store's event loop.

    ``listen`` may use port 0 (see ``port``); the port is bound when it is made, calls are
    served from :meth:`start`. Calls await ``store``'s runtime store (:attr:`Store.aio`: its
    pools, group commit, timeouts and metric hooks) on the loop it runs on; stopping the
    server leaves the store open (its owner disposes of it). ``interceptors`` (metrics, say;
    ``grpc.aio`` interceptors) see every call, also those refused; ``auth``, an
    :class:`~offsetstore.server.auth.AuthInterceptor`, authenticates and authorises them;
    ``credentials`` serve TLS. ``max_workers`` no longer counts threads: it sets the default
    stream and per-principal call limits, as it did. ``reuse_port`` lets several processes
    listen on one port (``serve --processes``); ``processes`` divides the per-principal limits
    among them. ``kafka_mirror`` (started and stopped by its
    owner) is offered every commit once it is in the store.
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
        max_partitions_per_principal: int = 0,
        principal_history_rows_per_second: float = 0,  # under a partition quota; 0: no budget
        reuse_port: bool = False,
        processes: int = 1,  # serving processes on the port (serve --processes): this one admits its share
        http_listen: str | None = None,  # HTTP/JSON and the console (server/http/)
        http_ssl_context: ssl.SSLContext | None = None,
        http_limits: ConnectionLimits | None = None,
        http_allowed_hosts: tuple[str, ...] = (),  # names the HTTP listener answers beside addresses and localhost
        kafka_mirror: KafkaMirror | None = None,
    ) -> None:
        self.store = store
        self.http: HttpListener | None = None
        self.kafka_mirror = kafka_mirror
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
        if processes < 1:
            raise ValueError("processes must be >= 1")
        # The kernel spreads a principal's connections over the serving processes, each counting
        # on its own: each admits 1/N of the per-principal limits, so that together they admit
        # what one process would (issue 34 finding 9; a limit below N becomes N, one call each).
        max_calls_per_principal = max(1, max_calls_per_principal // processes)
        principal_bytes_per_second /= processes
        principal_history_rows_per_second /= processes
        self._options = dict(
            auth=auth,
            # OTEL_*: a span of every call (server/tracing.py), innermost, and a gate observer naming its principal and group.
            interceptors=(*interceptors, *tracing_interceptors()),
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
            max_partitions=max_partitions_per_principal,
            history_rows=principal_history_rows_per_second,
            reflection_mode=reflection_mode,
            health_interval=health_interval,
            http=(http_listen, http_ssl_context, reuse_port, max_message_bytes, http_limits, http_allowed_hosts),
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
                ("grpc.so_reuseport", 1 if reuse_port else 0),
                *CONNECTION_OPTIONS,
            ],
        )
        self.async_store = store.aio
        carry = write_carry()
        if carry is not None and store.aio.writes.carry is None:
            # OTEL_*: a group commit's statements in its callers' traces (server/tracing.py); the
            # store's connections opened before tracing was set up would trace nothing: renewed.
            store.aio.writes.carry = carry
            store.wait(store.aio.renew_connections())
        try:
            self.port = store.wait(self._bind(listen, credentials))
            if self.port == 0:
                raise OSError(f"cannot listen on {listen}")
        except BaseException:
            if hasattr(self, "server"):
                store.wait(self.server.stop(None))
            raise
        self._started = self._stopped = False
        self.host = listen.rpartition(":")[0].strip("[]")

    async def _bind(self, listen: str, credentials: grpc.ServerCredentials | None) -> int:
        o = self._options
        auth = o["auth"]
        quota = partition_quota = None
        if isinstance(auth, AuthInterceptor) and auth.config is not None:
            quota = GroupQuota(self.async_store, auth, o["max_groups"])
            partition_quota = PartitionQuota(
                self.async_store, auth, o["max_partitions"], history_rows_per_second=o["history_rows"]
            )
        gate = Gate(
            OffsetStoreServicer(self.async_store, self.kafka_mirror.offer if self.kafka_mirror else None),
            admission=o["admission"],
            auth=auth,
            quota=quota,
            partition_quota=partition_quota,
            # The interceptors that want each call's outcome from the gate (the metrics).
            observers=tuple(i for i in o["interceptors"] if isinstance(i, CallObserver)),
        )
        self.server = grpc.aio.server(
            interceptors=(*o["interceptors"], o["streams"]),
            options=o["options"],
            # A waiting call is a coroutine: no bound of threads; this one only bounds memory.
            maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
        )
        self.server.add_generic_rpc_handlers((gate.handler(),))
        # The HTTP listener calls the same gate, through the same interceptors.
        http_listen, http_ssl, http_reuse_port, max_message_bytes, http_limits, http_hosts = o["http"]
        if http_listen:
            self.http = HttpListener(
                gate.handler(),
                http_listen,
                interceptors=o["interceptors"],
                ssl_context=http_ssl,
                max_message_bytes=max_message_bytes,
                reuse_port=http_reuse_port,
                limits=http_limits,
                allowed_hosts=http_hosts,
            )
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
            if self.http is not None:
                await self.http.start()

        self.store.wait(start())
        self._started = True
        return self

    def stop(self, grace: float | None = 0) -> None:
        """Refuses new calls, lets in-flight ones finish within ``grace`` seconds, then stops."""

        async def stop() -> None:
            await self.health.stop()
            if self.http is not None:
                await self.http.stop(grace)
            await self.server.stop(grace)

        if self._stopped or self.store.loop.is_closed():
            return
        self._stopped = True
        self.store.wait(stop())

    def __enter__(self) -> OffsetStoreServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
