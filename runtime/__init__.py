"""The database runtime that serves the storage core: the store, its group commit and coalesced
reads, the pool's check, deadlines, the maintenance thread, migrations at start and the
embedded PostgreSQL.

Below it, :mod:`offsetstore.storage` is the pure core (the rules, the schema, the SQL, one
function per operation taking the caller's connection) that the sinks run in their own
transactions; above it, the server and the CLI. The layers inside are a contract in
pyproject.toml.
"""

from __future__ import annotations

from offsetstore.runtime.async_store import AsyncStore
from offsetstore.runtime.store import Store, deadline

__all__ = ["AsyncStore", "Store", "deadline"]
