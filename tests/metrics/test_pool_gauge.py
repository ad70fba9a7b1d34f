"""The database pool's gauge and the build info, read from a registry over a real store."""

from __future__ import annotations

from importlib import metadata

from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from tests.fixtures.fix_metrics import Metered
from tests.fixtures.waits import wait_for


def test_pool_in_use_and_build_info(metered: Metered) -> None:
    assert metered.value("offsetstore_database_pool_in_use") == 0
    store = metered.store
    held = [store.aio.hot_connection(None) for _ in range(2)]
    for taken in held:
        store.wait(taken.__aenter__())
    assert metered.value("offsetstore_database_pool_in_use") == 2
    for taken in held:
        store.wait(taken.__aexit__(None, None, None))
    assert metered.value("offsetstore_database_pool_in_use") == 0
    assert metered.value("offsetstore_build_info", version=metadata.version("offsetstore")) == 1


def test_connections_being_opened_are_not_in_use() -> None:
    # The pool keeps trying to open its first connection to a database that is not there: no
    # call holds one. (It read 1 here, and 1 at times right after a store opened: a flaky test.)
    store = Store.open(StoreConfig("postgresql+psycopg://postgres@127.0.0.1:1/none", hot_pool_size=2))
    try:
        registry = metrics.build_registry(store)
        wait_for(lambda: store.aio.hot.get_stats().get("connections_errors", 0) > 0, what="a failed connect")
        assert registry.get_sample_value("offsetstore_database_pool_in_use") == 0
    finally:
        store.dispose()
