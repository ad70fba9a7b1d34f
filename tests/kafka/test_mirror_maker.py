"""Issue 58's negative controls: a group moved from cluster A to B by MirrorMaker 2's own translation, and by none.

Both on :func:`mirrored_kafka` (two KRaft clusters and MirrorMaker 2 in dedicated mode, A's
``orders`` written with aborted transactions and its log start moved). A resumed consumer's
re-reads and skips are counted record by record against B's copy. MirrorMaker's translation
is conservative and coarse (re-reads, no skips); the same offsets on B miss the mark.
"""

from __future__ import annotations

import random
import uuid

import pytest

from tests.fixtures.fix_mirror_maker import MirroredKafka, mirror_makers_resume, plain_group_on_a
from tests.fixtures.mirror_maker import format_resumes, resume_counts, resume_group

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("mirror_maker")]


def _stops(mirrored: MirroredKafka, seed: int) -> dict[int, int]:
    """Where a group stops on each partition: between half and nine tenths of its committed records."""
    rng = random.Random(seed)
    records = mirrored.source_records(mirrored.topics["orders"])
    return {p: int(len(rs) * rng.uniform(0.5, 0.9)) for p, rs in records.items()}


def test_mirror_makers_translation_re_reads_and_never_skips(mirrored_kafka: MirroredKafka) -> None:
    topic = mirrored_kafka.topics["orders"]
    on_a = plain_group_on_a(
        mirrored_kafka, topic, f"orders-app-{uuid.uuid4().hex[:8]}", records=_stops(mirrored_kafka, 58)
    )

    resumed = mirror_makers_resume(mirrored_kafka, topic, on_a)
    print(format_resumes("MirrorMaker 2's translation (sync.group.offsets.enabled), resumed on B:", resumed))

    # The counting itself: a resume at the exact position re-reads nothing and skips nothing.
    copy = mirrored_kafka.target_records(topic)
    exact = resume_counts(copy, on_a.seen, {p: r.exact for p, r in resumed.items()})
    assert all((r.rereads, r.skipped) == (0, 0) for r in exact.values())
    # A consumer of the group resumed on B (as a user's would) starts where MirrorMaker put it and re-reads as counted.
    read = resume_group(mirrored_kafka.target, topic.remote, on_a.group, topic.partitions)
    ends = {p: rs[-1].offset + 1 if rs else 0 for p, rs in copy.items()}
    assert {p: rs[0].offset for p, rs in read.items() if rs} == {
        p: r.offset for p, r in resumed.items() if r.offset < ends[p]
    }
    assert {p: sum(1 for r in rs if r.id in on_a.seen[p]) for p, rs in read.items()} == {
        p: r.rereads for p, r in resumed.items()
    }
    # MirrorMaker never skips a record (it translates down to the last offset sync before the position) ...
    assert all(r.skipped == 0 for r in resumed.values()), resumed
    # ... and, with transaction markers, aborts and a moved log start, it re-reads.
    assert sum(r.rereads for r in resumed.values()) > 0, resumed


def test_the_same_offsets_on_b_re_read_or_skip(mirrored_kafka: MirroredKafka) -> None:
    topic = mirrored_kafka.topics["orders"]
    on_a = plain_group_on_a(
        mirrored_kafka, topic, f"orders-app-{uuid.uuid4().hex[:8]}", records=_stops(mirrored_kafka, 59)
    )

    naive = resume_counts(mirrored_kafka.target_records(topic), on_a.seen, on_a.committed, on_a.committed)
    print(format_resumes("The naive switch (A's offsets used on B as they are):", naive))

    # B's copy has no control records, no aborted records, and starts at A's moved log start:
    # A's offsets point past the exact position on every partition, so the naive switch skips records.
    assert all(r.offset > r.exact for r in naive.values()), naive
    assert sum(r.skipped for r in naive.values()) > 0, naive
