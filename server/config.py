"""Server settings, read once at start from flags and ``OFFSETSTORE_*`` environment variables."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offsetstore.core.durations import parse_duration
from offsetstore.runtime.config import Carry, StoreConfig, StoreObserver
from offsetstore.server.limits import MAX_MESSAGE_BYTES, REFLECTION_MODES, Limits
from offsetstore.storage import database_url
from offsetstore.storage.engine import SessionSettings
from offsetstore.storage.status import StatusRules
from offsetstore.storage.validate import MAX_RESPONSE_BYTES


def _default_data_dir() -> Path:
    from offsetstore.runtime.embedded import default_data_dir

    return default_data_dir()


@dataclass(frozen=True)
class Settings:
    """Everything ``offsetstore serve`` needs; flags win over the environment, which wins over defaults."""

    database_url: str | None = None
    """External PostgreSQL URL (``postgresql://...``); unset starts the embedded PostgreSQL."""

    data_dir: Path = field(default_factory=_default_data_dir)
    """Where the embedded PostgreSQL keeps its data."""

    listen: str = "127.0.0.1:50051"
    """HOST:PORT of the gRPC server."""

    metrics_listen: str = "127.0.0.1:9464"
    """HOST:PORT of the Prometheus ``/metrics`` endpoint; empty disables it."""

    http_listen: str = ""
    """HOST:PORT of the HTTP/JSON API (Connect protocol) and the web console, with gRPC's TLS and tokens; empty (the default) disables it."""

    migrate: bool = True
    """Apply the migrations at start."""

    migration_lock_timeout: float = field(default=300.0, metadata={"duration": True})
    """Seconds to wait for the migration lock (another migrator, or any session squatting its key) before giving up."""

    trace_trust_callers: bool = False
    """With OTEL_* tracing: honour a caller's sampled ``traceparent`` flag (off: it cannot raise sampling above OTEL_TRACES_SAMPLER's)."""

    sql_api_roles: str = ""
    """Roles calling the SQL API v1 when migrating across 0011: ``keep`` grants each its access on every group, ``revoke`` lets them lose it, empty stops naming them."""

    processes: int = 1
    """Serving processes sharing the gRPC port (SO_REUSEPORT); ``auto`` is the number of CPUs."""

    max_workers: int = 32
    """Scale of the per-caller limits: streams (half), calls per principal (a quarter), calls per anonymous peer (8x)."""

    pool_size: int = 16
    """Database connections held by the server."""

    write_flushers: int = 2
    """Threads writing batches of concurrent commits and joins, one transaction each (group commit)."""

    statement_timeout_ms: int = 5000
    """Upper bound of one SQL statement; a slower database answers UNAVAILABLE."""

    database_prepare: str = "on"
    """Server-side prepared statements on the hot path: ``on``, or ``off`` behind a transaction pooler (PgBouncer's pool_mode = transaction)."""

    require_synchronous_replication: bool = False
    """Refuse to serve from a primary whose commits wait for no synchronous standby: an acknowledged commit could be lost in a failover."""

    grace_seconds: float = 10.0
    """How long SIGTERM waits for in-flight calls before cancelling them."""

    group_metrics_limit: int = 1000
    """At most this many groups get per-group metric series per scrape."""

    metrics_series_limit: int = 20_000
    """Per-group series a scrape holds at most, shared fairly by tenants; a group beyond its share shows sums only (0: no limit)."""

    log_level: str = "INFO"
    """Python logging level name."""

    log_format: str = "text"
    """``text`` (key=value) or ``json`` (one object per line)."""

    tls_cert_file: Path | None = None
    """PEM certificate chain of the server; with ``tls_key_file`` it serves TLS instead of plaintext."""

    tls_key_file: Path | None = None
    """PEM private key of ``tls_cert_file``."""

    tls_client_ca_file: Path | None = None
    """PEM CA bundle client certificates must chain to; set, every client needs one (mutual TLS)."""

    metrics_tls: bool | None = None
    """Serve ``/metrics`` over TLS with the server's certificate (client certificates too under mutual TLS); unset: whenever gRPC serves TLS."""

    tokens_file: Path | None = None
    """TOML file of principals, their token hashes and grants; set, every call needs a bearer token."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    """Largest request taken; the default admits the largest valid one (10,000 partitions, full metadata: ~44 MB)."""

    max_response_bytes: int = MAX_RESPONSE_BYTES
    """Largest FetchOffsets or DescribeGroup answer; a larger one comes in pages (page_size > 0), or is refused."""

    history_retention: float = field(default=7 * 86400.0, metadata={"duration": True})
    """Seconds of offset history kept (whole days are dropped once older); 0 keeps everything."""

    offsets_retention: float = field(default=0.0, metadata={"duration": True})
    """Seconds without a commit, join or reset after which a group's offsets expire; 0 never expires them."""

    maintenance_interval: float = field(default=60.0, metadata={"duration": True})
    """Seconds between maintenance rounds (history partitions, expiry)."""

    status_window: float = field(default=60.0, metadata={"duration": True})
    """The group status verdict's window: no commit for this long is STOPPED (IDLE when caught up), an offset unmoved under commits STALLED."""

    # --- the Kafka mirror (docs/operations.md, "Mirroring offsets to Kafka") ---

    mirror_kafka_bootstrap: str = ""
    """Kafka ``bootstrap.servers`` to copy committed offsets to (best effort, never read back); empty: no mirror."""

    mirror_kafka_groups: str = ""
    """Comma-separated group id prefixes whose commits are mirrored; required with ``mirror_kafka_bootstrap``."""

    mirror_interval: float = field(default=5.0, metadata={"duration": True})
    """Seconds between two mirror rounds: a partition's offset reaches Kafka at most this late."""

    # --- server-side watermarks (docs/operations.md, "Server-side watermarks") ---

    watermarks_kafka_bootstrap: str = ""
    """Kafka ``bootstrap.servers`` the supervisor reads log starts and ends from; empty: only reported watermarks."""

    watermarks_kafka_groups: str = ""
    """Comma-separated group id prefixes whose stored partitions' watermarks are read; required with the bootstrap."""

    watermarks_kafka_interval: float = field(default=5.0, metadata={"duration": True})
    """Seconds between two rounds of the watermark reader."""

    watermarks_kafka_max_partitions: int = 10_000
    """Partitions one round reads at most; beyond, rounds take them round-robin."""

    watermarks_kafka_topics: str = ""
    """Comma-separated topic prefixes the watermark reader may read; empty: those a watched group's principals may report (every topic without a tokens file)."""

    watermarks_kafka_config: Path | None = None
    """librdkafka properties file (key=value lines: security.protocol, sasl.*, ssl.*) for the watermark reader's client."""

    # --- hostile callers (docs/security.md, "Threat model") ---

    reflection: str = "on"
    """Server reflection: ``on`` (open to everyone), ``off``, or ``authenticated`` (a token or certificate)."""

    max_streams: int = 4
    """Reflection streams open at once; each is ended after a minute."""

    max_calls_per_principal: int | None = None
    """Calls one authenticated principal may have running at once; unset: a quarter of ``max_workers``."""

    principal_bytes_per_second: int = int(Limits.principal_bytes_per_second)
    """Response bytes one authenticated principal may read per second on average (bursts of 4 s); 0: no limit."""

    max_groups_per_principal: int = 0
    """Live groups one authenticated principal may create (``max_groups`` in the tokens file wins); 0: no quota."""

    max_partitions_per_principal: int = 0
    """Partitions one authenticated principal may store (``max_partitions`` in the tokens file wins); 0: no quota."""

    principal_history_rows_per_second: float = 1000.0
    """History rows a principal under a partition quota may append per second on average (bursts of 10 s); 0: no budget."""

    http_allowed_hosts: str = ""
    """Comma-separated host names the HTTP listener answers besides IP addresses and localhost (``.example.com``: every name under it); others get 421 (DNS rebinding)."""

    def __post_init__(self) -> None:
        if self.database_url is not None:
            database_url.parse(self.database_url)  # InvalidDatabaseUrl (a ValueError): one line, exit 2
        if self.database_prepare not in ("on", "off"):
            raise ValueError("OFFSETSTORE_DATABASE_PREPARE must be on or off (off behind a transaction pooler)")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("OFFSETSTORE_TLS_CERT_FILE and OFFSETSTORE_TLS_KEY_FILE go together: give both or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError(
                "OFFSETSTORE_TLS_CLIENT_CA_FILE (mutual TLS) needs the server's own TLS certificate and key"
            )
        if self.metrics_tls and self.tls_cert_file is None:
            raise ValueError("OFFSETSTORE_METRICS_TLS needs the server's TLS certificate and key")
        if not 1 <= self.write_flushers < self.pool_size:
            raise ValueError("OFFSETSTORE_WRITE_FLUSHERS must be at least 1 and below OFFSETSTORE_POOL_SIZE")
        if self.max_message_bytes < 1024:
            raise ValueError("OFFSETSTORE_MAX_MESSAGE_BYTES must be at least 1024")
        if not 2**16 <= self.max_response_bytes <= 2**26:
            raise ValueError("OFFSETSTORE_MAX_RESPONSE_BYTES must be between 65536 (64 KiB) and 67108864 (64 MiB)")
        if self.migration_lock_timeout < 0:
            raise ValueError("OFFSETSTORE_MIGRATION_LOCK_TIMEOUT must be 0 or above")
        if self.sql_api_roles not in ("", "keep", "revoke"):
            raise ValueError("OFFSETSTORE_SQL_API_ROLES must be keep or revoke (or empty: stop and name them)")
        if self.maintenance_interval <= 0:
            raise ValueError("OFFSETSTORE_MAINTENANCE_INTERVAL must be above 0")
        if self.history_retention < 0 or self.offsets_retention < 0:
            raise ValueError("retention durations must be 0 (keep everything) or above")
        if self.reflection not in REFLECTION_MODES:
            raise ValueError("OFFSETSTORE_REFLECTION must be on, off or authenticated")
        if self.reflection == "authenticated" and self.tokens_file is None and self.tls_client_ca_file is None:
            raise ValueError("OFFSETSTORE_REFLECTION=authenticated needs a tokens file or client certificates")
        if self.principal_history_rows_per_second < 0:
            raise ValueError("OFFSETSTORE_PRINCIPAL_HISTORY_ROWS_PER_SECOND must be >= 0 (0: no budget)")
        if self.principal_bytes_per_second < 0:
            raise ValueError("OFFSETSTORE_PRINCIPAL_BYTES_PER_SECOND must be >= 0 (0: no limit)")
        if self.max_calls_per_principal is not None and self.max_calls_per_principal < 1:
            raise ValueError("OFFSETSTORE_MAX_CALLS_PER_PRINCIPAL must be at least 1")
        if self.metrics_series_limit < 0:
            raise ValueError("OFFSETSTORE_METRICS_SERIES_LIMIT must be >= 0 (0: no limit)")
        if self.max_partitions_per_principal < 0:
            raise ValueError("OFFSETSTORE_MAX_PARTITIONS_PER_PRINCIPAL must be >= 0 (0: no quota)")
        if self.max_groups_per_principal < 0:
            raise ValueError("OFFSETSTORE_MAX_GROUPS_PER_PRINCIPAL must be >= 0 (0: no quota)")
        if not 1 <= self.processes <= 256:
            raise ValueError("OFFSETSTORE_PROCESSES must be between 1 and 256, or auto")
        if self.mirror_kafka_bootstrap and not self.mirror_kafka_groups.strip(","):
            raise ValueError(
                "OFFSETSTORE_MIRROR_KAFKA_BOOTSTRAP needs OFFSETSTORE_MIRROR_KAFKA_GROUPS (group id prefixes)"
            )
        if self.watermarks_kafka_bootstrap and not self.watermarks_kafka_groups.strip(","):
            raise ValueError(
                "OFFSETSTORE_WATERMARKS_KAFKA_BOOTSTRAP needs OFFSETSTORE_WATERMARKS_KAFKA_GROUPS (group id prefixes)"
            )
        if self.watermarks_kafka_interval <= 0 or self.watermarks_kafka_max_partitions < 1:
            raise ValueError(
                "OFFSETSTORE_WATERMARKS_KAFKA_INTERVAL must be above 0 and OFFSETSTORE_WATERMARKS_KAFKA_MAX_PARTITIONS at least 1"
            )
        if self.status_window <= 0:
            raise ValueError("OFFSETSTORE_STATUS_WINDOW must be above 0")
        if self.mirror_interval <= 0:
            raise ValueError("OFFSETSTORE_MIRROR_INTERVAL must be above 0")
        if not 0 <= self.max_streams < self.max_workers:
            raise ValueError("OFFSETSTORE_MAX_STREAMS must be >= 0 and below OFFSETSTORE_MAX_WORKERS")

    def limits(self) -> Limits:
        """The limits every serving process is made with (each admits its share)."""
        return Limits(
            max_workers=self.max_workers,
            max_streams=self.max_streams,
            max_calls_per_principal=self.max_calls_per_principal,
            principal_bytes_per_second=self.principal_bytes_per_second,
            max_groups_per_principal=self.max_groups_per_principal,
            max_partitions_per_principal=self.max_partitions_per_principal,
            principal_history_rows_per_second=self.principal_history_rows_per_second,
            max_message_bytes=self.max_message_bytes,
            reflection=self.reflection,
            processes=self.processes,
        )

    def store_config(
        self,
        url: str,
        *,
        pool_size: int | None = None,
        cold_pool_size: int | None = None,
        application_name: str = "offsetstore",
        observer: StoreObserver | None = None,
        carry: Carry | None = None,
    ) -> StoreConfig:
        """The runtime store's config on ``url``: a serving process's (``pool_size`` None), or the supervisor's smaller one.

        ``observer`` (the metrics) and ``carry`` (the traces) are the process's own, made before the store opens.
        """
        size = self.pool_size if pool_size is None else pool_size
        return StoreConfig(
            url,
            SessionSettings(
                statement_timeout_ms=self.statement_timeout_ms,
                application_name=application_name,
                prepare=self.database_prepare == "on",
                require_synchronous_replication=self.require_synchronous_replication,
            ),
            hot_pool_size=size,
            cold_pool_size=cold_pool_size,
            write_flushers=min(self.write_flushers, size),
            max_response_bytes=self.max_response_bytes,
            status_rules=StatusRules(window=self.status_window),
            observer=observer or StoreObserver(),
            carry=carry,
        )

    @property
    def tls(self) -> bool:
        """Whether the server serves TLS."""
        return self.tls_cert_file is not None

    @classmethod
    def load(cls, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        """Builds settings from flags (None = not given) over ``OFFSETSTORE_<NAME>`` variables."""
        environ = os.environ if environ is None else environ
        flags = flags or {}
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = flags.get(f.name)
            if raw is None:
                raw = environ.get(f"OFFSETSTORE_{f.name.upper()}")
            if raw is None or (raw == "" and f.name == "database_url"):
                continue
            if f.name == "processes" and isinstance(raw, str) and raw.strip().lower() == "auto":
                raw = os.cpu_count() or 1
            values[f.name] = _duration(f.name, raw) if f.metadata.get("duration") else _coerce(f.name, f.type, raw)
        return cls(**values)


def _duration(name: str, raw: Any) -> float:
    """Seconds of ``90s``, ``15m``, ``12h``, ``7d`` or plain seconds (also a number already parsed)."""
    if not isinstance(raw, str):
        return float(raw.total_seconds() if hasattr(raw, "total_seconds") else raw)
    try:
        return parse_duration(raw).total_seconds()
    except ValueError as error:
        raise ValueError(f"OFFSETSTORE_{name.upper()}: {error}") from None


#: Settings that turn security on. An empty value is refused rather than read as "unset":
#: ``OFFSETSTORE_TOKENS_FILE=""`` from a template whose secret did not render must not
#: serve every call to anonymous callers.
SECURITY_SETTINGS = frozenset({"tokens_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file"})


def _coerce(name: str, kind: Any, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    if name in SECURITY_SETTINGS and not raw.strip():
        raise ValueError(f"OFFSETSTORE_{name.upper()} is set but empty; unset it to run without it, or give the file")
    if isinstance(kind, str) and kind.endswith(" | None"):
        if raw == "":
            return None  # an empty variable unsets an optional setting
        kind = kind.removesuffix(" | None")
    try:
        if kind in ("bool", bool):
            lowered = raw.strip().lower()
            if lowered not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(raw)
            return lowered in ("1", "true", "yes", "on")
        if kind in ("int", int):
            return int(raw)
        if kind in ("float", float):
            return float(raw)
        if kind in ("Path", Path):
            return Path(raw).expanduser()
    except ValueError:
        raise ValueError(f"OFFSETSTORE_{name.upper()}: cannot read {raw!r} as {kind}") from None
    return raw


def split_host_port(value: str) -> tuple[str, int]:
    """``"127.0.0.1:50051"`` -> ("127.0.0.1", 50051); also ``[::1]:50051``."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
