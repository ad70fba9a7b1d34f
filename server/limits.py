"""What one server admits: the typed limits the gate, the quotas and the reflection guard are made from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["MAX_MESSAGE_BYTES", "REFLECTION_MODES", "Limits"]

# The largest valid request is a commit of 10,000 partitions, each with a 249-character
# topic, 4096 bytes of metadata and every number at its widest: 4,381 bytes a partition,
# ~43.8 MB in all. Larger requests are refused with RESOURCE_EXHAUSTED before they are read,
# and a caller's requests are read only once it is counted in (server/admission.py), which
# bounds the memory one caller's requests take.
MAX_MESSAGE_BYTES = 48 * 1024 * 1024

#: ``--reflection``: served to everyone, not served, or served to authenticated callers only.
REFLECTION_MODES = ("on", "off", "authenticated")


@dataclass(frozen=True)
class Limits:
    """What one server admits: its callers' limits and quotas, its streams, its largest request.

    The gate, the reflection guard and the quotas are made from it (server/app.py); ``serve``
    takes it from :meth:`Settings.limits`, a test names only the limits it is about.
    """

    max_workers: int = 32
    """Scale of the per-caller limits: streams (half, at most 4), calls per principal (a quarter), per anonymous peer (8x)."""

    max_streams: int | None = None
    """Reflection streams open at once; unset: half of ``max_workers``, at most 4."""

    stream_seconds: float = 60.0
    """A reflection stream is ended after this long (grpcurl's and buf's take milliseconds)."""

    max_calls_per_principal: int | None = None
    """Calls one authenticated principal may have running at once (all processes together); unset: a quarter of ``max_workers``."""

    principal_partitions_per_second: float = 20_000.0
    """Cost (partitions, entries, rows) one principal may spend per second while others are active; 0: no budget."""

    principal_bytes_per_second: float = 4 * 2**20
    """Response bytes one principal may read per second on average (bursts of 4 s); 0: no limit."""

    max_groups_per_principal: int = 0
    """Live groups one authenticated principal may create; 0: no quota."""

    max_partitions_per_principal: int = 0
    """Partitions one authenticated principal may store; 0: no quota."""

    principal_history_rows_per_second: float = 0.0
    """History rows a principal under a partition quota may append per second on average; 0: no budget."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    """Largest request taken (gRPC and HTTP)."""

    reflection: str = "on"
    """Server reflection: ``on``, ``off`` or ``authenticated``."""

    processes: int = 1
    """Serving processes sharing the port: each admits its share of the per-principal limits (:meth:`share`)."""

    grpc_handshake_timeout: float = 10.0
    """Seconds a gRPC connection has to finish its TLS and HTTP/2 handshake; grpc's own default is 120."""

    max_connections: int | None = None
    """gRPC connections one process holds at once, more closed at accept; unset: its descriptor limit less 384."""

    max_connections_per_peer: int = 0
    """gRPC connections one peer address may hold (all processes together), those beyond closed; 0: no cap (``serve``: 64)."""

    def __post_init__(self) -> None:
        if self.reflection not in REFLECTION_MODES:
            raise ValueError(f"reflection must be one of {', '.join(REFLECTION_MODES)}, not {self.reflection!r}")
        if not 0 <= self.streams < self.max_workers:
            raise ValueError("max_streams must be >= 0 and below max_workers")
        if self.processes < 1:
            raise ValueError("processes must be >= 1")
        if self.grpc_handshake_timeout <= 0:
            raise ValueError("grpc_handshake_timeout must be above 0")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if self.principal_partitions_per_second < 0:
            raise ValueError("principal_partitions_per_second must be >= 0 (0: no budget)")
        if self.max_connections_per_peer < 0:
            raise ValueError("max_connections_per_peer must be >= 0 (0: no cap)")

    @property
    def streams(self) -> int:
        """Reflection streams open at once, as many as half the calls when they held threads."""
        return min(4, self.max_workers // 2) if self.max_streams is None else self.max_streams

    @property
    def calls_per_principal(self) -> int:
        """Calls one principal may have running at once: a quarter of the workers unless set (four tenants cannot fill them)."""
        return max(1, self.max_workers // 4) if self.max_calls_per_principal is None else self.max_calls_per_principal

    def share(self) -> Limits:
        """What one of ``processes`` serving processes admits.

        The kernel spreads a principal's connections over the processes, each counting on its
        own: each admits 1/N of the per-principal limits, so that together they admit what one
        process would (a call limit below N becomes N, one call each).
        """
        return dataclasses.replace(
            self,
            max_calls_per_principal=max(1, self.calls_per_principal // self.processes),
            principal_partitions_per_second=self.principal_partitions_per_second / self.processes,
            principal_bytes_per_second=self.principal_bytes_per_second / self.processes,
            principal_history_rows_per_second=self.principal_history_rows_per_second / self.processes,
            processes=1,
        )
