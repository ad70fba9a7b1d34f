"""Database faults under load: killed backends, a restart and a crash of PostgreSQL, no acknowledged commit lost.

Every test here runs its own PostgreSQL (embedded, in a temporary directory), which it stops,
crashes and starts again; the session's database is never touched.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil
import pytest
import sqlalchemy as sa
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from sqlalchemy.pool import NullPool

from offsetstore.client import (
    OffsetCommit,
    OffsetMismatchError,
    OffsetStoreClient,
    OffsetStoreError,
    StoreUnavailableError,
)
from offsetstore.runtime import migrate
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.embedded import EmbeddedPostgres
from offsetstore.runtime.store import Store
from offsetstore.server.limits import Limits
from offsetstore.storage.engine import SessionSettings
from tests.fixtures.fix_server import ServerHandle

pytestmark = pytest.mark.slow

TOPIC = "orders"
# Generous: the database is back in about a second; the server must notice without a restart.
RECOVERY_SECONDS = 30


class PrivatePostgres:
    """An embedded PostgreSQL this test may stop, crash and restart at will."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.pg = EmbeddedPostgres(data_dir)
        self.url = self.pg.start()

    def execute(self, sql: str, **params: object) -> list[tuple[object, ...]]:
        engine = sa.create_engine(
            self.url,
            poolclass=NullPool,
            connect_args={
                "application_name": "offsetstore-test",
                # This session may write while the database is made read-only for the server.
                "options": "-c default_transaction_read_only=off",
            },
        )
        try:
            with engine.begin() as conn:
                result = conn.execute(sa.text(sql), params)
                return [tuple(r) for r in result] if result.returns_rows else []
        finally:
            engine.dispose()

    def terminate_server_backends(self) -> int:
        rows = self.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'offsetstore' AND pid <> pg_backend_pid()"
        )
        return int(rows[0][0])  # type: ignore[arg-type]

    def postmaster(self) -> psutil.Process | None:
        pidfile = self.data_dir / "postmaster.pid"
        with contextlib.suppress(FileNotFoundError, psutil.NoSuchProcess, ValueError, IndexError):
            return psutil.Process(int(pidfile.read_text().splitlines()[0]))
        return None

    def stop(self) -> None:
        """A clean shutdown (pg_ctl stop, fast mode): sessions are ended, then a checkpoint."""
        self.pg.stop()

    def crash(self) -> None:
        """An immediate shutdown: every process quits at once, no checkpoint; startup replays the WAL."""
        postmaster = self.postmaster()
        assert postmaster is not None
        postmaster.send_signal(signal.SIGQUIT)
        postmaster.wait(30)
        self.pg.stop()  # forget the handle; there is nothing left to stop

    def start(self) -> None:
        self.pg = EmbeddedPostgres(self.data_dir)
        url = self.pg.start()
        # The server's engine reconnects to the same URL: the socket must not move.
        assert url == self.url


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    # Under /tmp: as root the embedded server opens up the permissions of its parents.
    workdir = Path(tempfile.mkdtemp(prefix="offsetstore-faults-"))
    pg = PrivatePostgres(workdir / "pgdata")
    try:
        migrate.upgrade(pg.url)
        yield pg
    finally:
        with contextlib.suppress(Exception):
            pg.pg.stop()
        if (postmaster := pg.postmaster()) is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                postmaster.send_signal(signal.SIGINT)
                postmaster.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def faulty_server(private_pg: PrivatePostgres) -> Iterator[ServerHandle]:
    store = Store.open(StoreConfig(private_pg.url, SessionSettings(statement_timeout_ms=2000), hot_pool_size=8))
    server = ServerHandle(store, health_interval=0.2, limits=Limits(max_workers=16)).start()
    try:
        yield server
    finally:
        server.stop()
        store.dispose()


def server_reason(error: OffsetStoreError) -> str | None:
    """The ErrorInfo reason the server attached, or None when gRPC itself failed the call."""
    cause = error.__cause__
    if not isinstance(cause, grpc.Call):
        return None
    status = rpc_status.from_call(cause)
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR):
            detail.Unpack(info)
            return info.reason
    return None


