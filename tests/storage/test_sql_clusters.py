"""Issue 58 in the SQL API (migration 0018): a group bound to its Kafka cluster, and record fingerprints, from any driver."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.types import RecordFingerprint, TopicPartition
from offsetstore.kafka_integration.fingerprints import digest
from offsetstore.storage.clusters import bound_cluster, read_fingerprints
from tests.fixtures.fix_db import conninfo
from tests.fixtures.fix_sql_roles import MakeRole

#: The functions migration 0018 adds to the API, as a consumer's role is granted them (docs/sql.md).
CLUSTER_FUNCTIONS = (
    "offsetstore.bind_cluster(text, text)",
    "offsetstore.bound_cluster(text)",
    "offsetstore.commit_fingerprints(text, bigint, text[], integer[], bigint[], bigint[], bytea[])",
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"

FINGERPRINTS = "SELECT offsetstore.commit_fingerprints(%s, %s, %s, %s, %s, %s, %s)"


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(conninfo(database_url), autocommit=True) as c:
        yield c


def _refused(conn: psycopg.Connection, sql: str, params: list, sqlstate: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught, conn.transaction():
        conn.execute(sql, params)
    assert caught.value.sqlstate == sqlstate, caught.value
    return caught.value


def _state(engine: sa.Engine, group: str) -> tuple:
    """What the store keeps of a group's cluster and fingerprints."""
    with engine.connect() as c:
        return bound_cluster(c, group), read_fingerprints(c, group)


def _joined(conn: psycopg.Connection, group: str) -> int:
    generation: int = conn.execute("SELECT offsetstore.join_group(%s)", [group]).fetchone()[0]
    return generation


def test_a_group_binds_on_first_use_and_another_cluster_is_os006_naming_both(
    conn: psycopg.Connection, engine: sa.Engine, group_id: str
) -> None:
    _joined(conn, group_id)
    assert conn.execute("SELECT offsetstore.bound_cluster(%s)", [group_id]).fetchone() == (None,)
    assert conn.execute("SELECT offsetstore.bind_cluster(%s, 'cluster-A')", [group_id]).fetchone() == ("cluster-A",)
    assert conn.execute("SELECT offsetstore.bind_cluster(%s, 'cluster-A')", [group_id]).fetchone() == ("cluster-A",)
    error = _refused(conn, "SELECT offsetstore.bind_cluster(%s, 'cluster-B')", [group_id], "OS006")
    assert error.diag.message_primary == (
        f"group {group_id} is bound to Kafka cluster cluster-A, and this consumer reads cluster cluster-B: "
        "nothing was written"
    )
    assert error.diag.message_detail == "bound_cluster_id cluster-A, cluster_id cluster-B"
    assert f"offsetstore groups switch {group_id}" in str(error.diag.message_hint)
    assert _state(engine, group_id) == ("cluster-A", {})
    assert conn.execute("SELECT offsetstore.bound_cluster(%s)", [group_id]).fetchone() == ("cluster-A",)


def test_a_switched_group_is_bound_to_the_new_cluster(
    conn: psycopg.Connection, engine: sa.Engine, group_id: str
) -> None:
    generation = _joined(conn, group_id)
    conn.execute("SELECT offsetstore.bind_cluster(%s, 'cluster-A')", [group_id])
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{100}')", [group_id, generation])
    with engine.begin() as c:
        storage.reset_offsets(
            c, group_id, {"t": [0]}, to_offsets={TopicPartition("t", 0): 80}, switch_to_cluster_id="cluster-B"
        )
    _refused(conn, "SELECT offsetstore.bind_cluster(%s, 'cluster-A')", [group_id], "OS006")
    assert conn.execute("SELECT offsetstore.bind_cluster(%s, 'cluster-B')", [group_id]).fetchone() == ("cluster-B",)
    # The old writer's generation is fenced by the switch: its fingerprints too.
    _refused(conn, FINGERPRINTS, [group_id, generation, ["t"], [0], [80], [1], [b"\0" * 16]], "OS001")


@pytest.mark.parametrize(
    ("cluster_id", "reason"),
    [
        ("", "must not be empty"),
        (None, "must not be empty"),
        ("x" * 256, "must be at most 255 bytes"),
        ("é" * 128, "must be at most 255 bytes"),
        ("cluster\nB", "must not contain control characters"),
    ],
)
def test_a_bad_cluster_id_is_22023_and_binds_nothing(
    conn: psycopg.Connection, engine: sa.Engine, group_id: str, cluster_id: str | None, reason: str
) -> None:
    _joined(conn, group_id)
    error = _refused(conn, "SELECT offsetstore.bind_cluster(%s, %s)", [group_id, cluster_id], "22023")
    assert error.diag.message_primary == f"cluster_id: {reason}"
    assert error.diag.column_name == "cluster_id"
    assert _state(engine, group_id) == (None, {})


