"""Server settings, read once at start from flags and ``OFFSETSTORE_*`` environment variables."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _default_data_dir() -> Path:
    from .embedded import default_data_dir

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

    migrate: bool = True
    """Apply the migrations at start."""

    max_workers: int = 32
    """Threads serving RPCs at once."""

    pool_size: int = 16
    """Database connections held by the server."""

    statement_timeout_ms: int = 5000
    """Upper bound of one SQL statement; a slower database answers UNAVAILABLE."""

    grace_seconds: float = 10.0
    """How long SIGTERM waits for in-flight calls before cancelling them."""

    group_metrics_limit: int = 1000
    """At most this many groups get per-group metric series per scrape."""

    log_level: str = "INFO"
    """Python logging level name."""

    log_format: str = "text"
    """``text`` (key=value) or ``json`` (one object per line)."""

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
            values[f.name] = _coerce(f.name, f.type, raw)
        return cls(**values)


def _coerce(name: str, kind: Any, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
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
