"""What the runtime store opens and runs with: :class:`StoreConfig`, plain frozen data.

psycopg_pool's pools are the model: a pool is made from its conninfo and sizes, then opened
(``async with``) in the loop that uses it. Nothing here is recovered from another object
(an engine, a side table) or patched in after the pools are open: what a store needs, from
the session settings every transaction sets to the hooks its batches call, is given here.
``offsetstore serve`` makes one from its settings (``Settings.store_config``); a test or a
tool writes one out (``StoreConfig(url, hot_pool_size=4)``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import NamedTuple

from offsetstore.core.types import MAX_RESPONSE_BYTES
from offsetstore.storage.engine import SessionSettings
from offsetstore.storage.status import DEFAULT_RULES, StatusRules

__all__ = ["Carry", "StoreConfig", "StoreObserver"]


@dataclass(frozen=True)
class StoreObserver:
    """What a store reports as it runs (the metrics' seam); each hook may be None."""

    #: Called with each operation's name and duration in seconds, failures included.
    operation: Callable[[str, float], None] | None = None
    #: Called with the number of groups each expiry removed.
    expired: Callable[[int], None] | None = None
    #: Called with each batch's kind ("write": a group commit, "read": a coalesced read) and its calls.
    batch: Callable[[str, int], None] | None = None


class Carry(NamedTuple):
    """What a group-commit batch carries of its callers' context (the server's tracing makes one: server/tracing.py).

    ``capture`` runs in each caller's task when it queues its request; ``enter`` gets what was
    captured of the batch's callers and is entered around the batch's transaction.
    """

    capture: Callable[[], object]
    enter: Callable[[list[object]], AbstractContextManager[object]]


@dataclass(frozen=True)
class StoreConfig:
    """Everything an :class:`~offsetstore.runtime.async_store.AsyncStore` is made from."""

    url: str
    """The database, in any spelling libpq reads (multi-host URLs included)."""

    session: SessionSettings = field(default_factory=SessionSettings)
    """What every transaction sets for itself, and how connections are made; its statement timeout is the store's."""

    hot_pool_size: int = 8
    """Connections of the hot pool (group commit, fetches, descriptions, watermark reports), psycopg's pool."""

    cold_pool_size: int | None = None
    """Connections of SQLAlchemy's asyncio engine for everything else; None: a quarter of the hot pool, at least 2."""

    write_flushers: int = 2
    """Tasks writing group-commit batches, each holding one hot connection while it writes."""

    read_flushers: int = 2
    """Tasks coalescing concurrent fetches and descriptions."""

    max_response_bytes: int = MAX_RESPONSE_BYTES
    """The most one FetchOffsets or DescribeGroup answer may hold; larger ones come in pages."""

    status_rules: StatusRules = DEFAULT_RULES
    """How a group's status is judged (its window)."""

    observer: StoreObserver = field(default_factory=StoreObserver)
    """The hooks the store calls as it runs (the metrics)."""

    carry: Carry | None = None
    """What a write batch carries of its callers' context (the traces); None: nothing."""

    def __post_init__(self) -> None:
        if self.hot_pool_size < 1:
            raise ValueError("hot_pool_size must be >= 1")
        if self.cold_pool_size is not None and self.cold_pool_size < 1:
            raise ValueError("cold_pool_size must be >= 1")
        if self.write_flushers < 1 or self.read_flushers < 1:
            raise ValueError("write_flushers and read_flushers must be >= 1")

    @property
    def statement_timeout_ms(self) -> int:
        """The store's statement timeout (its session settings'); a caller's nearer deadline shortens it."""
        return self.session.statement_timeout_ms

    @property
    def cold_pool(self) -> int:
        """The asyncio engine's pool size, chosen."""
        return self.cold_pool_size or max(2, self.hot_pool_size // 4)
