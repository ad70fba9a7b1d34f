"""Issue 49: a wait for a held advisory lock is said when it starts, naming the holder (serve waited up to 5 minutes in silence)."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from offsetstore.storage.advisory_locks import LockWaitTimedOut, wait_for_xact_lock
from tests.fixtures.fix_locks import squatting

KEY = 0x0F5E_0049


def test_the_wait_for_a_held_lock_is_logged_at_its_start_naming_the_holder(
    scratch_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = sa.create_engine(scratch_database_url)
    try:
        with squatting(scratch_database_url, KEY) as squatter, engine.begin() as conn:
            with caplog.at_level(logging.WARNING, logger="offsetstore.storage.advisory_locks"):
                with pytest.raises(LockWaitTimedOut):
                    wait_for_xact_lock(conn, KEY, what="the migration lock", timeout=0.5)
    finally:
        engine.dispose()
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for the migration lock")]
    assert len(waits) == 1, caplog.text  # once, not every poll
    assert f"pid {squatter.pid}" in waits[0] and "giving up after 0.5 s" in waits[0]
