"""The SQL API v1 (docs/sql.md): its signatures stay, its errors carry their SQLSTATEs, its role can do the loop and no more."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import errors

from tests.fixtures.fix_db import conninfo
from tests.fixtures.fix_sql_roles import SqlRole

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"

#: The documented v1: (name, identity arguments, result). Changing an entry breaks v1's users.
V1 = [
    ("join_group", "group_id text, member_id text DEFAULT ''::text, member_host text DEFAULT ''::text", "bigint"),
    (
        "begin_write",
        "group_id text, generation bigint",
        "TABLE(topic text, partition integer, next_offset bigint)",
    ),
    (
        "commit_offsets",
        "group_id text, generation bigint, topics text[], partitions integer[], next_offsets bigint[], "
        "expected_offsets bigint[] DEFAULT NULL::bigint[], actor text DEFAULT 'sql'::text",
        "TABLE(topic text, partition integer, next_offset bigint, commit_time timestamp with time zone)",
    ),
    (
        "read_offsets",
        "group_id text",
        "TABLE(topic text, partition integer, next_offset bigint, metadata text, commit_time timestamp with time zone)",
    ),
]


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(conninfo(database_url), autocommit=True) as c:
        yield c


def test_the_v1_signatures_are_installed_unchanged(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), p.prosecdef, "
        "p.proconfig FROM pg_proc AS p WHERE p.pronamespace = 'offsetstore'::regnamespace "
        "AND p.proname = ANY(%s) ORDER BY 1",
        [[name for name, _, _ in V1]],
    ).fetchall()
    installed = {(name, args, result) for name, args, result, _, _ in rows}
    # A new overload is an addition; a v1 signature that is gone or different is a break.
    for entry in V1:
        assert entry in installed, f"offsetstore.{entry[0]}: the v1 signature changed"
    for name, _, _, definer, config in rows:
        assert definer, f"{name} must be SECURITY DEFINER"
        assert config == ["search_path=pg_catalog, pg_temp"], f"{name} must pin its search_path"
    identity = set(
        conn.execute(
            "SELECT p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc AS p "
            "WHERE p.pronamespace = 'offsetstore'::regnamespace AND p.proname = ANY(%s)",
            [[name for name, _, _ in V1]],
        ).fetchall()
    )
    for name, args, _ in V1:
        assert (name, re.sub(r" DEFAULT [^,]+", "", args)) in identity


def test_the_doc_lists_the_v1_functions() -> None:
    text = DOC.read_text()
    for name, _, _ in V1:
        assert f"offsetstore.{name}(" in text


def test_the_loop_commits_max_plus_one_with_history(conn: psycopg.Connection, group_id: str) -> None:
    generation = conn.execute("SELECT offsetstore.join_group(%s, 'm', 'h')", [group_id]).fetchone()[0]
    assert generation == 1
    with conn.transaction():
        assert conn.execute("SELECT * FROM offsetstore.begin_write(%s, %s)", [group_id, generation]).fetchall() == []
        # Each written record's offset + 1, in any order; a partition's largest wins.
        committed = conn.execute(
            "SELECT topic, partition, next_offset FROM offsetstore.commit_offsets(%s, %s, %s, %s, %s)",
            [group_id, generation, ["t", "t", "t", "u"], [0, 0, 0, 3], [6, 8, 7, 1]],
        ).fetchall()
    assert sorted(committed) == [("t", 0, 8), ("u", 3, 1)]
    assert conn.execute(
        "SELECT topic, partition, next_offset FROM offsetstore.read_offsets(%s)", [group_id]
    ).fetchall() == [
        ("t", 0, 8),
        ("u", 3, 1),
    ]
    with conn.transaction():
        stored = conn.execute("SELECT * FROM offsetstore.begin_write(%s, 0)", [group_id]).fetchall()
        assert sorted(stored) == [("t", 0, 8), ("u", 3, 1)]
        conn.execute(
            "SELECT * FROM offsetstore.commit_offsets(%s, 0, %s, %s, %s, %s, 'tester')",
            [group_id, ["t"], [0], [9], [8]],
        )
    history = conn.execute(
        "SELECT topic, partition, previous_offset, new_offset, kind, generation, actor "
        "FROM offsetstore.offset_history WHERE group_id = %s ORDER BY new_offset",
        [group_id],
    ).fetchall()
    # The actor is the role that logged in, whatever the call says (issue 34, finding 4).
    (role,) = conn.execute("SELECT session_user::text").fetchone()
    assert history == [
        ("u", 3, None, 1, 1, 1, role),
        ("t", 0, None, 8, 1, 1, role),
        ("t", 0, 8, 9, 1, 1, role),
    ]


def test_a_stale_generation_raises_os001_and_writes_nothing(conn: psycopg.Connection, group_id: str) -> None:
    old = conn.execute("SELECT offsetstore.join_group(%s)", [group_id]).fetchone()[0]
    current = conn.execute("SELECT offsetstore.join_group(%s)", [group_id]).fetchone()[0]
    for call, args in [
        ("SELECT * FROM offsetstore.begin_write(%s, %s)", [group_id, old]),
        ("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{5}')", [group_id, old]),
    ]:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(call, args)
        diag = caught.value.diag
        assert caught.value.sqlstate == "OS001"
        assert group_id in (diag.message_primary or "")
        assert diag.message_detail == f"current generation {current}"
        assert [int(n) for n in re.findall(r"\d+", diag.message_detail)] == [current]
    assert conn.execute("SELECT count(*) FROM offsetstore.read_offsets(%s)", [group_id]).fetchone()[0] == 0


def test_a_mismatch_raises_os002_and_rolls_back_the_callers_rows(conn: psycopg.Connection, group_id: str) -> None:
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t}', '{2}', '{5}')", [group_id])
    conn.execute(f'CREATE TEMP TABLE "{group_id}" (x int)')
    with pytest.raises(psycopg.Error) as caught, conn.transaction():
        conn.execute(f'INSERT INTO "{group_id}" VALUES (1)')
        conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t}', '{2}', '{7}', '{4}')", [group_id])
    assert caught.value.sqlstate == "OS002"
    assert caught.value.diag.message_detail == "topic t, partition 2, stored 5, expected 4"
    assert conn.execute(f'SELECT count(*) FROM "{group_id}"').fetchone()[0] == 0
    # -1 expects "no offset stored yet".
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t}', '{3}', '{7}', '{0}')", [group_id])
    assert caught.value.diag.message_detail == "topic t, partition 3, stored -1, expected 0"
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t,t}', '{3,2}', '{7,6}', '{-1,5}')", [group_id])


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ("join_group(NULL)", "group_id"),
        ("join_group('')", "group_id"),
        (f"join_group('{'g' * 256}')", "group_id"),
        (f"join_group('g', '{'m' * 256}')", "member_id"),
        ("begin_write('g', -1)", "generation"),
        ("begin_write('g', NULL)", "generation"),
        ("read_offsets('')", "group_id"),
        ("commit_offsets('g', 0, NULL, '{}', '{}')", "topics"),
        ("commit_offsets('g', 0, '{t}', '{0,1}', '{1}')", "partitions"),
        ("commit_offsets('g', 0, '{t}', '{0}', '{1,2}')", "next_offsets"),
        ("commit_offsets('g', 0, '{t}', '{0}', '{1}', '{1,2}')", "expected_offsets"),
        ("commit_offsets('g', 0, '{t}', '{0}', '{1}', NULL, NULL)", "actor"),
        ("commit_offsets('g', 0, '{t,\"\"}', '{0,0}', '{1,1}')", "topics[2]"),
        (f"commit_offsets('g', 0, '{{{'t' * 250}}}', '{{0}}', '{{1}}')", "topics[1]"),
        ("commit_offsets('g', 0, '{\"a b\"}', '{0}', '{1}')", "topics[1]"),
        ("commit_offsets('g', 0, '{t,NULL}', '{0,0}', '{1,1}')", "topics[2]"),
        ("commit_offsets('g', 0, '{t}', '{-1}', '{1}')", "partitions[1]"),
        ("commit_offsets('g', 0, '{t}', '{NULL}', '{1}')", "partitions[1]"),
        ("commit_offsets('g', 0, '{t}', '{0}', '{-1}')", "next_offsets[1]"),
        ("commit_offsets('g', 0, '{t}', '{0}', '{NULL}')", "next_offsets[1]"),
        ("commit_offsets('g', 0, '{t}', '{0}', '{1}', '{-2}')", "expected_offsets[1]"),
        ("commit_offsets('g', 0, '{t,t}', '{0,0}', '{1,2}', '{3,4}')", "expected_offsets[2]"),
    ],
)
def test_bad_input_raises_22023_naming_the_field(conn: psycopg.Connection, call: str, field: str) -> None:
    with pytest.raises(errors.InvalidParameterValue) as caught:
        conn.execute(f"SELECT * FROM offsetstore.{call}")
    assert caught.value.sqlstate == "22023"
    assert caught.value.diag.column_name == field
    assert (caught.value.diag.message_primary or "").startswith(f"{field}: ")


def test_the_limits_are_validate_pys() -> None:
    from offsetstore.storage import validate

    text = "".join(p.read_text() for p in (Path(__file__).parents[2] / "storage" / "sql").glob("*.sql"))
    assert f"> {validate.MAX_GROUP_ID_BYTES}" in text
    assert f"> {validate.MAX_TOPIC_CHARS}" in text
    assert f"> {validate.MAX_PARTITIONS}" in text
    assert f"> {validate.MAX_SQL_ELEMENTS}" in text
    assert validate._TOPIC.pattern in text


def _recipe(role: str, password: str, prefix: str) -> str:
    """docs/sql.md's role recipe, for ``role`` with ``password`` and a grant on ``prefix``."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    (recipe,) = [b for b in blocks if "GRANT EXECUTE" in b]
    assert "'orders-'" in recipe and "grant_groups" in recipe
    return (
        recipe.replace("orders_consumer", role)
        .replace("'change-me'", f"'{password}'")
        .replace("'orders-'", f"'{prefix}'")
    )


