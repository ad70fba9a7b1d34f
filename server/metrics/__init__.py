"""Prometheus metrics of the server, on a registry of its own so tests can build and read theirs.

Three sources feed one :class:`~prometheus_client.CollectorRegistry`:

- one gRPC server interceptor records go-grpc-prometheus' ``grpc_server_*`` series and the
  store counters (commits, offsets committed, rejections by reason, resets), derived from
  the method, the request and the final status code (:mod:`.rpc`);
- the Store reports each storage operation's duration (``offsetstore_database_query_seconds``);
- a collector reads the database at scrape time, in two bounded statements, for the
  per-group series, the group count and ``offsetstore_database_up``; so offsets that the
  Spark sink commits straight into PostgreSQL show up as well (:mod:`.groups`,
  :mod:`offsetstore.storage.group_metrics`).

:mod:`.registry` assembles them (also across serving processes, prometheus-client's
multiprocess mode) and :mod:`.http_server` serves ``/metrics``. The names below are the
package's public surface.
"""

from offsetstore.server.metrics.groups import SERIES_LIMIT, GroupCollector
from offsetstore.server.metrics.http_server import (
    HTTP_CONNECTION_SECONDS,
    HTTP_REQUEST_SECONDS,
    HTTP_TIMEOUT_SECONDS,
    MAX_HTTP_CONNECTIONS,
    MAX_HTTP_CONNECTIONS_PER_PEER,
    MetricsHTTPServer,
    serve_http,
)
from offsetstore.server.metrics.registry import (
    OPERATIONS,
    SCRAPE_CACHE_SECONDS,
    SUMS_SECONDS,
    RetentionMetrics,
    StoreSeries,
    build_registry,
    interceptors,
    retention_metrics,
    server_metrics,
    use_multiprocess,
    worker_metrics,
)
from offsetstore.server.metrics.rpc import (
    GRPC_CODES,
    LATENCY_BUCKETS,
    REJECTION_REASONS,
    SERVICES,
    MetricsInterceptor,
    ServerMetrics,
)
from offsetstore.storage.group_metrics import GroupScrape, group_metrics, group_sums, share_series

__all__ = [
    "GRPC_CODES",
    "HTTP_CONNECTION_SECONDS",
    "HTTP_REQUEST_SECONDS",
    "HTTP_TIMEOUT_SECONDS",
    "LATENCY_BUCKETS",
    "MAX_HTTP_CONNECTIONS",
    "MAX_HTTP_CONNECTIONS_PER_PEER",
    "OPERATIONS",
    "REJECTION_REASONS",
    "SCRAPE_CACHE_SECONDS",
    "SERIES_LIMIT",
    "SERVICES",
    "SUMS_SECONDS",
    "GroupCollector",
    "GroupScrape",
    "MetricsHTTPServer",
    "MetricsInterceptor",
    "RetentionMetrics",
    "ServerMetrics",
    "StoreSeries",
    "build_registry",
    "group_metrics",
    "group_sums",
    "interceptors",
    "retention_metrics",
    "serve_http",
    "server_metrics",
    "share_series",
    "use_multiprocess",
    "worker_metrics",
]
