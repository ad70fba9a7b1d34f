"""What running an operation for a caller takes in the runtime: its deadline (a contextvar), its statement timeout, faults made typed, retries."""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable

import psycopg
import psycopg_pool
import sqlalchemy.exc

from offsetstore.core.errors import OffsetStoreError, StoreUnavailableError

log = logging.getLogger(__name__)

#: When a caller gives up (``time.monotonic()``), and whether it is still there.
Bound = tuple[float, Callable[[], bool]]

# Conflicts PostgreSQL resolves by aborting one side; the whole transaction is safe to rerun.
_RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
ATTEMPTS = 3
# The database is gone, restarting, timed out or overloaded: the caller may try again later.
# Not every OperationalError qualifies (a statement too complex fails the same way each time).
_UNAVAILABLE = (
    psycopg.InterfaceError,  # the connection died between statements
    psycopg.errors.ConnectionException,  # SQLSTATE class 08
    psycopg.errors.OperatorIntervention,  # 57: admin/crash shutdown, starting up
    psycopg.errors.InsufficientResources,  # 53: too many connections, out of memory, disk full
    psycopg.errors.QueryCanceled,  # statement timeout (not an OperatorIntervention in psycopg)
    psycopg.errors.LockNotAvailable,
    # 25006: a standby, or a primary demoted by a failover, takes no writes until one is promoted.
    psycopg.errors.ReadOnlySqlTransaction,
    # 25P03: the server ended the session (idle_in_transaction_session_timeout).
    psycopg.errors.IdleInTransactionSessionTimeout,
    *_RETRYABLE,
)


def _cause(error: BaseException) -> tuple[BaseException | None, bool]:
    """(psycopg's error under ``error``, whether the connection was lost) for SQLAlchemy's or psycopg's own."""
    if isinstance(error, sqlalchemy.exc.DBAPIError):
        return error.orig, error.connection_invalidated
    if isinstance(error, psycopg.Error):
        # psycopg alone (the asyncio hot path): the connection it failed on says whether it broke.
        pgconn = error.pgconn
        return error, pgconn is not None and pgconn.status == psycopg.pq.ConnStatus.BAD
    return None, False


def retryable(error: BaseException) -> bool:
    """Whether PostgreSQL aborted the transaction for a conflict: the whole of it is safe to rerun."""
    return isinstance(_cause(error)[0], _RETRYABLE)


def classify(name: str, error: BaseException) -> OffsetStoreError | None:
    """What a failure of the operation ``name`` means to its caller; None where it is not the database's.

    Database errors are told apart by psycopg's classes, whichever layer (SQLAlchemy's
    sync or asyncio engine, or psycopg alone on the hot path) raised them.
    """
    if isinstance(error, (sqlalchemy.exc.TimeoutError, psycopg_pool.PoolTimeout)):
        log.warning("database pool exhausted", extra={"operation": name})
        return StoreUnavailableError("the offset store's database is busy")
    cause, invalidated = _cause(error)
    if cause is None:
        return None
    sqlstate = getattr(cause, "sqlstate", None) or ""
    if (
        invalidated
        or isinstance(cause, _UNAVAILABLE)
        # Class 57, operator intervention (psycopg gives 57P01-57P03 classes of their own).
        or sqlstate.startswith("57")
        # No SQLSTATE at all: the failure happened in reaching the server, not in a statement.
        or (isinstance(cause, psycopg.OperationalError) and not sqlstate)
    ):
        # Also when COMMIT itself failed: the outcome is unknown, so never report OK.
        log.warning(
            "database unavailable (%s)", type(cause).__name__, extra={"operation": name, "error": type(cause).__name__}
        )
        return StoreUnavailableError("the offset store's database is unavailable")
    return None


def one_requests_fault(error: OffsetStoreError) -> bool:
    """A batch that timed out or waited too long for a lock may have waited for one request's group."""
    cause = error.__cause__
    if cause is None:
        return False
    # SQLAlchemy's error around psycopg's (the sync path), or psycopg's own (the asyncio hot path).
    return isinstance(_cause(cause)[0], (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable))


def lock_wait_ran_out(error: OffsetStoreError) -> bool:
    """The operation waited longer than its lock timeout for a lock (someone else's long transaction)."""
    cause = error.__cause__
    return cause is not None and isinstance(_cause(cause)[0], psycopg.errors.LockNotAvailable)


_deadline: contextvars.ContextVar[Bound | None] = contextvars.ContextVar("offsetstore_deadline", default=None)
_principal: contextvars.ContextVar[str] = contextvars.ContextVar("offsetstore_caller_principal", default="")


def caller_bound() -> Bound | None:
    """(when the current caller gives up, whether it is still there), as :func:`deadline` set it; None: no bound."""
    return _deadline.get()


def caller_principal() -> str:
    """Whose call this is, as :func:`deadline` named it: its share of the group commit's batches ("" for none)."""
    return _principal.get()


def caller_gone() -> bool:
    """Whether the current caller said it is no longer there."""
    bound = _deadline.get()
    return bound is not None and not bound[1]()


def _always() -> bool:
    return True


class deadline:  # noqa: N801  # a context manager used as a function, as it was one (contextlib's)
    """Bounds the database work of the operations run inside by the caller's ``seconds``.

    Each transaction's statement timeout becomes the smaller of the engine's and a
    little less than the time left, so the database gives up before the caller does
    and the caller hears UNAVAILABLE rather than a bare deadline; a transaction whose
    caller is gone is rolled back instead of committed. ``principal`` names whose call it is
    (the server's: the authenticated principal, or the peer's address): the group commit
    shares its batches out between principals (:class:`~offsetstore.runtime._group_commit.FairQueue`).

    A class, not a ``contextlib.contextmanager``: every gated call enters one, and the
    generator's context manager cost ~1 µs more a call.
    """

    __slots__ = ("_is_active", "_named", "_principal", "_seconds", "_token")

    def __init__(
        self, seconds: float | None, is_active: Callable[[], bool] = _always, *, principal: str | None = None
    ) -> None:
        self._seconds = seconds
        self._is_active = is_active
        self._principal = principal

    def __enter__(self) -> None:
        seconds = self._seconds
        self._token = _deadline.set(None if seconds is None else (time.monotonic() + seconds, self._is_active))
        self._named = None if self._principal is None else _principal.set(self._principal)

    def __exit__(self, *exc: object) -> None:
        _deadline.reset(self._token)
        if self._named is not None:
            _principal.reset(self._named)


def timeout_ms(bound: Bound | None, engine_ms: int) -> int | None:
    """The statement timeout ``bound``'s deadline asks for; None where the engine's own (``engine_ms``) is shorter."""
    if bound is None:
        return None
    # Keep a margin for the reply to reach the caller.
    ms = int((bound[0] - time.monotonic()) * 900)
    if ms <= 0:
        raise StoreUnavailableError("the caller's deadline passed before the database answered")
    return ms if ms < engine_ms else None