def test_the_documented_role_does_the_loop_and_nothing_else(
    conn: psycopg.Connection, engine: sa.Engine, database_url: str, group_id: str
) -> None:
    role = SqlRole(f"sqlapi_{uuid.uuid4().hex[:10]}", uuid.uuid4().hex, database_url)
    conn.execute(_recipe(role.name, role.password, group_id))
    try:
        conn.execute(f"CREATE SCHEMA {role.name} AUTHORIZATION {role.name}")
        consumer = role.connect()  # logged in as the role: session_user is what the grants name
        with consumer.transaction():
            consumer.execute(f"CREATE TABLE {role.name}.sink (topic text, partition int, kafka_offset bigint)")
            generation = consumer.execute("SELECT offsetstore.join_group(%s)", [group_id]).fetchone()[0]
            assert (
                consumer.execute("SELECT * FROM offsetstore.begin_write(%s, %s)", [group_id, generation]).fetchall()
                == []
            )
            consumer.execute(f"INSERT INTO {role.name}.sink VALUES ('t', 0, 0), ('t', 0, 1)")
            consumer.execute(
                "SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t,t}', '{0,0}', '{1,2}')", [group_id, generation]
            )
            assert consumer.execute(
                "SELECT topic, partition, next_offset FROM offsetstore.read_offsets(%s)", [group_id]
            ).fetchall() == [("t", 0, 2)]
        forbidden = [
            "INSERT INTO offsetstore.offsets (group_id, topic, partition, \"offset\") VALUES ('x', 't', 0, 1)",
            'UPDATE offsetstore.offsets SET "offset" = 0',
            "DELETE FROM offsetstore.offsets",
            "SELECT * FROM offsetstore.offsets",
            "SELECT * FROM offsetstore.sql_grants",
            "SELECT * FROM offsetstore.lock_for_write('x', 0)",
            "SELECT * FROM offsetstore.write_batch('{t}', '{x}', '{1}', '{a}', '{\"\"}', '{\"\"}', '{f}', '{1}', "
            "'{0}', '{}', '{}', '{}', '{}', '{}')",
            "SELECT offsetstore.lock_group('x', true)",
            "SELECT offsetstore.grant_groups(session_user, '', 'admin')",
        ]
        for statement in forbidden:
            with pytest.raises(errors.InsufficientPrivilege):
                consumer.execute(statement)
        # Another consumer's group is not its own (tests/storage/test_sql_grants.py tries each function).
        with pytest.raises(psycopg.Error) as caught:
            consumer.execute("SELECT * FROM offsetstore.read_offsets(%s)", [f"x{group_id}"])
        assert caught.value.sqlstate == "OS003"
        with engine.connect() as owner:
            assert (
                owner.exec_driver_sql(
                    'SELECT "offset" FROM offsetstore.offsets WHERE group_id = %(g)s', {"g": group_id}
                ).scalar_one()
                == 2
            )
    finally:
        role.close()
        conn.execute(f"DROP SCHEMA IF EXISTS {role.name} CASCADE")
        conn.execute("SELECT offsetstore.revoke_groups(%s)", [role.name])
        conn.execute("DELETE FROM offsetstore.sql_quotas WHERE role = %s", [role.name])
        conn.execute(f"DROP OWNED BY {role.name}")
        conn.execute(f"DROP ROLE {role.name}")


