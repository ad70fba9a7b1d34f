"""The hot path as steps: generators that yield statements and are sent their rows, and the sync driver of them."""

from __future__ import annotations

import collections
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar, cast

import psycopg
import sqlalchemy.exc
from sqlalchemy import (
    Connection,
    Select,
)
from sqlalchemy.dialects.postgresql import psycopg as postgresql_psycopg
from sqlalchemy.util import await_only

R = TypeVar("R")

#: Yielded by hot steps between slices of a wide request's work: the asyncio path lets other calls run there.
PAUSE = None
#: How many items a hot step handles between two pauses.
SLICE = 200


# Array parameters travel as one array literal each, joined at C speed: psycopg would dump
# a 10,000-entry list element by element (milliseconds a column for the widest commit).


def int_array(values: Sequence[int | None]) -> str:
    if None in values:
        return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def bool_array(values: Sequence[bool]) -> str:
    return "{" + ",".join("t" if v else "f" for v in values) + "}"


def text_array(values: Sequence[str]) -> str:
    if not values:
        return "{}"
    together = "".join(values)
    if '"' in together or "\\" in together:
        values = [v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    return '{"' + '","'.join(values) + '"}'


#: A statement of the hot path: SQL with ``%(name)s`` placeholders, and its parameters.
Statement = tuple[str, Mapping[str, object]]
#: An operation of the hot path as steps: yields statements (or PAUSE), is sent each one's rows, returns its result.
HotSteps = Generator[Statement | None, list[tuple[Any, ...]] | None, R]


_DIALECT = postgresql_psycopg.dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it unannotated


class CompiledQuery(NamedTuple):
    """A query compiled once to psycopg's SQL: its text, its fixed parameters, a row type naming its columns."""

    sql: str
    fixed: dict[str, Any]
    row: Callable[..., Any]

    def statement(self, **params: object) -> Statement:
        return self.sql, {**self.fixed, **params}

    def rows(self, found: list[tuple[Any, ...]] | None) -> list[Any]:
        return [self.row(*r) for r in found or ()]


def compile_query(query: Select[Any]) -> CompiledQuery:
    """``query`` as a :class:`CompiledQuery` (compiling is most of a small call's cost: do it once)."""
    compiled = query.compile(dialect=_DIALECT)
    names = list(query.selected_columns.keys())
    return CompiledQuery(str(compiled), dict(compiled.params), collections.namedtuple("Row", names, rename=True))


#: A statement with more entries than this in an array argument is planned for its arguments:
#: a plan cached for a guessed size (PostgreSQL's generic plan, after five executions) can
#: cost a 10,000-partition statement thirty times its own plan.
WIDE = 256


def is_wide(params: Mapping[str, object]) -> bool:
    """Whether a hot statement with ``params`` is wide (see :data:`WIDE`): then it is not prepared."""
    return any(isinstance(v, (list, tuple)) and len(v) > WIDE for v in params.values())


def drive_steps(conn: Connection, steps: HotSteps[R]) -> R:
    """Drives ``steps`` on ``conn`` (sync) on the psycopg connection under it, unprepared (poolers: engine.py).

    It skips SQLAlchemy's compile and result layers (most of a small call's cost), yet
    fails as every other statement does: with SQLAlchemy's ``DBAPIError`` around
    psycopg's error, the connection invalidated where it broke.
    """
    raw = conn.connection.driver_connection
    if isinstance(raw, psycopg.AsyncConnection):
        # Under the async store's ``run_sync`` (a greenlet): the same statements, awaited through it.
        raw = _AwaitedConnection(raw)
    raw = cast("psycopg.Connection[tuple[Any, ...]]", raw)
    try:
        statement = next(steps)
        while True:
            if statement is PAUSE:
                statement = steps.send(None)
                continue
            sql, params = statement
            try:
                cursor = raw.execute(sql, params, prepare=False)
                rows = cursor.fetchall() if cursor.description is not None else []
            except psycopg.Error as error:
                if raw.broken:
                    conn.invalidate()
                raise sqlalchemy.exc.DBAPIError.instance(
                    sql, None, error, psycopg.Error, hide_parameters=True, connection_invalidated=raw.broken
                ) from None
            statement = steps.send(rows)
    except StopIteration as done:
        result: R = done.value
        return result


class _AwaitedConnection:
    """The part of a sync psycopg connection :func:`drive_steps` uses, over an async one, inside SQLAlchemy's greenlet."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    @property
    def broken(self) -> bool:
        return self._conn.broken

    def execute(self, sql: str, params: Mapping[str, object], *, prepare: bool) -> _AwaitedCursor:
        return _AwaitedCursor(await_only(self._conn.execute(sql, params, prepare=prepare)))


class _AwaitedCursor:
    def __init__(self, cursor: psycopg.AsyncCursor[Any]) -> None:
        self._cursor = cursor
        self.description = cursor.description

    def fetchall(self) -> list[Any]:
        rows: list[Any] = await_only(self._cursor.fetchall())
        return rows
