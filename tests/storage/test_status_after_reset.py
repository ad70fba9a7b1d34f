"""Issue 49: an operator's reset, adoption or import is no consumer's commit for the verdict, read from the database."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from offsetstore import storage
from offsetstore.core.types import GroupStatus, OffsetCommit, TopicPartition, Watermark
from offsetstore.storage.status import StatusRules
from tests.fixtures.waits import wait_for

#: A short window, so that "no commit for the window" comes within a test; the waits are on the verdict.
RULES = StatusRules(window=1.0)


def verdict(engine: sa.Engine, group_id: str) -> tuple[GroupStatus, str]:
    with engine.connect() as conn:
        described = storage.describe_group(conn, group_id, rules=RULES)
    return described.status, described.status_reason


def test_a_stopped_group_stays_stopped_after_a_reset_and_an_adoption_waits_for_its_consumer(engine, group_id) -> None:
    topic = f"ar-{uuid.uuid4().hex[:12]}"
    with engine.begin() as conn:
        storage.commit_offsets(conn, group_id, [OffsetCommit(topic, 0, 40)])
    with engine.begin() as conn:
        storage.report_watermarks(conn, [Watermark(topic, 0, 0, 100)])
    wait_for(lambda: verdict(engine, group_id)[0] == GroupStatus.STOPPED, "the consumer's silence to pass the window")

    with engine.begin() as conn:
        storage.reset_offsets(conn, group_id, {topic: [0]}, shift_by=-10)
    status, reason = verdict(engine, group_id)
    assert status == GroupStatus.STOPPED, reason
    assert "no consumer commit since" in reason

    adopted = f"{group_id}-adopted"
    with engine.begin() as conn:
        storage.reset_offsets(conn, adopted, {topic: [0]}, to_offsets={TopicPartition(topic, 0): 60}, source="a test")
    status, reason = verdict(engine, adopted)
    assert status == GroupStatus.OK, reason
    assert "waiting for the consumer" in reason
    wait_for(lambda: verdict(engine, adopted)[0] == GroupStatus.STOPPED, "the adoption's wait to pass the window")

    # The consumer's first commit after it ends the wait: a live group again.
    with engine.begin() as conn:
        storage.commit_offsets(conn, adopted, [OffsetCommit(topic, 0, 70)])
    status, reason = verdict(engine, adopted)
    assert status == GroupStatus.OK, reason