def _doc_loop(group_id: str, table: str = "orders_copy") -> tuple[str, list[str]]:
    """docs/sql.md's loop for ``group_id`` and ``table``: the join, and the batch's statements (BEGIN to COMMIT).

    psql's ``\\gset`` goes, and its ``:generation`` becomes a psycopg parameter.
    """
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    (loop,) = [b for b in blocks if "BEGIN;" in b]
    assert re.search(r"'orders-sql-etl', \d", loop) is None, "the loop names a generation of its own"
    loop = loop.replace("'orders-sql-etl'", f"'{group_id}'").replace("orders_copy", table)
    loop = loop.replace(" \\gset", ";").replace(":generation", "%(generation)s")
    code = "\n".join(line for line in loop.splitlines() if not line.lstrip().startswith("--"))
    statements = [s.strip() for s in code.split(";") if s.strip()]
    assert statements[1] == "BEGIN" and statements[-1] == "COMMIT", statements
    return statements[0], statements[1:]


def test_the_docs_loop_runs_as_written(conn: psycopg.Connection, group_id: str) -> None:
    conn.execute("CREATE TEMP TABLE orders_copy (id integer, amount numeric, kafka_offset bigint)")
    join, batch = _doc_loop(group_id)
    generation = {"generation": conn.execute(join).fetchone()[0]}
    for statement in batch:
        conn.execute(statement, generation)
    assert conn.execute(
        "SELECT topic, partition, next_offset FROM offsetstore.read_offsets(%s)", [group_id]
    ).fetchall() == [("orders", 0, 122)]
    assert conn.execute("SELECT count(*) FROM orders_copy").fetchone()[0] == 2