@dataclass
class Committer:
    """Commits 1, 2, 3, ... to its own partition, plainly or by compare-and-set, and notes every outcome."""

    client: OffsetStoreClient
    group: str
    partition: int
    compare_and_set: bool
    acknowledged: list[int] = field(default_factory=list)
    acknowledged_at: list[float] = field(default_factory=list)
    attempted: int = 0
    failures: list[tuple[str, str | None, str]] = field(default_factory=list)  # (type, reason, message)
    mismatches: list[str] = field(default_factory=list)
    crashed: list[BaseException] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        expected = -1  # compare-and-set: "nothing stored yet"
        try:
            while not stop.is_set():
                self.attempted += 1
                offset = self.attempted
                commit = OffsetCommit(
                    TOPIC, self.partition, offset, expected_offset=expected if self.compare_and_set else None
                )
                try:
                    self.client.commit_offsets(self.group, [commit])
                except OffsetMismatchError as error:
                    self.mismatches.append(error.message)
                    expected = self.stored(stop)
                except OffsetStoreError as error:
                    self.failures.append((type(error).__name__, server_reason(error), error.message))
                    if self.compare_and_set:
                        # The outcome is unknown: read what is stored, as docs/errors.md says.
                        expected = self.stored(stop)
                    time.sleep(0.02)
                else:
                    self.acknowledged.append(offset)
                    self.acknowledged_at.append(time.monotonic())
                    expected = offset
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.crashed.append(error)

    def stored(self, stop: threading.Event) -> int:
        while True:
            try:
                fetched = self.client.fetch_offsets(self.group, {TOPIC: [self.partition]})
                return fetched.offsets[(TOPIC, self.partition)].offset
            except StoreUnavailableError:
                if stop.is_set():
                    return -1
                time.sleep(0.1)


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> float:
    """Polls ``condition`` until it holds; returns how long that took."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def health_is(client: OffsetStoreClient, status: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return client.health(timeout=5) == status
        except OffsetStoreError:
            return False

    return check


def a_commit_succeeds(client: OffsetStoreClient, group: str) -> Callable[[], bool]:
    n = iter(range(1, 10**9))

    def check() -> bool:
        try:
            client.commit_offsets(group, {("probe", 0): next(n)}, timeout=5)
            return True
        except OffsetStoreError:
            return False

    return check


def test_acknowledged_commits_survive_killed_backends_a_restart_and_a_crash(
    private_pg: PrivatePostgres, faulty_server: ServerHandle
) -> None:
    group = f"faults-{uuid.uuid4().hex[:8]}"
    probe_group = f"{group}-probe"
    with OffsetStoreClient(faulty_server.address, timeout=30) as client:
        committers = [Committer(client, group, p, compare_and_set=p % 2 == 0) for p in range(8)]
        stop = threading.Event()
        threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in committers]
        for t in threads:
            t.start()

        def everyone_committed_since(since: float) -> Callable[[], bool]:
            return lambda: all(c.acknowledged_at and c.acknowledged_at[-1] > since for c in committers)

        def failures() -> int:
            return sum(len(c.failures) for c in committers)

        try:
            wait_for(everyone_committed_since(0), RECOVERY_SECONDS, "every committer commits")

            # Connections killed under the server's feet, again and again; each time every
            # committer gets through again before the next.
            killed = 0
            for _ in range(6):
                killed += private_pg.terminate_server_backends()
                wait_for(everyone_committed_since(time.monotonic()), RECOVERY_SECONDS, "every committer commits again")
            assert killed > 0

            # A clean restart, then a crash: each time health goes NOT_SERVING while the
            # database is away, calls fail with UNAVAILABLE, and the server comes back by itself.
            recoveries = []
            for outage in (private_pg.stop, private_pg.crash):
                failed_before = failures()
                outage()
                wait_for(health_is(client, "NOT_SERVING"), RECOVERY_SECONDS, "health turns NOT_SERVING")
                with pytest.raises(StoreUnavailableError) as down:
                    client.commit_offsets(probe_group, {("probe", 0): 1})
                assert server_reason(down.value) == "STORE_UNAVAILABLE"
                # The committers meet the outage too before the database comes back.
                wait_for(
                    lambda before=failed_before: failures() > before, RECOVERY_SECONDS, "a committer's commit fails"
                )
                private_pg.start()
                back_at = time.monotonic()
                recoveries.append(
                    wait_for(a_commit_succeeds(client, probe_group), RECOVERY_SECONDS, "a commit succeeds")
                )
                wait_for(health_is(client, "SERVING"), RECOVERY_SECONDS, "health turns SERVING")
                # Every committer gets through again, not just the probe.
                wait_for(everyone_committed_since(back_at), RECOVERY_SECONDS, "every committer commits again")
        finally:
            stop.set()
            for t in threads:
                t.join(60)

    assert not [c.crashed for c in committers if c.crashed]
    failures = [f for c in committers for f in c.failures]
    assert failures, "the faults were noticed by some committer"
    # Every failure is the store's UNAVAILABLE, sent by the server (never INTERNAL, never a bare transport error).
    assert {(kind, reason) for kind, reason, _ in failures} == {("StoreUnavailableError", "STORE_UNAVAILABLE")}
    # Compare-and-set holds: re-reading after an unknown outcome never leads to a mismatch.
    assert not [c.mismatches for c in committers if c.mismatches]

    rows = private_pg.execute(
        'SELECT partition, "offset" FROM offsetstore.offsets WHERE group_id = :g AND topic = :t', g=group, t=TOPIC
    )
    stored = {int(p): int(o) for p, o in rows}  # type: ignore[call-overload]
    history = private_pg.execute(
        "SELECT partition, new_offset FROM offsetstore.offset_history WHERE group_id = :g AND topic = :t",
        g=group,
        t=TOPIC,
    )
    landed: dict[int, set[int]] = {}
    for p, o in history:
        landed.setdefault(int(p), set()).add(int(o))  # type: ignore[call-overload]
    for c in committers:
        assert c.acknowledged, f"partition {c.partition} never committed"
        # No acknowledged commit is lost: each one is in the history, and the stored offset
        # is at least the last one acknowledged (a later commit of unknown outcome may have landed).
        assert set(c.acknowledged) <= landed[c.partition], f"partition {c.partition} lost acknowledged commits"
        assert c.acknowledged[-1] <= stored[c.partition] <= c.attempted
    print(
        f"failures: {len(failures)}, acknowledged: {sum(len(c.acknowledged) for c in committers)}, "
        f"recovered after {[round(r, 2) for r in recoveries]} s"
    )


def test_statement_timeout_is_unavailable_and_the_server_goes_on(
    private_pg: PrivatePostgres, faulty_server: ServerHandle
) -> None:
    """A database too slow to answer within the statement timeout is a fault of the store, not of the request."""
    group = f"slow-{uuid.uuid4().hex[:8]}"
    with OffsetStoreClient(faulty_server.address, timeout=30) as client:
        client.commit_offsets(group, {(TOPIC, 0): 1})
        engine = sa.create_engine(private_pg.url, poolclass=NullPool)
        try:
            with engine.begin() as conn:
                # Hold the group's row: the server's commit waits on it past its 2 s statement timeout.
                conn.execute(sa.text("SELECT 1 FROM offsetstore.groups WHERE group_id = :g FOR UPDATE"), {"g": group})
                with pytest.raises(StoreUnavailableError) as timed_out:
                    client.commit_offsets(group, {(TOPIC, 0): 2})
            assert server_reason(timed_out.value) == "STORE_UNAVAILABLE"
            assert "statement" not in timed_out.value.message.lower()  # no database text
        finally:
            engine.dispose()
        assert client.fetch_offsets(group).offsets[(TOPIC, 0)].offset == 1
        client.commit_offsets(group, {(TOPIC, 0): 3})
        assert client.fetch_offsets(group).offsets[(TOPIC, 0)].offset == 3
        assert client.health() == "SERVING"


def test_health_and_calls_while_the_database_is_down_from_the_start() -> None:
    """A server whose database is not there yet serves health (NOT_SERVING) and fails calls with UNAVAILABLE."""
    workdir = Path(tempfile.mkdtemp(prefix="offsetstore-faults-"))
    try:
        url = f"postgresql+psycopg://postgres@/postgres?host={workdir}"  # nothing listens there
        store = Store.open(StoreConfig(url, SessionSettings(connect_timeout_s=2), hot_pool_size=2))
        with (
            ServerHandle(store, health_interval=0.2) as server,
            OffsetStoreClient(server.address, timeout=30) as client,
        ):
            assert client.health() == "NOT_SERVING"
            for call in (
                lambda: client.commit_offsets("g", {(TOPIC, 0): 1}),
                lambda: client.fetch_offsets("g"),
                lambda: client.list_groups(),
            ):
                with pytest.raises(StoreUnavailableError) as error:
                    call()
                assert server_reason(error.value) == "STORE_UNAVAILABLE"
                assert "psycopg" not in error.value.message and str(workdir) not in error.value.message
        store.dispose()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_database_that_takes_no_writes_is_unavailable_for_writes_only(
    private_pg: PrivatePostgres, faulty_server: ServerHandle
) -> None:
    """After a failover onto a standby (read-only until promoted), commits are UNAVAILABLE, never INTERNAL."""
    group = f"ro-{uuid.uuid4().hex[:8]}"
    with OffsetStoreClient(faulty_server.address, timeout=30) as client:
        client.commit_offsets(group, {(TOPIC, 0): 1})
        private_pg.execute("ALTER DATABASE postgres SET default_transaction_read_only = on")
        try:
            private_pg.terminate_server_backends()  # new sessions take the setting
            wait_for(lambda: not a_commit_succeeds(client, group + "-probe")(), RECOVERY_SECONDS, "writes are refused")
            with pytest.raises(StoreUnavailableError) as refused:
                client.commit_offsets(group, {(TOPIC, 0): 2})
            assert server_reason(refused.value) == "STORE_UNAVAILABLE"
            assert client.fetch_offsets(group).offsets[(TOPIC, 0)].offset == 1
        finally:
            private_pg.execute("ALTER DATABASE postgres RESET default_transaction_read_only")
            private_pg.terminate_server_backends()
        wait_for(a_commit_succeeds(client, group + "-probe"), RECOVERY_SECONDS, "writes are taken again")
        client.commit_offsets(group, {(TOPIC, 0): 2})
        assert client.fetch_offsets(group).offsets[(TOPIC, 0)].offset == 2
