"""The ``serve`` settings declared once (name, type, default, help, flag, validity), importable without the server extra."""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from offsetstore.core.types import MAX_RESPONSE_BYTES
from offsetstore.server._declare import Valid as Valid
from offsetstore.server._declare import above, at_least, between, setting
from offsetstore.server._declare import env_name as env_name
from offsetstore.server._declare import one_of as one_of
from offsetstore.server.limits import MAX_MESSAGE_BYTES, REFLECTION_MODES, Limits

# Only the standard library and the client's own layers: `offsetstore serve --help` and the
# completion script read these declarations in a client-only install (cli/_serve_flags.py).
# How a field is declared (``setting()``, ``Valid``, ``env_name``) is server/_declare.py's,
# re-exported here for the callers that know it by this module.

RETENTION = "retention (durations: 90s, 15m, 12h, 7d or seconds; see docs/operations.md)"
MIRROR = "Kafka mirror (off by default; see docs/operations.md)"
WATERMARKS = "server-side watermarks (off by default; see docs/operations.md)"
SECURITY = "security (off by default; see docs/security.md)"


def _default_data_dir() -> Path:
    from offsetstore.runtime.embedded import default_data_dir

    return default_data_dir()


@dataclass(frozen=True)
class SettingFields:
    """The fields of ``Settings`` (``server/config.py`` adds their checks and the parts made from them)."""

    database_url: str | None = setting(
        None, "External PostgreSQL URL (``postgresql://...``); unset starts the embedded PostgreSQL."
    )
    data_dir: Path = setting(
        Path(),
        "Where the embedded PostgreSQL keeps its data.",
        factory=_default_data_dir,
        shown="~/.local/share/offsetstore/postgres, as root /var/lib/offsetstore/postgres",
    )
    listen: str = setting("127.0.0.1:50051", "HOST:PORT of the gRPC server.", metavar="HOST:PORT")
    metrics_listen: str = setting(
        "127.0.0.1:9464", "HOST:PORT of the Prometheus ``/metrics`` endpoint; empty disables it.", metavar="HOST:PORT"
    )
    http_listen: str = setting(
        "",
        "HOST:PORT of the HTTP/JSON API (Connect protocol) and the web console, with gRPC's TLS and tokens; "
        "empty disables it.",
        metavar="HOST:PORT",
    )
    http_allowed_hosts: str = setting(
        "",
        "Comma-separated host names the HTTP listener answers besides IP addresses and localhost "
        "(``.example.com``: every name under it); others get 421 (DNS rebinding).",
        metavar="NAME,..",
    )
    migrate: bool = setting(
        True,
        "Apply the migrations at start.",
        flag="--no-migrate",
        flag_help="Start without applying the migrations (``offsetstore migrate`` applies them).",
    )
    sql_api_roles: str = setting(
        "",
        "Roles calling the SQL API v1 when migrating across 0011: ``keep`` grants each its access on every group, "
        "``revoke`` lets them lose it, empty stops naming them.",
        choices=("keep", "revoke"),
    )
    migration_lock_timeout: float = setting(
        300.0,
        "How long to wait for the migration lock (another migrator, or any session squatting its key) "
        "before naming its holder and giving up.",
        duration=True,
        valid=at_least(0),
    )
    processes: int = setting(
        1,
        "Serving processes sharing the gRPC port (SO_REUSEPORT), each admitting 1/N of the per-principal limits; "
        "``auto`` is the number of CPUs.",
        metavar="N|auto",
        auto=True,
        valid=between(1, 256, "or auto"),
    )
    max_workers: int = setting(
        32,
        "Scale of the per-caller limits: streams (half), calls per principal (a quarter), "
        "calls per anonymous peer (8x).",
    )
    pool_size: int = setting(16, "Database connections held by the server.")
    write_flushers: int = setting(
        2, "Threads writing batches of concurrent commits and joins, one transaction each (group commit)."
    )
    statement_timeout_ms: int = setting(
        5000, "Upper bound of one SQL statement; a slower database answers UNAVAILABLE."
    )
    database_prepare: str = setting(
        "on",
        "Server-side prepared statements on the hot path: ``on``, or ``off`` behind a transaction pooler "
        "(PgBouncer's pool_mode = transaction).",
        choices=("on", "off"),
    )
    require_synchronous_replication: bool = setting(
        False,
        "Refuse to serve from a primary whose commits wait for no synchronous standby: "
        "an acknowledged commit could be lost in a failover.",
    )
    trace_trust_callers: bool = setting(
        False,
        "With OTEL_* tracing: honour a caller's sampled ``traceparent`` flag "
        "(off: it cannot raise sampling above OTEL_TRACES_SAMPLER's).",
    )
    grace_seconds: float = setting(10.0, "How long SIGTERM waits for in-flight calls before cancelling them.")
    event_loop: str = setting(
        "uvloop",
        "The serving processes' event loop: uvloop (less CPU per call: docs/performance.md, The event loop), "
        "or asyncio's own; where uvloop is not installed, asyncio's, said once.",
        choices=("uvloop", "asyncio"),
    )
    group_metrics_limit: int = setting(1000, "At most this many groups get per-group metric series per scrape.")
    metrics_series_limit: int = setting(
        20_000,
        "Per-group series a scrape holds at most, shared fairly by tenants; a group beyond its share shows sums "
        "only (0: no limit).",
        valid=at_least(0, "0: no limit"),
    )
    log_level: str = setting("INFO", "Python logging level name: DEBUG, INFO, WARNING, ...")
    log_format: str = setting(
        "text", "``text`` (key=value) or ``json`` (one object per line).", choices=("text", "json")
    )
    max_message_bytes: int = setting(
        MAX_MESSAGE_BYTES,
        "Largest request taken; the default admits the largest valid one (10,000 partitions, full metadata: ~44 MB).",
        valid=at_least(1024),
    )
    max_response_bytes: int = setting(
        MAX_RESPONSE_BYTES,
        "Largest FetchOffsets or DescribeGroup answer; a larger one comes in pages (page_size > 0), or is refused.",
        valid=between(2**16, 2**26, "64 KiB to 64 MiB"),
    )
    history_retention: float = setting(
        7 * 86400.0,
        "Offset history kept (whole days are dropped once older); 0 keeps everything.",
        group=RETENTION,
        duration=True,
        valid=at_least(0, "0 keeps everything"),
    )
    offsets_retention: float = setting(
        0.0,
        "Time without a commit, join or reset after which a group's offsets expire; 0 never expires them.",
        group=RETENTION,
        duration=True,
        valid=at_least(0, "0 never expires"),
    )
    maintenance_interval: float = setting(
        60.0,
        "Time between maintenance rounds (history partitions, expiry).",
        group=RETENTION,
        duration=True,
        valid=above(0),
    )
    status_window: float = setting(
        60.0,
        "The group status verdict's window: no commit for this long is STOPPED (IDLE when caught up), "
        "an offset unmoved under commits STALLED.",
        duration=True,
        valid=above(0),
    )
    mirror_kafka_bootstrap: str = setting(
        "",
        "Kafka ``bootstrap.servers`` to copy committed offsets to (best effort, never read back); empty: no mirror.",
        metavar="HOST:PORT,...",
        group=MIRROR,
    )
    mirror_kafka_groups: str = setting(
        "",
        "Comma-separated group id prefixes whose commits are mirrored; required with ``mirror_kafka_bootstrap``.",
        metavar="PREFIX[,PREFIX]",
        group=MIRROR,
    )
    mirror_interval: float = setting(
        5.0,
        "Time between two mirror rounds: a partition's offset reaches Kafka at most this late.",
        group=MIRROR,
        duration=True,
        valid=above(0),
    )
    watermarks_kafka_bootstrap: str = setting(
        "",
        "Kafka ``bootstrap.servers`` the supervisor reads log starts and ends from; empty: only reported watermarks.",
        metavar="HOST:PORT,...",
        group=WATERMARKS,
    )
    watermarks_kafka_groups: str = setting(
        "",
        "Comma-separated group id prefixes whose stored partitions' watermarks are read; required with the bootstrap.",
        metavar="PREFIX[,PREFIX]",
        group=WATERMARKS,
    )
    watermarks_kafka_topics: str = setting(
        "",
        "Comma-separated topic prefixes the watermark reader may read; empty: those a watched group's principals "
        "may report (every topic without a tokens file).",
        metavar="PREFIX[,PREFIX]",
        group=WATERMARKS,
    )
    watermarks_kafka_interval: float = setting(
        5.0,
        "Time between two rounds of the watermark reader.",
        group=WATERMARKS,
        duration=True,
        valid=above(0),
    )
    watermarks_kafka_max_partitions: int = setting(
        10_000,
        "Partitions one round reads at most; beyond, rounds take them round-robin.",
        metavar="N",
        group=WATERMARKS,
        valid=at_least(1),
    )
    watermarks_kafka_config: Path | None = setting(
        None,
        "librdkafka properties file (key=value lines: security.protocol, sasl.*, ssl.*) "
        "for the watermark reader's client.",
        metavar="FILE",
        group=WATERMARKS,
    )
    observe_kafka_groups: str = setting(
        "",
        "Comma-separated Kafka group id prefixes whose committed offsets the supervisor records as observed groups "
        "of the same ids (with the watermark reader's bootstrap, client config and partitions per round).",
        metavar="PREFIX[,PREFIX]",
        group=WATERMARKS,
    )
    observe_kafka_interval: float = setting(
        5.0,
        "Time between two rounds of the Kafka group observer: a commit to Kafka is recorded at most this late.",
        group=WATERMARKS,
        duration=True,
        valid=above(0),
    )
    tls_cert_file: Path | None = setting(
        None,
        "PEM certificate chain of the server; with ``--tls-key`` it serves TLS instead of plaintext.",
        flag="--tls-cert",
        metavar="PEM",
        group=SECURITY,
    )
    tls_key_file: Path | None = setting(
        None, "PEM private key of ``--tls-cert``.", flag="--tls-key", metavar="PEM", group=SECURITY
    )
    tls_client_ca_file: Path | None = setting(
        None,
        "PEM CA bundle client certificates must chain to; set, every client needs one (mutual TLS).",
        flag="--tls-client-ca",
        metavar="PEM",
        group=SECURITY,
    )
    metrics_tls: bool | None = setting(
        None,
        "Serve ``/metrics`` over TLS with the server's certificate (client certificates too under mutual TLS); "
        "unset: whenever gRPC serves TLS.",
        choices=("on", "off"),
        group=SECURITY,
    )
    reflection: str = setting(
        "on",
        "Server reflection (grpcurl, buf curl): ``on`` (open to everyone), ``off``, or ``authenticated`` "
        "(a token or certificate).",
        choices=REFLECTION_MODES,
        group=SECURITY,
    )
    max_calls_per_principal: int | None = setting(
        None,
        "Calls one authenticated principal may have running at once; more get RESOURCE_EXHAUSTED; "
        "unset: a quarter of ``--max-workers``.",
        group=SECURITY,
        valid=at_least(1),
    )
    principal_partitions_per_second: float = setting(
        Limits.principal_partitions_per_second,
        "Cost (the partitions a commit carries, the rows a read may return) one principal may spend per second "
        "while other principals are active (bursts of a second, at least 10,000); 0: no budget.",
        group=SECURITY,
        valid=at_least(0, "0: no budget"),
    )
    principal_bytes_per_second: int = setting(
        int(Limits.principal_bytes_per_second),
        "Response bytes one authenticated principal may read per second on average (bursts of 4 s); 0: no limit.",
        group=SECURITY,
        valid=at_least(0, "0: no limit"),
    )
    max_groups_per_principal: int = setting(
        0,
        "Live groups one authenticated principal may create, more get RESOURCE_EXHAUSTED GROUP_QUOTA "
        "(``max_groups`` in the tokens file wins); 0: no quota.",
        group=SECURITY,
        valid=at_least(0, "0: no quota"),
    )
    max_partitions_per_principal: int = setting(
        0,
        "Partitions one authenticated principal may store, calls adding more get RESOURCE_EXHAUSTED "
        "PARTITION_QUOTA (``max_partitions`` in the tokens file wins); 0: no quota.",
        group=SECURITY,
        valid=at_least(0, "0: no quota"),
    )
    principal_history_rows_per_second: float = setting(
        1000.0,
        "History rows a principal under a partition quota may append per second on average (bursts of 10 s); "
        "more get RESOURCE_EXHAUSTED history_rows; 0: no budget.",
        group=SECURITY,
        valid=at_least(0, "0: no budget"),
    )
    max_streams: int = setting(4, "Reflection streams open at once; each is ended after a minute.", group=SECURITY)
    grpc_handshake_timeout: float = setting(
        Limits.grpc_handshake_timeout,
        "Time a gRPC connection has to finish its TLS and HTTP/2 handshake before it is closed (grpc's own: 120 s).",
        duration=True,
        group=SECURITY,
        valid=above(0),
    )
    max_connections: int | None = setting(
        None,
        "gRPC connections one serving process holds at once, more closed as they are accepted; "
        "unset: its descriptor limit less 384.",
        group=SECURITY,
        valid=at_least(1),
    )
    max_connections_per_peer: int = setting(
        64,
        "gRPC connections one peer address may hold (behind a proxy: the proxy's); those beyond are closed "
        "within about 0.1 s (Linux); 0: no cap.",
        group=SECURITY,
        valid=at_least(0, "0: no cap"),
    )
    tokens_file: Path | None = setting(
        None,
        "TOML file of principals, their token hashes and grants by group prefix; set, every call needs a bearer token.",
        metavar="TOML",
        group=SECURITY,
    )


@functools.cache
def kinds() -> dict[str, tuple[type, bool]]:
    """Each setting's type and whether it may be unset (None), from its resolved annotation, never its text."""
    resolved: dict[str, tuple[type, bool]] = {}
    for name, hint in typing.get_type_hints(SettingFields).items():
        if isinstance(hint, types.UnionType):
            args = typing.get_args(hint)
            (kind,) = (arg for arg in args if arg is not type(None))
            resolved[name] = (kind, type(None) in args)
        else:
            resolved[name] = (hint, False)
    return resolved