def _documented_writer(conn: psycopg.Connection, batch: list[str], generation: dict[str, int]) -> list[str]:
    """The doc's batch as its text says to run it, retried from BEGIN on 40001; what happened, in order."""
    begin, begin_write, insert, commit_offsets, commit = batch
    events = []
    for _ in range(2):
        conn.execute(begin)
        try:
            (next_offset,) = [row[2] for row in conn.execute(begin_write, generation).fetchall()]
            events.append(f"saw {next_offset}")
            if next_offset <= 120:  # the doc's records are 120 and 121: write those at or above it
                conn.execute(insert)
                conn.execute(commit_offsets, generation)
            conn.execute(commit)
            return [*events, "committed"]
        except errors.SerializationFailure:
            conn.execute("ROLLBACK")
            events.append("40001")
    return events


@pytest.mark.parametrize(
    ("level", "documented"),
    [
        # Waits, then sees the first writer's offsets and skips what it wrote.
        ("READ COMMITTED", ["saw 122", "committed"]),
        # Sees the offsets of its snapshot, fails at its commit with 40001; the retry skips.
        ("REPEATABLE READ", ["saw 120", "40001", "saw 122", "committed"]),
    ],
)
def test_a_second_writer_of_the_docs_loop_behaves_as_documented(
    conn: psycopg.Connection, database_url: str, group_id: str, level: str, documented: list[str]
) -> None:
    text = " ".join(DOC.read_text().split())
    assert "could not serialize access due to concurrent update" in text and "| `40001`" in text
    table = f"public.orders_copy_{uuid.uuid4().hex[:10]}"
    conn.execute(f"CREATE TABLE {table} (id integer, amount numeric, kafka_offset bigint)")
    join, batch = _doc_loop(group_id, table)
    generation = {"generation": conn.execute(join).fetchone()[0]}
    conn.execute(
        "SELECT * FROM offsetstore.commit_offsets(%s, %s, '{orders}', '{0}', '{120}')",
        [group_id, generation["generation"]],
    )
    try:
        with (
            psycopg.connect(conninfo(database_url), autocommit=True) as first,
            psycopg.connect(conninfo(database_url), autocommit=True) as second,
        ):
            second.execute(f"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {level}")
            for statement in batch[:-1]:  # the first writer holds the group's lock, its rows written
                first.execute(statement, generation)
            with ThreadPoolExecutor(1) as pool:
                waiter = pool.submit(_documented_writer, second, batch, generation)
                deadline = time.monotonic() + 30
                while not conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    [first.info.backend_pid],
                ).fetchone()[0]:
                    assert time.monotonic() < deadline and not waiter.done(), "the second writer did not wait"
                    time.sleep(0.02)
                first.execute(batch[-1])
                assert waiter.result(timeout=30) == documented
        assert conn.execute(f"SELECT kafka_offset FROM {table} ORDER BY 1").fetchall() == [(120,), (121,)]
        assert conn.execute(
            "SELECT topic, partition, next_offset FROM offsetstore.read_offsets(%s)", [group_id]
        ).fetchall() == [("orders", 0, 122)]
    finally:
        conn.execute(f"DROP TABLE {table}")
