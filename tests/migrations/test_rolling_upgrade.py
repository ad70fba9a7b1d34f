"""A rolling upgrade across a migration: the previous release's server and this tree's over one database (issue 37, item 7)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy
import sqlalchemy.pool

from offsetstore.client import OffsetStoreClient, StaleGenerationError
from offsetstore.runtime import migrate
from tests.fixtures import old_release
from tests.fixtures.fix_server import Served, free_port, start_serve

pytestmark = pytest.mark.slow


def start_old(site: Path, database_url: str, log: Path, *extra: str) -> Served:
    """``offsetstore serve`` of the previous release, once it answers SERVING."""
    address = f"127.0.0.1:{free_port()}"
    with log.open("wb") as out:
        process = subprocess.Popen(
            old_release.command(
                "serve", "--database-url", database_url, "--listen", address, "--metrics-listen", "", *extra
            ),
            env=old_release.environment(site),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    served = Served(process, address, "", log)
    with OffsetStoreClient(address, timeout=2) as client:
        deadline = time.monotonic() + 90
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if client.health() == "SERVING":
                    return served
            except Exception:
                pass
            time.sleep(0.2)
    if process.poll() is None:
        process.kill()
        process.wait()
    raise AssertionError(f"the previous release's serve did not get healthy ({process.returncode}):\n{served.output()}")


class Traffic(threading.Thread):
    """Commits (and reads back) one group's offset through a server in a loop until stopped; keeps every error."""

    def __init__(self, address: str, group_id: str) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.group_id = group_id
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.offset = 0

    def run(self) -> None:
        with OffsetStoreClient(self.address, timeout=20) as client:
            while not self.stopping.is_set():
                try:
                    client.commit_offsets(self.group_id, {("t", 0): self.offset + 1})
                    self.offset += 1
                    assert client.fetch_offsets(self.group_id).offsets[("t", 0)].offset == self.offset
                except BaseException as error:  # noqa: BLE001 (the test reports every one)
                    self.errors.append(error)

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)


def test_old_server_serves_through_the_migration_and_shares_the_database(
    scratch_database_url: str, group_id: str, tmp_path: Path
) -> None:
    site = old_release.build(tmp_path / "old")
    url = scratch_database_url
    old = start_old(site, url, tmp_path / "old.log")  # migrates the empty database to its own head
    new: Served | None = None
    try:
        assert migrate.current(url) == old_release.PREVIOUS_HEAD_REVISION
        traffic = Traffic(old.address, f"{group_id}-loop")
        traffic.start()
        while traffic.offset < 20 and traffic.is_alive():  # the old server is busy before the migration starts
            time.sleep(0.05)
        new = start_serve(tmp_path / "data", "--database-url", url, "--metrics-listen", "")  # migrates to head
        head = migrate.current(url)
        assert head != old_release.PREVIOUS_HEAD_REVISION
        before = traffic.offset
        while traffic.offset < before + 20 and traffic.is_alive():  # and goes on serving after it
            time.sleep(0.05)
        traffic.stop()
        assert traffic.errors == []

        with (
            OffsetStoreClient(old.address, timeout=20) as old_client,
            OffsetStoreClient(new.address, timeout=20) as new_client,
        ):
            # Each sees what the other committed, both ways, and the loop's last offset.
            old_client.commit_offsets(group_id, {("t", 0): 10})
            assert new_client.fetch_offsets(group_id).offsets[("t", 0)].offset == 10
            new_client.commit_offsets(group_id, {("t", 0): 11, ("t", 1): 3})
            offsets = old_client.fetch_offsets(group_id).offsets
            assert (offsets[("t", 0)].offset, offsets[("t", 1)].offset) == (11, 3)
            assert new_client.fetch_offsets(f"{group_id}-loop").offsets[("t", 0)].offset == traffic.offset
            # A generation handed out by one fences commits through the other.
            generation = new_client.join_group(group_id, "member-1")
            old_client.commit_offsets(group_id, {("t", 0): 12}, generation=generation)
            with pytest.raises(StaleGenerationError):
                old_client.commit_offsets(group_id, {("t", 0): 13}, generation=generation + 1)  # not the current one
            assert [c.new_offset for c in new_client.list_offset_history(group_id).items][:1] == [12]

            # An old server (re)started now, while the upgrade rolls on, must not migrate: it does not
            # know the new revision. With --no-migrate it serves.
            refused = subprocess.run(
                old_release.command(
                    "serve", "--database-url", url, "--listen", f"127.0.0.1:{free_port()}", "--metrics-listen", ""
                ),
                env=old_release.environment(site),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert refused.returncode != 0
            assert f"Can't locate revision identified by '{head}'" in refused.stderr + refused.stdout
            late = start_old(site, url, tmp_path / "late.log", "--no-migrate")
            try:
                with OffsetStoreClient(late.address, timeout=20) as late_client:
                    assert late_client.fetch_offsets(group_id).offsets[("t", 0)].offset == 12
            finally:
                assert late.terminate() == 0

        # The old server stops cleanly; the new one serves on.
        assert old.terminate() == 0
        with OffsetStoreClient(new.address, timeout=20) as new_client:
            new_client.commit_offsets(group_id, {("t", 0): 14}, generation=generation)
            assert new_client.fetch_offsets(group_id).offsets[("t", 0)].offset == 14
    finally:
        if old.process.poll() is None:
            old.terminate()
        if new is not None:
            assert new.terminate() == 0


def test_a_server_behind_the_database_says_so_and_serves_with_no_migrate(
    scratch_database_url: str, group_id: str, tmp_path: Path
) -> None:
    """The next rolling upgrade, seen from this release: a newer release migrated the database past our head."""
    url = scratch_database_url
    migrate.upgrade(url)
    engine = sqlalchemy.create_engine(migrate.normalize_url(url), poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE offsetstore.alembic_version SET version_num = '9999_from_the_future'")
    finally:
        engine.dispose()
    with pytest.raises(migrate.DatabaseAhead, match="9999_from_the_future"):
        migrate.upgrade(url)
    refused = subprocess.run(
        [sys.executable, "-m", "offsetstore.cli.main", "serve", "--database-url", url]
        + ["--listen", f"127.0.0.1:{free_port()}", "--metrics-listen", ""],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert "a newer release migrated it" in refused.stderr and "--no-migrate" in refused.stderr
    served = start_serve(tmp_path / "data", "--database-url", url, "--metrics-listen", "", "--no-migrate")
    try:
        with OffsetStoreClient(served.address, timeout=20) as client:
            client.commit_offsets(group_id, {("t", 0): 1})
            assert client.fetch_offsets(group_id).offsets[("t", 0)].offset == 1
    finally:
        assert served.terminate() == 0
