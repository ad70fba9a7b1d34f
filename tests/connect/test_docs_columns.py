"""docs/connect.md as issue 49 found it wanting: every column ``change_table_sql`` creates, the install line, engine properties."""

from __future__ import annotations

import re
from pathlib import Path

from offsetstore.connect_integration import change_table_sql

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "connect.md"


def test_every_change_column_is_documented() -> None:
    columns = re.findall(r'(?:\(|, )"?(\w+)"? \w+', change_table_sql("t"))
    assert "ts_ms" in columns
    text = GUIDE.read_text()
    missing = [c for c in columns if f"`{c}`" not in text]
    assert not missing, missing


def test_the_install_line_installs_the_migrate_the_page_asks_for() -> None:
    text = GUIDE.read_text()
    assert "offsetstore migrate" in text
    (install,) = re.findall(r"^pip install '\.\[([\w,]+)\]'", text, re.MULTILINE)
    assert "server" in install.split(","), install


def test_the_guide_names_no_engine_property_debezium_deprecates() -> None:
    """Issue 49: the replay recipe said ``flush.lsn.source``, deprecated in Debezium 3.6 for ``lsn.flush.mode``."""
    text = GUIDE.read_text()
    assert "`lsn.flush.mode = manual`" in text
    assert "set `flush.lsn.source" not in text
