"""The SQL API's history budget per role (issue 47, M1): commit_offsets appends history within it, else OS004.

Before, a role under ``set_quotas`` (5 groups, 1,000 partitions) appended 10,600 history rows
a second from one session, where a gRPC principal with the same quota was held to 1,000.
Real login roles, docs/sql.md's calls.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.fixtures.fix_db import conninfo
from tests.fixtures.fix_sql_roles import MakeRole
from tests.fixtures.waits import wait_for

#: The finding's commit: every partition of the quota, each a new offset.
PARTITIONS = 1000
COMMIT = "SELECT count(*) FROM offsetstore.commit_offsets(%s, 0, %s, %s, %s)"


@pytest.fixture
def owner(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(conninfo(database_url), autocommit=True) as c:
        yield c


def _commit(conn: psycopg.Connection, group: str, offset: int) -> None:
    conn.execute(COMMIT, [group, ["t"] * PARTITIONS, list(range(PARTITIONS)), [offset] * PARTITIONS])


def _history_rows(owner: psycopg.Connection, group: str) -> int:
    return owner.execute("SELECT count(*) FROM offsetstore.offset_history WHERE group_id = %s", [group]).fetchone()[0]


@pytest.mark.slow  # waits out the budget's 10 s window
def test_a_role_under_quotas_appends_history_within_its_budget(
    owner: psycopg.Connection, make_sql_role: MakeRole
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}-"
    role = make_sql_role(grants=[(prefix, "commit")], quotas=(5, PARTITIONS))
    conn = role.connect()
    group = f"{prefix}a"
    started = time.monotonic()
    refused: psycopg.Error | None = None
    committed = 0
    for offset in range(1, 16):  # 15,000 rows asked for; the default budget is 1,000 a second, bursts of 10 s
        try:
            _commit(conn, group, offset)
            committed += 1
        except psycopg.Error as error:
            refused = error
            break
    took = time.monotonic() - started
    rows = _history_rows(owner, group)
    print(f"\n{rows} history rows in {took:.2f} s ({rows / took:,.0f}/s), {committed} commits, then {refused!r}")
    assert refused is not None, "the role appended history past its budget"
    assert refused.sqlstate == "OS004"
    assert refused.diag.message_primary == f"quota exceeded for role {role.name}: history_rows_per_second"
    detail = refused.diag.message_detail or ""
    assert detail.startswith("history_rows_per_second 1000, rows in the last 10 s ")
    retry_ms = int(detail.rpartition("retry_after_ms ")[2])
    assert 0 < retry_ms <= 10_000
    # The refused call wrote nothing; within the window, at most one call overdraws the budget.
    assert rows == committed * PARTITIONS <= 10 * 1000 + PARTITIONS

    def retried() -> bool:
        try:
            _commit(conn, group, 100)
        except psycopg.Error as error:
            assert error.sqlstate == "OS004"
            return False
        return True

    wait_for(retried, "a commit accepted once the budget's window moved on", seconds=15)


def test_the_owner_sets_the_budget_and_admin_on_every_group_has_none(
    owner: psycopg.Connection, make_sql_role: MakeRole
) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}-"
    role = make_sql_role(grants=[(prefix, "commit")], quotas=(5, PARTITIONS))
    owner.execute("SELECT offsetstore.set_history_budget(%s, 50)", [role.name])
    conn = role.connect()
    _commit(conn, f"{prefix}a", 1)  # 1,000 rows: the 500 of 10 s, overdrawn by one call
    with pytest.raises(psycopg.Error) as caught:
        _commit(conn, f"{prefix}a", 2)
    assert caught.value.sqlstate == "OS004"
    owner.execute("SELECT offsetstore.set_history_budget(%s, 0)", [role.name])  # 0: no budget
    _commit(conn, f"{prefix}a", 3)
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        owner.execute("SELECT offsetstore.set_history_budget(%s, -1)", [role.name])
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT offsetstore.set_history_budget(session_user, 0)")

    admin = make_sql_role(grants=[("", "admin")], quotas=(5, PARTITIONS))
    owner.execute("SELECT offsetstore.set_history_budget(%s, 1)", [admin.name])
    free = admin.connect()
    for offset in (1, 2, 3):
        _commit(free, f"{prefix}b", offset)
