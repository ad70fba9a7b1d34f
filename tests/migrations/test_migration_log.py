"""Issue 49: a migration at start logs what it changes, not Alembic's two lines of context boilerplate each time."""

from __future__ import annotations

import logging

import pytest

from offsetstore.runtime import migrate


def test_an_upgrade_logs_its_steps_and_no_context_boilerplate(
    scratch_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="alembic"):
        migrate.upgrade(scratch_database_url)
        migrate.current(scratch_database_url)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("alembic")]
    assert any(m.startswith("Running upgrade ") for m in said), said
    assert not [m for m in said if m.startswith(("Context impl ", "Will assume "))], said
