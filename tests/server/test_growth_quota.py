"""Growth a principal under a partition quota can cause (issue 34 finding 10): watermarks and history."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import PartitionQuotaError, ResourceExhaustedError
from offsetstore.core.types import Watermark
from offsetstore.runtime.store import Store
from offsetstore.server.auth import AccessControl, AuthConfig, hash_token
from offsetstore.server.limits import Limits
from offsetstore.server.partition_quota import HISTORY_BURST_SECONDS
from tests.fixtures.fix_server import ServerHandle

QUOTA = 50


def _tokens(directory: Path, run: str) -> str:
    """A tokens file of one principal committing to groups and topics under ``run``, quota ``QUOTA``; its token."""
    token = f"tenant-{uuid.uuid4().hex}"
    (directory / "tokens.toml").write_text(
        "[principals.tenant]\n"
        f'token_sha256 = "{hash_token(token)}"\n'
        f'grants = [{{ prefix = "{run}", permissions = ["commit"] }}, {{ topic_prefix = "{run}", permissions = ["commit"] }}]\n'
        f"max_partitions = {QUOTA}\n"
    )
    (directory / "tokens.toml").chmod(0o600)
    return token


def _watermarks(engine: sa.Engine, run: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM offsetstore.watermarks WHERE starts_with(topic, :p)"), {"p": run}
        ).scalar_one()


def test_watermarks_of_new_partitions_count_under_the_partition_quota(
    store: Store, engine: sa.Engine, tmp_path: Path
) -> None:
    run = f"w{uuid.uuid4().hex[:10]}-"
    token = _tokens(tmp_path, run)
    auth = AccessControl(AuthConfig.load(tmp_path / "tokens.toml"))
    with (
        ServerHandle(store, auth=auth, limits=Limits(max_workers=8)) as server,
        OffsetStoreClient(server.address, token=token, timeout=20) as client,
    ):
        # A flood of new partitions, 1,000 a call, as a hostile reporter would send.
        refused = 0
        for call in range(20):
            try:
                client.report_watermarks([Watermark(f"{run}t{call}", p, 0, 100) for p in range(1000)])
            except PartitionQuotaError as error:
                refused += 1
                assert error.metadata["limit"] == "max_partitions"
        kept = _watermarks(engine, run)
        print(
            f"20 reports of 1,000 new partitions each: {kept} watermarks stored, {refused} calls refused (quota {QUOTA})"
        )
        assert kept <= QUOTA
        assert refused == 20

        # Within the quota: reported, and reported again (no new partition) at the quota.
        client.report_watermarks([Watermark(f"{run}ok", p, 0, 10) for p in range(QUOTA)])
        client.report_watermarks([Watermark(f"{run}ok", p, 5, 20) for p in range(QUOTA)])
        assert _watermarks(engine, run) == QUOTA
        with pytest.raises(PartitionQuotaError):
            client.report_watermarks([Watermark(f"{run}ok", QUOTA, 0, 1)])
        assert _watermarks(engine, run) == QUOTA


def _history_rows(engine: sa.Engine, run: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM offsetstore.offset_history WHERE starts_with(group_id, :p)"), {"p": run}
        ).scalar_one()


def test_history_appended_under_a_partition_quota_keeps_to_the_principals_budget(
    store: Store, engine: sa.Engine, tmp_path: Path
) -> None:
    run = f"h{uuid.uuid4().hex[:10]}-"
    token = _tokens(tmp_path, run)
    auth = AccessControl(AuthConfig.load(tmp_path / "tokens.toml"))
    rate = 100.0
    with (
        ServerHandle(store, auth=auth, limits=Limits(max_workers=8, principal_history_rows_per_second=rate)) as server,
        OffsetStoreClient(server.address, token=token, timeout=20) as client,
    ):
        # The quota's 50 partitions, committed in a loop: every commit appends 50 history rows.
        group, refused, calls = f"{run}g", [], 200
        started = time.monotonic()
        for offset in range(calls):
            try:
                client.commit_offsets(group, {(f"{run}t", p): offset for p in range(QUOTA)})
            except ResourceExhaustedError as error:
                refused.append(error)
        elapsed = time.monotonic() - started
    rows = _history_rows(engine, run)
    print(f"{calls} commits of {QUOTA} partitions in {elapsed:.1f} s: {rows} history rows, {len(refused)} refused")
    # The burst (10 s of the rate), the rate over the run, and one call's overdraft.
    assert rows <= rate * HISTORY_BURST_SECONDS + rate * elapsed + QUOTA
    assert refused and all(e.metadata["limit"] == "history_rows" and e.retry_after for e in refused)
