"""The production tests' fixtures: PostgreSQL clusters of their own, PgBouncer, and `offsetstore serve` over them."""

from tests.fixtures.fix_kafka import broker, make_topic
from tests.fixtures.fix_pg_cluster import async_cluster, pooled_cluster, sync_cluster
from tests.fixtures.fix_pgbouncer import pooler
from tests.fixtures.fix_production import pooled_server

__all__ = ["async_cluster", "broker", "make_topic", "pooled_cluster", "pooled_server", "pooler", "sync_cluster"]