def test_binding_an_unknown_group_is_22023_and_creates_nothing(
    conn: psycopg.Connection, engine: sa.Engine, group_id: str
) -> None:
    error = _refused(conn, "SELECT offsetstore.bind_cluster(%s, 'cluster-A')", [group_id], "22023")
    assert error.diag.message_primary == "group_id: no such group: join it first (offsetstore.join_group)"
    assert _state(engine, group_id) == (None, {})
    with engine.connect() as c:
        assert (
            c.exec_driver_sql(
                "SELECT count(*) FROM offsetstore.groups WHERE group_id = %(g)s", {"g": group_id}
            ).scalar_one()
            == 0
        )


def test_fingerprints_commit_with_the_offsets_and_read_as_the_pythons(
    conn: psycopg.Connection, engine: sa.Engine, group_id: str
) -> None:
    generation = _joined(conn, group_id)
    d0 = digest(b"k", b"v", [("h", b"1")])
    d1 = digest(None, b"w", None)
    with conn.transaction():
        conn.execute(
            "SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t,t}', '{0,1}', '{10,7}')", [group_id, generation]
        )
        stored = conn.execute(
            FINGERPRINTS, [group_id, generation, ["t", "t"], [0, 1], [10, 7], [1_700_000_000_123, -1], [d0, d1]]
        ).fetchone()
    assert stored == (2,)
    assert _state(engine, group_id)[1] == {
        TopicPartition("t", 0): RecordFingerprint(10, 1_700_000_000_123, d0),
        TopicPartition("t", 1): RecordFingerprint(7, -1, d1),
    }
    # The next commit's fingerprint replaces the partition's; an empty call stores nothing.
    with conn.transaction():
        conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{11}')", [group_id, generation])
        conn.execute(FINGERPRINTS, [group_id, generation, ["t"], [0], [11], [5], [d1]])
    assert conn.execute(FINGERPRINTS, [group_id, generation, [], [], [], [], []]).fetchone() == (0,)
    assert _state(engine, group_id)[1][TopicPartition("t", 0)] == RecordFingerprint(11, 5, d1)


GOOD = {"topics": ["t", "t"], "partitions": [0, 1], "next_offsets": [10, 7], "timestamps_ms": [1, 2]}


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"topics": None}, "topics", "must not be NULL"),
        ({"partitions": [0]}, "partitions", "must be as long as topics"),
        ({"next_offsets": None}, "next_offsets", "must be as long as topics"),
        ({"timestamps_ms": [1, 2, 3]}, "timestamps_ms", "must be as long as topics"),
        ({"digests": [b"\0" * 16]}, "digests", "must be as long as topics"),
        (
            {"digests": [b"\0" * 16, None]},
            "digests[2]",
            "must be 16 bytes (the first 16 of the SHA-256 of key, value and headers)",
        ),
        (
            {"digests": [b"\0" * 16, b"\0" * 17]},
            "digests[2]",
            "must be 16 bytes (the first 16 of the SHA-256 of key, value and headers)",
        ),
        ({"timestamps_ms": [None, 2]}, "timestamps_ms[1]", "must be >= -1 (-1: the record has none)"),
        ({"next_offsets": [10, 0]}, "next_offsets[2]", "must be >= 1 (the record's offset + 1)"),
        ({"topics": ["t", "bad topic"]}, "topics[2]", "may contain only ASCII letters, digits, '.', '_' and '-'"),
        ({"partitions": [0, None]}, "partitions[2]", "must be >= 0"),
        ({"partitions": [1, 1]}, "partitions[1]", "names a partition twice"),
        ({"topics": ["t"] * 10001}, "topics", "at most 10000 elements in one call"),
    ],
)
def test_bad_fingerprints_are_22023_naming_the_field_and_write_nothing(
    conn: psycopg.Connection, engine: sa.Engine, group_id: str, change: dict, field: str, reason: str
) -> None:
    generation = _joined(conn, group_id)
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t,t}', '{0,1}', '{10,7}')", [group_id, generation])
    args = {**GOOD, "digests": [b"\1" * 16, b"\2" * 16], **change}
    error = _refused(
        conn,
        FINGERPRINTS,
        [
            group_id,
            generation,
            *(args[k] for k in ("topics", "partitions", "next_offsets", "timestamps_ms", "digests")),
        ],
        "22023",
    )
    assert (error.diag.message_primary, error.diag.column_name) == (f"{field}: {reason}", field)
    assert _state(engine, group_id) == (None, {})


