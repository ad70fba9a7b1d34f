"""A read's admitted cost bounds its work (issue 47, H1): a one-row page of a huge group is weighed by what it scans.

DescribeGroup's first page judges every partition of the group for the group's verdict;
ListTopics and ListGroups sum every partition of what they list. Before, all three were
admitted at their page size: a tenant reading its own 20,000-partition group with
``page_size=1`` in four threads took another tenant's commit p99 from 25 ms to 3.5 s, and
a 100,000-partition group's description always hit the statement timeout. Against a real
``offsetstore serve`` with tokens: the reader's group is written straight into the tables
(the quickest way to a big group; nothing here is about how it got there).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from offsetstore.client import OffsetCommit, OffsetStoreClient
from offsetstore.storage.engine import plain_engine
from offsetstore.storage.lag_columns import group_facts_query
from offsetstore.storage.status import StatusRules
from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures.fix_auth import PKI, TOKENS, bearer
from tests.fixtures.fix_server import Served, start_serve

pytestmark = pytest.mark.slow

READER = bearer("reader")
#: The big group's size: docs/security.md's example partition quota.
BIG = 20_000


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _one_statement_verdict_seconds(url: str, group_id: str) -> float:
    """How long the group's verdict takes as one statement here and now (the best of three, warm)."""
    query = group_facts_query(StatusRules().window)
    params = {"group": group_id, "after_topic": "", "after_partition": -1, "rows": BIG}
    engine = plain_engine(url)
    try:
        with engine.connect() as conn:
            took = []
            for _ in range(3):
                started = time.monotonic()
                assert len(conn.execute(query, params).fetchall()) == BIG
                took.append(time.monotonic() - started)
        return min(took)
    finally:
        engine.dispose()


def _big_group(url: str, group_id: str, partitions: int, *, past_end: int | None = None) -> None:
    """A group of ``partitions`` offsets on topic ``t-big``, every log end known; ``past_end`` committed past it."""
    engine = plain_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO offsetstore.groups (group_id, generation) VALUES (:g, 1)"), {"g": group_id})
        conn.execute(
            sa.text(
                'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset", metadata, commit_time)'
                " SELECT :g, 't-big', i, CASE WHEN i = :past THEN 100 ELSE 5 END, '', now() - interval '1 hour'"
                " FROM generate_series(0, :n - 1) i"
            ),
            {"g": group_id, "n": partitions, "past": -1 if past_end is None else past_end},
        )
        conn.execute(
            sa.text(
                "INSERT INTO offsetstore.watermarks (topic, partition, log_end_offset, updated_at)"
                " SELECT 't-big', i, 10, now() FROM generate_series(0, :n - 1) i"
                " ON CONFLICT (topic, partition) DO NOTHING"
            ),
            {"n": partitions},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # The statistics autovacuum makes within a minute of such a load, made now: in a full-suite
        # run they arrived between the verdict's timed runs (PostgreSQL's slow-statement log: two runs
        # 28.5 s without them, the third under 5 s), so the chunks' timeout came from one plan and the
        # chunks ran under another.
        conn.execute(sa.text("ANALYZE offsetstore.offsets, offsetstore.watermarks, offsetstore.offset_history"))
    engine.dispose()


@pytest.fixture(scope="module")
def big_served(
    module_database_url: str, pki: PKI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, str]]:
    """``offsetstore serve`` with tokens, and a reader's group of :data:`BIG` partitions."""
    group_id = f"t-big-{uuid.uuid4().hex[:8]}"
    _big_group(module_database_url, group_id, BIG)
    served = start_serve(
        tmp_path_factory.mktemp("scan") / "data",
        *("--database-url", module_database_url, "--no-migrate", "--tokens-file", str(pki.tokens_file)),
        # Four calls of the reader at once, as in the finding: its default limit is 2.
        *("--max-workers", "8", "--pool-size", "4", "--max-calls-per-principal", "4"),
    )
    try:
        yield served, group_id
    finally:
        served.terminate()


def _victim(address: str, seconds: float) -> list[float]:
    group = f"t-victim-{uuid.uuid4().hex[:8]}"
    latencies = []
    with OffsetStoreClient(address, timeout=30, token=TOKENS["committer"]) as client:
        stop_at = time.monotonic() + seconds
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            started = time.monotonic()
            client.commit_offsets(group, [OffsetCommit("t", 0, n)])
            latencies.append(time.monotonic() - started)
    return latencies


