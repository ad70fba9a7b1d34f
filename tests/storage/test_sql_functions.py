"""The installed SQL functions are the storage package's .sql files: editing a file without a migration fails here."""

from __future__ import annotations

import difflib
import re
from importlib import resources

import sqlalchemy as sa

from offsetstore.storage.schema import SCHEMA

_NAME = re.compile(rf"CREATE OR REPLACE FUNCTION {SCHEMA}\.(\w+)\(")


def sql_files() -> dict[str, str]:
    """Each function's name and its .sql file's text, as the installed package ships them."""
    folder = resources.files("offsetstore.storage") / "sql"
    return {f.name.removesuffix(".sql"): f.read_text() for f in folder.iterdir() if f.name.endswith(".sql")}


def definitions(conn: sa.Connection) -> dict[str, str]:
    """Every function of the schema (signature with argument types) and PostgreSQL's text of it."""
    rows = conn.execute(
        sa.text(
            "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc AS p "
            "WHERE p.pronamespace = CAST(:schema AS regnamespace) ORDER BY 1"
        ),
        {"schema": SCHEMA},
    )
    return {signature: text for signature, text in rows}


def _words(text: str) -> list[str]:
    # Layout is not the rule: a re-indented file needs no migration.
    return text.split()


def test_each_sql_file_defines_the_function_it_is_named_after() -> None:
    files = sql_files()
    assert files, "no .sql files in offsetstore.storage/sql"
    for name, text in files.items():
        assert _NAME.findall(text) == [name], f"sql/{name}.sql must define {SCHEMA}.{name} and nothing else"


def test_the_installed_functions_are_the_sql_files(engine: sa.Engine) -> None:
    """Installing the files over a database migrated to head must change nothing.

    PostgreSQL prints both sides (``pg_get_functiondef``) and whitespace is ignored, so
    only a real difference counts: a body, an argument, a result column, the language
    or volatility.
    """
    files = sql_files()
    with engine.connect() as conn:
        installed = definitions(conn)
        try:
            assert sorted(s.split("(")[0].removeprefix(f"{SCHEMA}.") for s in installed) == sorted(files), (
                "every installed function needs its .sql file, and every file a migration that installs it"
            )
            for text in files.values():
                conn.exec_driver_sql(text)
            from_files = definitions(conn)
        finally:
            conn.rollback()  # the session's database keeps what the migrations installed
    for signature, text in from_files.items():
        assert signature in installed, f"{signature} is in the .sql files but no migration installs it"
        if _words(text) != _words(installed[signature]):
            diff = "\n".join(
                difflib.unified_diff(
                    installed[signature].splitlines(), text.splitlines(), "installed", "sql file", lineterm=""
                )
            )
            raise AssertionError(
                f"{signature} differs from its .sql file: add a migration that installs the new text\n{diff}"
            )


def test_the_skip_rule_keeps_the_same_rows_in_arrow_and_in_sql(engine: sa.Engine) -> None:
    """The batch write skips in Arrow, the Spark executors' path in SQL: one rule, two renderings that agree."""
    import pyarrow as pa
    from psycopg import sql

    from offsetstore.sink import arrow_copy
    from offsetstore.sink import sql as sink_sql

    topics = ["a", "a", "a", "b", "b", "c", "c", "d"]
    partitions = [0, 0, 1, 0, 0, 0, 0, 0]
    offsets = [5, 6, 7, 1, 2, 8, 9, 0]
    batch = pa.table(
        {"topic": topics, "partition": pa.array(partitions, pa.int32()), "offset": pa.array(offsets, pa.int64())}
    )
    # At, above and below the batch; both sentinels; a partition the batch lacks; one never stored.
    stored = {("a", 0): 6, ("a", 1): 100, ("b", 0): -2, ("c", 0): -1, ("e", 0): 3}
    kept = arrow_copy.skip_delivered(batch, arrow_copy.partition_stats(batch), stored)
    in_arrow = sorted(
        zip(kept["topic"].to_pylist(), kept["partition"].to_pylist(), kept["offset"].to_pylist(), strict=True)
    )

    below = sink_sql.skip_below(arrow_copy.partition_stats(batch), stored)
    statement = sql.SQL(
        "SELECT s.{t}, s.{p}, s.{o} FROM unnest(%(topics)s::text[], %(partitions)s::integer[], %(offsets)s::bigint[]) "
        "AS s({t}, {p}, {o}) LEFT JOIN unnest(%(bt)s::text[], %(bp)s::integer[], %(bo)s::bigint[]) "
        "AS d(topic, partition, next_offset) ON d.topic = s.{t} AND d.partition = s.{p} WHERE {fresh}"
    ).format(
        t=sql.Identifier(sink_sql.TOPIC),
        p=sql.Identifier(sink_sql.PARTITION),
        o=sql.Identifier(sink_sql.OFFSET),
        fresh=sink_sql.FRESH,
    )
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        rows = raw.execute(
            statement,
            {
                "topics": topics,
                "partitions": partitions,
                "offsets": offsets,
                "bt": [tp[0] for tp in below],
                "bp": [tp[1] for tp in below],
                "bo": list(below.values()),
            },
        ).fetchall()
        conn.rollback()
    assert sorted(rows) == in_arrow == [("a", 0, 6), ("b", 0, 1), ("b", 0, 2), ("c", 0, 8), ("c", 0, 9), ("d", 0, 0)]
