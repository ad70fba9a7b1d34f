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
