"""A stateful property test: random sequences of storage operations on real PostgreSQL against a plain model.

Joins, commits (fenced or not, with compare-and-set), resets of every kind, partial and
whole deletes, over a few groups and partitions. After every step: a group id's
generation never repeats and never decreases, a commit with a superseded generation
never lands, fetch equals the model, and every change is in the history with its kind.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from offsetstore import storage
from offsetstore.core.errors import OffsetMismatchError, StaleGenerationError
from offsetstore.core.types import EARLIEST, LATEST, NO_OFFSET, Boundary, ChangeKind, OffsetCommit

INT64_MAX = 2**63 - 1
Key = tuple[str, int]


class Group:
    """What the model knows of one group id."""

    def __init__(self) -> None:
        self.seen = False  # has a row (live or tombstone)
        self.live = False
        self.generation = 0
        self.offsets: dict[Key, int] = {}
        self.history: Counter[ChangeKind] = Counter()
        self.handed_out: list[int] = []  # every generation the store returned, in order


class StorageModel(RuleBasedStateMachine):
    engine: sa.Engine  # set by the test

    def __init__(self) -> None:
        super().__init__()
        run = uuid.uuid4().hex[:10]
        self.group_ids = [f"model-{run}-{i}" for i in range(2)]
        self.topics = [f"m{run}a", f"m{run}b"]
        self.groups = {g: Group() for g in self.group_ids}
        # (instant, offsets of each group then): for resets to a point in time.
        self.instants: list[tuple[datetime, dict[str, dict[Key, int]]]] = []

    def _run(self, operation, *args, **kwargs):
        with self.engine.begin() as conn:
            return operation(conn, *args, **kwargs)

    def _moved_on(self, g: Group, generation: int) -> None:
        assert generation == g.generation + 1, (generation, g.generation)
        g.generation = generation
        g.handed_out.append(generation)

    # --- rules ---

    @rule(i=st.integers(0, 1))
    def join(self, i: int) -> None:
        gid = self.group_ids[i]
        g = self.groups[gid]
        generation = self._run(storage.join_group, gid, "m")
        assert generation == g.generation + 1
        self._moved_on(g, generation)
        g.seen = g.live = True

    @rule(
        i=st.integers(0, 1),
        values=st.dictionaries(
            st.tuples(st.integers(0, 1), st.integers(0, 2)), st.integers(0, 50), min_size=1, max_size=4
        ),
        fence=st.sampled_from(["none", "current", "stale"]),
        cas=st.sampled_from(["none", "right", "wrong"]),
    )
    def commit(self, i: int, values: dict[tuple[int, int], int], fence: str, cas: str) -> None:
        gid = self.group_ids[i]
        g = self.groups[gid]
        generation = {"none": 0, "current": g.generation, "stale": g.generation - 1}[fence]
        if generation < 0:
            generation = 0
        keys = [(self.topics[t], p) for t, p in values]
        expected = {k: g.offsets.get(k, NO_OFFSET) for k in keys}
        if min(expected.values()) < NO_OFFSET:
            cas = "none"  # a compare-and-set cannot name the earliest sentinel
        if cas == "wrong":
            expected[keys[0]] += 1
        commits = [
            OffsetCommit(t, p, off, expected_offset=None if cas == "none" else expected[(t, p)])
            for (t, p), off in zip(keys, values.values(), strict=True)
        ]
        stale = generation != 0 and generation != g.generation
        mismatch = cas == "wrong"
        if stale:
            with pytest.raises(StaleGenerationError):
                self._run(storage.commit_offsets, gid, commits, generation=generation)
            return
        if mismatch:
            with pytest.raises(OffsetMismatchError):
                self._run(storage.commit_offsets, gid, commits, generation=generation)
            return
        self._run(storage.commit_offsets, gid, commits, generation=generation)
        for c in commits:
            if g.offsets.get((c.topic, c.partition)) != c.offset:
                g.history[ChangeKind.COMMIT] += 1
            g.offsets[(c.topic, c.partition)] = c.offset
        g.seen = g.live = True

    def _reset(self, gid: str, selection: dict[str, tuple[int, ...]], new: dict[Key, int], **target) -> None:
        g = self.groups[gid]
        result = self._run(storage.reset_offsets, gid, selection, **target)
        assert {(c.topic, c.partition): c.new_offset for c in result.changes} == new
        if g.live or new:
            self._moved_on(g, result.generation)
            g.seen = g.live = True
        else:
            assert result.generation == g.generation
        g.offsets.update(new)
        g.history[ChangeKind.RESET] += len(new)

    def _selected(self, g: Group, topic: str, partitions: tuple[int, ...]) -> list[Key]:
        stored = [k for k in g.offsets if k[0] == topic and (not partitions or k[1] in partitions)]
        return sorted(set(stored) | {(topic, p) for p in partitions})

    @rule(
        i=st.integers(0, 1),
        t=st.integers(0, 1),
        partitions=st.sampled_from([(), (0,), (1, 2)]),
        kind=st.sampled_from(["to_offset", "shift_by", "earliest", "latest"]),
        n=st.integers(-60, 60),
    )
    def reset(self, i: int, t: int, partitions: tuple[int, ...], kind: str, n: int) -> None:
        gid, topic = self.group_ids[i], self.topics[t]
        g = self.groups[gid]
        keys = self._selected(g, topic, partitions)
        if kind == "to_offset":
            n = abs(n)
            self._reset(gid, {topic: partitions}, dict.fromkeys(keys, n), to_offset=n)
        elif kind == "shift_by":
            # No watermarks exist for these topics: sentinels and missing offsets have nothing to shift from.
            new = {k: min(max(0, g.offsets[k] + n), INT64_MAX) for k in keys if g.offsets.get(k, -1) >= 0}
            self._reset(gid, {topic: partitions}, new, shift_by=n)
        else:
            boundary = Boundary.EARLIEST if kind == "earliest" else Boundary.LATEST
            sentinel = EARLIEST if kind == "earliest" else LATEST
            self._reset(gid, {topic: partitions}, dict.fromkeys(keys, sentinel), to_boundary=boundary)

    @rule(i=st.integers(0, 1), t=st.integers(0, 1), back=st.integers(0, 50))
    def reset_to_time(self, i: int, t: int, back: int) -> None:
        if not self.instants:
            return
        gid, topic = self.group_ids[i], self.topics[t]
        g = self.groups[gid]
        instant, then = self.instants[max(0, len(self.instants) - 1 - back)]
        past = {k: v for k, v in then[gid].items() if k[0] == topic}
        keys = sorted({k for k in g.offsets if k[0] == topic} | set(past))
        # A reset never deletes: a partition with no offset then starts from the earliest.
        self._reset(gid, {topic: ()}, {k: past.get(k, EARLIEST) for k in keys}, to_commit_time=instant)

    @rule(i=st.integers(0, 1), t=st.integers(0, 1), partitions=st.sampled_from([(), (0,), (1, 2)]), whole=st.booleans())
    def delete(self, i: int, t: int, partitions: tuple[int, ...], whole: bool) -> None:
        gid, topic = self.group_ids[i], self.topics[t]
        g = self.groups[gid]
        if whole:
            deleted = self._run(storage.delete_offsets, gid, all_topics=True)
            gone = sorted(g.offsets) if g.live else []
        else:
            deleted = self._run(storage.delete_offsets, gid, {topic: partitions})
            gone = [k for k in sorted(g.offsets) if k[0] == topic and (not partitions or k[1] in partitions)]
            gone = gone if g.live else []
        assert [(tp.topic, tp.partition) for tp in deleted] == gone
        if g.live and (whole or gone):
            self._moved_on(g, g.generation + 1)
            for k in gone:
                del g.offsets[k]
            g.history[ChangeKind.DELETE] += len(gone)
            g.live = not whole

    def _generation_of_record(self, gid: str) -> int:
        return self._run(storage.group_generation, gid)

    # --- invariants, after every step ---

    @invariant()
    def fetch_equals_the_model(self) -> None:
        for gid, g in self.groups.items():
            fetched = self._run(storage.fetch_offsets, gid)
            assert {(tp.topic, tp.partition): o.offset for tp, o in fetched.offsets.items()} == g.offsets
            assert fetched.generation == (g.generation if g.live else 0)

    @invariant()
    def generations_only_increase(self) -> None:
        for gid, g in self.groups.items():
            assert g.handed_out == sorted(set(g.handed_out))
            assert self._generation_of_record(gid) == g.generation

    @invariant()
    def every_change_is_in_the_history(self) -> None:
        for gid, g in self.groups.items():
            kinds = Counter(c.kind for c in self._run(storage.list_offset_history, gid, page_size=1000).items)
            assert kinds == +g.history

    @invariant()
    def remember_this_instant(self) -> None:
        with self.engine.connect() as conn:
            now = conn.execute(sa.select(sa.func.clock_timestamp())).scalar_one()
        self.instants.append((now, {gid: dict(g.offsets) for gid, g in self.groups.items()}))


def _check(engine: sa.Engine, examples: int, steps: int) -> None:
    StorageModel.engine = engine
    run_state_machine_as_test(
        StorageModel,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_storage_core_matches_the_model(engine: sa.Engine) -> None:
    _check(engine, examples=20, steps=25)


@pytest.mark.slow
def test_storage_core_matches_the_model_at_length(engine: sa.Engine) -> None:
    _check(engine, examples=100, steps=40)
