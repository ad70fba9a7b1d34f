"""Server settings, read once at start from flags and ``OFFSETSTORE_*`` environment variables."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offsetstore.core.durations import parse_duration
from offsetstore.runtime.config import Carry, StoreConfig, StoreObserver
from offsetstore.server.limits import Limits
from offsetstore.server.settings import SettingFields, Valid, kinds
from offsetstore.storage import database_url
from offsetstore.storage.engine import SessionSettings
from offsetstore.storage.status import StatusRules


@dataclass(frozen=True)
class Settings(SettingFields):
    """Everything ``offsetstore serve`` needs; flags win over the environment, which wins over defaults.

    The fields, their defaults, their help and what each value must be are declared once in
    ``server/settings.py`` (the flags of ``serve`` and the checks below are made from them); here
    are the checks that relate settings to each other and the parts made of them.
    """

    def __post_init__(self) -> None:
        # Each setting's own rule is declared with it (``valid``, or its choices); here, the rules
        # that relate settings to each other.
        for f in dataclasses.fields(self):
            valid: Valid | None = f.metadata.get("valid")
            if valid is not None:
                valid.check(f.name, getattr(self, f.name))
        if self.database_url is not None:
            database_url.parse(self.database_url)  # InvalidDatabaseUrl (a ValueError): one line, exit 2
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
        if self.reflection == "authenticated" and self.tokens_file is None and self.tls_client_ca_file is None:
            raise ValueError("OFFSETSTORE_REFLECTION=authenticated needs a tokens file or client certificates")
        if self.mirror_kafka_bootstrap and not self.mirror_kafka_groups.strip(","):
            raise ValueError(
                "OFFSETSTORE_MIRROR_KAFKA_BOOTSTRAP needs OFFSETSTORE_MIRROR_KAFKA_GROUPS (group id prefixes)"
            )
        if self.watermarks_kafka_bootstrap and not self.watermarks_kafka_groups.strip(","):
            raise ValueError(
                "OFFSETSTORE_WATERMARKS_KAFKA_BOOTSTRAP needs OFFSETSTORE_WATERMARKS_KAFKA_GROUPS (group id prefixes)"
            )
        if not 0 <= self.max_streams < self.max_workers:
            raise ValueError("OFFSETSTORE_MAX_STREAMS must be >= 0 and below OFFSETSTORE_MAX_WORKERS")

    def limits(self) -> Limits:
        """The limits every serving process is made with (each admits its share)."""
        return Limits(
            max_workers=self.max_workers,
            max_streams=self.max_streams,
            max_calls_per_principal=self.max_calls_per_principal,
            principal_partitions_per_second=self.principal_partitions_per_second,
            principal_bytes_per_second=self.principal_bytes_per_second,
            max_groups_per_principal=self.max_groups_per_principal,
            max_partitions_per_principal=self.max_partitions_per_principal,
            principal_history_rows_per_second=self.principal_history_rows_per_second,
            max_message_bytes=self.max_message_bytes,
            reflection=self.reflection,
            processes=self.processes,
            grpc_handshake_timeout=self.grpc_handshake_timeout,
            max_connections=self.max_connections,
            max_connections_per_peer=self.max_connections_per_peer,
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
            values[f.name] = _duration(f.name, raw) if f.metadata.get("duration") else _coerce(f.name, raw)
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


def _coerce(name: str, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    if name in SECURITY_SETTINGS and not raw.strip():
        raise ValueError(f"OFFSETSTORE_{name.upper()} is set but empty; unset it to run without it, or give the file")
    kind, optional = kinds()[name]
    if optional and raw == "":
        return None  # an empty variable unsets an optional setting
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(raw)
            return lowered in ("1", "true", "yes", "on")
        if kind in (int, float):
            return kind(raw)
        if kind is Path:
            return Path(raw).expanduser()
    except ValueError:
        raise ValueError(f"OFFSETSTORE_{name.upper()}: cannot read {raw!r} as {kind.__name__}") from None
    return raw


def split_host_port(value: str) -> tuple[str, int]:
    """``"127.0.0.1:50051"`` -> ("127.0.0.1", 50051); also ``[::1]:50051``."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
