"""The SQL API's grants (issue 34, finding 4): a real role reads and writes only what its grants cover, under its quotas."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import errors
from sqlalchemy.pool import NullPool

from offsetstore.runtime import migrate
from offsetstore.storage import validate
from tests.fixtures.fix_db import conninfo, nothing_written
from tests.fixtures.fix_sql_roles import MakeRole

#: Each API function on a group, and the grant it takes.
CALLS = {
    "read_offsets": ("SELECT * FROM offsetstore.read_offsets(%s)", "read"),
    "join_group": ("SELECT offsetstore.join_group(%s)", "commit"),
    "begin_write": ("SELECT * FROM offsetstore.begin_write(%s, 0)", "commit"),
    "commit_offsets": ("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t}', '{0}', '{99}')", "commit"),
}


@pytest.fixture
def owner(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(conninfo(database_url), autocommit=True) as c:
        yield c


def _prefix() -> str:
    return f"p{uuid.uuid4().hex[:8]}-"


def _state(owner: psycopg.Connection, group: str) -> tuple:
    """Everything the store keeps of a group: its row, offsets and history."""
    return (
        owner.execute("SELECT generation, deleted_at FROM offsetstore.groups WHERE group_id = %s", [group]).fetchall(),
        owner.execute(
            'SELECT topic, partition, "offset", commit_time FROM offsetstore.offsets WHERE group_id = %s ORDER BY 1, 2',
            [group],
        ).fetchall(),
        owner.execute("SELECT count(*) FROM offsetstore.offset_history WHERE group_id = %s", [group]).fetchall(),
    )


def _refused(conn: psycopg.Connection, call: str, group: str, sqlstate: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(call, [group]).fetchall()
    assert caught.value.sqlstate == sqlstate, caught.value
    return caught.value


@pytest.mark.parametrize("function", sorted(CALLS))
def test_a_role_without_a_grant_on_the_group_gets_os003_and_changes_nothing(
    owner: psycopg.Connection, make_sql_role: MakeRole, function: str
) -> None:
    victim = f"{_prefix()}victim"
    generation = owner.execute("SELECT offsetstore.join_group(%s)", [victim]).fetchone()[0]
    owner.execute("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{5}')", [victim, generation])
    before = _state(owner, victim)
    # Commit on its own prefix, which is not the victim's nor a prefix of it.
    role = make_sql_role(grants=[(_prefix(), "admin")])
    conn = role.connect()
    call, access = CALLS[function]
    error = _refused(conn, call, victim, "OS003")
    assert error.diag.message_primary == (
        f"permission denied for group {victim}: role {role.name} has no {access} grant on it"
    )
    assert error.diag.message_detail == f"role {role.name}, access {access}"
    assert _state(owner, victim) == before
    # An unknown group is refused alike (nothing says whether it exists) and is not created.
    stranger = f"{_prefix()}unknown"
    _refused(conn, call, stranger, "OS003")
    assert _state(owner, stranger) == ([], [], [(0,)])


def test_a_read_grant_reads_and_cannot_write(owner: psycopg.Connection, make_sql_role: MakeRole) -> None:
    prefix = _prefix()
    group = f"{prefix}orders"
    owner.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t}', '{0}', '{5}')", [group])
    role = make_sql_role(grants=[(prefix, "read")])
    conn = role.connect()
    assert conn.execute(
        "SELECT topic, partition, next_offset FROM offsetstore.read_offsets(%s)", [group]
    ).fetchall() == [("t", 0, 5)]
    before = _state(owner, group)
    for function in ("join_group", "begin_write", "commit_offsets"):
        assert "read grant" not in str(_refused(conn, CALLS[function][0], group, "OS003"))
    assert _state(owner, group) == before


def test_a_commit_grant_does_the_loop_and_the_history_names_the_role(
    owner: psycopg.Connection, make_sql_role: MakeRole
) -> None:
    prefix = _prefix()
    group = f"{prefix}orders"
    role = make_sql_role(grants=[(prefix, "commit")])
    conn = role.connect()
    generation = conn.execute("SELECT offsetstore.join_group(%s, 'w1', 'h')", [group]).fetchone()[0]
    with conn.transaction():
        assert conn.execute("SELECT * FROM offsetstore.begin_write(%s, %s)", [group, generation]).fetchall() == []
        conn.execute(
            "SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t,t}', '{0,1}', '{3,4}', NULL, 'someone-else')",
            [group, generation],
        )
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{6}')", [group, generation])
    assert conn.execute(
        "SELECT topic, partition, next_offset FROM offsetstore.read_offsets(%s)", [group]
    ).fetchall() == [
        ("t", 0, 6),
        ("t", 1, 4),
    ]
    actors = owner.execute(
        "SELECT DISTINCT actor FROM offsetstore.offset_history WHERE group_id = %s", [group]
    ).fetchall()
    assert actors == [(role.name,)]


def test_the_owner_is_unrestricted_and_named_in_the_history(owner: psycopg.Connection, group_id: str) -> None:
    assert owner.execute("SELECT count(*) FROM offsetstore.sql_grants WHERE role = session_user").fetchone() == (0,)
    generation = owner.execute("SELECT offsetstore.join_group(%s)", [group_id]).fetchone()[0]
    owner.execute(
        "SELECT * FROM offsetstore.commit_offsets(%s, %s, '{t}', '{0}', '{1}', NULL, 'x')", [group_id, generation]
    )
    assert owner.execute("SELECT next_offset FROM offsetstore.read_offsets(%s)", [group_id]).fetchall() == [(1,)]
    assert owner.execute(
        "SELECT actor = session_user FROM offsetstore.offset_history WHERE group_id = %s", [group_id]
    ).fetchall() == [(True,)]


@pytest.mark.parametrize("as_owner", [False, True], ids=["role", "owner"])
def test_two_million_elements_are_refused_with_22023_and_nothing_written(
    owner: psycopg.Connection, engine: sa.Engine, make_sql_role: MakeRole, as_owner: bool
) -> None:
    prefix = _prefix()
    group = f"{prefix}wide"
    conn = owner if as_owner else make_sql_role(grants=[(prefix, "commit")]).connect()
    n = 2_000_000
    with pytest.raises(errors.InvalidParameterValue) as caught:
        conn.execute(
            "SELECT * FROM offsetstore.commit_offsets(%s, 0, %s::text[], %s::integer[], %s::bigint[])",
            [group, ["t"] * n, [0] * n, list(range(n))],
        )
    assert caught.value.diag.column_name == "topics"
    assert caught.value.diag.message_primary == f"topics: at most {validate.MAX_SQL_ELEMENTS} elements in one call"
    assert nothing_written(engine, group)
    # The bound is on elements, before anything walks them; one under it, repeats make one partition.
    m = validate.MAX_SQL_ELEMENTS
    conn.execute(
        "SELECT * FROM offsetstore.commit_offsets(%s, 0, %s::text[], %s::integer[], %s::bigint[])",
        [group, ["t"] * m, [0] * m, list(range(1, m + 1))],
    )
    assert conn.execute("SELECT next_offset FROM offsetstore.read_offsets(%s)", [group]).fetchall() == [(m,)]


def test_the_group_quota_refuses_a_new_group_with_os004(
    owner: psycopg.Connection, engine: sa.Engine, make_sql_role: MakeRole
) -> None:
    prefix = _prefix()
    role = make_sql_role(grants=[(prefix, "commit"), (f"{prefix}sub-", "commit")], quotas=(2, 0))
    conn = role.connect()
    conn.execute("SELECT offsetstore.join_group(%s)", [f"{prefix}a"])
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t}', '{0}', '{1}')", [f"{prefix}sub-b"])
    for call, _ in CALLS.values():
        if "read_offsets" not in call:
            error = _refused(conn, call, f"{prefix}c", "OS004")
            assert error.diag.message_detail == "max_groups 2, groups 2"
    assert nothing_written(engine, f"{prefix}c")
    # Its live groups stay its own to use; a deleted one is revived only under the quota.
    conn.execute("SELECT offsetstore.join_group(%s)", [f"{prefix}a"])
    owner.execute("UPDATE offsetstore.groups SET deleted_at = now() WHERE group_id = %s", [f"{prefix}a"])
    conn.execute("SELECT offsetstore.join_group(%s)", [f"{prefix}c"])
    _refused(conn, CALLS["join_group"][0], f"{prefix}a", "OS004")


def test_the_partition_quota_refuses_new_partitions_with_os004(
    owner: psycopg.Connection, make_sql_role: MakeRole
) -> None:
    prefix = _prefix()
    role = make_sql_role(grants=[(prefix, "commit")], quotas=(0, 3))
    conn = role.connect()
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t,t}', '{0,1}', '{1,1}')", [f"{prefix}a"])
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t}', '{0}', '{1}')", [f"{prefix}b"])
    before = _state(owner, f"{prefix}b")
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t,t,t}', '{0,1,1}', '{2,2,3}')", [f"{prefix}b"])
    assert caught.value.sqlstate == "OS004"
    assert caught.value.diag.message_detail == "max_partitions 3, partitions 3, adding 1"
    assert _state(owner, f"{prefix}b") == before
    # Partitions it stores already commit as before.
    conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t,t}', '{0,1}', '{9,9}')", [f"{prefix}a"])


def test_admin_on_every_group_has_no_quota(make_sql_role: MakeRole) -> None:
    prefix = _prefix()
    conn = make_sql_role(grants=[("", "admin")], quotas=(1, 1)).connect()
    for name in ("a", "b"):
        conn.execute("SELECT * FROM offsetstore.commit_offsets(%s, 0, '{t,t}', '{0,1}', '{1,1}')", [prefix + name])


def test_only_the_owner_manages_grants(owner: psycopg.Connection, make_sql_role: MakeRole) -> None:
    role = make_sql_role(grants=[(_prefix(), "read")])
    conn = role.connect()
    for call in (
        "SELECT offsetstore.grant_groups(session_user, '', 'admin')",
        "SELECT offsetstore.set_quotas(session_user, 0, 0)",
        "SELECT offsetstore.revoke_groups(session_user)",
        "INSERT INTO offsetstore.sql_grants VALUES (session_user, '', 'admin')",
        "SELECT * FROM offsetstore.sql_grants",
    ):
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(call)
    for args, field in [
        (("no_such_role_x", "", "read"), "role_name"),
        ((role.name, "", "write"), "access"),
        ((role.name, None, "read"), "group_prefix"),
    ]:
        with pytest.raises(errors.InvalidParameterValue) as caught:
            owner.execute("SELECT offsetstore.grant_groups(%s, %s, %s)", args)
        assert caught.value.diag.column_name == field
    # A grant on a prefix replaces the one before; revoking takes them away.
    owner.execute(
        "SELECT offsetstore.grant_groups(%s, 'x-', 'read'), offsetstore.grant_groups(%s, 'x-', 'commit')",
        [role.name, role.name],
    )
    assert owner.execute(
        "SELECT access FROM offsetstore.sql_grants WHERE role = %s AND group_prefix = 'x-'", [role.name]
    ).fetchall() == [("commit",)]
    assert owner.execute("SELECT offsetstore.revoke_groups(%s)", [role.name]).fetchone() == (2,)
    _refused(conn, CALLS["read_offsets"][0], "x-1", "OS003")


def test_upgrade_downgrade_upgrade_keeps_the_api(scratch_database_url: str) -> None:
    url = scratch_database_url
    migrate.upgrade(url)
    engine = sa.create_engine(url, poolclass=NullPool)

    def api_calls_grants() -> bool:
        with engine.connect() as conn:
            text = conn.exec_driver_sql(
                "SELECT pg_get_functiondef('offsetstore.read_offsets(text)'::regprocedure)"
            ).scalar_one()
        return "api_authorize" in text

    try:
        assert api_calls_grants()
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT offsetstore.grant_groups(session_user, 'a-', 'read')")
        migrate.downgrade(url, "0010")
        assert not api_calls_grants()
        with engine.begin() as conn:
            assert conn.exec_driver_sql("SELECT to_regclass('offsetstore.sql_grants')").scalar_one() is None
            assert conn.exec_driver_sql("SELECT to_regproc('offsetstore.api_authorize')").scalar_one() is None
            conn.exec_driver_sql("SELECT * FROM offsetstore.commit_offsets('g', 0, '{t}', '{0}', '{1}')")
        migrate.upgrade(url)
        assert api_calls_grants()
        with engine.begin() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM offsetstore.sql_grants").scalar_one() == 0
            assert conn.exec_driver_sql("SELECT next_offset FROM offsetstore.read_offsets('g')").scalar_one() == 1
    finally:
        engine.dispose()
