"""``offsetstore migrate`` as an operator runs it: what it says it did, ``serve``'s lock flag, ``serve``'s exit code."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from offsetstore.migrations import MIGRATION_LOCK_ID
from offsetstore.runtime import migrate
from tests.fixtures.fix_locks import squatting


def offsetstore_migrate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    command = [sys.executable, "-m", "offsetstore.cli.main", "migrate", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def head() -> str:
    from alembic.script import ScriptDirectory

    return str(ScriptDirectory.from_config(migrate.alembic_config("postgresql://h/db")).get_current_head())


def test_migrate_says_what_it_applied_then_that_there_is_nothing_to_do(scratch_database_url: str) -> None:
    first = offsetstore_migrate("--database-url", scratch_database_url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"migrated to {head()}: "), first.stdout
    assert "migrations applied" in first.stdout, first.stdout
    # Run again (a deploy step that always runs it): the database was already there.
    again = offsetstore_migrate("--database-url", scratch_database_url)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"the database is already at {head()}: nothing to migrate\n", again.stdout


def test_migrate_says_how_many_it_applied_from_an_older_revision(scratch_database_url: str) -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config(scratch_database_url))
    previous = script.get_revision(head()).down_revision
    assert isinstance(previous, str)
    migrate.upgrade(scratch_database_url, previous)
    done = offsetstore_migrate("--database-url", scratch_database_url)
    assert done.stdout == f"migrated to {head()}: 1 migration applied\n", done.stdout + done.stderr


@pytest.mark.slow
def test_a_held_migration_lock_ends_migrate_at_its_timeout_with_serves_exit_code(scratch_database_url: str) -> None:
    with squatting(scratch_database_url, MIGRATION_LOCK_ID) as squatter:
        started = time.monotonic()
        done = offsetstore_migrate("--database-url", scratch_database_url, "--migration-lock-timeout", "2s")
        waited = time.monotonic() - started
    # 2, as serve exits for the same lock (tests/storage/test_advisory_locks.py), one line naming the holder.
    assert done.returncode == 2, done.stdout + done.stderr
    assert waited < 60, waited  # the flag's 2 s, not the default 5 min
    [line] = [line for line in done.stderr.splitlines() if not line.startswith(" ")][-1:]
    assert line.startswith("offsetstore: ") and "migration lock" in line, done.stderr
    assert f"pid {squatter.pid}" in line, done.stderr
    assert "Traceback" not in done.stderr


def test_migrate_help_reads_the_settings_flags() -> None:
    done = offsetstore_migrate("--help")
    assert done.returncode == 0, done.stderr
    for flag, variable in (
        ("--migration-lock-timeout", "OFFSETSTORE_MIGRATION_LOCK_TIMEOUT"),
        ("--database-url", "OFFSETSTORE_DATABASE_URL"),
        ("--sql-api-roles", "OFFSETSTORE_SQL_API_ROLES"),
        ("--data-dir", "OFFSETSTORE_DATA_DIR"),
    ):
        assert flag in done.stdout and variable in done.stdout, done.stdout
    assert "--listen" not in done.stdout and "--no-migrate" not in done.stdout


def test_no_migrate_help_says_what_the_flag_does(capsys: pytest.CaptureFixture[str]) -> None:
    from offsetstore.cli import main as cli_main

    with pytest.raises(SystemExit):
        cli_main.main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--no-migrate Start without applying the migrations (offsetstore migrate applies them)" in out, out