@pytest.mark.alone
def test_reading_ones_own_huge_group_in_a_loop_keeps_another_tenants_commits_within_5x(
    big_served: tuple[Served, str],
) -> None:
    served, group_id = big_served
    quiet = _victim(served.address, 3.0)
    stop = threading.Event()
    reads: list[str] = []
    ran_out: list[str] = []

    def reader() -> None:
        # The finding's loop: one-row pages that aggregate the whole group. Admission holds this
        # principal to its cost per second while the victim commits (each call costs the 10,000
        # partitions it scans at most), so one of its four queued calls may wait past its own deadline: that is the throttle working on the aggressor, counted,
        # not a fault of the test (the victim's p99 is the claim; some rounds must still finish).
        with grpc.insecure_channel(served.address) as channel:
            own = pb_grpc.OffsetStoreServiceStub(channel)
            while not stop.is_set():
                try:
                    own.DescribeGroup(
                        pb.DescribeGroupRequest(group_id=group_id, page_size=1), metadata=READER, timeout=60
                    )
                    own.ListTopics(pb.ListTopicsRequest(group_id=group_id, page_size=1), metadata=READER, timeout=60)
                    own.ListGroups(pb.ListGroupsRequest(prefix=group_id, page_size=1), metadata=READER, timeout=60)
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        raise
                    ran_out.append("deadline")
                    continue
                reads.append("done")

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        loaded = _victim(served.address, 8.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    print(
        f"\nvictim commit p99 quiet {_p99(quiet) * 1000:.1f} ms, with four readers of a {BIG:,}-partition group "
        f"{_p99(loaded) * 1000:.1f} ms; commits {len(quiet) / 3:.0f}/s vs {len(loaded) / 8:.0f}/s; "
        f"reader rounds {len(reads)}, reader calls past their 60 s deadline {len(ran_out)}"
    )
    assert reads, "the reader's own reads never finished"
    # Before: 25.5 -> 3,479 ms. The bound, 5x quiet, with a floor for a shared machine's quiet p99.
    assert _p99(loaded) < 5 * max(_p99(quiet), 0.02)


def test_a_huge_groups_description_answers_under_a_short_statement_timeout(
    module_database_url: str, pki: PKI, tmp_path: Path
) -> None:
    """The group's verdict is read a chunk at a time: no statement of it grows with the group.

    Before, the verdict of 20,000 partitions was one statement (about 0.6 s on a quiet machine,
    100,000 partitions past the default 5 s): under a 300 ms statement timeout it was UNAVAILABLE.
    The timeout here is half of what that one statement takes in this run (300 ms at least), so
    a loaded machine slows the bound with the work: a chunk (1/20 of the group) fits, the whole
    group in one statement would not. A partition past its log end in the group's last chunk
    still makes the verdict.
    """
    group_id = f"t-chunked-{uuid.uuid4().hex[:8]}"
    _big_group(module_database_url, group_id, BIG, past_end=BIG - 3)
    whole = _one_statement_verdict_seconds(module_database_url, group_id)
    timeout_ms = max(300, int(whole * 1000 / 2))
    served = start_serve(
        tmp_path / "data",
        *("--database-url", module_database_url, "--no-migrate", "--tokens-file", str(pki.tokens_file)),
        *("--statement-timeout-ms", str(timeout_ms)),
    )
    try:
        with grpc.insecure_channel(served.address) as channel:
            started = time.monotonic()
            described = pb_grpc.OffsetStoreServiceStub(channel).DescribeGroup(
                pb.DescribeGroupRequest(group_id=group_id, page_size=1), metadata=READER, timeout=60
            )
            took = time.monotonic() - started
    finally:
        served.terminate()
    print(
        f"\nDescribeGroup of {BIG:,} partitions, page_size=1, {timeout_ms} ms statement timeout: {took * 1000:.0f} ms"
        f" (the verdict in one statement: {whole * 1000:.0f} ms)"
    )
    assert len(described.partitions) == 1
    assert described.status == pb.GROUP_STATUS_PAST_END
    assert described.status_reason.startswith(f"t-big:{BIG - 3}: ")