def test_a_fingerprint_of_another_offset_than_the_stored_one_is_os002(
    conn: psycopg.Connection, engine: sa.Engine, group_id: str
) -> None:
    generation = _joined(conn, group_id)
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{10}')", [group_id, generation])
    ok = b"\1" * 16
    error = _refused(conn, FINGERPRINTS, [group_id, generation, ["t", "t"], [0, 3], [10, 4], [1, 1], [ok, ok]], "OS002")
    assert error.diag.message_detail == "topic t, partition 3, stored -1, expected 4"
    _refused(conn, FINGERPRINTS, [group_id, generation, ["t"], [0], [9], [1], [ok]], "OS002")
    # An unknown group: refused alike, and not created by the lock.
    stranger = f"{group_id}-unknown"
    _refused(conn, FINGERPRINTS, [stranger, 0, ["t"], [0], [1], [1], [ok]], "OS002")
    assert _state(engine, group_id) == (None, {})
    with engine.connect() as c:
        assert (
            c.exec_driver_sql(
                "SELECT count(*) FROM offsetstore.groups WHERE group_id = %(g)s", {"g": stranger}
            ).scalar_one()
            == 0
        )


def test_the_functions_take_the_roles_grants(
    conn: psycopg.Connection, engine: sa.Engine, make_sql_role: MakeRole
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}-"
    group = f"{prefix}orders"
    generation = _joined(conn, group)
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{5}')", [group, generation])
    reader, writer, stranger = (
        make_sql_role(grants=[(prefix, "read")]),
        make_sql_role(grants=[(prefix, "commit")]),
        make_sql_role(grants=[(f"x{prefix}", "admin")]),
    )
    for role in (reader, writer, stranger):
        conn.execute(f"GRANT EXECUTE ON FUNCTION {', '.join(CLUSTER_FUNCTIONS)} TO {role.name}")
    ok = b"\1" * 16
    calls = {
        "bind_cluster": ("SELECT offsetstore.bind_cluster(%s, 'cluster-A')", [group], "commit"),
        "commit_fingerprints": (FINGERPRINTS, [group, 0, ["t"], [0], [5], [1], [ok]], "commit"),
        "bound_cluster": ("SELECT offsetstore.bound_cluster(%s)", [group], "read"),
    }
    for sql, params, access in calls.values():
        error = _refused(stranger.connect(), sql, params, "OS003")
        assert (
            error.diag.message_primary
            == f"permission denied for group {group}: role {stranger.name} has no {access} grant on it"
        )
        if access == "commit":
            _refused(reader.connect(), sql, params, "OS003")
    assert _state(engine, group) == (None, {})
    assert reader.connect().execute("SELECT offsetstore.bound_cluster(%s)", [group]).fetchone() == (None,)
    c = writer.connect()
    assert c.execute("SELECT offsetstore.bind_cluster(%s, 'cluster-A')", [group]).fetchone() == ("cluster-A",)
    assert c.execute(FINGERPRINTS, [group, 0, ["t"], [0], [5], [1], [ok]]).fetchone() == (1,)
    assert reader.connect().execute("SELECT offsetstore.bound_cluster(%s)", [group]).fetchone() == ("cluster-A",)
    assert _state(engine, group) == ("cluster-A", {TopicPartition("t", 0): RecordFingerprint(5, 1, ok)})


def test_no_role_runs_them_without_a_grant_of_execute(make_sql_role: MakeRole, group_id: str) -> None:
    role = make_sql_role(grants=[("", "admin")])  # docs/sql.md's four functions only
    c = role.connect()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("SELECT offsetstore.bound_cluster(%s)", [group_id])
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("SELECT offsetstore.api_check_cluster('x')")


def test_the_docs_cluster_block_runs_as_written(conn: psycopg.Connection, engine: sa.Engine, group_id: str) -> None:
    """docs/sql.md's block: the join, the binding, a commit with its fingerprint; psql's ``\\gset`` made a parameter."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    (block,) = [b for b in blocks if "bind_cluster(" in b and "GRANT" not in b]
    block = block.replace("'orders-sql-etl'", f"'{group_id}'").replace(" \\gset", ";").replace(":generation", "%(g)s")
    code = "\n".join(line.split("--")[0] for line in block.splitlines())
    join, *rest = [s.strip() for s in code.split(";") if s.strip()]
    generation = {"g": conn.execute(join).fetchone()[0]}
    with conn.transaction():
        for statement in rest:
            conn.execute(statement, generation)
    bound, found = _state(engine, group_id)
    assert bound == "q0lLRuTdQ8W0Q8GRl7Vh2w"
    assert found == {
        TopicPartition("orders", 0): RecordFingerprint(
            1043, 1765141200123, bytes.fromhex("9f2c0a61d4e7b3f81c55a0e2d7b94c3e")
        )
    }
