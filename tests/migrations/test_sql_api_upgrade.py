"""An upgrade across migration 0011 (SQL API grants) never locks a running SQL API v1 consumer out (issue 47, item 7).

The previous release's consumer is docs/sql.md's loop of that release (0009's API: a role
with EXECUTE on the four functions and nothing else), running as a real login role. Before,
``offsetstore migrate`` applied 0011 and the consumer got OS003 on its next call. Now the
upgrade names the roles and stops, unless told to keep them (each keeps its access on
every group, granted in the migration's own transaction) or to revoke them.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

import psycopg
import pytest

from offsetstore.runtime import migrate
from tests.fixtures import old_release
from tests.fixtures.fix_db import conninfo
from tests.fixtures.fix_sql_roles import API_FUNCTIONS

pytestmark = pytest.mark.slow


def _as_role(url: str, role: str, password: str) -> psycopg.Connection:
    """A connection whose ``session_user`` is ``role``: its login where the server lets it in (the
    machine's PostgreSQL), else, on the embedded one that admits only its OS user, a superuser's
    connection made the role with ``SET SESSION AUTHORIZATION`` (as tests/fixtures/fix_sql_roles.py does)."""
    try:
        return psycopg.connect(conninfo(url), user=role, password=password)
    except psycopg.OperationalError:
        conn = psycopg.connect(conninfo(url))
        conn.execute(f'SET SESSION AUTHORIZATION "{role}"')
        conn.commit()
        assert conn.execute("SELECT session_user").fetchone() == (role,)
        conn.commit()
        return conn


class SqlConsumer(threading.Thread):
    """docs/sql.md's loop as the previous release documented it: join once, then begin_write, commit_offsets, COMMIT."""

    def __init__(self, url: str, role: str, password: str, group_id: str) -> None:
        super().__init__(daemon=True)
        self.conn = _as_role(url, role, password)
        self.group_id = group_id
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.offset = 0
        self.generation = self.conn.execute("SELECT offsetstore.join_group(%s, 'c-1', 'h')", (group_id,)).fetchone()[0]
        self.conn.commit()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.conn.execute("SELECT * FROM offsetstore.begin_write(%s, %s)", (self.group_id, self.generation))
                self.conn.execute(
                    "SELECT * FROM offsetstore.commit_offsets(%s, %s, ARRAY['t'], ARRAY[0], ARRAY[%s::bigint],"
                    " ARRAY[NULL::bigint], '')",
                    (self.group_id, self.generation, self.offset + 1),
                )
                self.conn.commit()
                self.offset += 1
            except psycopg.Error as error:
                self.conn.rollback()
                self.errors.append(error)
                if len(self.errors) > 10:
                    return

    def wait_for_commits(self, more: int) -> None:
        target = self.offset + more
        while self.offset < target and self.is_alive():
            self.stopping.wait(0.02)
        assert self.offset >= target, f"the consumer stopped committing: {self.errors[:1]}"

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        self.conn.close()


def _migrate(url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offsetstore.cli.main", "migrate", "--database-url", url, *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def v1_role(scratch_database_url: str) -> tuple[str, str]:
    """A login role with the previous release's docs/sql.md grants, on a database at the previous release's head."""
    migrate.upgrade(scratch_database_url, old_release.PREVIOUS_HEAD_REVISION)
    role, password = f"v1role_{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    with psycopg.connect(conninfo(scratch_database_url), autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        owner.execute(f"GRANT USAGE ON SCHEMA offsetstore TO {role}")
        owner.execute(f"GRANT EXECUTE ON FUNCTION {', '.join(API_FUNCTIONS)} TO {role}")
    yield role, password
    with psycopg.connect(conninfo(scratch_database_url), autocommit=True) as owner:
        owner.execute(f"DROP OWNED BY {role}")
        owner.execute(f"DROP ROLE {role}")


def test_a_running_v1_consumer_keeps_committing_through_the_upgrade(
    scratch_database_url: str, v1_role: tuple[str, str]
) -> None:
    url = scratch_database_url
    role, password = v1_role
    consumer = SqlConsumer(url, role, password, f"orders-{uuid.uuid4().hex[:8]}")
    consumer.start()
    try:
        consumer.wait_for_commits(20)

        # Without a choice: the upgrade names the role and applies nothing.
        stopped = _migrate(url)
        assert stopped.returncode == 2, stopped.stdout + stopped.stderr
        assert f"{role} (commit)" in stopped.stderr and "--sql-api-roles keep" in stopped.stderr
        assert migrate.current(url) == old_release.PREVIOUS_HEAD_REVISION
        consumer.wait_for_commits(20)

        # Kept: the grants commit with 0011, so the running consumer never sees it without one.
        kept = _migrate(url, "--sql-api-roles", "keep")
        assert kept.returncode == 0, kept.stdout + kept.stderr
        assert f"kept their access on every group: {role} (commit)" in kept.stdout
        assert migrate.current(url) != old_release.PREVIOUS_HEAD_REVISION
        consumer.wait_for_commits(20)
    finally:
        consumer.stop()
    print(f"\nthe v1 consumer committed {consumer.offset} times through the upgrade, errors {len(consumer.errors)}")
    assert consumer.errors == []
    with psycopg.connect(conninfo(url)) as owner:
        grants = owner.execute(
            "SELECT group_prefix, access FROM offsetstore.sql_grants WHERE role = %s", (role,)
        ).fetchall()
        actor = owner.execute(
            "SELECT actor FROM offsetstore.offset_history WHERE group_id = %s ORDER BY id DESC LIMIT 1",
            (consumer.group_id,),
        ).fetchone()
    assert grants == [("", "commit")]
    assert actor == (role,)


def test_revoke_migrates_and_the_role_loses_its_access(scratch_database_url: str, v1_role: tuple[str, str]) -> None:
    url = scratch_database_url
    role, password = v1_role
    revoked = _migrate(url, "--sql-api-roles", "revoke")
    assert revoked.returncode == 0, revoked.stdout + revoked.stderr
    assert f"lost their access: {role} (commit)" in revoked.stdout
    with _as_role(url, role, password) as conn:
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT * FROM offsetstore.read_offsets('orders-1')")
    assert refused.value.sqlstate == "OS003"
